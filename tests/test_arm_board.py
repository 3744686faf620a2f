"""The emulated aarch64 board (Debian arm64 under qemu-user, the aarch64 TVM wheel inside):
cross-compile on the host, measure on the board, check the output against the host.

Marked `arm` (not in the default run): `python -m pytest -m arm`. Needs root; the first
run builds the root filesystem (a few minutes), later runs reuse it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from .rpc_farm import Farm, free_port

pytestmark = pytest.mark.arm
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "arm-board.sh"


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    # Asked for with -m arm, it must run: a skip would read as a pass.
    assert os.geteuid() == 0, "the emulated board needs root (debootstrap, chroot, binfmt_misc)"
    logs = tmp_path_factory.mktemp("arm")
    setup = subprocess.run(["bash", str(SCRIPT), "setup"], capture_output=True, text=True,
                           timeout=3000)
    assert setup.returncode == 0, setup.stderr[-2000:]
    farm = Farm(logs).start()
    port = free_port()
    log = open(logs / "board.log", "ab")
    proc = subprocess.Popen(["bash", str(SCRIPT), "start", farm.tracker, "arm64", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    farm.wait_registered("arm64", 1, timeout=600)  # TVM imports slowly under emulation
    yield farm
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    farm.stop()


def _board_error(device: str, lib: Path, model: bytes, shape) -> float:
    """Largest difference between the exported `lib` run on the board and ONNX Runtime on
    the host, for one seeded frame."""
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    (got,) = _board_outputs(device, lib, [x])
    assert np.abs(reference).max() > 0.1 and got.shape == reference.shape
    return float(np.abs(got - reference).max())


def _board_outputs(device: str, lib: Path, frames: list) -> list:
    """The exported `lib` run on the board on each frame (the board's session is freed
    before returning)."""
    import gc

    import tvm
    from tvm import relax

    from tvmtui.devices.rpc import connect_device, parse_device

    sess, _, _ = connect_device(parse_device(device), session_timeout=600, wait=120)
    sess.upload(str(lib))
    remote = sess.load_module(lib.name)
    dev = sess.cpu()
    vm = relax.VirtualMachine(remote, dev)
    outputs = [vm["main"](tvm.runtime.tensor(x, device=dev)).numpy() for x in frames]
    del vm, remote, dev, sess  # the board serves one session at a time: free it
    gc.collect()
    return outputs


def test_emulated_board_end_to_end(cli, board, tmp_path):
    out = cli.run("devices", "--tracker", board.tracker, "--key", "arm64", "--json",
                  timeout=600)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    board_fp = info["board"]["fingerprint"]
    assert board_fp["arch"] == "aarch64"
    assert info["board"]["target"]["mtriple"].startswith("aarch64")
    assert board_fp["id"] != info["local"]["fingerprint"]["id"]
    (tmp_path / "devices.json").write_text(json.dumps(info, indent=1))

    device = f"tracker://{board.tracker}/arm64"
    # The channel-blocked layout's ARM path: NEON's 4 float32 lanes give NCHW4c.
    out = cli.run("tune", "dwconv:D9", "--trials", "8", "--session", "arm", "--json",
                  "--device", device, "--variants", "nchwc", timeout=3000)
    assert out.returncode == 0, out.stderr
    events = cli.json_lines(out.stdout)
    assert events[-1]["state"] == "finished", events[-1]
    trials = [e for e in events if e["event"] == "trial"]
    measured = [t for t in trials if not t["error_kind"]]
    assert len(trials) == 8 and measured, [t["error"] for t in trials][:2]
    extracted = next(e for e in events if e["event"] == "tasks_extracted")
    assert extracted["variants"]["nchwc"]["label"] == "NCHW4c"
    assert extracted["variants"]["nchwc"]["rewritten"] == 1
    assert all(t["device"] for t in measured)
    meta = cli.session("arm").meta()
    assert meta["target"]["mtriple"].startswith("aarch64")
    assert meta["fingerprint"]["arch"] == "aarch64"

    # The exported, cross-compiled library runs on the board and matches the host.
    lib = tmp_path / "arm.so"
    out = cli.run("export", "arm", str(lib), "--json", timeout=1200)
    assert out.returncode == 0, out.stderr
    assert b"\x7fELF" == lib.read_bytes()[:4] and lib.read_bytes()[18] == 0xB7  # EM_AARCH64
    exported = json.loads(lib.with_suffix(".json").read_text())
    assert (exported["variant"], exported["variant_label"]) == ("nchwc", "NCHW4c")

    err = _board_error(device, lib, (cli.root / "arm" / "model.onnx").read_bytes(),
                       (1, 1024, 7, 7))
    assert err <= 1e-4
    # The baselines on the board itself: LiteRT (XNNPACK) and ACL (Arm NN, CpuAcc), parity
    # against tuned TVM run there, on 100 frames.
    out = cli.run("bench", "arm", "--baselines", "tflite,acl,tvm-untuned", "--frames", "100",
                  "--repeats", "20", "--max-seconds", "5", "--json", timeout=3000)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["device"].startswith("board ") and report["device"].endswith(", emulated")
    assert any("emulated board" in n and "meaningless" in n for n in report["notes"])
    rows = {r["name"]: r for r in report["baselines"]}
    for name in ("tflite", "acl", "tvm-untuned", "tvm-tuned"):
        assert rows[name]["available"], rows[name]["reason"]
        assert rows[name]["device"] == report["device"]
        assert rows[name]["parity"]["passed"], rows[name]["parity"]
        assert rows[name]["parity"]["against"] == "tvm-tuned" and rows[name]["parity"]["frames"] == 100
    assert "CpuAcc" in rows["acl"]["detail"] and "Arm NN" in rows["acl"]["detail"]
    assert rows["tflite"]["detail"].startswith("LiteRT 1.4.0")
    (tmp_path / "bench.json").write_text(json.dumps(report, indent=1))

    (tmp_path / "result.json").write_text(json.dumps({
        "target": meta["target"], "trials_measured_on_board": len(measured),
        "variant": exported["variant_label"],
        "max_abs_err": err, "t": time.time()}))


def test_emulated_board_tunes_the_blocked_winograd(cli, board, tmp_path):
    """Winograd in NEON's NCHW4c: tuned on the board, cross-compiled, run there, and
    checked against ONNX Runtime on the host (9x9 input: tiles no multiple of it)."""
    from tests.test_variants import conv_net

    model = tmp_path / "conv.onnx"
    shape = (1, 16, 9, 9)
    model.write_bytes(conv_net([(16, 3, 1)], shape))
    device = f"tracker://{board.tracker}/arm64"
    out = cli.run("tune", str(model), "--trials", "8", "--session", "armw", "--json",
                  "--device", device, "--variants", "winograd", "--batch", "4", timeout=3000)
    assert out.returncode == 0, out.stderr
    events = cli.json_lines(out.stdout)
    extracted = next(e for e in events if e["event"] == "tasks_extracted")
    assert extracted["variants"]["winograd"]["rewritten"] == 1
    names = {t["index"]: t["name"] for t in extracted["tasks"]}
    measured = [t for t in events if t["event"] == "trial" and not t["error_kind"]]
    assert any("winograd4_NCHWc" in names[t["task"]] and t["device"] for t in measured)
    lib = tmp_path / "armw.so"
    out = cli.run("export", "armw", str(lib), "--json", timeout=1200)
    assert out.returncode == 0, out.stderr
    assert json.loads(lib.with_suffix(".json").read_text())["variant"] == "winograd"
    assert _board_error(device, lib, model.read_bytes(), shape) <= 1e-4


def test_emulated_board_tunes_int8_convolutions_on_sdot(cli, board, tmp_path):
    """An int8 model's convolutions on Arm's `sdot` (qemu's CPU has the dot-product
    extension; under qemu-user the board reads the host's /proc/cpuinfo, so the target
    asks for +dotprod): tuned on the board, run there, and 0 quantization steps from
    LiteRT's reference kernels."""
    from tests.test_integer import _few_channels, _int8

    model = tmp_path / "int8.tflite"
    model.write_bytes(_int8(_few_channels(4), (1, 4, 15, 13)))
    out = cli.run("devices", "--tracker", board.tracker, "--key", "arm64", "--json",
                  timeout=600)
    assert out.returncode == 0, out.stderr
    target = json.loads(out.stdout)["board"]["target"]
    target["mattr"] = sorted(set(target.get("mattr") or []) | {"+neon", "+dotprod"})
    device = f"tracker://{board.tracker}/arm64"
    out = cli.run("tune", str(model), "--trials", "12", "--session", "armdot", "--json",
                  "--device", device, "--variants", "nchwc", "--target", json.dumps(target),
                  timeout=3000)
    assert out.returncode == 0, out.stderr
    events = cli.json_lines(out.stdout)
    extracted = next(e for e in events if e["event"] == "tasks_extracted")
    assert extracted["variants"]["nchwc"]["label"] == "NCHW4c + sdot"
    on_sdot = {t["index"] for t in extracted["tasks"] if t.get("instruction") == "sdot"}
    assert len(on_sdot) == 3
    measured = [t for t in events if t["event"] == "trial" and not t["error_kind"]]
    assert any(t["task"] in on_sdot and t["device"] for t in measured), \
        [t["error"] for t in events if t["event"] == "trial"][:2]
    out = cli.run("bench", "armdot", "--baselines", "tflite", "--frames", "20",
                  "--repeats", "5", "--max-seconds", "5", "--json", timeout=3000)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["device"].startswith("board ") and report["variant"] == "NCHW4c + sdot"
    rows = {r["name"]: r for r in report["baselines"]}
    assert rows["tflite"]["parity"]["passed"], rows["tflite"]["parity"]  # XNNPACK there
    # LiteRT's reference kernels on the board: the tuned library matches them exactly.
    kernels = report["reference_kernels"]
    assert kernels is not None and "reference kernels" in kernels["runtime"], report["notes"]
    assert kernels["steps"]["tvm-tuned"] == 0, kernels
    lib = tmp_path / "armdot.so"
    out = cli.run("export", "armdot", str(lib), "--json", timeout=1200)
    assert out.returncode == 0, out.stderr
    assert lib.read_bytes()[18] == 0xB7  # EM_AARCH64
    assert json.loads(lib.with_suffix(".json").read_text())["variant_label"] == "NCHW4c + sdot"
