"""The same layer API as `nets.OnnxNet`, written as a TFLite flatbuffer (no TensorFlow).

Uses the TFLite schema's generated object API that LiteRT ships. Activations are stored
NHWC, as TFLite wants; `shapes` still reports the logical NCHW shape so network functions
run unchanged. Where TFLite's SAME padding would differ from the explicit, symmetric
padding of the definition (any strided layer), an explicit PAD precedes a VALID layer.
BatchNorm becomes MUL + ADD with the folded per-channel scale and shift.
"""

from __future__ import annotations

import numpy as np

from tvmtui.graph.tflite_schema import pack_model, schema
from tvmtui.workloads.netstats import NetStats


def _nhwc(shape: list[int]) -> list[int]:
    return [shape[0], shape[2], shape[3], shape[1]] if len(shape) == 4 else list(shape)


class TfliteNet:
    """Builds a TFLite model from layer calls; tensors are indices, weights buffers."""

    def __init__(self, name: str, input_shape: list[int]):
        self.S = schema()
        self.name = name
        self.tensors: list = []
        self.buffers: list = [self.S.BufferT()]  # buffer 0: the empty sentinel
        self.operators: list = []
        self.opcodes: dict[int, int] = {}
        self.shapes: dict[str, list[int]] = {}
        self.index: dict[str, int] = {}
        self.stats = NetStats()
        self._n = 0
        self._add_tensor("input", list(input_shape))

    # ---- plumbing ---------------------------------------------------------------
    def _add_tensor(self, name: str, logical: list[int], data: np.ndarray | None = None,
                    dtype: str = "float32") -> str:
        tensor = self.S.TensorT()
        tensor.shape = _nhwc(logical) if data is None else list(data.shape)
        tensor.type = {"float32": self.S.TensorType.FLOAT32,
                       "int32": self.S.TensorType.INT32}[dtype]
        tensor.name = name.encode()
        tensor.buffer = 0
        if data is not None:
            buf = self.S.BufferT()
            buf.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
            self.buffers.append(buf)
            tensor.buffer = len(self.buffers) - 1
        self.tensors.append(tensor)
        self.index[name] = len(self.tensors) - 1
        self.shapes[name] = list(logical)
        return name

    def _fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def _const(self, array: np.ndarray, prefix: str = "c") -> str:
        dtype = "int32" if array.dtype.kind in "iu" else "float32"
        array = array.astype(np.int32 if dtype == "int32" else np.float32)
        return self._add_tensor(self._fresh(prefix), list(array.shape), array, dtype)

    def _op(self, code_name: str, inputs: list[str | None], logical_out: list[int],
            options=None, options_type: str | None = None) -> str:
        code = getattr(self.S.BuiltinOperator, code_name)
        if code not in self.opcodes:
            self.opcodes[code] = len(self.opcodes)
        out = self._add_tensor(self._fresh(code_name.lower()), logical_out)
        op = self.S.OperatorT()
        op.opcodeIndex = self.opcodes[code]
        op.inputs = [self.index[i] if i is not None else -1 for i in inputs]
        op.outputs = [self.index[out]]
        if options is not None and options_type is not None:
            op.builtinOptionsType = getattr(self.S.BuiltinOptions, options_type)
            op.builtinOptions = options
        self.operators.append(op)
        return out

    def _options(self, kind: str, **fields):
        opts = getattr(self.S, f"{kind}T")()
        for key, value in fields.items():
            setattr(opts, key, value)
        return opts

    def _pad(self, x: str, pad: int) -> str:
        if pad == 0:
            return x
        n, c, h, w = self.shapes[x]
        paddings = np.array([[0, 0], [pad, pad], [pad, pad], [0, 0]], dtype=np.int32)
        return self._op("PAD", [x, self._const(paddings, "pad")], [n, c, h + 2 * pad, w + 2 * pad])

    # ---- layers (same signatures and accounting as OnnxNet) ----------------------------
    def conv(self, x: str, w: np.ndarray, b: np.ndarray | None, stride: int = 1,
             pad: int = 0, groups: int = 1) -> str:
        n, c, h, wd = self.shapes[x]
        o, _, k, _ = w.shape
        oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
        self.stats.macs += o * oh * ow * (c // groups) * k * k
        self.stats.params += int(w.size) + (int(b.size) if b is not None else 0)
        self.stats.layers.append(f"conv {k}x{k}/{stride} {c}->{o}" + (" dw" if groups > 1 else ""))
        bias = self._const(b if b is not None else np.zeros(o, np.float32), "b")
        x = self._pad(x, pad)
        VALID = self.S.Padding.VALID
        if groups == 1:
            weight = self._const(w.transpose(0, 2, 3, 1), "w")  # OIHW -> OHWI
            opts = self._options("Conv2DOptions", padding=VALID, strideW=stride, strideH=stride,
                                 dilationWFactor=1, dilationHFactor=1)
            return self._op("CONV_2D", [x, weight, bias], [n, o, oh, ow], opts, "Conv2DOptions")
        weight = self._const(w.transpose(1, 2, 3, 0), "w")  # (C,1,H,W) -> (1,H,W,C)
        opts = self._options("DepthwiseConv2DOptions", padding=VALID, strideW=stride,
                             strideH=stride, depthMultiplier=o // c, dilationWFactor=1,
                             dilationHFactor=1)
        return self._op("DEPTHWISE_CONV_2D", [x, weight, bias], [n, o, oh, ow], opts,
                        "DepthwiseConv2DOptions")

    def conv_transpose(self, x: str, w: np.ndarray, stride: int, pad: int) -> str:
        n, c, h, wd = self.shapes[x]
        _, o, k, _ = w.shape
        oh, ow = (h - 1) * stride - 2 * pad + k, (wd - 1) * stride - 2 * pad + k
        self.stats.params += int(w.size)
        self.stats.macs += c * h * wd * o * k * k
        self.stats.layers.append(f"conv_transpose {k}x{k}/{stride} {c}->{o}")
        total = (h - 1) * stride + k - oh  # padding TFLite must remove, split evenly = `pad`
        padding = self.S.Padding.VALID if total == 0 else self.S.Padding.SAME
        if total not in (0, 2 * pad) or (padding == self.S.Padding.SAME and oh != h * stride):
            raise ValueError("this transposed convolution has no TFLite padding equivalent")
        out_shape = self._const(np.array([n, oh, ow, o], dtype=np.int32), "oshape")
        weight = self._const(w.transpose(1, 2, 3, 0), "w")  # (I,O,H,W) -> (O,H,W,I)
        opts = self._options("TransposeConvOptions", padding=padding, strideW=stride,
                             strideH=stride)
        return self._op("TRANSPOSE_CONV", [out_shape, weight, x], [n, o, oh, ow], opts,
                        "TransposeConvOptions")

    def batch_norm(self, x: str, gamma, beta, mean, var, eps: float = 1e-5) -> str:
        self.stats.params += sum(int(a.size) for a in (gamma, beta, mean, var))
        scale = (gamma / np.sqrt(var + eps)).astype(np.float32)
        shift = (beta - mean * scale).astype(np.float32)
        y = self._op("MUL", [x, self._const(scale, "bn")], self.shapes[x],
                     self._options("MulOptions"), "MulOptions")
        return self._op("ADD", [y, self._const(shift, "bn")], self.shapes[x],
                        self._options("AddOptions"), "AddOptions")

    def relu(self, x: str) -> str:
        return self._op("RELU", [x], self.shapes[x])

    def relu6(self, x: str) -> str:
        return self._op("RELU6", [x], self.shapes[x])

    def tanh(self, x: str) -> str:
        return self._op("TANH", [x], self.shapes[x])

    def sigmoid(self, x: str) -> str:
        return self._op("LOGISTIC", [x], self.shapes[x])

    def add(self, a: str, b: str) -> str:
        return self._op("ADD", [a, b], self.shapes[a], self._options("AddOptions"), "AddOptions")

    def mul(self, a: str, b: str) -> str:
        return self._op("MUL", [a, b], self.shapes[a], self._options("MulOptions"), "MulOptions")

    def max_pool(self, x: str, k: int, stride: int, pad: int) -> str:
        # Zero padding equals -inf padding here: pooled inputs follow a ReLU.
        n, c, h, w = self.shapes[x]
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        self.stats.layers.append(f"max_pool {k}x{k}/{stride}")
        opts = self._options("Pool2DOptions", padding=self.S.Padding.VALID, strideW=stride,
                             strideH=stride, filterWidth=k, filterHeight=k)
        return self._op("MAX_POOL_2D", [self._pad(x, pad)], [n, c, oh, ow], opts, "Pool2DOptions")

    def global_avg_pool(self, x: str) -> str:
        n, c, _, _ = self.shapes[x]
        axes = self._const(np.array([1, 2], dtype=np.int32), "axes")
        return self._op("MEAN", [x, axes], [n, c], self._options("ReducerOptions", keepDims=False),
                        "ReducerOptions")

    def flatten(self, x: str) -> str:
        shape = self.shapes[x]
        if len(shape) == 2:
            return x
        perm = self._const(np.array([0, 3, 1, 2], dtype=np.int32), "perm")  # NHWC -> NCHW
        nchw = self._op("TRANSPOSE", [x, perm], shape)
        self.tensors[self.index[nchw]].shape = list(shape)  # this one really is NCHW
        return self._reshape(nchw, [shape[0], int(np.prod(shape[1:]))])

    def reshape(self, x: str, shape: list[int]) -> str:
        return self._reshape(x, list(shape))

    def _reshape(self, x: str, logical: list[int]) -> str:
        stored = _nhwc(logical)
        target = self._const(np.array(stored, dtype=np.int32), "shape")
        opts = self._options("ReshapeOptions", newShape=stored)
        return self._op("RESHAPE", [x, target], logical, opts, "ReshapeOptions")

    def dense(self, x: str, w: np.ndarray, b: np.ndarray | None) -> str:
        n, k = self.shapes[x]
        out = w.shape[0]
        self.stats.params += int(w.size) + (int(b.size) if b is not None else 0)
        self.stats.macs += n * k * out
        self.stats.layers.append(f"dense {k}->{out}")
        bias = self._const(b, "b") if b is not None else None
        opts = self._options("FullyConnectedOptions")
        return self._op("FULLY_CONNECTED", [x, self._const(w, "w"), bias], [n, out], opts,
                        "FullyConnectedOptions")

    def _slice(self, x: str, begin: list[int], size: list[int]) -> str:
        b = self._const(np.array(begin, dtype=np.int32), "begin")
        s = self._const(np.array(size, dtype=np.int32), "size")
        return self._op("SLICE", [x, b, s], list(size), self._options("SliceOptions"),
                        "SliceOptions")

    def slice_cols(self, x: str, start: int, end: int) -> str:
        n, _ = self.shapes[x]
        return self._slice(x, [0, start], [n, end - start])

    def slice_rows(self, x: str, row: int) -> str:
        _, k = self.shapes[x]
        return self._slice(x, [row, 0], [1, k])

    def concat_cols(self, a: str, b: str) -> str:
        n, ka = self.shapes[a]
        opts = self._options("ConcatenationOptions", axis=1)
        return self._op("CONCATENATION", [a, b], [n, ka + self.shapes[b][1]], opts,
                        "ConcatenationOptions")

    # ---- output -----------------------------------------------------------------------
    def finish(self, out: str) -> bytes:
        S = self.S
        subgraph = S.SubGraphT()
        subgraph.tensors = self.tensors
        subgraph.inputs = [self.index["input"]]
        subgraph.outputs = [self.index[out]]
        subgraph.operators = self.operators
        subgraph.name = self.name.encode()
        model = S.ModelT()
        model.version = 3
        model.description = b"tvmtui"
        model.buffers = self.buffers
        model.subgraphs = [subgraph]
        codes = []
        for code, _ in sorted(self.opcodes.items(), key=lambda kv: kv[1]):
            oc = S.OperatorCodeT()
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(code, 127)
            oc.version = 1
            codes.append(oc)
        model.operatorCodes = codes
        return pack_model(model)
