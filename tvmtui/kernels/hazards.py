"""Schedules TVM 0.27 is known to compute wrong, and how to tell a task or record at risk.

MetaSchedule measures a candidate's time, never its output: a postprocessor that writes a
kernel wrong makes it no slower, and the search may well keep it. tvmtui tunes such a
task without the part at fault (`tuning/spaces.py`), and every reader of a session's
database leaves out records made with it (`sessions/msdb.py`)."""

from __future__ import annotations

POSTPROC = "EnterPostproc"  # a trace's instructions after this one are postprocessors'


def layout_rewrite_hazard(mod) -> str | None:
    """Why MetaSchedule's RewriteLayout would compute `mod` wrong, or None.

    RewriteLayout gives a weight (a layout-free buffer) the layout its consumer's tiling
    wants, also through an elementwise block that reads it first (a conv2d_transpose's
    `kernel_transform`), but it applies that block's output layout to the weight's axes
    in their own order: where the block reads the weight transposed (`w[i, o, 1-h, 1-w]`
    written as `[o, i, h, w]`), the weight is packed by the wrong axis. PP-OCR's detector's
    last ConvTranspose (24 -> 1 channels) was packed into 1x1x2x2 by its output channel and
    ran 97% of its outputs wrong. Such a task is tuned without RewriteLayout."""
    from tvm import s_tir

    try:
        (gvar, func), = mod.functions.items()
        free = [func.params[int(i)] for i in func.attrs.get("layout_free_buffers", None) or []]
    except (ValueError, AttributeError, KeyError, IndexError, TypeError):
        return None
    if not free:
        return None
    sch = s_tir.Schedule(mod, debug_mask=0)
    todo = sch.get_child_blocks(sch.get_sblock("root", gvar.name_hint))
    while todo:
        rv = todo.pop()
        todo += sch.get_child_blocks(rv)
        block = sch.get(rv)
        if len(block.reads) != 1 or any(int(iv.iter_type) != 0 for iv in block.iter_vars):
            continue  # not a copy of one buffer (a reduction, a bias add): left as it is
        read, axes = block.reads[0], [iv.var for iv in block.iter_vars]
        if not any(read.source.same_as(b) for b in free):
            continue
        mins = [r.min for r in read.region]
        if len(mins) != len(axes) or not all(m.same_as(a) for m, a in zip(mins, axes)):
            return (f"block {block.name_hint!r} reads the weight {read.source.name!r} "
                    "in another order than it writes it")
    return None


def rewrites_layout(record_json) -> bool:
    """Whether a tuning record (its JSON, as the database file holds it) had RewriteLayout
    transform a buffer's layout: a `TransformLayout` among its postprocessors' steps."""
    try:
        insts = record_json[0][0]
        names = [inst[0] for inst in insts]
    except (TypeError, IndexError, KeyError):
        return False
    if POSTPROC not in names:
        return False
    return "TransformLayout" in names[names.index(POSTPROC):]
