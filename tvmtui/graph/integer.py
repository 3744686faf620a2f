"""Quantized TFLite layers as integer arithmetic, rounded as TFLite rounds (rewrite revisions 14-16).

TVM's TFLite importer turns every quantized operator into dequantize -> float operator ->
quantize, so an int8 model computes in float and rounds each layer's output its own way:
up to two quantization steps from LiteRT at a MobileNet's output. This pass finds those
regions in the imported graph and replaces each with what TFLite's reference kernels
compute, bit for bit:

- CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED: int8 x int8 products summed in int32, the
  input's zero point padded in and its weight sum folded into the int32 bias (`acc =
  conv(x, w) + b - zx * sum(w)`), then requantized per output channel with TFLite's fixed
  point multiplier and shift (`requantize`);
- ADD: both inputs rescaled with a 20-bit left shift and their multipliers, summed, then
  requantized (TFLite's `AddElementwise`), with the fused activation as a clamp;
- RELU, RELU6, RELU_N1_TO_1: TFLite's `ReluX` (requantize, then clamp);
- MEAN over the spatial axes: TFLite's `reference_integer_ops::Mean`;
- operators that only move data (transpose, reshape, pad, max pool, concatenation) between
  equal quantization parameters run on the integers themselves.

A region of any other shape is left as the importer wrote it (float), and `IntegerPlan`
names it. Constants keep their integer types; FoldConstant folds the weight sums later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tvmtui.graph.fixedpoint import (
    Emitter,
    dtype_range,
    mean_multiplier,
    quantize_multiplier,
)
from tvmtui.graph.fold import constant_value

ADD_LEFT_SHIFT = 20  # TFLite's left shift for int8 and uint8 ADD
INTEGER_ATTR = "tvmtui_integer"  # the IRModule attribute that carries `IntegerPlan.to_text()`


@dataclass
class IntegerPlan:
    """What the integer lowering did to one graph."""

    lowered: dict[str, int] = field(default_factory=dict)  # kind -> layers made integer
    left: dict[str, int] = field(default_factory=dict)  # float operator -> regions left in float

    def count(self) -> int:
        return sum(self.lowered.values())

    def to_json(self) -> dict:
        return {"lowered": dict(self.lowered), "left_in_float": dict(self.left)}

    def to_text(self) -> str:
        import json

        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def of(cls, mod) -> IntegerPlan | None:
        """The plan `relax_import` left on a module, or None for a float model."""
        import json

        text = (mod.attrs or {}).get(INTEGER_ATTR) if mod.attrs is not None else None
        if text is None:
            return None
        data = json.loads(str(text))
        return cls(dict(data["lowered"]), dict(data["left_in_float"]))

    def summary(self) -> str:
        """One line for notes: `int8: 14 conv2d, 13 depthwise_conv2d ... in integers`."""
        done = ", ".join(f"{n} {k}" for k, n in sorted(self.lowered.items()))
        text = f"int8 layers in integer arithmetic, rounded as TFLite: {done or 'none'}"
        if self.left:
            text += "; left in float: " + ", ".join(
                f"{n} {k.removeprefix('relax.')}" for k, n in sorted(self.left.items()))
        return text


# ---- reading the imported graph ---------------------------------------------------------------
@dataclass
class _Quant:
    """An integer tensor and the parameters a `dequantize` read it with."""

    expr: object
    scale: np.ndarray  # float32, one value or one per channel
    zero_point: np.ndarray  # int
    axis: int

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1




def lower_integer(mod, revision: int = 17) -> tuple[Any, IntegerPlan]:
    """`mod` (as TVM's TFLite importer wrote it) with its quantized regions in integer
    arithmetic (see the module's docstring), and what was done; `revision` 14 computes a
    fully connected layer's multiplier as that revision did, 14-15 round QUANTIZE as they
    did, from 17 a fully connected layer is a 1x1 convolution (`REWRITE_REVISION`)."""
    from tvm import relax

    plan = IntegerPlan()

    @relax.expr_functor.mutator
    class Lowering(relax.PyExprMutator):
        def value(self, expr):
            """What a variable is bound to in the new function (or the expression)."""
            while isinstance(expr, relax.Var):
                bound = self.lookup_binding(expr)
                if bound is None:
                    return expr
                expr = bound
            return expr

        def op_of(self, expr) -> tuple[str | None, Any]:
            value = self.value(expr)
            if isinstance(value, relax.Call) and isinstance(value.op, tvm_ir_op()):
                return value.op.name, value
            return None, value

        def constant(self, expr) -> np.ndarray | None:
            """A constant, through the permute_dims and reshapes the importer wraps
            weights in."""
            name, value = self.op_of(expr)
            if name is None:
                return constant_value(value)
            if name in ("relax.permute_dims", "relax.reshape"):
                inner = self.constant(value.args[0])
                if inner is None:
                    return None
                if name == "relax.reshape":
                    return inner.reshape([int(d) for d in value.ty.shape])
                axes = value.attrs.axes
                return np.transpose(inner, None if axes is None else [int(a) for a in axes])
            return None

        def dequantized(self, expr, weight: bool = False) -> _Quant | None:
            """The integer operand of a `dequantize` (a weight's as a constant, with the
            reshape a per-channel depthwise weight goes through after it)."""
            name, call = self.op_of(expr)
            reshape = None
            if weight and name == "relax.reshape":
                reshape = [int(d) for d in call.ty.shape]
                name, call = self.op_of(call.args[0])
            if name != "relax.dequantize":
                return None
            scale, zp = constant_value(call.args[1]), constant_value(call.args[2])
            if scale is None or zp is None:
                return None
            data = call.args[0]
            axis = int(call.attrs.axis)
            if weight:
                value = self.constant(data)
                if value is None:
                    return None
                if reshape is not None:  # (1, KH, KW, C) -> (KH, KW, C, 1): channels last
                    if axis != value.ndim - 1 or reshape[-2] != value.shape[-1]:
                        return None
                    value, axis = value.reshape(reshape), len(reshape) - 2
                data = value
            return _Quant(data, np.atleast_1d(scale).astype(np.float32),
                          np.atleast_1d(zp).astype(np.int64), axis)

        # ---- regions ------------------------------------------------------------------
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            if getattr(call.op, "name", None) != "relax.quantize":
                return call
            scale, zp = constant_value(call.args[1]), constant_value(call.args[2])
            if scale is None or zp is None or scale.size != 1 or zp.size != 1:
                return call
            out = (float(np.float32(scale.reshape(()))), int(zp.reshape(())),
                   str(call.attrs.out_dtype))
            name, inner = self.op_of(call.args[0])
            if name is None and str(call.args[0].ty.dtype) == "float32":  # a QUANTIZE
                plan.lowered["quantize"] = plan.lowered.get("quantize", 0) + 1
                return Emitter(self.builder_).quantize(call.args[0], *out, revision=revision)
            lowered = None
            try:
                lowered = self.region(name, inner, out, call)
            except _NotThisShape:
                lowered = None
            if lowered is None:
                plan.left[name or "?"] = plan.left.get(name or "?", 0) + 1
                return call
            kind, expr = lowered
            plan.lowered[kind] = plan.lowered.get(kind, 0) + 1
            return expr

        def region(self, name, inner, out, call):
            lo, hi = dtype_range(out[2])
            clamp = (lo, hi)
            if name in ("relax.nn.relu", "relax.clip"):  # an activation before quantize
                clamp = self.activation(name, inner, out, clamp)
                name, inner = self.op_of(inner.args[0])
                if name == "relax.dequantize":  # a standalone RELU / RELU6
                    return "relu", self.relu(inner, out, clamp)
            if name == "relax.add":
                a_name, a = self.op_of(inner.args[0])
                if a_name in ("relax.nn.conv2d", "relax.matmul"):
                    bias = self.dequantized(inner.args[1], weight=True)
                    if bias is None:
                        raise _NotThisShape
                    return self.product(a_name, a, bias, out, clamp)
                return "add", self.add(inner, out, clamp)
            if name in ("relax.nn.conv2d", "relax.matmul"):
                return self.product(name, inner, None, out, clamp)
            if name == "relax.mean":
                return "mean", self.mean(inner, out, clamp)
            if name == "relax.dequantize":
                return self.same(call, None, out)
            if name in ("relax.permute_dims", "relax.reshape", "relax.nn.pad",
                        "relax.nn.max_pool2d", "relax.concat"):
                return self.same(call, inner, out)
            return None

        def activation(self, name, inner, out, clamp):
            """TFLite's clamp for a fused activation, in the output's integers."""
            scale, zp, _ = out
            lo, hi = clamp
            if name == "relax.nn.relu":
                return max(lo, zp), hi
            a_min, a_max = (float(arg.value) for arg in inner.args[1:3])
            return (max(lo, zp + int(round(a_min / scale))),
                    min(hi, zp + int(round(a_max / scale))))

        def product(self, name, call, bias, out, clamp):
            """conv2d / matmul of a dequantized input and weight (+ a dequantized bias)."""
            from tvm import relax

            x = self.dequantized(call.args[0])
            w = self.dequantized(call.args[1], weight=True)
            if x is None or w is None or not x.per_tensor or np.any(w.zero_point != 0) and \
                    not w.per_tensor:
                raise _NotThisShape
            zx = int(x.zero_point[0])
            weight = w.expr.astype(np.int64) - w.zero_point.reshape(
                [-1 if d == w.axis else 1 for d in range(w.expr.ndim)] if w.zero_point.size > 1
                else ())
            e = Emitter(self.builder_)
            out_shape = [int(d) for d in call.ty.shape]
            channels = out_shape[-1]
            as_conv = False  # a fully connected layer written as a 1x1 convolution
            if name == "relax.nn.conv2d":
                a = call.attrs
                if str(a.data_layout) != "NHWC" or str(a.kernel_layout) not in ("HWIO", "HWOI"):
                    raise _NotThisShape
                o_axis = str(a.kernel_layout).index("O")
                if int(a.groups) > 1 and str(a.kernel_layout) == "HWOI":
                    o_axis = 2  # depthwise: (KH, KW, C, 1), one output channel per group
                sums = weight.sum(axis=tuple(d for d in range(4) if d != o_axis)).reshape(-1)
                t, left, b, r = (int(p) for p in a.padding)
                data = x.expr
                if t or left or b or r:
                    data = e.emit(relax.op.nn.pad(data, [0, 0, t, b, left, r, 0, 0],
                                                  pad_value=float(zx)))
                acc = e.emit(relax.op.nn.conv2d(
                    data, e.const(weight, _narrow(weight)), strides=a.strides, padding=[0, 0],
                    dilation=a.dilation, groups=int(a.groups), data_layout="NHWC",
                    kernel_layout=str(a.kernel_layout), out_layout="NHWC", out_dtype="int32"))
                kind = "depthwise_conv2d" if int(a.groups) > 1 else "conv2d"
            else:
                if weight.ndim != 2:
                    raise _NotThisShape
                sums = weight.sum(axis=0)
                rows = [int(d) for d in x.expr.ty.shape]
                as_conv = revision >= 17 and len(rows) == 2
                if as_conv:
                    # A 1x1 convolution over one row of M pixels: the blocked variant then
                    # runs it on the dot-product instruction like any convolution (TOPI's
                    # int32 dense ran DQN int8's 3136 -> 512 layer, a third of the network).
                    out_shape = [1, 1, *out_shape]
                    data = e.emit(relax.op.reshape(x.expr, out_shape[:3] + [rows[1]]))
                    acc = e.emit(relax.op.nn.conv2d(
                        data, e.const(weight.reshape(1, 1, *weight.shape), _narrow(weight)),
                        data_layout="NHWC", kernel_layout="HWIO", out_layout="NHWC",
                        out_dtype="int32"))
                else:
                    acc = e.emit(relax.op.matmul(x.expr, e.const(weight, _narrow(weight)),
                                                 out_dtype="int32"))
                kind = "fully_connected"
            if sums.size != channels:
                raise _NotThisShape
            offset = -zx * sums
            if bias is not None:
                b_int = np.asarray(bias.expr, np.int64).reshape(-1)
                if bias.expr.dtype.kind not in "iu" or b_int.size not in (1, channels):
                    raise _NotThisShape
                offset = offset + b_int
            rank = [1] * (len(out_shape) - 1) + [-1]  # per channel, at full rank
            if np.any(offset):
                acc = e.emit(relax.op.add(acc, e.const(offset, "int32", rank)))
            sw = np.broadcast_to(w.scale, (channels,))
            # in double throughout: a float32 product of the two scales moves the
            # multiplier by ~1e-7, enough to round a layer's output across a half step
            if kind == "fully_connected" and revision < 15:
                real = (np.float32(x.scale[0]) * sw).astype(np.float64) / np.float64(out[0])
            else:
                real = np.float64(x.scale[0]) * sw.astype(np.float64) / np.float64(out[0])
            multiplier, shift = quantize_multiplier(real)
            if np.all(multiplier == multiplier[0]) and np.all(shift == shift[0]):
                multiplier, shift = multiplier[:1], shift[:1]
            result = e.requantize(acc, multiplier, shift, out[1], *clamp, out[2], rank,
                                  single=kind == "fully_connected")
            if as_conv:  # back to the layer's [M, N]
                result = e.emit(relax.op.reshape(result, out_shape[2:]))
            return kind, result

        def add(self, call, out, clamp):
            """TFLite's quantized ADD of two dequantized tensors."""
            from tvm import relax

            a, b = self.dequantized(call.args[0]), self.dequantized(call.args[1])
            if a is None or b is None or not (a.per_tensor and b.per_tensor):
                raise _NotThisShape
            if isinstance(a.expr, np.ndarray) or isinstance(b.expr, np.ndarray):
                raise _NotThisShape
            e = Emitter(self.builder_)
            sa, sb, so = (np.float64(v) for v in (a.scale[0], b.scale[0], out[0]))
            twice_max = 2 * max(sa, sb)
            scaled = []
            for q, s in ((a, sa), (b, sb)):
                m, sh = quantize_multiplier(s / twice_max)
                x = e.cast(q.expr, "int32")
                x = e.emit(relax.op.subtract(x, e.const(int(q.zero_point[0]), "int32")))
                x = e.emit(relax.op.left_shift(x, e.const(ADD_LEFT_SHIFT, "int32")))
                scaled.append(e.requantize(x, m, sh, 0, -(1 << 31), (1 << 31) - 1, "int32"))
            total = e.emit(relax.op.add(*scaled))
            m, sh = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * so))
            return e.requantize(total, m, sh, out[1], *clamp, out[2])

        def relu(self, dq_call, out, clamp):
            """TFLite's `ReluX`: requantize the input, then clamp."""
            from tvm import relax

            x = self.dequantized(dq_call)
            if x is None or not x.per_tensor:
                raise _NotThisShape
            e = Emitter(self.builder_)
            v = e.cast(x.expr, "int32")
            v = e.emit(relax.op.subtract(v, e.const(int(x.zero_point[0]), "int32")))
            # float / float, as TFLite divides the scales
            m, sh = quantize_multiplier(np.float32(x.scale[0]) / np.float32(out[0]))
            return e.requantize(v, m, sh, out[1], *clamp, out[2])

        def mean(self, call, out, clamp):
            """TFLite's integer MEAN (`QuantizedMeanOrSum`): the sum of `x - zx` over the
            axes, requantized with 1 / count folded into the multiplier as TFLite folds it."""
            from tvm import relax

            x = self.dequantized(call.args[0])
            if x is None or not x.per_tensor or call.attrs.axis is None:
                raise _NotThisShape
            shape = [int(d) for d in call.args[0].ty.shape]
            axes = [int(v) % len(shape) for v in call.attrs.axis]
            count = int(np.prod([shape[a] for a in axes]))
            e = Emitter(self.builder_)
            v = e.cast(x.expr, "int32")
            v = e.emit(relax.op.subtract(v, e.const(int(x.zero_point[0]), "int32")))
            total = e.emit(relax.op.sum(v, axis=axes, keepdims=bool(call.attrs.keepdims)))
            m, sh = quantize_multiplier(np.float64(x.scale[0]) / np.float64(out[0]))
            m, sh = mean_multiplier(int(m[0]), int(sh[0]), count)
            return e.requantize(total, m, sh, out[1], *clamp, out[2])

        def same(self, call, inner, out):
            """A data-moving operator (or none) between equal quantization parameters, run
            on the integers."""
            from tvm import relax

            if inner is None:
                x = self.dequantized(call.args[0])
                if x is None or not x.per_tensor or not _same_params(x, out) or \
                        str(x.expr.ty.dtype) != out[2]:
                    raise _NotThisShape
                return "requantize", x.expr
            name = inner.op.name
            operands = list(inner.args[0].fields) if name == "relax.concat" else [inner.args[0]]
            ints = []
            for operand in operands:
                x = self.dequantized(operand)
                if x is None or not x.per_tensor or not _same_params(x, out) or \
                        isinstance(x.expr, np.ndarray) or str(x.expr.ty.dtype) != out[2]:
                    raise _NotThisShape
                ints.append(x.expr)
            if name == "relax.concat":
                expr = relax.Call(inner.op, [relax.Tuple(ints)], inner.attrs)
            elif name == "relax.nn.pad":
                a = inner.attrs
                if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0:
                    raise _NotThisShape
                expr = relax.op.nn.pad(ints[0], [int(p) for p in a.pad_width],
                                       pad_value=float(out[1]))
            else:
                expr = relax.Call(inner.op, [ints[0], *inner.args[1:]], inner.attrs)
            return name.split(".")[-1], expr

    def tvm_ir_op():
        import tvm

        return tvm.ir.Op

    lowering = Lowering(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            lowering.builder_.update_func(gvar, lowering.visit_expr(func))
    out = lowering.builder_.get()
    if plan.count():
        out = relax.transform.DeadCodeElimination()(out)
    return out, plan


class _NotThisShape(Exception):
    """A quantized region this pass does not lower: it stays in float."""


def _same_params(x: _Quant, out) -> bool:
    return bool(np.float32(x.scale[0]) == np.float32(out[0]) and int(x.zero_point[0]) == out[1])


def _narrow(values: np.ndarray) -> str:
    """The smallest of int8 / int16 / int32 that holds `values` exactly."""
    for dtype in ("int8", "int16"):
        lo, hi = dtype_range(dtype)
        if values.min() >= lo and values.max() <= hi:
            return dtype
    return "int32"
