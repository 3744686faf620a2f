"""Half blocks (rewrite revision 22): a float convolution whose output channels divide by
half the vector block but not by the block (24, 40, 72, 120 channels on AVX-512) is
blocked NCHW[half]c, one 256-bit vector, instead of staying in NCHW. MobileNet-style
models' 24-channel layers had run unblocked: 14 of PP-OCR's text detector's convolutions,
29 of its direction classifier's, 12 of MediaPipe's pose detector's.

TVM's ConvertLayout cannot convert between two blockings of the channels (NCHW16c to
NCHW8c: "Invalid layout axis"). Where half and full blocks would meet (a concatenation
of 24-channel tensors read by a 16c layer), `convert_layouts` keeps the half blocks that
meet none, picked one by one in the graph's order (a layer reading a 24-channel
concatenation takes its input in the half block too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

OFF, FULL_IN, HALF_IN = 0, 1, 2


class Halves:
    """How the convolutions eligible for a half block are blocked, numbered in the order
    ConvertLayout visits them: `picks` maps each to `OFF` (NCHW), `FULL_IN` (its input
    blocked as by a full block's layer, `blocking.input_block`) or `HALF_IN` (its input
    in the half block too, as a 24-channel concatenation gives it); None: all `FULL_IN`."""

    def __init__(self, picks: dict[int, int] | None = None):
        self.picks = picks
        self.seen = 0

    def take(self) -> int:
        """The next eligible convolution's pick."""
        index, self.seen = self.seen, self.seen + 1
        return FULL_IN if self.picks is None else self.picks.get(index, OFF)


def half_block(call, cout: int, block: int, revision: int) -> int:
    """The half block of a float convolution of `cout` output channels that divide by half
    of `block` (>= 4) but not by `block`, from revision 22; else 0. Integer layers keep
    `block`: their dot-product kernels fill a whole vector of int32 sums."""
    half = block // 2
    if revision < 22 or half < 4 or cout % half or cout % block == 0 or \
            str(call.args[0].ty.dtype) != "float32":
        return 0
    return half


def convert_layouts(mod, plan, layouts: Callable):
    """`mod` through ConvertLayout with the callback `layouts(plan, halves)` makes, with
    every half block it offers, or failing that with those that convert; `plan` records
    the attempt that was kept."""
    import tvm
    from tvm import relax

    def attempt(halves: Halves):
        tried = dataclasses.replace(plan, notes=list(plan.notes))
        try:
            out = relax.transform.ConvertLayout({}, layouts(tried, halves))(mod)
        except tvm.error.InternalError:
            return None, tried
        return out, tried

    out, tried = attempt(Halves())
    if out is None:
        none = Halves({})  # as before revision 22: an error here is TVM's own, and raised
        tried = dataclasses.replace(plan, notes=list(plan.notes))
        out = relax.transform.ConvertLayout({}, layouts(tried, none))(mod)
        kept: dict[int, int] = {}
        for index in range(none.seen):
            for pick in (FULL_IN, HALF_IN):
                more, more_plan = attempt(Halves({**kept, index: pick}))
                if more is not None:
                    kept[index] = pick
                    out, tried = more, more_plan
                    break
        if len(kept) < none.seen:
            tried.notes.append(
                f"{none.seen - len(kept)} of {none.seen} convolutions left in NCHW rather "
                "than half-blocked: their tensors meet fully blocked layers")
    plan.rewritten, plan.notes = tried.rewritten, tried.notes
    return out
