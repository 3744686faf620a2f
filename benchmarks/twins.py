"""Worst disagreement between the zoo's twins: ONNX Runtime on the .onnx, LiteRT on the
.tflite, and TVM (untuned) built from each file, on the same seeded inputs.

    python benchmarks/twins.py [--frames 3]

Prints one row per network and writes benchmarks/results/twins.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def back(y):
    """NHWC output back to NCHW (other ranks unchanged)."""
    return y.transpose(0, 3, 1, 2) if y.ndim == 4 else y


def main() -> None:
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from tvmtui.graph.relax_import import onnx_to_relax, tflite_to_relax
    from tvmtui.workloads.litert import make_interpreter
    from tvmtui.workloads.nets import NETS, network_files

    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=3)
    args = ap.parse_args()
    target = tvm.target.Target({"kind": "llvm"})
    start = time.time()
    files = {name: network_files(spec) for name, spec in NETS.items()}
    gen_s = time.time() - start
    rows = []
    for name, spec in NETS.items():
        onnx_bytes, tfl_bytes = (p.read_bytes() for p in files[name])
        sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
        lite = make_interpreter(tfl_bytes)
        lite.allocate_tensors()
        shape = spec.input_shape
        nhwc = [1, *shape[2:], shape[1]] if len(shape) == 4 else shape
        onnx_mod = onnx_to_relax(onnx_bytes, {"input": shape})
        vm_onnx = relax.VirtualMachine(relax.build(onnx_mod, target=target), tvm.cpu())
        tfl_mod = tflite_to_relax(tfl_bytes, {"input": nhwc})
        vm_tfl = relax.VirtualMachine(relax.build(tfl_mod, target=target), tvm.cpu())
        worst = {"litert": 0.0, "tvm_from_onnx": 0.0, "tvm_from_tflite": 0.0}
        for frame in range(args.frames):
            x = np.random.default_rng(frame).standard_normal(spec.input_shape).astype(np.float32)
            xl = x.transpose(0, 2, 3, 1).copy() if x.ndim == 4 else x
            ref = sess.run(None, {"input": x})[0]
            lite.set_tensor(lite.get_input_details()[0]["index"], xl)
            lite.invoke()
            outs = {
                "litert": back(lite.get_tensor(lite.get_output_details()[0]["index"])),
                "tvm_from_onnx": vm_onnx["main"](tvm.runtime.tensor(x)).numpy(),
                "tvm_from_tflite": back(vm_tfl["main"](tvm.runtime.tensor(xl)).numpy()),
            }
            for key, y in outs.items():
                worst[key] = max(worst[key], float(np.abs(y - ref).max()))
        rows.append({"network": name, "frames": args.frames, **worst})
        print(f"{name:10} " + "  ".join(f"{k} {v:.2e}" for k, v in worst.items()), flush=True)
    result = {"generate_all_s": round(gen_s, 2), "rows": rows,
              "command": "python benchmarks/twins.py --frames %d" % args.frames}
    dest = Path(__file__).resolve().parent / "results" / "twins.json"
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(f"files ready in {gen_s:.2f} s; wrote {dest}")


if __name__ == "__main__":
    main()
