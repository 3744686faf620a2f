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
# A task of at most this much work (its FLOPs, or the values it writes if more) also gets a
# design space run on one thread: a parallel launch costs ~1 us on this 2-core VM, and an
# LSTM cell's gates (128 values, 0.2 us of work on one core) took 1 us parallel.
SERIAL_WORK = 65536


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


def rules_kind(target) -> str:
    """The family of MetaSchedule rules and postprocessors a target is searched with."""
    return "cuda" if target.kind.name == "cuda" else "llvm"


def space_generator(target, without: str | None, tiny: bool = False):
    """The space generator for a task: MetaSchedule's default, or it minus one part; for a
    `tiny` task on a CPU (see SERIAL_WORK), that and the same run on one thread, measured
    against each other."""
    from tvm.s_tir import meta_schedule as ms

    kind = rules_kind(target)
    serial_too = tiny and kind == "llvm"
    if without is None and not serial_too:
        return "post-order-apply"

    def generator(serial: bool):
        rules, postprocs = ms.ScheduleRule.create(kind), ms.Postproc.create(kind)
        if without is not None:
            part, name = without.split(":", 1)
            if part == "rule":
                rules = [r for r in rules if type(r).__name__ != name]
            else:
                postprocs = [p for p in postprocs if type(p).__name__ != name]
        if serial:
            rules = [_serial(r) for r in rules]
        return ms.space_generator.PostOrderApply(
            sch_rules=rules, postprocs=postprocs, mutator_probs=ms.Mutator.create(kind))

    if not serial_too:
        return generator(False)
    return ms.space_generator.SpaceGeneratorUnion([generator(False), generator(True)])


def _serial(rule):
    """`rule`, or the CPU's parallelize-vectorize-unroll rule with no parallel loop."""
    from tvm.s_tir import meta_schedule as ms

    if not isinstance(rule, ms.schedule_rule.ParallelizeVectorizeUnroll):
        return rule
    return ms.schedule_rule.ParallelizeVectorizeUnroll(
        max_jobs_per_core=-1, max_vectorize_extent=int(rule.max_vectorize_extent),
        unroll_max_steps=[int(v) for v in rule.unroll_max_steps],
        unroll_explicit=bool(rule.unroll_explicit))


def is_tiny(mod, flops: float) -> bool:
    """At most SERIAL_WORK FLOPs, and as many values written (the last buffer of `mod`'s
    function: TE-made functions write their output last)."""
    try:
        func = next(iter(mod.functions.values()))
        written = 1
        for extent in func.params[-1].shape:
            written *= int(extent)
    except (StopIteration, AttributeError, IndexError, TypeError, ValueError):
        return False
    return max(flops, written) <= SERIAL_WORK


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
    kind = rules_kind(target)
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
