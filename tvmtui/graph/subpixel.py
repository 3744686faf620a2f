"""Strided transposed convolution as one dense convolution plus an interleave (sub-pixel).

TOPI lowers conv2d_transpose as a convolution over the input dilated with zeros: at
stride s, s*s times the useful multiply-adds. Each output phase (oh % s, ow % s) only
ever meets the kernel taps k = (phase + pad) % s + s*t, so it is a stride-1 convolution of
the input with a (K/s x K/s) slice of the flipped kernel. All s*s phases share one padded
input, so they run as a single convolution with s*s times the output channels; a gather
then interleaves the phases into the output (and crops the phases' offsets).

A transposed convolution of a 1x1 input whose output is its kernel (DCGAN's first layer,
noise -> 4x4x512: stride 1, no padding) has no phases: each output pixel is one kernel tap
times the input vector, so from rewrite revision 3 it is a matrix-vector product with the
weights as they are (IOHW flattens to in x out), and TOPI's loop over a padded, flipped
input goes (DCGAN: 0.57 ms, 6 GB/s of weights, of its 2.7 ms).

From rewrite revision 2 the phase convolution runs channel-blocked (NCHW[x]c in and out,
TOPI's conv2d_NCHWc, its weights packed now) and the gather reads the blocked phases:
with NCHW phases the output channel, the one dimension long enough for the vector
lanes, was the outermost (a 512->256 DCGAN layer: 2.14 ms NCHW, 0.58 ms blocked).

Phase r's outputs start at offset (r + pad) // s of the one padded input, so a plain
convolution over it computes, for every phase, the outputs of the largest offset too:
(h+1)^2 per phase where h^2 are used (DCGAN: 272 MFLOP against the layers' 207, 56% more
on the 4x4 input). From rewrite revision 5 the blocked phase convolution reads each
channel chunk's rows and columns at its phase's own offset (`exact_phases`: TOPI's
conv2d_NCHWc with that one change, same block and loops, so its seeds apply), wherever a
chunk holds one phase only (the output channels divide by the block).
"""

from __future__ import annotations

import numpy as np


def phase_layout(h: int, out_h: int, k: int, s: int, p: int) -> tuple[int, int]:
    """Top and bottom padding of the input along one axis for the phase convolution:
    phase r's outputs start at offset (r + p) // s of the phase convolution's output."""
    taps = k // s
    top = taps - 1
    needed = -(-out_h // s) + (s - 1 + p) // s  # outputs per phase + the largest offset
    bottom = max(0, needed - (h + top - taps + 1))
    return top, bottom


def phase_weights(weight: np.ndarray, s: int, pads: tuple[int, int]) -> np.ndarray:
    """IOHW transposed-conv weights -> OIHW weights of the s*s phase convolutions, phases
    outermost along O: index ((rh * s + rw) * O + o)."""
    cin, cout, kh, kw = weight.shape
    th, tw = kh // s, kw // s
    out = np.zeros((s * s * cout, cin, th, tw), np.float32)
    for rh in range(s):
        bh = (rh + pads[0]) % s
        for rw in range(s):
            bw = (rw + pads[1]) % s
            block = (rh * s + rw) * cout
            for jh in range(th):
                for jw in range(tw):
                    tap_h, tap_w = bh + s * (th - 1 - jh), bw + s * (tw - 1 - jw)
                    out[block:block + cout, :, jh, jw] = weight[:, :, tap_h, tap_w].T
    return out


def pack_weights(oihw: np.ndarray, inner: int, outer: int) -> np.ndarray:
    """OIHW -> OIHW[inner]i[outer]o (conv2d_NCHWc's kernel layout)."""
    o, i, kh, kw = oihw.shape
    blocked = oihw.reshape(o // outer, outer, i // inner, inner, kh, kw)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 3, 1))


def point_input(bb, call, w_np: np.ndarray, plan):
    """A 1x1 input's transposed convolution as (n, cin) x (cin, cout*kh*kw), reshaped."""
    from tvm import relax, te

    cin, cout, kh, kw = w_np.shape
    n = int(call.args[0].ty.shape[0])
    flat = np.ascontiguousarray(w_np.reshape(cin, cout * kh * kw))

    def matvec(x, w):
        i = te.reduce_axis((0, cin), name="i")
        return te.compute((n, cout * kh * kw),
                          lambda b, j: te.sum(x[b, i, 0, 0] * w[i, j], axis=i),
                          name="point_matvec")

    out = bb.emit_te(matvec, call.args[0], relax.const(flat),
                     primfunc_name_hint="conv2d_transpose_point")
    plan.rewritten += 1
    return relax.op.reshape(out, (n, cout, kh, kw))


def exact_phases(data, kernel, s: int, cout: int, out_hw: tuple[int, int],
                 pads: tuple[int, int, int, int], offsets: tuple[int, int]):
    """The blocked phase convolution, each output chunk's phase read at its own offset:
    `data` NCHW[inner]c, `kernel` as `pack_weights` gives it, chunks phase-major (cout of
    each phase a whole number of chunks); `offsets`: the transposed conv's top/left pad."""
    from tvm import te, topi

    n, _, _, _, inner = (int(v) for v in data.shape)
    _, ichunks, th, tw, _, outer = (int(v) for v in kernel.shape)
    per_phase = cout // outer
    padded = topi.nn.pad(data, (0, 0, pads[0], pads[1], 0), (0, 0, pads[2], pads[3], 0),
                         name="data_pad")
    ic = te.reduce_axis((0, ichunks * inner), name="ic")
    kh = te.reduce_axis((0, th), name="kh")
    kw = te.reduce_axis((0, tw), name="kw")

    def conv(b, chunk, y, x, o):
        phase = chunk // per_phase
        row = y + (phase // s + offsets[0]) // s + kh
        col = x + (phase % s + offsets[1]) // s + kw
        return te.sum(padded[b, ic // inner, row, col, ic % inner]
                      * kernel[chunk, ic // inner, kh, kw, ic % inner, o], axis=[ic, kh, kw])

    return te.compute((n, s * s * per_phase, *out_hw, outer), conv, name="conv2d_NCHWc",
                      tag="conv2d_NCHWc")


def legalize(bb, call, plan, block: int | None = None, points: bool = False,
             exact: bool = False):
    """conv2d_transpose -> phase convolution + interleave, where it applies; else stock.
    `block`: the vector lanes to block the phase convolution's channels by (None: NCHW);
    `points`: a 1x1 input's (see above) becomes a matrix-vector product; `exact`: a
    blocked phase convolution computes only the outputs its phase uses."""
    import tvm
    from tvm import relax, te, topi
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d_transpose

    a = call.attrs
    weight = call.args[1]
    strides = [int(v) for v in a.strides]
    try:
        data = [int(v) for v in call.args[0].ty.shape]
        out = [int(v) for v in call.ty.shape]
        wshape = [int(v) for v in weight.ty.shape]
    except (TypeError, ValueError, AttributeError):
        return _nn_conv2d_transpose(bb, call)
    if (a.data_layout != "NCHW" or a.kernel_layout != "IOHW" or a.out_layout != "NCHW"
            or int(a.groups) != 1 or any(int(d) != 1 for d in a.dilation)
            or not isinstance(weight, tvm.ir.expr.GenericConst)):
        return _nn_conv2d_transpose(bb, call)
    if (points and data[2:] == [1, 1] and out[2:] == wshape[2:]
            and not any(int(v) for v in a.padding) and (a.out_dtype or "float32") == "float32"
            and call.args[0].ty.dtype == "float32"):
        return point_input(bb, call, weight.value.numpy(), plan)
    if strides[0] != strides[1] or strides[0] < 2:
        return _nn_conv2d_transpose(bb, call)
    s = strides[0]
    # Kernels that are no multiple of the stride get zero taps appended (same result).
    w_np = weight.value.numpy()
    kh, kw = (-(-k // s) * s for k in wshape[2:])
    w_np = np.pad(w_np, ((0, 0), (0, 0), (0, kh - wshape[2]), (0, kw - wshape[3])))
    pad = [int(v) for v in a.padding]
    pad_t, pad_l = pad[0], pad[1]
    _, cin, h, w = data
    n, cout, oh, ow = out
    top_h, bot_h = phase_layout(h, oh, kh, s, pad_t)
    top_w, bot_w = phase_layout(w, ow, kw, s, pad_l)
    weights = phase_weights(w_np, s, (pad_t, pad_l))
    out_dtype = a.out_dtype or "float32"
    pads = (top_h, top_w, bot_h, bot_w)
    if block is None:
        phases = bb.emit_te(topi.nn.conv2d_nchw, call.args[0], relax.const(weights), 1, pads, 1,
                            out_dtype, primfunc_name_hint="conv2d_phases")
        outer, exact = 0, False
    else:
        from tvmtui.graph.blocking import input_block

        inner, outer = input_block(cin, block), input_block(s * s * cout, block)
        packed = bb.emit_te(
            lambda x: te.compute((n, cin // inner, h, w, inner),
                                 lambda i, c, y, z, k: x[i, c * inner + k, y, z],
                                 name="phase_input_pack"),
            call.args[0], primfunc_name_hint="phase_input_pack")
        kernel = relax.const(pack_weights(weights, inner, outer))
        exact = (exact and cout % outer == 0
                 and out_dtype == call.args[0].ty.dtype == "float32")
        if exact:
            out_hw = (-(-oh // s), -(-ow // s))
            phases = bb.emit_te(exact_phases, packed, kernel, s, cout, out_hw, pads,
                                (pad_t, pad_l), primfunc_name_hint="conv2d_phases")
        else:
            phases = bb.emit_te(
                topi.nn.conv2d_NCHWc, packed, kernel, (1, 1), pads, (1, 1),
                f"NCHW{inner}c", f"NCHW{outer}c", out_dtype, primfunc_name_hint="conv2d_phases")

    def interleave(ph):
        def pick(i, o, y, x):
            # phase r = y % s sits at offset (r + pad) // s in a padded phase output
            channel = ((y % s) * s + x % s) * cout + o
            row, col = y // s, x // s
            if not exact:
                row, col = row + (y % s + pad_t) // s, col + (x % s + pad_l) // s
            if outer:
                return ph[i, channel // outer, row, col, channel % outer]
            return ph[i, channel, row, col]

        return te.compute((n, cout, oh, ow), pick, name="subpixel_interleave")

    plan.rewritten += 1
    return bb.call_te(interleave, phases, primfunc_name_hint="subpixel_interleave")

