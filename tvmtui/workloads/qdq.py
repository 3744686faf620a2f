"""The int8 twins as ONNX QDQ files, for ONNX Runtime and OpenVINO.

Each is written from the TFLite twin itself, operator by operator, with its integer
weights and every tensor's scale and zero point: QuantizeLinear -> DequantizeLinear
around each activation, DequantizeLinear on the weights (per channel on axis 0) and on
the int32 biases, in NCHW. So all runtimes compute one int8 model and their outputs are
compared in its quantization steps (a static quantizer run on the float ONNX file would
pick its own ranges: a different model, many steps away). The vocabulary is what the
quantizer writes (`quantize.py`); anything else raises `UnsupportedTwin`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_NCHW = (0, 3, 1, 2)  # ONNX holds a 4-d NHWC activation as transpose(x, _NCHW)
_DTYPES = {0: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 9: np.int8}


class UnsupportedTwin(ValueError):
    """A TFLite operator this writer has no ONNX form for."""


@dataclass
class _Tensor:
    value: str  # the ONNX value holding it: integers for a quantized tensor, else float
    perm: tuple  # onnx value = transpose(tflite tensor, perm)
    params: tuple[str, str] | None = None  # a quantized tensor's scale and zero point


class _Writer:
    def __init__(self, model, sub):
        self.model, self.sub = model, sub
        self.nodes, self.inits, self.values = [], [], {}
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def init(self, stem: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.fresh(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], stem: str, **attrs) -> str:
        from onnx import helper

        out = self.fresh(stem)
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    # ---- the flatbuffer ----------------------------------------------------------------
    def tensor(self, index: int):
        return self.sub.Tensors(int(index))

    def data(self, index: int) -> np.ndarray:
        t = self.tensor(index)
        raw = self.model.Buffers(t.Buffer()).DataAsNumpy()
        if isinstance(raw, int) or raw is None:
            raise UnsupportedTwin(f"tensor {t.Name().decode()} is not a constant")
        return np.frombuffer(raw.tobytes(), _DTYPES[t.Type()]).reshape(t.ShapeAsNumpy())

    def quant(self, index: int) -> tuple[np.ndarray, np.ndarray, int]:
        q = self.tensor(index).Quantization()
        if q is None or q.ScaleLength() == 0:
            raise UnsupportedTwin(f"tensor {self.tensor(index).Name().decode()} is not quantized")
        return (q.ScaleAsNumpy().astype(np.float32), q.ZeroPointAsNumpy().astype(np.int64),
                int(q.QuantizedDimension()))

    # ---- QDQ pieces ----------------------------------------------------------------------
    def requantized(self, index: int, value: str, perm: tuple) -> None:
        """`value` (float) quantized to tensor `index`'s parameters and dequantized again."""
        scale, zp, _ = self.quant(index)
        dtype = _DTYPES[self.tensor(index).Type()]
        s = self.init("scale", scale.reshape(()))
        z = self.init("zero_point", zp.reshape(()).astype(dtype))
        self.values[int(index)] = _Tensor(self.node("QuantizeLinear", [value, s, z], "q"), perm,
                                          (s, z))

    def read(self, t: _Tensor) -> str:
        """`t` as float: each reader of a quantized tensor gets a DequantizeLinear of its
        own, the form ONNX Runtime fuses into its integer operators."""
        if t.params is None:
            return t.value
        return self.node("DequantizeLinear", [t.value, *t.params], "dq")

    def weight(self, index: int, layout: tuple) -> str:
        """A quantized constant, transposed by `layout` and dequantized (per channel on
        the axis it lands on)."""
        scale, zp, axis = self.quant(index)
        data = np.transpose(self.data(index), layout)
        q = self.init("w", data)
        if scale.size == 1:
            return self.node("DequantizeLinear", [q, self.init("ws", scale.reshape(())),
                                                  self.init("wz", zp.reshape(()).astype(data.dtype))],
                             "w_dq")
        return self.node("DequantizeLinear", [q, self.init("ws", scale),
                                              self.init("wz", zp.astype(data.dtype))],
                         "w_dq", axis=layout.index(axis))

    def activation(self, value: str, code: int) -> str:
        if code == 0:
            return value
        if code == 1:
            return self.node("Relu", [value], "relu")
        bounds = {3: (0.0, 6.0), 2: (-1.0, 1.0)}.get(code)
        if bounds is None:
            raise UnsupportedTwin(f"fused activation {code}")
        lo, hi = (self.init("c", np.float32(b)) for b in bounds)
        return self.node("Clip", [value, lo, hi], "clip")

    def as_layout(self, t: _Tensor, perm: tuple) -> str:
        """`t`'s ONNX value as transpose(tflite tensor, perm)."""
        if tuple(t.perm) == tuple(perm):
            return self.read(t)
        inverse = np.argsort(t.perm)  # back to the TFLite layout, then to perm
        return self.node("Transpose", [self.read(t)], "t", perm=[int(inverse[p]) for p in perm])


def _options(op, cls):
    import tflite

    table = op.BuiltinOptions()
    opts = getattr(tflite, cls)()
    opts.Init(table.Bytes, table.Pos)
    return opts


def _pads(padding: int, size, kernel, stride, dilation) -> list[int]:
    """Begin and end padding of each spatial axis for TFLite's SAME (0) or VALID (1)."""
    if padding == 1:
        return [0, 0, 0, 0]
    begin, end = [], []
    for n, k, s, d in zip(size, kernel, stride, dilation):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end


def _padded_convolutions(model, sub, names) -> set[int]:
    """Tensors a PAD makes that only a convolution reads, as its data: ONNX holds that
    padding in the Conv (as a float model and ONNX Runtime's quantizer write it), so the
    runtime sees one quantized convolution, not a float Pad between two QDQ pairs."""
    readers: dict[int, list[tuple[str, int]]] = {}
    made_by_pad = set()
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = names.get(max(code.DeprecatedBuiltinCode(), code.BuiltinCode()), "?")
        for slot, idx in enumerate(op.InputsAsNumpy()):
            readers.setdefault(int(idx), []).append((kind, slot))
        if kind == "PAD":
            made_by_pad.add(int(op.Outputs(0)))
    outputs = {int(v) for v in sub.OutputsAsNumpy()}
    return {t for t in made_by_pad if t not in outputs and readers.get(t) and all(
        kind in ("CONV_2D", "DEPTHWISE_CONV_2D") and slot == 0 for kind, slot in readers[t])}


def tflite_to_qdq(model_bytes: bytes) -> bytes:
    """An int8 TFLite model (float input and output through QUANTIZE / DEQUANTIZE) as an
    ONNX QDQ model in NCHW, computing the same integers."""
    import tflite
    from onnx import TensorProto, helper

    model = tflite.Model.GetRootAsModel(model_bytes, 0)
    sub = model.Subgraphs(0)
    from tflite.BuiltinOperator import BuiltinOperator

    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    w = _Writer(model, sub)
    into_conv = _padded_convolutions(model, sub, names)
    folded: dict[int, list[int]] = {}  # a PAD's output -> the convolution pads it holds
    inputs = []
    for idx in sub.InputsAsNumpy():
        t = sub.Tensors(int(idx))
        shape = [int(d) for d in t.ShapeAsNumpy()]
        perm = _NCHW if len(shape) == 4 else tuple(range(len(shape)))
        name = t.Name().decode()
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                    [shape[p] for p in perm]))
        w.values[int(idx)] = _Tensor(name, perm)
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = names.get(max(code.DeprecatedBuiltinCode(), code.BuiltinCode()), "?")
        ins = [int(v) for v in op.InputsAsNumpy()]
        out = int(op.Outputs(0))
        out_shape = [int(d) for d in sub.Tensors(out).ShapeAsNumpy()]
        x = w.values.get(ins[0])
        if kind == "QUANTIZE":
            w.requantized(out, w.read(x), x.perm)
        elif kind == "DEQUANTIZE":
            w.values[out] = _Tensor(w.read(x), x.perm)
        elif kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            depthwise = kind == "DEPTHWISE_CONV_2D"
            opts = _options(op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
            # CONV_2D weights are OHWI; DEPTHWISE (1, H, W, C): both to OIHW / (C, 1, H, W)
            weight = w.weight(ins[1], (3, 0, 1, 2) if depthwise else (0, 3, 1, 2))
            kshape = [int(d) for d in sub.Tensors(ins[1]).ShapeAsNumpy()][1:3]
            in_shape = [int(d) for d in sub.Tensors(ins[0]).ShapeAsNumpy()]
            stride = [opts.StrideH(), opts.StrideW()]
            dilation = [opts.DilationHFactor(), opts.DilationWFactor()]
            operands = [w.as_layout(x, _NCHW), weight]
            if len(ins) > 2 and ins[2] >= 0:
                operands.append(w.weight(ins[2], (0,)))
            pads = _pads(opts.Padding(), in_shape[1:3], kshape, stride, dilation)
            if ins[0] in folded:
                pads = [int(a + b) for a, b in zip(pads, folded[ins[0]])]
            y = w.node("Conv", operands, "conv", strides=stride, dilations=dilation, pads=pads,
                       group=in_shape[3] if depthwise else 1)
            w.requantized(out, w.activation(y, opts.FusedActivationFunction()), _NCHW)
        elif kind == "FULLY_CONNECTED":
            opts = _options(op, "FullyConnectedOptions")
            operands = [w.as_layout(x, tuple(range(len(out_shape)))), w.weight(ins[1], (0, 1))]
            if len(ins) > 2 and ins[2] >= 0:
                operands.append(w.weight(ins[2], (0,)))
            y = w.node("Gemm", operands, "fc", transB=1)
            w.requantized(out, w.activation(y, opts.FusedActivationFunction()),
                          tuple(range(len(out_shape))))
        elif kind == "ADD":
            opts = _options(op, "AddOptions")
            b = w.values[ins[1]]
            y = w.node("Add", [w.read(x), w.as_layout(b, x.perm)], "add")
            w.requantized(out, w.activation(y, opts.FusedActivationFunction()), x.perm)
        elif kind == "PAD":
            table = w.data(ins[1]).astype(np.int64)  # (rank, 2), in the TFLite layout
            if out in into_conv and not table[[0, 3]].any():  # the convolution's own pads
                w.values[out] = x
                folded[out] = [*table[1:3, 0], *table[1:3, 1]]
                continue
            table = table[list(x.perm)]
            y = w.node("Pad", [w.read(x), w.init("pads", np.concatenate([table[:, 0], table[:, 1]]))],
                       "pad")
            w.requantized(out, y, x.perm)
        elif kind == "MAX_POOL_2D":
            opts = _options(op, "Pool2DOptions")
            kernel, stride = [opts.FilterHeight(), opts.FilterWidth()], [opts.StrideH(), opts.StrideW()]
            in_shape = [int(d) for d in sub.Tensors(ins[0]).ShapeAsNumpy()]
            y = w.node("MaxPool", [w.as_layout(x, _NCHW)], "pool", kernel_shape=kernel,
                       strides=stride, pads=_pads(opts.Padding(), in_shape[1:3], kernel, stride,
                                                  [1, 1]))
            w.requantized(out, w.activation(y, opts.FusedActivationFunction()), _NCHW)
        elif kind == "MEAN":
            opts = _options(op, "ReducerOptions")
            axes = [int(a) % len(x.perm) for a in w.data(ins[1]).reshape(-1)]
            keep = bool(opts.KeepDims())
            onnx_axes = sorted(list(x.perm).index(a) for a in axes)
            y = w.node("ReduceMean", [w.read(x)], "mean", axes=onnx_axes, keepdims=int(keep))
            kept = [a for a in x.perm if keep or a not in axes]  # tflite axes, ONNX order
            perm = tuple(int(r) for r in np.argsort(np.argsort(kept))) if not keep else x.perm
            w.requantized(out, y, perm)
        elif kind == "TRANSPOSE":
            perm = tuple(int(p) for p in w.data(ins[1]).reshape(-1))
            inverse = np.argsort(x.perm)
            y = w.node("Transpose", [w.read(x)], "t", perm=[int(inverse[p]) for p in perm])
            w.requantized(out, y, tuple(range(len(perm))))
        elif kind == "RESHAPE":
            y = w.node("Reshape", [w.as_layout(x, tuple(range(len(x.perm)))),
                                   w.init("shape", np.asarray(out_shape, np.int64))], "reshape")
            w.requantized(out, y, tuple(range(len(out_shape))))
        else:
            raise UnsupportedTwin(f"no ONNX QDQ form for {kind} (operator #{i})")
    outputs = []
    for idx in sub.OutputsAsNumpy():
        t = sub.Tensors(int(idx))
        shape = [int(d) for d in t.ShapeAsNumpy()]
        perm = _NCHW if len(shape) == 4 else tuple(range(len(shape)))
        value = w.as_layout(w.values[int(idx)], perm)
        name = t.Name().decode()
        w.nodes.append(helper.make_node("Identity", [value], [name]))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                     [shape[p] for p in perm]))
    graph = helper.make_graph(w.nodes, "qdq", inputs, outputs, w.inits)
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                   producer_name="tvmtui")
    onnx_model.ir_version = 8
    return onnx_model.SerializeToString()
