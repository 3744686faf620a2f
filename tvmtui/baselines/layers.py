"""Layer by layer: where a float parity dispute starts.

The model file is rewritten so that every float tensor an operator computes is also an
output (`expose`); the disputed frame is run through that file by the baseline's own
runtime, by TVM (an untuned build of the same graph: tuned kernels fuse the layers away)
and by the graph in float64. Each layer's distance from float64 on each side (the parity
metric) shows where a side leaves the tolerance, and whether the other leaves it with it
(a layer that amplifies float32 rounding) or not (that side's kernel for the layer)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tvmtui.baselines.exact import FAR, ExactReference, distance
from tvmtui.baselines.host import RemoteRunner, RunnerSpec
from tvmtui.baselines.model import BenchModel


@dataclass(frozen=True)
class Layer:
    """One exposed tensor: its place among the outputs and the operator that computed it."""

    position: int
    op: int
    kind: str
    name: str
    shape: list[int]


def expose(fmt: str, data: bytes) -> tuple[bytes, list[Layer]]:
    """The model with every float tensor an operator computes from non-constant inputs
    added to its outputs (after the original ones), and those tensors in operator order."""
    return _expose_tflite(data) if fmt == "tflite" else _expose_onnx(data)


def _expose_tflite(data: bytes) -> tuple[bytes, list[Layer]]:
    from tvmtui.graph.normalize import builtin_names
    from tvmtui.graph.tflite_schema import pack_model, schema

    S = schema()
    model = S.ModelT.InitFromPackedBuf(data, 0)
    sub, names = model.subgraphs[0], builtin_names()

    def constant(t: int) -> bool:
        buffer = sub.tensors[t].buffer
        return bool(buffer) and model.buffers[buffer].data is not None and \
            len(model.buffers[buffer].data) > 0

    outputs, layers = [int(t) for t in sub.outputs], []
    folded: set[int] = set()
    for i, op in enumerate(sub.operators):
        code = model.operatorCodes[op.opcodeIndex]
        kind = names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "CUSTOM")
        if all(t < 0 or t in folded or constant(t) for t in op.inputs):
            folded.update(int(t) for t in op.outputs)  # a weight's DENSIFY, DEQUANTIZE:
            continue  # the import folds them into constants
        for t in (int(t) for t in op.outputs):
            tensor = sub.tensors[t]
            if tensor.type != S.TensorType.FLOAT32 or tensor.shape is None:
                continue
            if t not in outputs:
                outputs.append(t)
            layers.append(Layer(outputs.index(t), i, kind, tensor.name.decode(),
                                [int(d) for d in tensor.shape]))
    sub.outputs = np.array(outputs, dtype=np.int32)
    return pack_model(model, len(data) + (1 << 16)), layers


def _expose_onnx(data: bytes) -> tuple[bytes, list[Layer]]:
    import onnx

    model = onnx.load_from_string(data)
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    constants = {t.name for t in model.graph.initializer}
    outputs = [o.name for o in model.graph.output]
    layers = []
    for i, node in enumerate(model.graph.node):
        if node.op_type == "Constant" or all(x in constants or not x for x in node.input):
            constants.update(node.output)
            continue
        for name in node.output:
            info = known.get(name)
            tensor = info.type.tensor_type if info is not None else None
            if tensor is None or tensor.elem_type != onnx.TensorProto.FLOAT or \
                    any(not d.HasField("dim_value") for d in tensor.shape.dim):
                continue
            if name not in outputs:
                outputs.append(name)
                model.graph.output.append(info)
            layers.append(Layer(outputs.index(name), i, node.op_type, node.name or name,
                                [d.dim_value for d in tensor.shape.dim]))
    return model.SerializeToString(), layers


@dataclass
class LayerSides:
    """Every exposed layer of one frame: float64, TVM's untuned build, and the baseline."""

    layers: list[Layer]
    exact: list[np.ndarray]
    reference: list[np.ndarray]
    baseline: list[np.ndarray]


def run_layers(model: BenchModel, target: dict, baseline: str, threads: int, options: dict,
               frame: list[np.ndarray]) -> LayerSides:
    """One frame through the exposed model on all three sides (here, on this CPU)."""
    from tvmtui.baselines.builds import untuned_library

    data, layers = expose(model.native, model.files[model.native])
    exposed = replace(model, files={model.native: data}, output_steps=())
    sides = []
    for spec in (RunnerSpec("tvm-untuned", exposed, threads, options,
                            library=untuned_library(exposed, target)),
                 RunnerSpec(baseline, exposed, threads, options)):
        runner = RemoteRunner(spec)
        try:
            problem = runner.start()
            if problem is not None:
                raise RuntimeError(f"{spec.name} cannot run the exposed model: {problem}")
            sides.append(runner.infer(frame))
        finally:
            runner.close()
    return LayerSides(layers, ExactReference(exposed).outputs(frame), *sides)


def judge_layers(sides: LayerSides, mine_name: str, their_name: str,
                 tolerance: float) -> tuple[str, list[dict]]:
    """(one-line summary, a row per layer): where a side first leaves the tolerance."""
    rows: list[dict[str, Any]] = []
    for layer in sides.layers:
        p = layer.position
        rows.append({"op": layer.op, "kind": layer.kind, "name": layer.name,
                     "shape": layer.shape,
                     "reference_err": distance(sides.reference[p], sides.exact[p]),
                     "baseline_err": distance(sides.baseline[p], sides.exact[p])})
    mine = mine_name if mine_name == "tvm-untuned" else f"{mine_name} (its graph, built untuned)"
    first = next((r for r in rows if max(r["reference_err"], r["baseline_err"]) > tolerance), None)
    if first is None:
        worst = max((max(r["reference_err"], r["baseline_err"]) for r in rows), default=0.0)
        return (f"layer by layer: {mine} and {their_name} stay within {worst:.1e} of exact at "
                f"all {len(rows)} layers: the miss is not the graph's float32 rounding but "
                "the tuned library (or the model it was built from)"), rows
    before = max((max(r["reference_err"], r["baseline_err"]) for r in rows[:rows.index(first)]),
                 default=0.0)
    ours, other = first["reference_err"], first["baseline_err"]
    where = (f"operator #{first['op']} {first['kind']} '{first['name']}' "
             f"({'x'.join(map(str, first['shape']))})")
    if ours > tolerance and ours >= FAR * other:
        said = f"{mine} is off from {where}: {ours:.1e} from exact, {their_name} {other:.1e}"
    elif other > tolerance and other >= FAR * ours:
        said = f"{their_name} is off from {where}: {other:.1e} from exact, {mine} {ours:.1e}"
    else:
        said = (f"both leave the tolerance together at {where} ({mine} {ours:.1e}, {their_name} "
                f"{other:.1e} from exact; every layer before it within {before:.1e}): the "
                "layer amplifies float32 rounding, neither kernel is wrong")
    return f"layer by layer ({len(rows)} layers): {said}", rows
