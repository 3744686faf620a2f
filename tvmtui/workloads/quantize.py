"""Post-training int8 quantization of a float TFLite model written by `TfliteNet`.

What TFLite's converter does for full-integer models with float I/O: BatchNorm's MUL + ADD
folded into the convolution before them and a RELU / RELU6 fused into the CONV_2D,
DEPTHWISE_CONV_2D, FULLY_CONNECTED or ADD before it (`fuse_like_converter`); activation ranges
calibrated by running the float model on frames, asymmetric int8 activations, symmetric
per-channel int8 weights for CONV_2D / DEPTHWISE_CONV_2D, per-tensor for FULLY_CONNECTED,
int32 biases at input scale x weight scale, a QUANTIZE after the input and a DEQUANTIZE
before the output. Ops that move data without computing (RESHAPE, TRANSPOSE, PAD,
MAX_POOL_2D) keep their input's parameters, as TFLite requires.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tvmtui.graph.tflite_schema import opcode_index, pack_model

_SAME_PARAMS = {"RESHAPE", "TRANSPOSE", "PAD", "MAX_POOL_2D"}
# Left in float between a DEQUANTIZE and a QUANTIZE (none now: the converter writes int8
# TRANSPOSE and PAD, and TVM imports them).
_FLOAT_OPS: set[str] = set()
_WEIGHTED = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": None}  # channel axis
_FUSES = {"RELU": 1, "RELU6": 3}  # activation operator -> ActivationFunctionType
_FUSE_INTO = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD"}


def fuse_like_converter(model_bytes: bytes) -> bytes:
    """The float model as TFLite's converter would write it: a per-channel MUL and ADD after
    a convolution (BatchNorm) folded into its weights and bias, and an activation after a
    layer that can fuse one set as that layer's fused activation. A layer is folded into
    only when its output has no other reader."""
    from ai_edge_litert import schema_py_generated as S

    model = S.ModelT.InitFromPackedBuf(model_bytes, 0)
    g = model.subgraphs[0]
    names = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
    readers: dict[int, int] = {}
    for op in g.operators:
        for t in op.inputs:
            readers[t] = readers.get(t, 0) + 1
    for t in g.outputs:
        readers[t] = readers.get(t, 0) + 1

    def const(t: int) -> np.ndarray | None:
        tensor = g.tensors[t]
        data = model.buffers[tensor.buffer].data if tensor.buffer else None
        if data is None or tensor.type != S.TensorType.FLOAT32:
            return None
        return np.frombuffer(bytes(bytearray(data)), np.float32).reshape(list(tensor.shape))

    def put(t: int, array: np.ndarray) -> None:
        model.buffers[g.tensors[t].buffer].data = np.frombuffer(
            np.ascontiguousarray(array, np.float32).tobytes(), np.uint8)

    producer: dict[int, Any] = {}  # tensor -> the OperatorT writing it
    kept = []
    for op in g.operators:
        name = names[model.operatorCodes[op.opcodeIndex].builtinCode]
        src: Any = producer.get(op.inputs[0])  # its OperatorT, or None
        src_name = src and names[model.operatorCodes[src.opcodeIndex].builtinCode]
        alone = src is not None and readers.get(op.inputs[0]) == 1
        fused = getattr(getattr(src, "builtinOptions", None), "fusedActivationFunction", 0)
        if alone and not fused and name in ("MUL", "ADD") and \
                src_name in ("CONV_2D", "DEPTHWISE_CONV_2D") and len(op.inputs) == 2:
            value, weight, bias = const(op.inputs[1]), const(src.inputs[1]), const(src.inputs[2])
            channels = g.tensors[src.outputs[0]].shape[-1]
            if value is not None and weight is not None and bias is not None and \
                    value.size == channels:
                if name == "MUL":
                    axis = 0 if src_name == "CONV_2D" else 3
                    shape = [-1 if d == axis else 1 for d in range(weight.ndim)]
                    put(src.inputs[1], weight * value.reshape(shape))
                    put(src.inputs[2], bias * value.reshape(-1))
                else:
                    put(src.inputs[2], bias + value.reshape(-1))
                src.outputs = list(op.outputs)
                producer[op.outputs[0]] = src
                continue
        if alone and not fused and name in _FUSES and src_name in _FUSE_INTO and \
                src.builtinOptions is not None:
            src.builtinOptions.fusedActivationFunction = _FUSES[name]
            src.outputs = list(op.outputs)
            producer[op.outputs[0]] = src
            continue
        kept.append(op)
        for t in op.outputs:
            producer[t] = op
    g.operators = kept
    return pack_model(model, len(model_bytes) + 1024)


def _ranges(model_bytes: bytes, frames: list[np.ndarray]) -> dict[int, tuple[float, float]]:
    """min/max of every float tensor over the frames."""
    import warnings

    from ai_edge_litert.interpreter import Interpreter

    with warnings.catch_warnings():  # "intended for debugging": calibration is what it is for
        warnings.simplefilter("ignore")
        it = Interpreter(model_content=model_bytes, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    inp = it.get_input_details()[0]["index"]
    seen: dict[int, tuple[float, float]] = {}
    for frame in frames:
        it.set_tensor(inp, frame)
        it.invoke()
        for d in it.get_tensor_details():
            if d["dtype"] != np.float32:
                continue
            try:
                value = it.get_tensor(d["index"])
            except ValueError:
                continue
            if value.size == 0:
                continue
            lo, hi = float(value.min()), float(value.max())
            old = seen.get(d["index"], (lo, hi))
            seen[d["index"]] = (min(old[0], lo), max(old[1], hi))
    return seen


def _asymmetric(lo: float, hi: float) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0 or 1e-8
    return scale, int(np.clip(round(-128 - lo / scale), -128, 127))


def quantize_tflite(model_bytes: bytes, frames: list[np.ndarray], per_channel: bool = True) -> bytes:
    """The int8 model (see the module's docstring); `frames` are NHWC float inputs;
    `per_channel=False`: one weight scale per layer (TFLite's older per-tensor scheme)."""
    from ai_edge_litert import schema_py_generated as S

    model_bytes = fuse_like_converter(model_bytes)
    ranges = _ranges(model_bytes, frames)
    model = S.ModelT.InitFromPackedBuf(model_bytes, 0)
    g = model.subgraphs[0]
    names = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
    INT8, INT32, FLOAT32 = S.TensorType.INT8, S.TensorType.INT32, S.TensorType.FLOAT32

    def qparams(scales, zps, axis: int = 0):
        q = S.QuantizationParametersT()
        q.scale, q.zeroPoint, q.quantizedDimension = list(map(float, scales)), list(map(int, zps)), axis
        return q

    def value(t: int) -> np.ndarray:
        tensor = g.tensors[t]
        raw = bytes(bytearray(model.buffers[tensor.buffer].data))
        return np.frombuffer(raw, np.float32).reshape(list(tensor.shape))

    def store(t: int, array: np.ndarray, dtype, q) -> None:
        """Replace a constant's float data (the writer gives each its own buffer)."""
        model.buffers[g.tensors[t].buffer].data = np.frombuffer(
            np.ascontiguousarray(array).tobytes(), np.uint8)
        g.tensors[t].type, g.tensors[t].quantization = dtype, q

    def is_const(t: int) -> bool:
        tensor = g.tensors[t]
        return bool(tensor.buffer) and model.buffers[tensor.buffer].data is not None

    act: dict[int, tuple[float, int]] = {}  # activation tensor -> (scale, zero point)

    def activation(t: int, params: tuple[float, int] | None = None) -> tuple[float, int]:
        if t not in act:
            act[t] = params or _asymmetric(*ranges.get(t, (-1.0, 1.0)))
            g.tensors[t].type = INT8
            g.tensors[t].quantization = qparams([act[t][0]], [act[t][1]])
        return act[t]

    # A float input quantized by QUANTIZE, a float output made by DEQUANTIZE.
    (inp,), (out,) = g.inputs, g.outputs
    q_in = _clone(S, g, inp, b"_int8")
    q_out = _clone(S, g, out, b"_float")
    for op in g.operators:
        op.inputs = [q_in if t == inp else t for t in op.inputs]
    activation(q_in, _asymmetric(*ranges.get(inp, (-1.0, 1.0))))
    ops = []
    for op in g.operators:
        name = names[model.operatorCodes[op.opcodeIndex].builtinCode]
        x = op.inputs[0]
        sx, _ = activation(x)
        if name in _FLOAT_OPS:
            xf, (y,) = _clone(S, g, x, b"_float"), op.outputs
            yf = _clone(S, g, y, b"_float")
            ops += [_plain(S, model, "DEQUANTIZE", x, xf), op, _plain(S, model, "QUANTIZE", yf, y)]
            op.inputs, op.outputs = [xf, *op.inputs[1:]], [yf]
            g.tensors[xf].type = g.tensors[yf].type = FLOAT32
            activation(y, act[x])
            continue
        ops.append(op)
        if name in _WEIGHTED:
            w, b = op.inputs[1], op.inputs[2] if len(op.inputs) > 2 else -1
            axis = _WEIGHTED[name] if per_channel else None
            wv = value(w)
            if axis is None:
                sw = np.full(1, max(float(np.abs(wv).max()) / 127.0, 1e-8))
                qw = np.round(wv / sw[0])
            else:
                moved = np.moveaxis(wv, axis, 0).reshape(wv.shape[axis], -1)
                sw = np.maximum(np.abs(moved).max(axis=1) / 127.0, 1e-8)
                shape = [1] * wv.ndim
                shape[axis] = -1
                qw = np.round(wv / sw.reshape(shape))
            store(w, np.clip(qw, -127, 127).astype(np.int8), INT8,
                  qparams(sw, np.zeros(len(sw)), axis or 0))
            if b >= 0:
                sb = sx * sw
                qb = np.round(value(b) / (sb if len(sb) > 1 else sb[0]))
                store(b, qb.astype(np.int32), INT32, qparams(sb, np.zeros(len(sb))))
        else:
            for t in op.inputs[1:]:
                if t >= 0 and is_const(t) and g.tensors[t].type == FLOAT32:
                    cv = value(t)
                    s, z = _asymmetric(float(cv.min()), float(cv.max()))
                    qc = np.clip(np.round(cv / s) + z, -128, 127).astype(np.int8)
                    store(t, qc, INT8, qparams([s], [z]))
                elif t >= 0 and not is_const(t):
                    activation(t)
        (y,) = op.outputs
        activation(y, act[x] if name in _SAME_PARAMS else None)
    g.operators = [_plain(S, model, "QUANTIZE", inp, q_in), *ops,
                   _plain(S, model, "DEQUANTIZE", out, q_out)]
    g.outputs = [q_out]
    g.tensors[q_out].type, g.tensors[q_out].quantization = FLOAT32, None
    return pack_model(model, len(model_bytes) + 1024)


def _clone(S, g, t: int, suffix: bytes) -> int:
    """A new tensor shaped like `t` (no data)."""
    src = g.tensors[t]
    new = S.TensorT()
    new.shape, new.type, new.name, new.buffer = list(src.shape), src.type, src.name + suffix, 0
    g.tensors.append(new)
    return len(g.tensors) - 1


def _plain(S, model, name: str, x: int, y: int):
    """An operator with one input, one output and no options."""
    op = S.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode_index(S, model, name), [x], [y]
    return op
