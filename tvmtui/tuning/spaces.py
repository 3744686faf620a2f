"""Per-task design spaces: which tasks MetaSchedule cannot search, and how to still tune them.

A task's space fails when a schedule rule raises while the space is generated (e.g. a
`ScheduleError` such as "The primitive requires all the producer(s) of the given block to be
present under the target loop"), or when the postprocessors reject every sample of it.
`diagnose` finds that, then retries without each rule, then without each postprocessor, and
reports the first that makes the space work; a task nothing fixes is failed (it keeps
TVM's default schedule, measured once so the estimate stays complete).
"""

from __future__ import annotations

from dataclasses import dataclass

SAMPLES = 6  # random replays of each design before a space is called unusable


@dataclass(frozen=True)
class Verdict:
    """How a task's design space is made: as usual, without one rule or postprocessor, or
    not at all (`error`)."""

    without: str | None = None  # "rule:AutoInline" / "postproc:RewriteLayout"
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_json(self) -> dict:
        return {"without": self.without, "error": self.error}


def _kind(target) -> str:
    return "cuda" if target.kind.name == "cuda" else "llvm"


def space_generator(target, without: str | None):
    """The space generator for a task: MetaSchedule's default, or it minus one part."""
    from tvm.s_tir import meta_schedule as ms

    if without is None:
        return "post-order-apply"
    kind = _kind(target)
    rules, postprocs = ms.ScheduleRule.create(kind), ms.Postproc.create(kind)
    part, name = without.split(":", 1)
    if part == "rule":
        rules = [r for r in rules if type(r).__name__ != name]
    else:
        postprocs = [p for p in postprocs if type(p).__name__ != name]
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs=postprocs, mutator_probs=ms.Mutator.create(kind))


def probe(mod, target, space) -> str | None:
    """None when the space generates and some random sample of it passes the
    postprocessors; else why not (one line)."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    try:
        ctx = ms.TuneContext(mod=mod, target=target, space_generator=space, task_name="probe",
                             rand_state=1)
        designs = ctx.generate_design_space()
    except Exception as exc:  # noqa: BLE001 - a rule's failure is what we look for
        return _line(exc)
    if not designs:
        return "no design space"
    postprocs = list(ctx.space_generator.postprocs)
    last = "the postprocessors rejected every sample"
    for design in designs:
        insts = design.trace.simplified(remove_postproc=True).insts
        for seed in range(1, SAMPLES + 1):
            try:
                sch = s_tir.Schedule(mod, seed=seed, debug_mask=0)
                s_tir.schedule.Trace(insts, {}).apply_to_schedule(sch, remove_postproc=True)
                if all(p.apply(sch) for p in postprocs):
                    return None
            except Exception as exc:  # noqa: BLE001 - a sample that fails to replay
                last = _line(exc)
    return last


def diagnose(mod, target) -> Verdict:
    """The verdict for one task (see the module's docstring)."""
    from tvm.s_tir import meta_schedule as ms

    error = probe(mod, target, "post-order-apply")
    if error is None:
        return Verdict()
    kind = _kind(target)
    parts = [f"rule:{type(r).__name__}" for r in ms.ScheduleRule.create(kind)]
    parts += [f"postproc:{type(p).__name__}" for p in ms.Postproc.create(kind)]
    for without in dict.fromkeys(parts):
        if probe(mod, target, space_generator(target, without)) is None:
            return Verdict(without=without)
    return Verdict(error=error)


def _line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = next((ln for ln in lines if "Error" in ln or "error" in ln), lines[-1] if lines else "")
    return f"{type(exc).__name__}: {text}"[:300]
