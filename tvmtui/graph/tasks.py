"""MetaSchedule tasks of a graph under several variants, merged into one tuning list."""

from __future__ import annotations

from dataclasses import dataclass, field

from tvmtui.graph import lowering
from tvmtui.graph import variants as gv


@dataclass
class VariantTasks:
    """Tasks of all variants (each task once) and, per task, its weight in each variant."""

    tasks: list  # MetaSchedule ExtractedTask
    weights: list[dict[str, int]]  # per task: variant -> how often that variant runs it
    plans: dict[str, gv.Plan] = field(default_factory=dict)  # the variants kept
    skipped: list[str] = field(default_factory=list)  # why a variant was dropped

    def variant_of(self, index: int) -> str:
        """The variant a task implements, or "shared" when every variant runs it."""
        owners = self.weights[index]
        if len(owners) == 1:
            return next(iter(owners))
        return "shared" if len(owners) == len(self.plans) else ",".join(owners)


def extract_variant_tasks(base, target, variants: list[str], tolerance: float = 1e-4,
                          revision: int = gv.REWRITE_REVISION):
    """Extract each variant's tasks from `base` (see `relax_import.load_relax`); a variant
    that changes no layer is dropped (it would only repeat `nchw`)."""
    from tvm_ffi import structural_hash

    out = VariantTasks([], [])
    index: dict[int | tuple[str, int], int] = {}  # by shape (before revision 12: and name)
    for variant in variants:
        try:
            mod, plan = gv.prepare(base, target, variant, tolerance, revision)
            tasks = lowering.extract_tasks(mod, target, revision)
        except Exception as exc:  # noqa: BLE001 - a rewrite TVM fails on loses that variant only
            if variant == gv.DEFAULT:
                raise
            lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
            out.skipped.append(f"{variant}: the rewrite failed on this graph "
                               f"({type(exc).__name__}: {lines[-1][:160] if lines else ''})")
            continue
        if variant != gv.DEFAULT and plan.rewritten == 0:
            out.skipped.append(f"{plan.label}: no layer it applies to"
                               + (f" ({plan.notes[0]})" if plan.notes else ""))
            continue
        out.plans[variant] = plan
        for task in tasks:
            # From revision 12 a task is its function's structure: the same layer under
            # two variants is one task even where each graph numbers it apart (ResNet-18's
            # strided and 1x1 convs are `fused_conv2d_NCHWc10_add71` in NCHW8c and
            # `fused_conv2d_NCHWc6_add71` in Winograd). As two tasks, the second's every
            # candidate had been measured for the first and was skipped: it never got a
            # trial, and Winograd never got an estimate.
            shape = int(structural_hash(task.dispatched[0]))
            key = shape if revision >= 12 else (task.task_name, shape)
            if key not in index:
                index[key] = len(out.tasks)
                out.tasks.append(task)
                out.weights.append({})
            weights = out.weights[index[key]]
            weights[variant] = weights.get(variant, 0) + int(task.weight)
    if not out.plans:  # none of the asked variants applies: tune the stock graph
        kept = extract_variant_tasks(base, target, [gv.DEFAULT], tolerance, revision)
        kept.skipped = out.skipped + kept.skipped
        return kept
    return out
