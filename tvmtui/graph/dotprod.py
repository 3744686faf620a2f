"""Integer convolutions on the chip's dot-product instruction (x86 AVX512-VNNI `vpdpbusd`).

An int8 convolution of the channel-blocked graph (`nchwc`) whose input channels come in
blocks of a multiple of 4 and whose output channels in blocks of 16 is written for
`vpdpbusd`: each instruction multiplies 4 unsigned input bytes (4 input channels of one
pixel, broadcast) by 16 x 4 signed weight bytes and adds the 16 int32 sums to 16
accumulators (16 output channels). The weights are repacked at compile time to
(O/16, I/b, KH, KW, b/4, 16, 4), the layout TVM's `conv2d_NCHWc_int8` reads; int8 inputs
are read as unsigned bytes (`x ^ 0x80` = x + 128), and 128 x the weights' sum per output
channel is subtracted after, so the result is the signed convolution exactly. The
schedule (`kernels/rules.py`, by the block's `schedule_rule`) tiles registers and
tensorizes with tvmtui's own intrinsic (`DOT_VNNI`): TVM 0.27's ships the LLVM intrinsic's
pre-LLVM-21 signature (i32 operands), which LLVM 22 rejects.

From rewrite revision 16, a layer with a few input channels that do not come in fours (an
RGB or grayscale input: 3 channels, blocked NCHW1c) runs there too: its channels are padded
to the next multiple of 4: the weights' with zeros at compile time, so whatever the
input's padding channels hold adds nothing to any sum.

Layers this does not fit (depthwise, other chips) stay on TOPI's integer code, which
vectorizes int32 multiply-adds.
"""

from __future__ import annotations

import numpy as np

RULE_DOT = "tvmtui.dot_conv2d_NCHWc"  # the schedule rule of a dot-product conv block
DOT_VNNI = "tvmtui_dot_16x4_u8i8i32_vnni"  # the tensor intrinsic it tensorizes with
LANES, REDUCE = 16, 4  # output channels per instruction, input channels each one sums
FEW_CHANNELS = 16  # up to this many input channels may be padded to a multiple of REDUCE


def instruction(target) -> str | None:
    """The dot-product instruction this target has for int8 convolutions, or None."""
    from tvm.target import codegen

    if target.kind.name != "llvm":
        return None
    try:
        if codegen.target_has_features("avx512vnni", target):
            return "avx512-vnni"
    except Exception:  # noqa: BLE001 - a feature name this LLVM does not know
        return None
    return None


def task_instruction(mod, target) -> str | None:
    """The instruction a task's kernel (an IRModule of one PrimFunc) is tensorized with:
    that of the target when one of its blocks is a dot-product conv, else None."""
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(mod)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:  # noqa: BLE001 - no root block: not a TE kernel
        return None
    if any(sch.get(b).annotations.get("schedule_rule") == RULE_DOT for b in blocks):
        return instruction(target)
    return None


def applies(call, target, pad_channels: bool = False) -> bool:
    """Whether a blocked conv2d call can run on the dot-product instruction here;
    `pad_channels` (revision 16): also one with a few input channels not in fours."""
    a = call.attrs
    data, kernel = call.args[0], call.args[1]
    if instruction(target) is None or str(a.out_dtype) != "int32" or int(a.groups) != 1:
        return False
    if str(data.ty.dtype) not in ("int8", "uint8") or str(kernel.ty.dtype) != "int8":
        return False
    layout, out_layout = str(a.data_layout), str(a.out_layout or a.data_layout)
    if not (layout.startswith("NCHW") and layout.endswith("c") and layout[4:-1].isdigit()) \
            or out_layout != f"NCHW{LANES}c" or str(a.kernel_layout) != \
            f"OIHW{layout[4:-1]}i{LANES}o":
        return False
    block = int(layout[4:-1])
    channels = int(data.ty.shape[1]) * block
    if block % REDUCE and not (pad_channels and channels <= FEW_CHANNELS):
        return False
    if any(int(p) for p in a.padding) or any(int(d) != 1 for d in a.dilation):
        return False
    return _constant(kernel) is not None


def _constant(expr) -> np.ndarray | None:
    import tvm

    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.GenericConst) else None


def legalize(bb, call):
    """The conv2d call as the dot-product kernel (see the module's docstring)."""
    from tvm import relax

    a = call.attrs
    data = call.args[0]
    weight = _constant(call.args[1]).astype(np.int8)  # (O/16, I/b, KH, KW, b, 16)
    signed = str(data.ty.dtype) == "int8"
    if weight.shape[4] % REDUCE:  # a few channels, padded to a multiple of 4 (one block)
        weight = _padded_weight(weight)
        data = bb.emit_te(_padded_unsigned, data, weight.shape[4], signed,
                          primfunc_name_hint="as_unsigned")
    elif signed:
        data = bb.emit_te(_as_unsigned, data, primfunc_name_hint="as_unsigned")
    oc, ic, kh, kw, block, lanes = weight.shape
    packed = np.ascontiguousarray(
        weight.reshape(oc, ic, kh, kw, block // REDUCE, REDUCE, lanes).transpose(
            0, 1, 2, 3, 4, 6, 5))
    strides = [int(s) for s in a.strides]
    out = bb.emit_te(_dot_conv, data, relax.const(packed), strides,
                     primfunc_name_hint="dot_conv2d_NCHWc")
    if not signed:
        return out
    offset = 128 * weight.astype(np.int64).sum(axis=(1, 2, 3, 4))  # (O/16, 16)
    offset = relax.const(offset.reshape(1, oc, 1, 1, lanes).astype(np.int32))
    return relax.op.subtract(out, offset)


def _padded_weight(weight: np.ndarray) -> np.ndarray:
    """(O/16, I/b, KH, KW, b, 16) weights as one block of all input channels, zero-padded
    to a multiple of 4: (O/16, 1, KH, KW, 4k, 16)."""
    oc, ic, kh, kw, block, lanes = weight.shape
    channels = ic * block
    whole = weight.transpose(0, 2, 3, 1, 4, 5).reshape(oc, kh, kw, channels, lanes)
    padded = np.zeros((oc, kh, kw, -(-channels // REDUCE) * REDUCE, lanes), np.int8)
    padded[:, :, :, :channels] = whole
    return padded[:, None]


def _padded_unsigned(data, channels: int, signed: bool):
    """NCHW[b]c data with few channels as one block of `channels` unsigned bytes (read
    as `_as_unsigned` when `signed`). The padding channels repeat the first ones: their
    weights are zero, and an unconditional read stays in bounds when vectorized."""
    from tvm import te, tirx

    n, chunks, h, w, block = (int(d) for d in data.shape)
    whole = chunks * block

    def value(b, y, x, c):
        v = data[b, c % whole // block, y, x, c % whole % block]
        if signed:
            v = tirx.bitwise_xor(v, tirx.const(-128, "int8"))
        return v.astype("uint8")

    return te.compute((n, 1, h, w, channels), lambda b, _, y, x, c: value(b, y, x, c),
                      name="as_unsigned")


def _as_unsigned(data):
    """int8 as unsigned bytes: x + 128, by flipping the sign bit."""
    from tvm import te, tirx

    return te.compute(data.shape, lambda *i: tirx.bitwise_xor(data(*i), tirx.const(-128, "int8"))
                      .astype("uint8"), name="as_unsigned")


def _dot_conv(data, kernel, strides):
    """uint8 NCHW[b]c data x int8 (O/16, I/b, KH, KW, b/4, 16, 4) kernel -> int32 NCHW16c."""
    from tvm import te

    n, _, h, w, _ = (int(d) for d in data.shape)
    oc, ic, kh, kw, quads, lanes, reduce = (int(d) for d in kernel.shape)
    sh, sw = strides
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    r_chunk = te.reduce_axis((0, ic), "rc")
    r_h, r_w = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
    r_quad, r_lane = te.reduce_axis((0, quads), "rq"), te.reduce_axis((0, reduce), "rl")
    return te.compute(
        (n, oc, oh, ow, lanes),
        lambda b, o, y, x, ob: te.sum(
            data[b, r_chunk, y * sh + r_h, x * sw + r_w, r_quad * reduce + r_lane].astype("int32")
            * kernel[o, r_chunk, r_h, r_w, r_quad, ob, r_lane].astype("int32"),
            axis=[r_chunk, r_h, r_w, r_quad, r_lane]),
        name="dot_conv2d_NCHWc", attrs={"schedule_rule": RULE_DOT})
