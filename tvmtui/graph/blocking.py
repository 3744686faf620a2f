"""How a target's vector unit blocks channels: the float32 lanes that size `nchwc`'s
channel block, its register count, and the block of a layer whose channels it does not
divide."""

from __future__ import annotations


def vector_block(target) -> int:
    """float32 lanes of the target's widest vector unit (the channel block of `nchwc`)."""
    from tvm.target import codegen

    triple = str(target.attrs.get("mtriple", "") or "")
    if triple.startswith(("aarch64", "arm")):
        return 4
    for feature, lanes in (("avx512f", 16), ("avx2", 8), ("avx", 8)):
        try:
            if codegen.target_has_features(feature, target):
                return lanes
        except Exception:  # noqa: BLE001 - an unknown feature name on this LLVM
            continue
    return 4


def vector_registers(target) -> int:
    """Vector registers of the target: 32 on AArch64 and with AVX-512, 16 otherwise (AVX2,
    SSE, 32-bit Arm NEON)."""
    triple = str(target.attrs.get("mtriple", "") or "")
    if triple.startswith(("aarch64", "arm64")):
        return 32
    return 32 if vector_block(target) == 16 else 16


def input_block(channels: int, block: int) -> int:
    """The largest power of two up to `block` that divides `channels` (1 for RGB)."""
    inner = block
    while channels % inner:
        inner //= 2
    return inner


def pads_in_block(mod):
    """`mod` with each pad that `ConvertLayout` left between two layout transforms
    (channel-blocked -> NHWC, pad, NHWC -> the same blocking; TVM infers no layout for
    pad) applied to the blocked tensor itself (rewrite revision 18). An integer depthwise
    layer is padded with its input's zero point before it (`integer.py`): MobileNet int8's
    13 depthwise kernels each unblocked, padded and reblocked their input."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            blocked = _blocked_pad(call, self.lookup_binding)
            return call if blocked is None else blocked

    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gvar] = relax.analysis.remove_all_unused(Rewrite(mod).visit_expr(func))
    return mod


def _blocked_pad(call, lookup):
    """The blocked pad `call` (a layout transform back to NCHW[b]c) amounts to, or None."""
    from tvm import relax

    def producer(expr, op: str):
        if not isinstance(expr, relax.Var):
            return None
        bound = lookup(expr)
        ok = isinstance(bound, relax.Call) and getattr(bound.op, "name", "") == op
        return bound if ok else None

    if getattr(call.op, "name", "") != "relax.layout_transform" or \
            call.attrs.pad_value is not None:
        return None
    pad = producer(call.args[0], "relax.nn.pad")
    unblock = None if pad is None else producer(pad.args[0], "relax.layout_transform")
    if unblock is None or unblock.attrs.pad_value is not None:
        return None
    source = unblock.args[0]
    shape = [int(d) for d in source.ty.shape] if source.ty.shape is not None else []
    widths = [int(w) for w in pad.attrs.pad_width]
    if len(shape) != 5 or len(widths) != 8 or widths[6] or widths[7] or \
            str(pad.attrs.pad_mode) != "constant":
        return None
    n, chunks, h, w, block = shape
    points = [(0, 0, 0, 0, 0), (n - 1, chunks - 1, h - 1, w - 1, block - 1),
              (0, chunks - 1, 1 % h, 2 % w, 1 % block)]
    for b, c, y, x, cb in points:  # blocked -> NHWC, and NHWC -> the same blocking
        nhwc = (b, y, x, c * block + cb)
        padded = (b, y + widths[2], x + widths[4], c * block + cb)
        if _mapped(unblock, (b, c, y, x, cb)) != list(nhwc) or \
                _mapped(call, padded) != [b, c, y + widths[2], x + widths[4], cb]:
            return None
    return relax.op.nn.pad(source, [0, 0, 0, 0, *widths[2:6], 0, 0],
                           pad_value=float(pad.attrs.pad_value))


def _mapped(transform, point) -> list[int]:
    """Where a layout transform call moves the element at `point`."""
    from tvm import tirx

    mapped = transform.attrs.index_map.map_indices([tirx.const(v, "int64") for v in point])
    return [int(i) for i in mapped]
