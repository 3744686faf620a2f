"""Post-training int8 quantization of a float TFLite model written by `TfliteNet`.

What TFLite's converter does for full-integer models with float I/O: activation ranges
calibrated by running the float model on frames, asymmetric int8 activations, symmetric
per-channel int8 weights for CONV_2D / DEPTHWISE_CONV_2D, per-tensor for FULLY_CONNECTED,
int32 biases at input scale x weight scale, a QUANTIZE after the input and a DEQUANTIZE
before the output. Ops that move data without computing (RESHAPE, TRANSPOSE, PAD,
MAX_POOL_2D) keep their input's parameters, as TFLite requires.
"""

from __future__ import annotations

import numpy as np

from tvmtui.workloads.tflite_writer import opcode_index, pack_model

_SAME_PARAMS = {"RESHAPE", "TRANSPOSE", "PAD", "MAX_POOL_2D"}
# Left in float between a DEQUANTIZE and a QUANTIZE: TVM 0.27 has no int8 TRANSPOSE or PAD.
_FLOAT_OPS = {"TRANSPOSE", "PAD"}
_WEIGHTED = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": None}  # channel axis


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


def quantize_tflite(model_bytes: bytes, frames: list[np.ndarray]) -> bytes:
    """The int8 model (see the module's docstring); `frames` are NHWC float inputs."""
    from ai_edge_litert import schema_py_generated as S

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
            axis = _WEIGHTED[name]
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
