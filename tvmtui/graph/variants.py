"""Layout and algorithm variants of a Relax graph, and the passes that lower them.

A variant is one rewrite of the whole graph; the tuner measures each and keeps the fastest:

- `nchw`: every convolution direct, in NCHW (TVM's stock lowering).
- `nchwc`: direct convolutions in a channel-blocked layout NCHW[x]c, x = the target's
  float32 vector lanes (16 on AVX-512, 8 on AVX2, 4 on NEON), for every convolution
  whose output channels divide by x (the input of a first layer, 3 or 4 channels, is
  blocked by what divides them); the weights are packed at compile time.
- `winograd`: the graph blocked as in `nchwc`, and its 3x3 stride-1 convolutions as
  Winograd F(4,3), or F(2,3) where F(4,3) is not accurate enough for that layer, in the
  same blocked layout (`winograd.py`; a layer whose channels the block does not divide
  stays NCHW and runs TOPI's NCHW Winograd); the weights are transformed at compile time
  (float64). Sessions from before revision 4 ran Winograd in NCHW (TOPI's, padded to
  whole tiles and cropped) and left the other convolutions as in `nchw`.
- `subpixel`: strided transposed convolutions as one dense phase convolution (blocked)
  plus an interleave (`subpixel.py`), instead of a convolution over a zero-dilated input;
  that of a 1x1 input as a matrix-vector product.

Whatever the variant, float32 sigmoid, tanh, exp and erf become polynomials that vectorize
(`fastmath.py`, from rewrite revision 6), and a layout transform walks its output, not its
input (from revision 7, `_legalize_layout_transform`); from revision 9 a convolution's
BatchNormalization is folded into its weights first (`affine.py`), and from revision 10
each fused kernel may repack its weights (`lowering.py`); from revision 11 the layout
transforms of a blocked graph run inside the kernels next to them (`absorb.py`).

`prepare` must run, with the same variant and rewrite revision, before task extraction,
export and the bench build: then all three compile the same graph and the database's keys
match.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from tvmtui.graph.blocking import input_block, pads_in_block, vector_block
from tvmtui.graph.halves import FULL_IN, OFF, Halves, convert_layouts, half_block
from tvmtui.graph.revisions import REWRITE_REVISION

VARIANTS = ("nchw", "nchwc", "winograd", "subpixel")
DEFAULT = "nchw"


def session_revision(meta: dict) -> int:
    """The rewrite revision a session was tuned with (1 for sessions from before it)."""
    return int((meta.get("options") or {}).get("rewrite", 1))


@dataclass
class Plan:
    """What a variant did to one graph."""

    variant: str
    label: str  # how the app and the reports name it: "NCHW", "NCHW16c", "Winograd"
    rewritten: int = 0  # convolutions this variant changed
    notes: list[str] = field(default_factory=list)  # layers it left alone, and why
    dot: int = 0  # integer convolutions on the chip's dot-product instruction (`dotprod`)
    instruction: str | None = None  # that instruction ("avx512-vnni")

    def to_json(self) -> dict:
        return {"variant": self.variant, "label": self.label, "rewritten": self.rewritten,
                "notes": list(self.notes), "dot": self.dot, "instruction": self.instruction}

    def used_dot(self, instruction: str) -> None:
        """One more convolution on `instruction`; the label says so ("NCHW16c + avx512-vnni")."""
        if not self.dot:
            self.label = f"{self.label} + {instruction}"
        self.dot += 1
        self.instruction = instruction


def parse_variants(text: str) -> list[str]:
    """`--variants` value -> variant names ("all" or a comma list); ValueError if unknown."""
    if text.strip().lower() in ("all", "auto", ""):
        return list(VARIANTS)
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise ValueError(
            f"unknown variant(s) {', '.join(unknown) or text!r}; choose from {', '.join(VARIANTS)}"
        )
    return list(dict.fromkeys(names))


def label(variant: str, block: int) -> str:
    return {"nchw": "NCHW", "nchwc": f"NCHW{block}c", "winograd": "Winograd",
            "subpixel": "Sub-pixel"}[variant]


# ---- the rewrites ---------------------------------------------------------------------------
def _shape(expr) -> list[int] | None:
    try:
        return [int(d) for d in expr.ty.shape]
    except (TypeError, ValueError, AttributeError):
        return None


def _conv_info(call) -> tuple[list[int], list[int]] | None:
    """(data shape, weight shape) of a static NCHW/OIHW conv2d call, else None."""
    a = call.attrs
    if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or a.out_layout != "NCHW":
        return None
    data, weight = _shape(call.args[0]), _shape(call.args[1])
    if data is None or weight is None or len(data) != 4 or len(weight) != 4:
        return None
    return data, weight


def _nhwc_info(call, floats: bool) -> tuple[list[int], list[int]] | None:
    """`_conv_info`'s shapes (NCHW, OIHW) of an NHWC conv2d (a TFLite layer): an integer one
    from revision 14, blocked like ONNX convolutions, a float one from revision 19
    (`floats`): before, a float TFLite model's blocked variant applied to no layer."""
    a = call.attrs
    dtypes = ("int8", "uint8", "float32") if floats else ("int8", "uint8")
    if a.data_layout != "NHWC" or str(call.args[0].ty.dtype) not in dtypes or \
            a.kernel_layout not in ("HWIO", "HWOI"):
        return None
    data, weight = _shape(call.args[0]), _shape(call.args[1])
    if data is None or weight is None or len(data) != 4 or len(weight) != 4:
        return None
    n, h, w, c = data
    kh, kw, third, fourth = weight
    if a.kernel_layout == "HWIO":
        return [n, c, h, w], [fourth, third, kh, kw]
    return [n, c, h, w], [third, fourth, kh, kw]  # depthwise: (KH, KW, C, 1)


def _blocked_layouts(block: int, plan: Plan, revision: int, halves: Halves | None = None,
                     winograd: bool = False):
    """ConvertLayout callback: NCHW[block]c for each conv whose channels divide by block
    (from revision 2, also those whose input channels do not: their input is blocked by
    `input_block`, their output by `block`; from 22, half blocks as `halves` picks, but
    for the `winograd` variant's 3x3 layers that NCHW Winograd would run instead)."""
    halves = halves or Halves()

    def layout_cb(call):
        if call.op.name != "relax.nn.conv2d":
            return {}
        info = _conv_info(call)
        if info is None and revision >= 14:
            info = _nhwc_info(call, floats=revision >= 19)
        if info is None:
            return {"relax.nn.conv2d": ["NCHW", "OIHW"]}
        (_, cin, _, _), (cout, per_group, kh, kw) = info
        groups = int(call.attrs.groups)
        depthwise = groups == cin == cout and per_group == 1
        if groups == 1 or depthwise:
            if cin % block == 0 and cout % block == 0:
                plan.rewritten += 1
                kernel = f"OIHW1i{block}o" if depthwise else f"OIHW{block}i{block}o"
                return {"relax.nn.conv2d": [f"NCHW{block}c", kernel]}
            if groups == 1 and cout % block == 0 and revision >= 2:
                inner = input_block(cin, block)
                plan.rewritten += 1
                return {"relax.nn.conv2d": [f"NCHW{inner}c", f"OIHW{inner}i{block}o",
                                            f"NCHW{block}c"]}
            half = half_block(call, cout, block, revision)
            if winograd and half and (kh, kw) == (3, 3) and \
                    [int(v) for v in call.attrs.strides] == [1, 1] and \
                    input_block(cin, block) != half:
                half = 0  # blocked in and out alike or not at all: Winograd either way
            pick = halves.take() if half else OFF
            if pick != OFF:
                plan.rewritten += 1
                if depthwise:
                    return {"relax.nn.conv2d": [f"NCHW{half}c", f"OIHW1i{half}o"]}
                inner = input_block(cin, block if pick == FULL_IN else half)
                return {"relax.nn.conv2d": [f"NCHW{inner}c", f"OIHW{inner}i{half}o",
                                            f"NCHW{half}c"]}
            if revision >= 26 and call.attrs.data_layout == "NHWC":
                plan.notes.append(f"conv {cin}->{cout} channels stays NHWC: not a multiple "
                                  f"of the block {block}")
                return {"relax.nn.conv2d": ["NHWC", str(call.attrs.kernel_layout)]}
            plan.notes.append(
                f"conv {cin}->{cout} channels stays NCHW: not a multiple of the block {block}")
        return {"relax.nn.conv2d": ["NCHW", "OIHW"]}

    return layout_cb


def _legalize_blocked(bb, call, plan: Plan | None = None, revision: int = REWRITE_REVISION,
                      pads: list | None = None):
    """Lower conv2d in a blocked layout with TOPI's conv2d_NCHWc (stock refuses 5-D), or
    an integer one on the chip's dot-product instruction (`dotprod`, noted in `plan`); a
    depthwise one whose input is one of `pads` (`padded.depthwise_pads`) pads it itself."""
    from tvm import topi
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    a = call.attrs
    if len(a.data_layout) == 4:
        return _nn_conv2d(bb, call)
    from tvmtui.graph import dotprod

    target = tvm_target_current()
    if dotprod.applies(call, target, pad_channels=revision >= 16):
        if plan is not None:
            plan.used_dot(dotprod.instruction(target) or "")
        return dotprod.legalize(bb, call, target)
    if int(a.groups) > 1:
        from tvmtui.graph.padded import absorbed

        data, padding, value = call.args[0], a.padding, 0.0
        found = absorbed(bb, data, pads or [])
        if found is not None:
            data, pad = found
            padding, value = pad.padding, pad.value
        return bb.call_te(_depthwise_nchwc, data, call.args[1], a.strides, padding,
                          a.dilation, a.out_dtype or "float32", value,
                          primfunc_name_hint="depthwise_conv2d_NCHWc")
    return bb.call_te(
        topi.nn.conv2d_NCHWc, call.args[0], call.args[1], a.strides, a.padding, a.dilation,
        a.data_layout, a.out_layout, a.out_dtype or "float32", primfunc_name_hint="conv2d_NCHWc",
    )


def tvm_target_current():
    import tvm

    return tvm.target.Target.current()


def _depthwise_nchwc(data, kernel, strides, padding, dilation, out_dtype, pad_value=0.0):
    """Depthwise conv on NCHW[x]c data with an OIHW1i[x]o kernel (TOPI registers none),
    the input padded with `pad_value`."""
    from tvm import te, topi

    n, chunks, h, w, block = (int(d) for d in data.shape)
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    sh, sw = (int(v) for v in strides)
    dh, dw = (int(v) for v in dilation)
    pads = [int(p) for p in padding]
    pads = pads * 2 if len(pads) == 2 else pads
    padded = topi.nn.pad(data, (0, 0, pads[0], pads[1], 0), (0, 0, pads[2], pads[3], 0),
                         pad_value=pad_value)
    oh = (h + pads[0] + pads[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pads[1] + pads[3] - dw * (kw - 1) - 1) // sw + 1
    rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
    return te.compute(
        (n, chunks, oh, ow, block),
        lambda b, c, y, x, cb: te.sum(
            padded[b, c, y * sh + rh * dh, x * sw + rw * dw, cb].astype(out_dtype)
            * kernel[c, 0, rh, rw, 0, cb].astype(out_dtype), axis=[rh, rw]),
        name="depthwise_conv2d_NCHWc")


def _keeps_order(index_map, shape: list[int]) -> bool:
    """Whether a layout transform of a tensor of `shape` moves no element: NCHW to NCHW1c,
    or NCHW8c of a 1x1 map, keep every element at its flat offset."""
    from tvm import ir, sym

    analyzer = sym.Analyzer()
    for var, extent in zip(index_map.initial_indices, shape):
        analyzer.bind(var, ir.Range(0, extent))

    def flat(indices, dims):
        offset = 0
        for index, dim in zip(indices, dims):
            offset = offset * dim + index
        return offset

    out_shape = [int(d) for d in index_map.map_shape(shape)]
    return analyzer.can_prove_equal(flat(index_map.final_indices, out_shape),
                                    flat(index_map.initial_indices, shape))


def _legalize_layout_transform(bb, call, views: bool = False):
    """A layout transform as a gather that walks its output (TVM's walks its input), or,
    with `views` (revision 8), as a zero-copy view where it moves no element.

    Stock TVM writes the transform as a copy over the input's shape with the layout applied
    to the write. Parallelized over its outer loops, that splits the input's channels
    between threads, which then write alternate words of the same cache lines: DQN's input
    (NCHW to NCHW4c) took a third of the network's time deployed, 7 us alone. Walking the
    output, each thread writes whole lines of its own. A transform that pads (TVM's form
    then walks the output already), or whose shape is not static, keeps the stock form.
    """
    from tvm import te, tirx
    from tvm.relax.transform.legalize_ops.manipulate import _layout_transform

    index_map = call.attrs.index_map
    shape = _shape(call.args[0])
    if shape is None or call.attrs.pad_value is not None:
        return _layout_transform(bb, call)
    _, padding = index_map.non_surjective_inverse(call.args[0].ty.shape)
    if not (isinstance(padding, tirx.IntImm) and int(padding) == 0):
        return _layout_transform(bb, call)
    out_shape = [int(d) for d in index_map.map_shape(shape)]
    if views and _keeps_order(index_map, shape):
        from tvm import relax

        return relax.op.memory.view(call.args[0], relax.ShapeExpr(out_shape))
    inverse = index_map.inverse(shape)

    def gather(data):
        return te.compute(out_shape, lambda *idx: data(*inverse.map_indices(list(idx))),
                          name="te_layout_transform")

    return bb.call_te(gather, call.args[0], primfunc_name_hint="te_layout_transform")


def _blocked(mod, block: int, plan: Plan, revision: int, winograd: bool = False):
    """`mod` with its convolutions in NCHW[block]c and their weights packed now (stock
    folding would compile each packing); `winograd`: for the Winograd variant."""
    from tvmtui.graph.fold import fold_with_numpy

    if revision >= 19:
        from tvmtui.graph.ranks import full_rank_constants
        from tvmtui.graph.slices import split_as_slices

        mod = full_rank_constants(split_as_slices(mod))
    mod = convert_layouts(mod, plan, lambda tried, halves: _blocked_layouts(
        block, tried, revision, halves, winograd))
    if revision >= 18:
        mod = pads_in_block(mod)
    if revision >= 19:
        from tvmtui.graph.slices import channels_in_block

        mod = channels_in_block(mod)
    return fold_with_numpy(mod)


def prepare(mod, target, variant: str = DEFAULT, tolerance: float = 1e-4,
            revision: int = REWRITE_REVISION):
    """Rewrite `mod` (imported, NCHW) for `variant` and legalize it -> (module, Plan);
    `revision`: the session's `options.rewrite` (1 for sessions from before it existed)."""
    import tvm
    from tvm import relax

    block = vector_block(target)
    plan = Plan(variant, label(variant, block))
    from tvmtui.graph.integer import IntegerPlan

    integer = IntegerPlan.of(mod)
    if integer is not None:
        plan.notes.append(integer.summary())
    legalize_map: dict[str, Callable] = {}
    if revision >= 9:
        from tvmtui.graph.affine import fold_channel_affine

        mod = fold_channel_affine(mod)
    if revision >= 19:
        from tvmtui.graph.simplify import simplified

        mod = simplified(mod, reciprocals=revision >= 23 and integer is None,
                         prelus=revision >= 24)
    pads: list = []  # pads a depthwise conv absorbs (revision 20)
    if variant == "nchwc":
        mod = _blocked(mod, block, plan, revision)
        pads = _depthwise_pads(mod, revision)
        legalize_map["relax.nn.conv2d"] = functools.partial(_legalize_blocked, plan=plan,
                                                            revision=revision, pads=pads)
    elif variant == "winograd" and revision >= 4:
        from tvmtui.graph import winograd

        layouts = Plan("nchwc", "")
        mod = _blocked(mod, block, layouts, revision, winograd=True)
        pads = _depthwise_pads(mod, revision)
        plan.notes += layouts.notes
        nchw = winograd.nchw_legalizer(plan, tolerance, _conv_info)  # layers left in NCHW
        legalize_map["relax.nn.conv2d"] = winograd.blocked_legalizer(
            plan, tolerance,
            lambda bb, call: nchw(bb, call) if len(call.attrs.data_layout) == 4 else
            _legalize_blocked(bb, call, plan, revision, pads), window=revision >= 13)
    elif variant == "winograd":
        from tvmtui.graph import winograd

        # Fold weight expressions (e.g. a TFLite OHWI->OIHW transpose) into constants first.
        mod = relax.transform.FoldConstant()(mod)
        legalize_map["relax.nn.conv2d"] = winograd.nchw_legalizer(plan, tolerance, _conv_info)
    elif variant == "subpixel":
        from tvmtui.graph import subpixel

        phase_block = block if revision >= 2 else None
        legalize_map["relax.nn.conv2d_transpose"] = (
            lambda bb, call: subpixel.legalize(bb, call, plan, phase_block, revision >= 3,
                                               revision >= 5))
    elif variant != "nchw":
        raise ValueError(f"unknown variant {variant!r}")
    if revision >= 6:
        from tvmtui.graph import fastmath

        legalize_map.update(fastmath.legalizations(softmax=revision >= 25))
    if revision >= 7:
        legalize_map["relax.layout_transform"] = functools.partial(
            _legalize_layout_transform, views=revision >= 8)
    with target:
        mod = tvm.transform.Sequential([
            relax.transform.LegalizeOps(customize_legalize_map=legalize_map),
            relax.transform.CanonicalizeBindings(),
        ])(mod)
    if pads:  # the pads the convolutions absorbed, now unused
        mod = relax.transform.DeadCodeElimination()(mod)
    return mod, plan


def _depthwise_pads(mod, revision: int) -> list:
    from tvmtui.graph.padded import depthwise_pads

    return depthwise_pads(mod) if revision >= 20 else []
