"""Integer convolutions on the chip's dot-product instruction (x86 AVX512-VNNI `vpdpbusd`,
Arm `sdot`).

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

On Arm with the dot-product extension (`+dotprod`), `sdot` does the same for 4 output
channels (NEON's NCHW4c): each instruction multiplies 4 signed input bytes, broadcast, by
4 x 4 signed weight bytes into 4 int32 accumulators. It takes int8 inputs as they are (no
offset to fold out); a uint8 input stays on TOPI's code there.

Layers this does not fit (depthwise, other chips) stay on TOPI's integer code, which
vectorizes int32 multiply-adds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tvmtui.graph.fold import constant_value

RULE_DOT = "tvmtui.dot_conv2d_NCHWc"  # the schedule rule of a dot-product conv block
INTRIN_KEY = "tvmtui.dot_intrin"  # the block annotation naming the intrinsic to use
DOT_VNNI = "tvmtui_dot_16x4_u8i8i32_vnni"  # the tensor intrinsics it tensorizes with
DOT_SDOT = "tvmtui_dot_4x4_i8i8i32_sdot"
REDUCE = 4  # input channels each output lane sums per instruction
FEW_CHANNELS = 16  # up to this many input channels may be padded to a multiple of REDUCE


@dataclass(frozen=True)
class Dot:
    """A dot-product instruction: its name, the output channels (int32 lanes) it fills,
    whether it reads the input as unsigned bytes, and the tensor intrinsic."""

    name: str
    lanes: int
    unsigned_input: bool
    intrin: str


DOTS = {"avx512-vnni": Dot("avx512-vnni", 16, True, DOT_VNNI),
        "sdot": Dot("sdot", 4, False, DOT_SDOT)}


def instruction(target) -> str | None:
    """The dot-product instruction this target has for int8 convolutions, or None."""
    from tvm.target import codegen

    if target.kind.name != "llvm":
        return None
    arm = str(target.attrs.get("mtriple", "") or "").startswith(("aarch64", "arm64"))
    try:
        if arm and codegen.target_has_features("dotprod", target):
            return "sdot"
        if not arm and codegen.target_has_features("avx512vnni", target):
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
    name = instruction(target)
    if name is None or str(a.out_dtype) != "int32" or int(a.groups) != 1:
        return False
    dot = DOTS[name]
    inputs = ("int8", "uint8") if dot.unsigned_input else ("int8",)
    if str(data.ty.dtype) not in inputs or str(kernel.ty.dtype) != "int8":
        return False
    layout, out_layout = str(a.data_layout), str(a.out_layout or a.data_layout)
    if not (layout.startswith("NCHW") and layout.endswith("c") and layout[4:-1].isdigit()) \
            or out_layout != f"NCHW{dot.lanes}c" or str(a.kernel_layout) != \
            f"OIHW{layout[4:-1]}i{dot.lanes}o":
        return False
    block = int(layout[4:-1])
    channels = int(data.ty.shape[1]) * block
    if block % REDUCE and not (pad_channels and channels <= FEW_CHANNELS):
        return False
    if any(int(p) for p in a.padding) or any(int(d) != 1 for d in a.dilation):
        return False
    return constant_value(kernel) is not None




def legalize(bb, call, target):
    """The conv2d call as the dot-product kernel of `target` (see the module's docstring)."""
    from tvm import relax

    dot = DOTS[instruction(target) or ""]
    a = call.attrs
    data = call.args[0]
    weight = constant_value(call.args[1]).astype(np.int8)  # (O/L, I/b, KH, KW, b, L), L lanes
    flip = dot.unsigned_input and str(data.ty.dtype) == "int8"  # read as x + 128
    if weight.shape[4] % REDUCE:  # a few channels, padded to a multiple of 4 (one block)
        weight = _padded_weight(weight)
        name = "as_unsigned" if dot.unsigned_input else "padded"  # VNNI's as before
        data = bb.emit_te(_padded_channels, data, weight.shape[4], flip, name,
                          primfunc_name_hint=name)
    elif flip:
        data = bb.emit_te(_as_unsigned, data, primfunc_name_hint="as_unsigned")
    oc, ic, kh, kw, block, lanes = weight.shape
    packed = np.ascontiguousarray(
        weight.reshape(oc, ic, kh, kw, block // REDUCE, REDUCE, lanes).transpose(
            0, 1, 2, 3, 4, 6, 5))
    strides = [int(s) for s in a.strides]
    out = bb.emit_te(_dot_conv, data, relax.const(packed), strides, dot.intrin,
                     primfunc_name_hint="dot_conv2d_NCHWc")
    if not flip:
        return out
    offset = 128 * weight.astype(np.int64).sum(axis=(1, 2, 3, 4))  # (O/16, 16)
    offset = relax.const(offset.reshape(1, oc, 1, 1, lanes).astype(np.int32))
    return relax.op.subtract(out, offset)


def _padded_weight(weight: np.ndarray) -> np.ndarray:
    """(O/L, I/b, KH, KW, b, L) weights as one block of all input channels, zero-padded
    to a multiple of 4: (O/L, 1, KH, KW, 4k, L)."""
    oc, ic, kh, kw, block, lanes = weight.shape
    channels = ic * block
    whole = weight.transpose(0, 2, 3, 1, 4, 5).reshape(oc, kh, kw, channels, lanes)
    padded = np.zeros((oc, kh, kw, -(-channels // REDUCE) * REDUCE, lanes), np.int8)
    padded[:, :, :, :channels] = whole
    return padded[:, None]


def _padded_channels(data, channels: int, flip: bool, name: str):
    """NCHW[b]c data with few channels as one block of `channels` bytes (int8 read as
    `_as_unsigned` when `flip`). The padding channels repeat the first ones: their weights
    are zero, and an unconditional read stays in bounds when vectorized."""
    from tvm import te, tirx

    n, chunks, h, w, block = (int(d) for d in data.shape)
    whole = chunks * block

    def value(b, y, x, c):
        v = data[b, c % whole // block, y, x, c % whole % block]
        if flip:
            return tirx.bitwise_xor(v, tirx.const(-128, "int8")).astype("uint8")
        return v

    return te.compute((n, 1, h, w, channels), lambda b, _, y, x, c: value(b, y, x, c),
                      name=name)


def _as_unsigned(data):
    """int8 as unsigned bytes: x + 128, by flipping the sign bit."""
    from tvm import te, tirx

    return te.compute(data.shape, lambda *i: tirx.bitwise_xor(data(*i), tirx.const(-128, "int8"))
                      .astype("uint8"), name="as_unsigned")


def _dot_conv(data, kernel, strides, intrin: str = DOT_VNNI):
    """NCHW[b]c bytes x int8 (O/L, I/b, KH, KW, b/4, L, 4) kernel -> int32 NCHW[L]c, for
    the tensor intrinsic `intrin` (the block says which, for the schedule rule)."""
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
        name="dot_conv2d_NCHWc",
        # VNNI's blocks carry no key, so they stay the tasks earlier sessions tuned
        attrs={"schedule_rule": RULE_DOT} if intrin == DOT_VNNI else
        {"schedule_rule": RULE_DOT, INTRIN_KEY: intrin})
