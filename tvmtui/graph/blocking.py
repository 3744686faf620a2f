"""How a target's vector unit blocks channels: the float32 lanes that size `nchwc`'s
channel block, its register count, and the block of a layer whose channels it does not
divide."""

from __future__ import annotations

from tvmtui.graph.passes import each_call


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
    """`mod` with the pads and max pools that `ConvertLayout` left between a channel-blocked
    tensor and its way back (TVM infers no layout for pad) computed on the blocked tensor
    itself (rewrite revision 18): `unblock(x) -> pad -> reblock` is `pad(x)`, and a pad or
    an NHWC max pool of `unblock(x)` runs on `x`, the unblocking moved after it, where the
    next reblocking cancels it. Integer layers are padded with their input's zero point
    before them (`integer.py`): MobileNet int8's 13 depthwise layers each unblocked,
    padded and reblocked their input, and ResNet-18 int8's max pool ran in NHWC between
    two such transforms (0.095 ms, 3% of the network)."""
    return each_call(mod, _sunk)


def _sunk(call, lookup, emit):
    """`call` with an unblocking of its input moved after it (see `pads_in_block`)."""
    from tvm import relax

    name = getattr(call.op, "name", "")
    if name not in ("relax.nn.pad", "relax.nn.max_pool2d", "relax.layout_transform") or \
            not call.args or not isinstance(call.args[0], relax.Var):
        return call
    unblock = lookup(call.args[0])
    source = unblocked(unblock)
    if source is None:
        return call
    shape = [int(d) for d in source.ty.shape]
    block = shape[4]
    a = call.attrs
    if name == "relax.layout_transform":  # back to the same blocking: nothing to do
        if a.pad_value is None and all(
                mapped(call, (b, y, x, c * block + cb)) == [b, c, y, x, cb]
                for b, c, y, x, cb in corners(shape)):
            return source
        return call
    if name == "relax.nn.pad":
        widths = [int(w) for w in a.pad_width]
        if len(widths) != 8 or widths[6] or widths[7] or str(a.pad_mode) != "constant":
            return call
        inner = relax.op.nn.pad(source, [0, 0, 0, 0, *widths[2:6], 0, 0],
                                pad_value=float(a.pad_value))
    else:
        if str(a.layout) != "NHWC" or str(a.out_layout) != "NHWC":
            return call
        inner = relax.op.nn.max_pool2d(
            source, [int(v) for v in a.pool_size], [int(v) for v in a.strides],
            [int(v) for v in a.padding], [int(v) for v in a.dilation], bool(a.ceil_mode),
            bool(a.count_include_pad), layout=f"NCHW{block}c", out_layout=f"NCHW{block}c")
    return relax.Call(unblock.op, [emit(inner)], unblock.attrs)


def unblocked(expr, layout: str = "NHWC"):
    """x, where `expr` is a layout transform of an NCHW[b]c tensor x to `layout` (NHWC or
    NCHW); else None."""
    from tvm import relax

    if not (isinstance(expr, relax.Call) and getattr(expr.op, "name", "") ==
            "relax.layout_transform") or expr.attrs.pad_value is not None:
        return None
    source = expr.args[0]
    if source.ty.shape is None or len(source.ty.shape) != 5:
        return None
    shape = [int(d) for d in source.ty.shape]
    block = shape[4]
    for n, c, y, x, cb in corners(shape):
        channel = c * block + cb
        if mapped(expr, (n, c, y, x, cb)) != ([n, y, x, channel] if layout == "NHWC" else
                                              [n, channel, y, x]):
            return None
    return source


def corners(shape: list[int]) -> list[tuple[int, ...]]:
    """A few points of an NCHW[b]c tensor that tell its layout transforms apart."""
    n, chunks, h, w, block = shape
    return [(0, 0, 0, 0, 0), (n - 1, chunks - 1, h - 1, w - 1, block - 1),
            (0, chunks - 1, 1 % h, 2 % w, 1 % block), (0, 1 % chunks, h - 1, 0, block - 1)]


def mapped(transform, point) -> list[int]:
    """Where a layout transform call moves the element at `point`."""
    from tvm import tirx

    mapped = transform.attrs.index_map.map_indices([tirx.const(v, "int64") for v in point])
    return [int(i) for i in mapped]
