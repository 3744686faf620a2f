"""The model under comparison in every format a baseline may read, with one input layout.

TVM runs the session's own file (the *native* format). A baseline that needs the other
format gets the twin: the built-in networks and operators exist as both ONNX (NCHW) and
TFLite (NHWC) with identical weights. Frames are always made in the native layout and
converted on the way in and out of a twin, so every output is compared in one layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tvmtui.workloads import builtin, int8, nets


def _nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 else x


def _nhwc_to_nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if x.ndim == 4 else x


@dataclass(frozen=True)
class BenchModel:
    """What the baselines need: bytes per format, the native input shapes and dtypes."""

    name: str
    native: str  # "onnx" or "tflite": the format TVM tunes
    input_shapes: dict[str, list[int]]
    input_dtypes: dict[str, str]
    files: dict[str, bytes] = field(repr=False)  # format -> model bytes (native + twin)
    flops: int | None = None
    output_steps: tuple = ()  # per output: its quantization step (int8 models), else None

    def has(self, fmt: str) -> bool:
        return fmt in self.files

    def to_format(self, fmt: str, frame: list[np.ndarray]) -> list[np.ndarray]:
        """Inputs in the layout of `fmt`'s file (a twin in the other layout gets transposed)."""
        if fmt == self.native:
            return frame
        convert = _nchw_to_nhwc if self.native == "onnx" else _nhwc_to_nchw
        return [convert(x) for x in frame]

    def from_format(self, fmt: str, outputs: list[np.ndarray]) -> list[np.ndarray]:
        """Outputs of `fmt`'s file back in the native layout."""
        if fmt == self.native:
            return outputs
        convert = _nhwc_to_nchw if self.native == "onnx" else _nchw_to_nhwc
        return [convert(y) for y in outputs]


def _dtypes_onnx(model_bytes: bytes, names: list[str]) -> dict[str, str]:
    import onnx
    from onnx import helper

    model = onnx.load_from_string(model_bytes)
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    return {n: np.dtype(helper.tensor_dtype_to_np_dtype(types[n])).name for n in names}


def _dtypes_tflite(model_bytes: bytes, names: list[str]) -> dict[str, str]:
    import tflite
    from tflite.TensorType import TensorType

    by_code = {v: k.lower() for k, v in vars(TensorType).items() if not k.startswith("_")}
    model = tflite.Model.GetRootAsModel(model_bytes, 0)
    sub = model.Subgraphs(0)
    found = {}
    for idx in sub.InputsAsNumpy():
        tensor = sub.Tensors(int(idx))
        found[tensor.Name().decode()] = by_code.get(tensor.Type(), "float32")
    return {n: np.dtype(found.get(n, "float32")).name for n in names}


def _output_steps_tflite(model_bytes: bytes) -> tuple:
    """Each output's quantization step: its own scale when it is quantized, or that of the
    quantized tensor a DEQUANTIZE made it from; None for a float output."""
    import tflite

    model = tflite.Model.GetRootAsModel(model_bytes, 0)
    sub = model.Subgraphs(0)
    producer = {}
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        for j in range(op.OutputsLength()):
            producer[int(op.Outputs(j))] = op

    def step(index: int) -> float | None:
        q = sub.Tensors(index).Quantization()
        return float(q.Scale(0)) if q is not None and q.ScaleLength() == 1 else None

    steps = []
    for idx in sub.OutputsAsNumpy():
        idx = int(idx)
        found = step(idx)
        op = producer.get(idx)
        if found is None and op is not None and op.InputsLength() == 1:
            code = model.OperatorCodes(op.OpcodeIndex())
            if max(code.DeprecatedBuiltinCode(), code.BuiltinCode()) == 6:  # DEQUANTIZE
                found = step(int(op.Inputs(0)))
        steps.append(found)
    return tuple(steps)


def bench_model(workload_meta: dict, native_bytes: bytes) -> BenchModel:
    """From a session's (or a freshly loaded workload's) metadata and its model bytes."""
    native = workload_meta.get("format", "onnx")
    files = {native: native_bytes}
    source = workload_meta.get("source", "")
    if source.startswith("builtin:"):
        name = source.split(":", 1)[1]
        net = nets.NETS.get(name)
        if name in int8.INT8_TWINS:  # ONNX Runtime and OpenVINO read its QDQ file
            files["onnx"] = int8.qdq_file(name).read_bytes()
        elif net is not None:
            files["tflite"] = nets.network_files(net)[1].read_bytes()
        else:
            op = builtin.lookup(name)
            if op is not None:
                files["tflite"] = builtin.build_tflite(op)
    shapes = {k: list(v) for k, v in workload_meta["input_shapes"].items()}
    reader = _dtypes_tflite if native == "tflite" else _dtypes_onnx
    return BenchModel(
        name=workload_meta["name"],
        native=native,
        input_shapes=shapes,
        input_dtypes=reader(native_bytes, list(shapes)),
        files=files,
        flops=workload_meta.get("flops"),
        output_steps=_output_steps_tflite(native_bytes) if native == "tflite" else (),
    )
