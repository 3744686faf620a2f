"""TFLite's fixed-point arithmetic: its multipliers at compile time (numpy) and its
requantization as Relax operators, for the integer lowering (`integer.py`)."""

from __future__ import annotations

import numpy as np


# ---- TFLite's fixed-point arithmetic, at compile time -------------------------------------
def quantize_multiplier(real) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's `QuantizeMultiplier` of each value: (int32 multiplier in [2^30, 2^31), shift),
    `real = multiplier * 2^(shift - 31)`; the fraction rounds half away from zero."""
    real = np.atleast_1d(np.asarray(real, np.float64))
    frac, exp = np.frexp(real)
    q = np.trunc(frac * (1 << 31) + np.copysign(0.5, frac)).astype(np.int64)
    exp = exp.astype(np.int64)
    full = q == (1 << 31)
    q[full] //= 2
    exp[full] += 1
    tiny = (exp < -31) | (real == 0)
    q[tiny], exp[tiny] = 0, 0
    exp = np.minimum(exp, 30)
    return q, exp


def mean_multiplier(multiplier: int, shift: int, count: int) -> tuple[int, int]:
    """TFLite's MEAN multiplier with 1 / `count` folded in: shifted left by up to
    floor(log2(count)) bits (at most 32, and no further than a shift of -31), then divided
    by `count` (truncating)."""
    extra = min(count.bit_length() - 1, 32, 31 + shift)
    return (multiplier << extra) // count, shift - extra


def mbqm_reference(x, multiplier, shift, single: bool = False) -> np.ndarray:
    """TFLite's `MultiplyByQuantizedMultiplier` in numpy (int64), rounded twice or once
    (`Emitter.requantize`): what `requantize` is checked against."""
    if single:
        total = 31 - np.asarray(shift, np.int64)
        return (np.asarray(x, np.int64) * multiplier + (np.int64(1) << (total - 1))) >> total
    x = np.asarray(x, np.int64) * (1 << np.maximum(shift, 0))
    ab = x * multiplier
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = _truncdiv(ab + nudge, 1 << 31)
    right = np.maximum(-np.asarray(shift), 0)
    mask = (1 << right) - 1
    remainder = high & mask
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + (remainder > threshold)


def _truncdiv(a, b):
    q = np.floor_divide(a, b)
    return q + ((a % b != 0) & (a < 0))


# ---- the same arithmetic as Relax operators --------------------------------------------------
class Emitter:
    """Relax expressions for integer arithmetic, each bound in the block being built."""

    def __init__(self, builder):
        self.bb = builder

    def emit(self, expr):
        return self.bb.emit(expr)

    @staticmethod
    def const(values, dtype: str, shape=None):
        from tvm import relax

        array = np.asarray(values).astype(dtype)
        if array.size == 1:
            return relax.const(array.reshape(()).item(), dtype)
        return relax.const(array.reshape(shape) if shape is not None else array, dtype)

    def quantize(self, x, scale: float, zero_point: int, dtype: str, revision: int = 17):
        """TFLite's QUANTIZE of a float tensor: `x / scale` in float32 rounded half away
        from zero (TVM's `quantize` rounds half to even), plus the zero point, clamped.
        From revision 16 the rounding is `t + trunc(2 * (v - t))` with `t = trunc(v)`, exact
        in float32 (the fraction and its double are), and the float goes to int32 before
        `dtype`: revision 14's select on `|v - t| >= 0.5` and direct float -> int8 cast made
        LLVM extract each byte (DQN's 84x84x4 input took 19 us, a quarter of its network).
        From revision 17 it computes on a flat view of the tensor (zero-copy, both ways):
        over the 4-D tensor MetaSchedule fused all four loops and vectorized 64 of them, and
        TVM left the index arithmetic that splits a flat position into four coordinates and
        joins them again unsimplified, so every lane was loaded and stored on its own (DQN's
        input: 38-58 us)."""
        from tvm import relax

        op = relax.op
        if revision >= 17:
            shape = [int(d) for d in x.ty.shape]
            flat = self.emit(op.memory.view(x, relax.ShapeExpr([int(np.prod(shape))])))
            out = self.quantize(flat, scale, zero_point, dtype, revision=16)
            return self.emit(op.memory.view(out, relax.ShapeExpr(shape)))
        v = self.emit(op.divide(x, self.const(scale, "float32")))
        whole = self.emit(op.trunc(v))
        lo, hi = dtype_range(dtype)
        if revision >= 16:
            twice = op.multiply(op.subtract(v, whole), self.const(2.0, "float32"))
            v = self.emit(op.add(whole, op.trunc(twice)))
            v = self.emit(op.add(v, self.const(float(zero_point), "float32")))
            return self.cast(self.cast(self.clamp(v, float(lo), float(hi), "float32"), "int32"),
                             dtype)
        half = self.emit(op.greater_equal(op.abs(op.subtract(v, whole)),
                                          self.const(0.5, "float32")))
        v = self.emit(op.add(whole, op.where(half, op.sign(v), self.const(0.0, "float32"))))
        v = self.emit(op.add(v, self.const(float(zero_point), "float32")))
        return self.cast(self.clamp(v, float(lo), float(hi), "float32"), dtype)

    def cast(self, x, dtype: str):
        from tvm import relax

        return self.emit(relax.op.astype(x, dtype))

    def requantize(self, x32, multiplier, shift, zero_point: int, lo: int, hi: int, dtype: str,
                   shape=None, single: bool = False):
        """`zero_point + MultiplyByQuantizedMultiplier(x32, multiplier, shift)` clamped to
        [lo, hi] and cast to `dtype`; `multiplier` and `shift` are scalars or per-channel
        arrays broadcast as `shape`. `single`: rounded once, `(x * m + 2^(30 - shift)) >>
        (31 - shift)`, as LiteRT's FULLY_CONNECTED rounds; else twice, as its other kernels
        do: gemmlowp's rounding doubling high multiply, which for a positive multiplier is
        `(x * m + 2^30) >> 31` whatever the sign (its nudge and truncation toward zero
        cancel), then a right shift by `r` rounding half away from zero, `(h + 2^(r-1) +
        (h >> 31)) >> r` in int32 (`h >> 31` is -1 for a negative h). Seven operations an
        element, against the reference's fifteen: the epilogue of a layer with few input
        channels (MobileNet's first pointwise) costs as much as its products."""
        from tvm import relax

        op, c = relax.op, self.const
        multiplier = np.asarray(multiplier, np.int64)
        shift = np.asarray(shift, np.int64)
        x = self.cast(x32, "int64")
        if single:
            total = 31 - shift
            v = self.emit(op.add(op.multiply(x, c(multiplier, "int64", shape)),
                                 c(np.int64(1) << (total - 1), "int64", shape)))
            high = self.emit(op.right_shift(v, c(total, "int64", shape)))
            return self._finish(self.cast(high, "int32"), zero_point, lo, hi, dtype)
        left = np.maximum(shift, 0)
        if left.any():
            x = self.emit(op.left_shift(x, c(left, "int64", shape)))
        ab = self.emit(op.multiply(x, c(multiplier, "int64", shape)))
        high = self.emit(op.right_shift(op.add(ab, c(1 << 30, "int64")), c(31, "int64")))
        high = self.cast(high, "int32")
        right = np.maximum(-shift, 0)
        if right.any():  # RoundingDivideByPOT
            half = np.where(right > 0, np.int64(1) << np.maximum(right - 1, 0), 0)
            v = self.emit(op.add(high, c(half, "int32", shape)))
            negative = self.emit(op.right_shift(high, c(31, "int32")))
            if not np.all(right > 0):  # channels that shift by 0 take no correction
                negative = self.emit(op.bitwise_and(negative, c(np.where(right > 0, -1, 0),
                                                                "int32", shape)))
            v = self.emit(op.add(v, negative))
            high = self.emit(op.right_shift(v, c(right, "int32", shape)))
        return self._finish(high, zero_point, lo, hi, dtype)

    def _finish(self, high, zero_point: int, lo: int, hi: int, dtype: str):
        from tvm import relax

        op, c = relax.op, self.const
        out = self.emit(op.add(high, c(zero_point, "int32")))
        return self.cast(self.clamp(out, lo, hi, "int32"), dtype)

    def clamp(self, x, lo, hi, dtype: str):
        """maximum then minimum against 0-d constants (ConvertLayout carries a blocked
        layout through those, not through clip)."""
        from tvm import relax

        x = self.emit(relax.op.maximum(x, self.const(lo, dtype)))
        return self.emit(relax.op.minimum(x, self.const(hi, dtype)))


def dtype_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)
