"""Channel splits in a graph that the blocked variants rewrite (rewrite revision 19).

TVM 0.27's ConvertLayout carries a `split` along the channel axis into NCHW[b]c with its
split points unchanged: YOLOv8's C2f blocks split 32 channels at 16, which in NCHW16c
(2 chunks) left an empty second half, and the next convolution's type check failed, so
NudeNet's whole graph lost its blocked and Winograd variants and tuned in NCHW only. A
channel split is written here as one `strided_slice` per part before ConvertLayout, whose
layout inference for slices is right (it slices the NCHW tensor).

ConvertLayout then leaves each slice, and each channel concat, in NCHW between an
unblocking and a reblocking (59 layout transforms in NudeNet); `channels_in_block` slices
and concatenates the blocked tensors instead where the channels fall on whole blocks, and
the transforms that then undo each other go."""

from __future__ import annotations

from tvmtui.graph.blocking import corners, mapped, unblocked
from tvmtui.graph.passes import each_call, each_function


def split_as_slices(mod):
    """`mod` with each `split` along axis 1 of a 4-D tensor replaced by its parts, each a
    `strided_slice` of the same channels."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_tuple_getitem_(self, op):
            op = super().visit_tuple_getitem_(op)
            tup = op.tuple_value
            if not isinstance(tup, relax.Var):
                return op
            split = self.lookup_binding(tup)
            bounds = _channel_parts(split)
            if bounds is None:
                return op
            begin, end = bounds[op.index]
            return relax.op.strided_slice(split.args[0], axes=[1], begin=[begin], end=[end])

    return each_function(mod, lambda m, func: Rewrite(m).visit_expr(func))


def _channel_parts(call) -> list[tuple[int, int]] | None:
    """(begin, end) channels of each part of `call` if it splits a 4-D tensor along axis 1
    into parts of known size; else None."""
    from tvm import relax

    if not (isinstance(call, relax.Call) and getattr(call.op, "name", "") == "relax.split"):
        return None
    shape = call.args[0].ty.shape
    if shape is None or len(shape) != 4 or int(call.attrs.axis) not in (1, -3):
        return None
    try:
        channels = int(shape[1])
        sections = call.attrs.indices_or_sections
        if isinstance(sections, int) or hasattr(sections, "value"):  # a number of parts
            count = int(getattr(sections, "value", sections))
            if channels % count:
                return None
            points = [channels // count * k for k in range(1, count)]
        else:
            points = [int(p) for p in sections]
    except (TypeError, ValueError):
        return None
    edges = [0, *points, channels]
    return list(zip(edges[:-1], edges[1:]))


def channels_in_block(mod):
    """`mod` with slices and concats along the channels of NCHW unblockings of NCHW[b]c
    tensors, on whole blocks, done on the blocked tensors (the unblocking moved after
    them), and a reblocking of an unblocking to the same block dropped."""
    return each_call(mod, _in_block)


def _in_block(call, lookup, emit):
    """`call` done on blocked tensors (see `channels_in_block`), or `call` as it was."""
    from tvm import relax

    name = getattr(call.op, "name", "")
    if name == "relax.concat" and int(call.attrs.axis) in (1, -3) and \
            isinstance(call.args[0], relax.Tuple):
        parts = [unblocked(lookup(v), "NCHW") if isinstance(v, relax.Var) else None
                 for v in call.args[0].fields]
        if not parts or any(p is None for p in parts) or \
                len({int(p.ty.shape[4]) for p in parts}) != 1:
            return call
        joined = emit(relax.op.concat(parts, axis=1))
        return _unblock_like(lookup(call.args[0].fields[0]), joined)
    if not call.args or not isinstance(call.args[0], relax.Var):
        return call
    unblock = lookup(call.args[0])
    source = unblocked(unblock, "NCHW")
    if source is None:
        return call
    block = int(source.ty.shape[4])
    if name == "relax.layout_transform":  # back to the same blocking: nothing to do
        shape = [int(d) for d in source.ty.shape]
        if call.attrs.pad_value is None and all(
                mapped(call, (b, c * block + cb, y, x)) == [b, c, y, x, cb]
                for b, c, y, x, cb in corners(shape)):
            return source
        return call
    if name != "relax.strided_slice":
        return call
    axes, begin, end, *strides = (_ints(a) for a in call.args[1:])
    channels = int(source.ty.shape[1]) * block
    if axes not in ([1], [-3]) or begin is None or end is None or \
            any(s != [1] for s in strides) or begin[0] % block or min(end[0], channels) % block:
        return call
    sliced = emit(relax.op.strided_slice(source, axes=[1], begin=[begin[0] // block],
                                         end=[min(end[0], channels) // block]))
    return _unblock_like(unblock, sliced)


def _ints(expr) -> list[int] | None:
    """The integers of a Relax tuple of constants, else None."""
    try:
        return [int(f.value) for f in expr.fields]
    except (AttributeError, TypeError, ValueError):
        return None


def _unblock_like(unblock, blocked):
    """An NCHW unblocking of `blocked`, made as `unblock` (one `blocking.unblocked` found)."""
    from tvm import relax

    return relax.Call(unblock.op, [blocked], unblock.attrs)
