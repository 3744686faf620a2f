"""Constants broadcast from a lower rank, written at the full rank before the blocked
rewrites (rewrite revision 19).

TFLite's float layers add their bias as a 1-D constant broadcast over an NHWC tensor's
last axis; TVM's ConvertLayout infers no blocked layout for an operand of another rank, so
each such layer went back to NHWC for its bias add and activation and was blocked again
for the next convolution (86 layout transforms in hand_landmark_lite's blocked graph).
The same constant reshaped to (1, 1, 1, C) is blocked with the tensor, and folded."""

from __future__ import annotations

from tvmtui.graph.fold import constant_value
from tvmtui.graph.passes import each_call

ELEMENTWISE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide",
               "relax.maximum", "relax.minimum")


def full_rank_constants(mod):
    """`mod` with each constant operand of an elementwise operator on a 4-D tensor, of rank
    1 to 3 and more than one element, reshaped to rank 4 (NumPy broadcasting: leading
    ones)."""
    return each_call(mod, _full_rank, prune=False)


def _full_rank(call, lookup, emit):
    from tvm import relax

    if getattr(call.op, "name", "") not in ELEMENTWISE or len(call.args) != 2:
        return call
    widened = [_widened(a, b) for a, b in zip(call.args, call.args[::-1])]
    if all(w is None for w in widened):
        return call
    return relax.Call(call.op, [a if w is None else w for a, w in zip(call.args, widened)],
                      call.attrs)


def _widened(const, other):
    """`const` at rank 4 if it is a constant of lower rank (but 0) broadcast against the
    4-D tensor `other`, else None."""
    from tvm import relax

    data = constant_value(const)
    shape = getattr(other.ty, "shape", None)
    if data is None or shape is None or len(shape) != 4:
        return None
    if not 1 <= data.ndim < 4 or data.size == 1:
        return None
    return relax.const(data.reshape((1,) * (4 - data.ndim) + data.shape), str(data.dtype))
