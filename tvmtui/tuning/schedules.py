"""Schedules replayed from a design space's trace with chosen decisions: a seed's tiles
(`seeds.py`), one schedule of each design, or every schedule of a small space."""

from __future__ import annotations

from itertools import product


def module_hash(mod) -> str:
    """A scheduled module's identity: its structural hash, as 16 hex digits (the key of
    the search's memory and of the records `sessions/msdb.py` reads)."""
    from tvm_ffi import structural_hash

    return format(structural_hash(mod) & 0xFFFFFFFFFFFFFFFF, "016x")


def one_per_design(mod, design_spaces, postprocs) -> list:
    """A schedule of each design space, its other decisions sampled: the start of a small
    space's first batch, so that no design (a blocked Winograd's register tile) is left to
    chance."""
    return [sch for i, design in enumerate(design_spaces)
            if (sch := replay(mod, design, {}, postprocs, seed=i + 1)) is not None]


MAX_SPACE = 96  # schedules a small space may have to be enumerated rather than sampled
LOCATION_MISSES = 2  # compute locations after root that fail in a row end the probing


def every_schedule(mod, design_spaces, postprocs, cap: int = MAX_SPACE) -> list | None:
    """Every distinct schedule of a space whose only random decisions are categorical (an
    unroll depth) and compute locations; None when the space has other decisions or more
    than `cap` schedules. Sampled 32 at a time, C12's blocked Winograd's 32 schedules came
    a few at a time (3-4 s a draw for 1-7 new ones); enumerated, all of them cost about two
    draws."""
    found: dict[str, object] = {}  # by module hash: two designs may schedule alike
    for design in design_spaces:
        base = dict(design.trace.decisions)
        axes = []
        for inst in design.trace.insts:
            kind = inst.kind.name
            if kind == "SampleCategorical":
                axes.append((inst, list(range(len(inst.attrs[0])))))
            elif kind == "SampleComputeLocation":
                axes.append((inst, _locations(mod, design, base, inst, postprocs)))
            elif kind.startswith("Sample"):
                return None
        combos = list(product(*(values for _, values in axes)))
        if len(found) + len(combos) > cap:
            return None
        for combo in combos:
            decisions = {**base, **{inst: value for (inst, _), value in zip(axes, combo)}}
            sch = replay(mod, design, decisions, postprocs)
            if sch is not None:
                found.setdefault(module_hash(sch.mod), sch)
    return list(found.values())


def _locations(mod, design, base: dict, inst, postprocs) -> list[int]:
    """The compute locations of `inst` that replay (others as the design decided): inline
    (-2), root (-1), then loop after loop until LOCATION_MISSES fail in a row."""
    found, misses, where = [], 0, -2
    while (misses < LOCATION_MISSES or where < 0) and where < MAX_SPACE:
        if replay(mod, design, {**base, inst: where}, postprocs) is not None:
            found.append(where)
            misses = 0
        elif where >= 0:
            misses += 1
        where += 1
    return found


def replay(mod, design, decisions: dict, postprocs, seed: int | None = None):
    """`design`'s trace applied to `mod` with `decisions` (others sampled), then the
    postprocessors; None when the space rejects it."""
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(mod, seed=seed, debug_mask=0)
        # A design space's trace has no postprocessing; the decisions are keyed by its own
        # instructions (a simplified copy would have new ones).
        s_tir.schedule.Trace(design.trace.insts, decisions).apply_to_schedule(
            sch, remove_postproc=True)
        # As the search does: what follows is postprocessing, which a replay of this trace
        # (evolution mutates it) leaves out and redoes.
        sch.enter_postproc()
        return sch if all(p.apply(sch) for p in postprocs) else None
    except Exception:  # noqa: BLE001 - a schedule the space rejects is simply not used
        return None
