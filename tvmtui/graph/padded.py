"""Depthwise convolutions that pad their own input (rewrite revision 20).

An integer convolution is padded with its input's zero point before it (`integer.py`), as
a `pad` of the blocked tensor (`blocking.pads_in_block`), because a Relax convolution pads
with zeros only. For a blocked depthwise convolution, the last of them on TOPI-style code,
that pad ran as a kernel of its own: MobileNet int8's 13 depthwise layers each read and
wrote their input once more, in 13 small parallel kernels. From revision 20 such a
convolution reads the pad's input and pads it itself, with the pad's value, inside its
kernel (`variants._depthwise_nchwc`), where MetaSchedule inlines the padding as it does
a float convolution's; the pad, then unused, is removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pad:
    """A pad a depthwise convolution absorbs: its variable, its widths as the
    convolution's padding (top, left, bottom, right) and its value."""

    var: Any  # the relax.Var bound to the pad
    padding: tuple[int, int, int, int]
    value: float


def depthwise_pads(mod) -> list[Pad]:
    """The pads of `mod` (blocked) that only a blocked depthwise convolution without
    padding of its own reads: constant, on the height and width of an NCHW[b]c tensor."""
    from tvm import relax

    from tvmtui.graph.passes import use_counts

    out = []
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        uses = use_counts(func)
        calls = [b for block in func.body.blocks for b in block.bindings
                 if isinstance(b, relax.VarBinding) and isinstance(b.value, relax.Call)]
        reader = {arg: b.value for b in calls for arg in b.value.args
                  if isinstance(arg, relax.Var) and uses.get(arg) == 1}
        for b in calls:
            pad = _as_pad(b.var, b.value)
            if pad is not None and b.var in reader and _absorbs(reader[b.var]):
                out.append(pad)
    return out


def absorbed(bb, data, pads: list[Pad]):
    """(the pad's input, the pad) when `data` is one of `pads`, else None; the input is
    that of the pad as the block builder has it now (legalized)."""
    from tvm import relax

    pad = next((p for p in pads if p.var.same_as(data)), None)
    if pad is None:
        return None
    bound = bb.lookup_binding(data)
    if isinstance(bound, relax.Call) and getattr(bound.op, "name", "") == "relax.call_tir" \
            and len(bound.args[1].fields) == 1:
        return bound.args[1].fields[0], pad
    return None


def _as_pad(var, call) -> Pad | None:
    if getattr(call.op, "name", "") != "relax.nn.pad":
        return None
    a = call.attrs
    widths = [int(w) for w in a.pad_width]
    if str(a.pad_mode) != "constant" or len(widths) != 10 or any(widths[:4]) or any(widths[8:]):
        return None
    top, bottom, left, right = widths[4:8]
    return Pad(var, (top, left, bottom, right), float(a.pad_value))


def _absorbs(call) -> bool:
    """Whether `call` is a blocked depthwise convolution that pads nothing itself."""
    if call is None or getattr(call.op, "name", "") != "relax.nn.conv2d":
        return False
    a = call.attrs
    layout = str(a.data_layout)
    return len(layout) > 4 and layout.startswith("NCHW") and int(a.groups) > 1 and \
        not any(int(p) for p in a.padding)
