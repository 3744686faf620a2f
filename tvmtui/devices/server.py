"""A TVM RPC server that can also describe its board.

It is TVM's own server (same protocol, same tracker registration) plus one remote
function, `tvmtui.device_info`, returning the board's fingerprint, TVM version and LLVM
target as JSON, so the host can check what it is about to tune for. `main` takes the
function registering what the server offers (`init`): the board server users run,
`python -m tvmtui.board`, adds the bench's functions that way. Run alone,

    python -m tvmtui.devices.server --tracker HOST:9190 --key rpi4 [--host ADDRESS] [--port 9090]

serves tuning only.

TVM's RPC runs whatever library a client uploads, without authentication: the server
listens on 127.0.0.1 unless `--host` names another address, and then says what it exposes.
SIGTERM (systemd, `kill`) stops TVM's serving child process too.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable


def device_info() -> str:
    from tvmtui.devices.fingerprint import this_fingerprint
    from tvmtui.devices.local import local_cpu_target

    fp = this_fingerprint()
    try:
        target = local_cpu_target()
    except Exception as exc:  # noqa: BLE001 - a TVM without LLVM still answers
        target = {"error": str(exc)}
    return json.dumps({"fingerprint": fp.to_json(), "tvm": fp.tvm, "target": target,
                       "emulated": emulation()})


def emulation() -> str | None:
    """How this board is emulated, when it is: under qemu-user an aarch64 process reads
    the host's own /proc/cpuinfo, an x86 vendor's."""
    import platform

    try:
        cpuinfo = open("/proc/cpuinfo").read(4096)
    except OSError:
        return None
    machine = platform.machine()
    if machine in ("aarch64", "arm64", "armv7l") and any(
            v in cpuinfo for v in ("GenuineIntel", "AuthenticAMD")):
        return f"qemu-user: {machine} code on an x86_64 host (timings mean nothing)"
    return None


def register() -> None:
    """Runs in the server's process before it serves (TVM's `server_init_callback`)."""
    import tvm_ffi

    tvm_ffi.register_global_func("tvmtui.device_info", device_info, override=True)


def main(argv: list[str] | None = None, prog: str = "python -m tvmtui.devices.server",
         init: Callable[[], None] = register) -> int:
    """Serve until SIGTERM or ^C. `init` registers the server's functions: a module-level
    function, as TVM runs it again in the process that serves."""
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1; anything else exposes "
                         "unauthenticated code execution to that network)")
    ap.add_argument("--port", type=int, default=9090)
    ap.add_argument("--port-end", type=int, default=9199)
    ap.add_argument("--tracker", help="HOST:PORT of the RPC tracker to register with")
    ap.add_argument("--key", default="", help="device key to register under")
    args = ap.parse_args(argv)
    import os

    from tvmtui.devices.local import cpu_count

    # Unset, TVM on x86 uses half the hardware threads (it assumes hyper-threading).
    os.environ.setdefault("TVM_NUM_THREADS", str(cpu_count()))
    from tvm import rpc

    tracker = None
    if args.tracker:
        host, _, port = args.tracker.rpartition(":")
        tracker = (host, int(port))
    init()
    server = rpc.Server(args.host, args.port, args.port_end, key=args.key,
                        tracker_addr=tracker, server_init_callback=init)
    print(f"tvmtui rpc server on {args.host}:{server.port} key {args.key!r}", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"WARNING: listening on {args.host}:{server.port}: anyone who can reach it can "
              "upload and run native code as this user (TVM RPC has no authentication); keep "
              "it on a trusted network or tunnel it over SSH", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()  # TVM serves from a child process: stop it with us
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
