"""Winograd F(m, 3) convolutions: the transforms, their accuracy, and two lowerings.

- Channel-blocked (rewrite revision 4 on): the layer stays in the graph's NCHW[x]c layout
  and every stage vectorizes over the x-wide channel block. The input transform reads the
  blocked input through a zero-padded window, computed a tile column (alpha vectors) at a
  time just before the transform reads it, so LLVM keeps it in registers (revisions 4-12
  checked the bounds of every term instead: the same speed, but TVM's TIR passes took
  0.4 s of each candidate's build over those checks, against 0.1 now); the batched
  GEMM of each of the alpha^2 transformed positions accumulates a few tiles x channel
  blocks in vector registers, its weights transformed and packed at compile time; the
  inverse transform writes whole tiles, and a gather crops them into the blocked output.
  Each transform is written as two 1-D passes with the matrices' constants in the
  expression (zero terms dropped), and scheduled by tvmtui's custom rules
  (`kernels/rules.py`, by the blocks' `schedule_rule`).
- NCHW (revisions 1-3): TOPI's pre-transformed Winograd, padded to whole tiles and cropped
  (TOPI reads past its padded input otherwise). Its batched GEMM vectorizes over tiles,
  which fill no vector on a 28x28 layer.

Measured on C6 (28x28, 128->128; 2 cores, AVX2), kernel alone: the blocked lowering
hand-scheduled 0.41-0.45 ms; TOPI's NCHW one tuned 1.41 ms; LiteRT runs the layer in ~1.4.
"""

from __future__ import annotations

import functools

import numpy as np

MIN_CHANNELS = 16  # below this the transforms cost more than they save
# The custom schedule rules of the blocked stages (`kernels/rules.py` registers them).
RULE_PACK, RULE_GEMM, RULE_UNPACK, RULE_OUTPUT = (
    "tvmtui_winograd_pack", "tvmtui_winograd_gemm", "tvmtui_winograd_unpack",
    "tvmtui_winograd_output")
WINDOW = "winograd_pad"  # the zero-padded input the pack rule places (revision 13 on)


@functools.cache
def winograd_matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B, G of Winograd F(tile, 3) in float64 (TVM's own interpolation points), read
    only; computed once (in exact fractions: 30 ms, times every layer of ResNet-18)."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    a, b, g = _cook_toom_convolution(_interpolation_points(tile + 1), tile, 3)
    out = (np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(g, np.float64))
    for m in out:
        m.flags.writeable = False
    return out


def winograd_weight(weight: np.ndarray, tile: int) -> np.ndarray:
    """OIHW 3x3 weights -> (alpha, alpha, CI, CO), transformed in float64."""
    _, _, g = winograd_matrices(tile)
    cout, cin = weight.shape[:2]
    alpha = g.shape[0]
    # u[e, n] = sum_kl g[e, k] g[n, l] w[k, l]: one GEMM with kron(g, g) (an einsum over
    # the three operands took 2.5 s for a 512x512 layer, this ~0.1 s).
    flat = weight.transpose(2, 3, 1, 0).reshape(9, cin * cout).astype(np.float64)
    return (np.kron(g, g) @ flat).reshape(alpha, alpha, cin, cout).astype(np.float32)


def blocked_weight(u: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """`winograd_weight`'s (alpha, alpha, CI, CO) -> the blocked GEMM's
    (alpha, alpha, CO/ob, CI/ib, ib, ob)."""
    alpha, _, cin, cout = u.shape
    u = u.reshape(alpha, alpha, cin // in_block, in_block, cout // out_block, out_block)
    return np.ascontiguousarray(u.transpose(0, 1, 4, 2, 3, 5))


def unblock_weight(packed: np.ndarray) -> np.ndarray:
    """OIHW[i]i[o]o (conv2d_NCHWc's kernel layout) -> OIHW."""
    oc, ic, kh, kw, ib, ob = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 5, 1, 4, 2, 3)).reshape(
        oc * ob, ic * ib, kh, kw)


def winograd_error(weight: np.ndarray, hw: tuple[int, int], pads: list[int], tile: int,
                   seed: int = 0, u: np.ndarray | None = None) -> float:
    """Largest error of F(tile,3) in float32 against float64 direct on one random frame,
    measured as the parity gate does: |a - b| / max(|b|, 1); `u`: the layer's
    `winograd_weight` for `tile`, if already made."""
    cout, cin, _, _ = weight.shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((cin, *hw)).astype(np.float32)
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr)))
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    cols = np.stack([xp[:, i:i + oh, j:j + ow] for i in range(3) for j in range(3)], axis=1)
    ref = np.einsum("oik,ikhw->ohw", weight.astype(np.float64).reshape(cout, cin, 9), cols,
                    optimize=True)
    a, b, _ = (m.astype(np.float32) for m in winograd_matrices(tile))
    alpha = tile + 2
    nh, nw = -(-oh // tile), -(-ow // tile)
    xt = np.pad(xp.astype(np.float32), ((0, 0), (0, nh * tile + 2 - xp.shape[1]),
                                        (0, nw * tile + 2 - xp.shape[2])))
    tiles = np.stack([np.stack([xt[:, i * tile:i * tile + alpha, j * tile:j * tile + alpha]
                                for j in range(nw)], 1) for i in range(nh)], 1)
    v = np.einsum("ae,cijab,bn->enijc", b, tiles, b, optimize=True)  # data pack
    if u is None:
        u = winograd_weight(weight, tile)
    m = np.einsum("enijc,enco->enijo", v, u, optimize=True)  # GEMM
    y = np.einsum("ea,enijo,nb->oiajb", a, m, a, optimize=True)
    y = y.reshape(cout, nh * tile, nw * tile)
    y = y[:, :oh, :ow].astype(np.float64)
    return float(np.max(np.abs(y - ref) / np.maximum(np.abs(ref), 1.0)))


def pick_tile(weight: np.ndarray, hw: tuple[int, int], pads: list[int], tolerance: float,
              notes: list[str]) -> tuple[int, np.ndarray] | None:
    """F(4,3), else F(2,3), whichever first stays within half the parity tolerance on this
    layer, with the weights it transformed for it (`winograd_weight`: checked and packed
    from one transform, which took 0.1-0.3 s for a 512x512 layer); None (the layer stays
    direct) when neither does. Says why in `notes`."""
    cout, cin = weight.shape[:2]
    for tile in (4, 2):
        u = winograd_weight(weight, tile)
        err = winograd_error(weight, hw, pads, tile, u=u)
        if err <= tolerance / 2:
            return tile, u
        notes.append(
            f"conv {cin}->{cout} {hw[0]}x{hw[1]}: F({tile},3) error {err:.1e} exceeds half the "
            f"{tolerance:g} parity tolerance" + ("; trying F(2,3)" if tile == 4 else
                                                 "; stays direct"))
    return None


# ---- channel-blocked lowering --------------------------------------------------------------
def _combine(coefs, terms):
    """sum(c * t) with the matrix's float32 constants; zero terms dropped, +-1 not multiplied."""
    from tvm import tirx

    expr = None
    for coef, term in zip(coefs, terms):
        c = float(np.float32(coef))
        if c == 0.0:
            continue
        part = term if c == 1.0 else (-term if c == -1.0 else term * tirx.const(c, "float32"))
        expr = part if expr is None else expr + part
    return expr if expr is not None else tirx.const(0.0, "float32")


def _by_index(var, exprs):
    """exprs[var] for a loop variable (the rules unroll that loop, and the selects fold)."""
    from tvm import tirx

    out = exprs[-1]
    for i in range(len(exprs) - 2, -1, -1):
        out = tirx.Select(var == i, exprs[i], out)
    return out


def conv2d_winograd_nchwc(data, kernel, padding, tile: int, out_dtype: str = "float32",
                          window: bool = True):
    """3x3 stride-1 convolution of NCHW[ib]c `data` as Winograd F(tile, 3), output
    NCHW[ob]c; `kernel` is `blocked_weight`'s (alpha, alpha, CO/ob, CI/ib, ib, ob).
    `window` (rewrite revision 13 on): the input transform reads a zero-padded copy of
    the input (`WINDOW`, which the pack rule computes a column of a tile at a time);
    without it every term of the transform checks its own bounds."""
    from tvm import te, tirx

    n, chunks, h, w, ib = (int(d) for d in data.shape)
    alpha, _, ochunks, _, _, ob = (int(d) for d in kernel.shape)
    pt, pl, pb, pr = (int(p) for p in padding)
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    nh, nw = -(-oh // tile), -(-ow // tile)
    tiles = n * nh * nw
    a_mat, b_mat, _ = winograd_matrices(tile)

    def tile_of(p):
        return p // (nh * nw), (p // nw) % nh, p % nw

    def guarded(i, c, y, x, cb):  # the input at padded coordinates (y, x), zero outside it
        y, x = y - pt, x - pl
        inside = tirx.all(y >= 0, y < h, x >= 0, x < w)
        return tirx.if_then_else(inside, data[i, c, y, x, cb], tirx.const(0.0, data.dtype))

    if window:
        padded = te.compute((n, chunks, nh * tile + 2, nw * tile + 2, ib), guarded,
                            name=WINDOW, attrs={"schedule_rule": "None"})

        def load(*index):
            return padded[index]
    else:
        load = guarded

    def rows(eps, col, p, c, cb):  # first 1-D pass of the input transform, on one column
        i, th, tw = tile_of(p)
        terms = [load(i, c, th * tile + a, tw * tile + col, cb) for a in range(alpha)]
        return _by_index(eps, [_combine(b_mat[:, e], terms) for e in range(alpha)])

    pack_rows = te.compute((alpha, alpha, tiles, chunks, ib), rows, name="winograd_pack_rows",
                           attrs={"schedule_rule": "None"})
    pack = te.compute(
        (alpha, alpha, tiles, chunks, ib),
        lambda eps, nu, p, c, cb: _by_index(
            nu, [_combine(b_mat[:, e], [pack_rows[eps, j, p, c, cb] for j in range(alpha)])
                 for e in range(alpha)]),
        name="winograd_pack", attrs={"schedule_rule": RULE_PACK})
    rc = te.reduce_axis((0, chunks), "rc")
    rb = te.reduce_axis((0, ib), "rb")
    gemm = te.compute(
        (alpha, alpha, ochunks, tiles, ob),
        lambda eps, nu, k, p, kb: te.sum(
            (pack[eps, nu, p, rc, rb] * kernel[eps, nu, k, rc, rb, kb]).astype(out_dtype),
            axis=[rc, rb]),
        name="winograd_gemm",
        attrs={"schedule_rule": RULE_GEMM, "layout_free_placeholders": [kernel]})
    unpack_rows = te.compute(
        (alpha, tile, ochunks, tiles, ob),
        lambda a, wi, k, p, kb: _by_index(
            wi, [_combine(a_mat[:, i], [gemm[a, j, k, p, kb] for j in range(alpha)])
                 for i in range(tile)]),
        name="winograd_unpack_rows", attrs={"schedule_rule": "None"})
    unpack = te.compute(
        (ochunks, tiles, tile, tile, ob),
        lambda k, p, hi, wi, kb: _by_index(
            hi, [_combine(a_mat[:, i], [unpack_rows[a, wi, k, p, kb] for a in range(alpha)])
                 for i in range(tile)]),
        name="winograd_unpack", attrs={"schedule_rule": RULE_UNPACK})
    return te.compute(
        (n, ochunks, oh, ow, ob),
        lambda i, k, y, x, kb: unpack[k, i * nh * nw + (y // tile) * nw + x // tile,
                                      y % tile, x % tile, kb],
        name="conv2d_winograd_NCHWc", attrs={"schedule_rule": RULE_OUTPUT})


def blocked_legalizer(plan, tolerance: float, fallback, window: bool = True):
    """conv2d legalization for a blocked graph: eligible 3x3 stride-1 layers (blocked in
    and out by the same block, constant weights, >= MIN_CHANNELS) as blocked Winograd
    (`window`: see `conv2d_winograd_nchwc`), every other convolution through `fallback`."""
    import tvm
    from tvm import relax

    def legalize(bb, call):
        a = call.attrs
        weight = call.args[1]
        layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout))
        try:
            data_shape = [int(d) for d in call.args[0].ty.shape]
            w_shape = [int(d) for d in weight.ty.shape]
        except (TypeError, ValueError, AttributeError):
            return fallback(bb, call)
        if (len(data_shape) != 5 or len(w_shape) != 6 or int(a.groups) != 1
                or w_shape[2:4] != [3, 3] or w_shape[4] != data_shape[4]
                or [int(s) for s in a.strides] != [1, 1] or [int(d) for d in a.dilation] != [1, 1]
                or layouts[2] != layouts[0] or (a.out_dtype or "float32") != "float32"
                or not isinstance(weight, tvm.ir.expr.GenericConst)):
            return fallback(bb, call)
        oihw = unblock_weight(weight.value.numpy())
        cout, cin = oihw.shape[:2]
        if min(cin, cout) < MIN_CHANNELS:
            return fallback(bb, call)
        pads = [int(p) for p in a.padding]
        pads = pads * 2 if len(pads) == 2 else pads
        picked = pick_tile(oihw, tuple(data_shape[2:4]), pads, tolerance, plan.notes)
        if picked is None:
            return fallback(bb, call)
        tile, u = picked
        plan.rewritten += 1
        kernel = blocked_weight(u, w_shape[4], w_shape[5])
        return bb.call_te(conv2d_winograd_nchwc, call.args[0], relax.const(kernel), pads, tile,
                          "float32", window, primfunc_name_hint=f"conv2d_winograd{tile}_NCHWc")

    return legalize


# ---- NCHW lowering (sessions of rewrite revisions 1-3) -------------------------------------
def _winograd_nchw_te(data, kernel_pack, padding, out_hw, tile, out_dtype):
    """TOPI's pre-transformed Winograd NCHW on whole tiles, cropped to the true output."""
    from tvm import te
    from tvm.topi.nn.conv2d import _conv2d_winograd_nchw_impl

    full = _conv2d_winograd_nchw_impl(
        data, kernel_pack, (1, 1), padding, (1, 1), out_dtype, tile, pre_computed=True)
    n, co = int(full.shape[0]), int(full.shape[1])
    if [int(full.shape[2]), int(full.shape[3])] == list(out_hw):
        return full
    return te.compute((n, co, *out_hw), lambda i, c, h, w: full[i, c, h, w], name="crop")


def nchw_legalizer(plan, tolerance: float, conv_info):
    """conv2d legalization that runs eligible 3x3 stride-1 NCHW layers as TOPI Winograd."""
    import tvm
    from tvm import relax
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    def legalize(bb, call):
        info = conv_info(call)
        a = call.attrs
        weight = call.args[1]
        if (info is None or int(a.groups) != 1 or list(info[1][2:]) != [3, 3]
                or [int(s) for s in a.strides] != [1, 1] or [int(d) for d in a.dilation] != [1, 1]
                or not isinstance(weight, tvm.ir.expr.GenericConst)):
            return _nn_conv2d(bb, call)
        (n, cin, h, w), (cout, _, _, _) = info
        if min(cin, cout) < MIN_CHANNELS:
            return _nn_conv2d(bb, call)
        pads = [int(p) for p in a.padding]
        pads = pads * 2 if len(pads) == 2 else pads
        out_hw = (h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2)
        w_np = weight.value.numpy()
        picked = pick_tile(w_np, (h, w), pads, tolerance, plan.notes)
        if picked is None:
            return _nn_conv2d(bb, call)
        tile, u = picked
        # Pad bottom/right to whole tiles so TOPI never reads past its padded input.
        extra_h = -(-out_hw[0] // tile) * tile - out_hw[0]
        extra_w = -(-out_hw[1] // tile) * tile - out_hw[1]
        padding = (pads[0], pads[1], pads[2] + extra_h, pads[3] + extra_w)
        plan.rewritten += 1
        return bb.call_te(
            _winograd_nchw_te, call.args[0], relax.const(u), padding,
            out_hw, tile, a.out_dtype or "float32", primfunc_name_hint=f"conv2d_winograd{tile}",
        )

    return legalize
