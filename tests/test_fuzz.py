"""Mutated model files (truncated, bit-flipped, wrong magic, absurd shapes) through the
loading every command does before it creates anything: each is refused with one line
(exit 2) or loads; none crashes, none hangs; the CLI leaves no session behind."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx

from tests.user_models import padded_residual_onnx, shape_reshape_onnx, small_cnn_tflite

HARNESS = textwrap.dedent("""
    import json, sys
    from tvmtui.core.errors import UserError
    from tvmtui.workloads.loader import load_workload
    for path in sys.argv[1:]:
        print(json.dumps({"path": path, "start": True}), flush=True)
        try:
            load_workload(path)
            out = {"path": path, "outcome": "loaded"}
        except UserError as exc:
            out = {"path": path, "outcome": "refused", "message": str(exc)}
        except Exception as exc:  # what the test is looking for
            out = {"path": path, "outcome": "crashed", "message": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
""")


def _absurd_onnx(data: bytes, dims: list[int]) -> bytes:
    model = onnx.load_from_string(data)
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, dims):
        dim.ClearField("dim_param")
        dim.dim_value = value
    return model.SerializeToString()


def mutants(tmp_path, count: int = 240) -> list:
    rng = np.random.default_rng(2026)
    seeds = {"onnx": [shape_reshape_onnx(), padded_residual_onnx()],
             "tflite": [small_cnn_tflite()]}
    paths = []
    for i in range(count):
        fmt = "tflite" if i % 3 == 2 else "onnx"
        data = bytearray(seeds[fmt][i % len(seeds[fmt])])
        kind = ("truncate", "flip", "magic", "shape")[i % 4]
        if kind == "truncate":
            data = data[: int(rng.integers(0, len(data)))]
        elif kind == "flip":
            for _ in range(int(rng.integers(1, 9))):
                pos = int(rng.integers(0, len(data)))
                data[pos] ^= 1 << int(rng.integers(0, 8))
        elif kind == "magic":
            if fmt == "tflite":
                data[4:8] = bytes(rng.integers(0, 256, 4, dtype=np.uint8))
            else:
                data = bytearray(rng.integers(0, 256, 16, dtype=np.uint8).tobytes()) + data
        elif fmt == "onnx":
            dims = [int(rng.choice([0, 10**9, 2**31, 1])), 4, int(rng.choice([9, 10**7])), 7]
            data = bytearray(_absurd_onnx(bytes(data), dims))
        else:  # a TFLite input shape patched in place: find the stored [1, 10, 10, 4]
            needle = np.array([1, 10, 10, 4], np.int32).tobytes()
            at = bytes(data).find(needle)
            if at >= 0:
                data[at + 4: at + 8] = np.int32(rng.choice([10**6, -7, 0])).tobytes()
        path = tmp_path / f"m{i:03d}_{kind}.{fmt}"
        path.write_bytes(bytes(data))
        paths.append(path)
    return paths


def test_mutated_models_are_refused_in_one_line_or_load(tmp_path, cli):
    paths = mutants(tmp_path)
    proc = subprocess.run([sys.executable, "-c", HARNESS, *map(str, paths)],
                          capture_output=True, text=True, timeout=1200)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    results = [r for r in lines if "outcome" in r]
    assert len(results) == len(paths), (proc.returncode, proc.stderr[-1500:], lines[-1:])
    crashed = [r for r in results if r["outcome"] == "crashed"]
    assert not crashed, crashed[:3]
    refused = [r for r in results if r["outcome"] == "refused"]
    assert all("\n" not in r["message"] for r in refused)
    assert len(refused) >= len(paths) // 2  # most mutations make a file unusable
    # A sample of the refused files through the real CLI: exit 2, one line, no session.
    for r in refused[:: max(1, len(refused) // 12)]:
        out = cli.run("tune", r["path"], "--trials", "1", timeout=300)
        assert out.returncode == 2, (r["path"], out.stderr[-500:])
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not cli.root.exists() or not any(cli.root.iterdir())
