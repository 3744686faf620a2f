"""What converters write as several operators, written as the one it computes (rewrite
revision 19, every variant).

openWakeWord's embedding model (a Keras model through tf2onnx) clips each activation as
`max(stack((x, c), axis=0), axis=0)` after a `broadcast_to` of x to its own shape: a
tensor twice the activation's size written and reduced per layer, and a 5-D stack that
TVM's ConvertLayout cannot infer a layout for, so the graph lost its blocked variants.
Here that is `maximum(x, c)` (`c` a scalar when all its values are equal), and a
`broadcast_to` a tensor's own shape is the tensor.

From revision 23, a float graph's division by a constant is a multiplication by its
reciprocal (within an ulp): PaddlePaddle writes hard-swish as `x * relu6(x + 3) / 6`, and
LLVM keeps an exact division as it is; a vector division has a small fraction of a
multiply's throughput, which a depthwise layer's few multiply-adds per output do not hide.
Integer graphs keep their divisions: their quantize divides by the scale exactly as
TFLite's reference kernels do.

From revision 24, a float PReLU (ONNX `PRelu`) is `max(x, 0) + alpha * min(x, 0)`, alpha
shaped to broadcast along its axis: exact, and elementwise operators a blocked layout
passes through; TVM's ConvertLayout infers none for `nn.prelu`, so each one unblocked its
input and ran as a kernel of its own between two layout transforms."""

from __future__ import annotations

from tvmtui.graph.fold import constant_value
from tvmtui.graph.passes import each_call

_PAIRWISE = {"relax.max": "maximum", "relax.min": "minimum"}


def simplified(mod, reciprocals: bool = False, prelus: bool = False):
    """`mod` with the patterns above rewritten; `reciprocals`: its divisions by constants
    too (revision 23, float graphs); `prelus`: its PReLUs as elementwise operators
    (revision 24)."""
    def simpler(call, lookup, emit):
        name = getattr(call.op, "name", "")
        new = None
        if name == "relax.broadcast_to":
            new = _same_shape(call)
        elif name in _PAIRWISE:
            new = _pairwise(call, lookup)
        elif name == "relax.divide" and reciprocals:
            new = _reciprocal(call)
        elif name == "relax.nn.prelu" and prelus:
            new = elementwise_prelu(call.args[0], call.args[1], int(call.attrs.axis))
        return call if new is None else new

    return each_call(mod, simpler)


def _reciprocal(call):
    """`x * (1 / c)` for a float32 `x / c`, c a constant of finite non-zero values; else
    None."""
    import numpy as np
    from tvm import relax

    value = constant_value(call.args[1])
    if value is None or value.dtype != np.float32 or str(call.ty.dtype) != "float32" or \
            not np.all(np.isfinite(value)) or np.any(value == 0):
        return None
    inverse = (1.0 / value.astype(np.float64)).astype(np.float32)
    return relax.op.multiply(call.args[0], relax.const(inverse, "float32"))


def elementwise_prelu(x, alpha, axis: int | None = None):
    """`max(x, 0) + alpha * min(x, 0)` for a float `x` (exact: each term is x, 0 or alpha *
    x); with `axis`, the 1-D `alpha` is reshaped to broadcast along it. None for an integer
    `x` or a shape not known."""
    from tvm import relax

    dtype = str(x.ty.dtype)
    if not dtype.startswith("float"):
        return None
    if axis is not None:
        shape = getattr(x.ty, "shape", None)
        if shape is None:
            return None
        rank = len(shape)
        broadcast = [1] * rank
        broadcast[axis % rank] = -1
        value = constant_value(alpha)
        alpha = relax.op.reshape(alpha, broadcast) if value is None else \
            relax.const(value.reshape(broadcast), str(value.dtype))
    zero = relax.const(0.0, dtype)
    return relax.op.add(relax.op.maximum(x, zero),
                        relax.op.multiply(relax.op.minimum(x, zero), alpha))


def _same_shape(call):
    """x, for `broadcast_to(x, s)` where s is x's static shape; else None."""
    source = call.args[0]
    try:
        have = [int(d) for d in source.ty.shape]
        want = [int(d) for d in call.ty.shape]
    except (TypeError, ValueError, AttributeError):
        return None
    return source if have == want else None


def _pairwise(call, lookup):
    """`max(stack(xs, axis=k), axis=[k])` (or min) as maximum(x0, x1, ...); else None."""
    from tvm import relax

    axes = call.attrs.axis
    if axes is None or len(axes) != 1 or bool(call.attrs.keepdims) or \
            not isinstance(call.args[0], relax.Var):
        return None
    stack = lookup(call.args[0])
    if not (isinstance(stack, relax.Call) and getattr(stack.op, "name", "") == "relax.stack"
            and isinstance(stack.args[0], relax.Tuple)):
        return None
    rank = len(stack.ty.shape)
    if int(stack.attrs.axis) % rank != int(axes[0]) % rank:
        return None
    op = getattr(relax.op, _PAIRWISE[call.op.name])
    parts = [_scalar_if_uniform(x) for x in stack.args[0].fields]
    out = parts[0]
    for part in parts[1:]:
        out = op(out, part)
    return out


def _scalar_if_uniform(expr):
    """A 0-d constant for a constant whose values are all equal; else `expr`."""
    from tvm import relax

    value = constant_value(expr)
    if value is None or value.size == 0 or not (value == value.flat[0]).all():
        return expr
    return relax.const(value.flat[0], str(value.dtype))
