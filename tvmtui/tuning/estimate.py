"""The end-to-end estimate of a session, per variant; shared by the worker and readers.

A variant's estimate is the sum over its tasks of (times the variant runs the task) x
(the task's best latency); it exists once every one of its tasks has a best. The
session's estimate is that of the fastest complete variant: the one export builds.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_VARIANT = "nchw"


def variant_estimates(tasks: Iterable[tuple[dict[str, int], float | None]]) -> dict[str, float | None]:
    """(weights by variant, best seconds or None) per task -> estimate ms per variant."""
    totals: dict[str, float | None] = {}
    for weights, best_s in tasks:
        for variant, weight in weights.items():
            if best_s is None:
                totals[variant] = None
            elif totals.setdefault(variant, 0.0) is not None:
                totals[variant] += 1000.0 * weight * best_s
    return totals


def choose(estimates: dict[str, float | None]) -> tuple[str, float | None]:
    """The fastest variant with a complete estimate, or the stock one while none has."""
    complete = {v: ms for v, ms in estimates.items() if ms is not None}
    if not complete:
        return (DEFAULT_VARIANT if DEFAULT_VARIANT in estimates or not estimates
                else next(iter(estimates))), None
    best = min(complete, key=complete.get)
    return best, complete[best]


# A variant stops getting trials once it is clearly behind the fastest: twice as slow after
# 16 trials on each of its tasks, or 25% slower after 48 (measurements here are noisy, and
# a variant that starts slow can still catch up early on).
RETIRE_RULES = ((16, 2.0), (48, 1.25))


def partial_estimates(tasks: Iterable[tuple[dict[str, int], float | None, int]]
                      ) -> dict[str, tuple[float, int]]:
    """(weights, best seconds or None, trials) per task -> per variant, the sum over its
    measured tasks (a lower bound on its estimate) and the fewest trials of those."""
    out: dict[str, tuple[float, int]] = {}
    for weights, best_s, trials in tasks:
        if best_s is None:
            continue
        for variant, weight in weights.items():
            total, fewest = out.get(variant, (0.0, trials))
            out[variant] = (total + 1000.0 * weight * best_s, min(fewest, trials))
    return out


def losing_variants(estimates: dict[str, float | None], min_trials: dict[str, int],
                    labels: dict[str, str] | None = None,
                    partial: dict[str, tuple[float, int]] | None = None) -> dict[str, str]:
    """Variants to stop tuning -> why. `min_trials`: the fewest trials any of a variant's
    computing tasks has had. A variant never complete after 32 trials a task (its
    candidates keep failing) stops too, and so does one whose measured tasks alone
    (`partial`, see partial_estimates) already lose by a retire rule: a task not yet
    measured must not keep a clearly slower variant in the race."""
    complete = {v: ms for v, ms in estimates.items() if ms is not None}
    if not complete:
        return {}
    best = min(complete, key=complete.get)
    out = {}
    for variant, ms in estimates.items():
        n = min_trials.get(variant, 0)
        if variant == best:
            continue
        name = (labels or {}).get(best, best)
        if ms is None:
            if n >= 32:
                out[variant] = f"no complete estimate after {n} trials per task"
                continue
            lower, n = (partial or {}).get(variant, (0.0, 0))
            for trials, ratio in RETIRE_RULES:
                if n >= trials and lower > ratio * complete[best]:
                    out[variant] = (f"at least {lower:.3f} ms (not every task measured) "
                                    f"against {name}'s {complete[best]:.3f} ms")
                    break
            continue
        for trials, ratio in RETIRE_RULES:
            if n >= trials and ms > ratio * complete[best]:
                out[variant] = f"{ms:.3f} ms against {name}'s {complete[best]:.3f} ms"
                break
    return out
