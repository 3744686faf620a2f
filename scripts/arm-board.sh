#!/usr/bin/env bash
# An emulated aarch64 board for tests and demos: a Debian arm64 root filesystem made by
# debootstrap from Debian's packages, run under qemu-user (binfmt_misc), with the aarch64
# apache-tvm wheel and tvmtui's RPC server inside, registered to a tracker. The board carries
# both baselines `tvmtui bench` runs there: LiteRT (the newest aarch64 cp311 wheel,
# ai-edge-litert 1.4.0, beside TVM in /opt/py) and ARM Compute Library through Debian's Arm NN
# (python3-pyarmnn and the CpuAcc backend, on the system Python with Debian's own numpy 1.x:
# the board server runs it in a process of its own without /opt/py on its path).
#
#   scripts/arm-board.sh setup                      # build once; cached in $ROOTFS
#   scripts/arm-board.sh start HOST:PORT KEY [PORT] # run the board's RPC server (foreground)
#
# Needs root (apt-get, debootstrap, chroot, mounting binfmt_misc). Speed under emulation
# means nothing; correctness of the ARM path does.
set -euo pipefail

ROOTFS=${TVMTUI_ARM_ROOTFS:-/var/cache/tvmtui/arm64-rootfs}
SUITE=${TVMTUI_ARM_SUITE:-bookworm}
HERE=$(cd "$(dirname "$0")/.." && pwd)
# The host's own Debian mirror (the only package registry reachable here).
MIRROR=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
LITERT_VERSION=1.4.0
ARMNN_PACKAGES="python3-pyarmnn libarmnn-cpuacc-backend22 libarmnn-cpuref-backend22 libarmnntfliteparser22"
TVM_VERSION=$(python3 -c "from importlib.metadata import version; print(version('apache-tvm'))")
FFI_VERSION=$(python3 -c "from importlib.metadata import version; print(version('apache-tvm-ffi'))")

host_tools() {
    local missing=()
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static binfmt-support)
    command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
    if [ ${#missing[@]} -gt 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    fi
    if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
        update-binfmts --enable qemu-aarch64 || update-binfmts --import qemu-aarch64
    fi
}

setup() {
    host_tools
    local ready="$TVM_VERSION $FFI_VERSION litert-$LITERT_VERSION armnn"
    if [ -f "$ROOTFS/.tvmtui-ready" ] && grep -qx "$ready" "$ROOTFS/.tvmtui-ready"; then
        echo "board root filesystem ready: $ROOTFS"
        return
    fi
    if [ ! -x "$ROOTFS/usr/bin/python3" ] || [ -d "$ROOTFS/debootstrap" ]; then
        rm -rf "$ROOTFS"
        mkdir -p "$(dirname "$ROOTFS")"
        debootstrap --arch=arm64 --foreign --variant=minbase \
            --include=python3,libstdc++6,libgomp1 "$SUITE" "$ROOTFS" "$MIRROR"
        chroot "$ROOTFS" /debootstrap/debootstrap --second-stage
    fi
    # Arm NN from Debian's arm64 packages (apt runs inside the board, under qemu).
    echo "deb $MIRROR $SUITE main" > "$ROOTFS/etc/apt/sources.list"
    chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
    chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        $ARMNN_PACKAGES >/dev/null
    # The aarch64 wheels, installed from the host's pip into the board's filesystem.
    rm -rf "$ROOTFS/opt/py"
    python3 -m pip install --quiet --no-compile --no-warn-conflicts --target "$ROOTFS/opt/py" \
        --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 \
        --platform manylinux_2_17_aarch64 \
        --python-version 3.11 --implementation cp --only-binary=:all: \
        "apache-tvm==$TVM_VERSION" "apache-tvm-ffi==$FFI_VERSION" "numpy<3" ml_dtypes \
        typing_extensions psutil cloudpickle "ai-edge-litert==$LITERT_VERSION"
    echo "$ready" > "$ROOTFS/.tvmtui-ready"
    echo "board root filesystem ready: $ROOTFS"
}

start() {
    local tracker=$1 key=$2 port=${3:-9500}
    host_tools
    mountpoint -q "$ROOTFS/proc" || mount -t proc proc "$ROOTFS/proc"
    mountpoint -q "$ROOTFS/sys" || mount -t sysfs sysfs "$ROOTFS/sys"
    mkdir -p "$ROOTFS/dev/shm"
    mountpoint -q "$ROOTFS/dev/shm" || mount -t tmpfs tmpfs "$ROOTFS/dev/shm"
    # tvmtui itself (pure Python; the board only needs its server and fingerprint code).
    rm -rf "$ROOTFS/opt/tvmtui" && mkdir -p "$ROOTFS/opt/tvmtui"
    cp -r "$HERE/tvmtui" "$ROOTFS/opt/tvmtui/"
    exec chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root \
        PYTHONPATH=/opt/py:/opt/tvmtui PYTHONDONTWRITEBYTECODE=1 \
        python3 -m tvmtui.board --host 127.0.0.1 --port "$port" \
        --port-end "$((port + 20))" --tracker "$tracker" --key "$key"
}

case "${1:-}" in
    setup) setup ;;
    start) shift; start "$@" ;;
    *) echo "usage: $0 setup | start TRACKER_HOST:PORT KEY [PORT]" >&2; exit 2 ;;
esac
