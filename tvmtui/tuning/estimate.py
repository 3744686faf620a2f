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


# A variant stops getting trials once it is clearly behind the fastest: four times as slow
# after a first batch on each of its tasks (8 trials), twice as slow after 16, or 25% slower
# after 48 (measurements here are noisy, and a variant that starts slow can still catch up
# early on: D1's NCHW, 0.18 ms after its first 16 trials, ended at 0.065). The first rule
# spares an evolved round of a variant no tuning brings back (C12's NCHW, 4-5x behind
# Winograd after its first batch, took 22 of 64 trials and a 7 s search).
RETIRE_RULES = ((8, 4.0), (16, 2.0), (48, 1.25))


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


def contenders(estimates: dict[str, float | None]) -> list[str]:
    """The complete variants still in the race at the end: within the last retire rule's
    ratio of the fastest (see RETIRE_RULES), fastest first. Their heavy tasks are measured
    again before export picks one of them (see `confirm.py`)."""
    complete = {v: ms for v, ms in estimates.items() if ms is not None}
    if not complete:
        return []
    best = min(complete.values())
    ratio = RETIRE_RULES[-1][1]
    return sorted((v for v, ms in complete.items() if ms <= ratio * best), key=complete.get)


def confirmed_estimates(tasks: Iterable[tuple[dict[str, int], float | None, float | None]],
                        variants: Iterable[str]) -> dict[str, float | None]:
    """(weights by variant, best seconds or None, confirmed seconds or None) per task ->
    estimate ms of each of `variants`, with each task's confirmed median where it has one
    and its best otherwise."""
    wanted = set(variants)
    return {v: ms for v, ms in variant_estimates(
        ({v: w for v, w in weights.items() if v in wanted},
         confirmed if confirmed is not None else best)
        for weights, best, confirmed in tasks).items() if v in wanted}


# A task that, measured 16 times, takes under 2% of every complete estimate of the variants
# that run it gets no more trials, as long as the tasks so retired take under 5% of each
# estimate together (smallest first): tuning them on could win the network no more. The
# gradient scheduler gives every task a batch (32) before it weighs them: DQN's 512x18
# dense, 1% of the network, took 47 of 288 trials (16 of them cold), its first conv 40.
NEGLIGIBLE_AFTER, NEGLIGIBLE_SHARE, NEGLIGIBLE_TOTAL = 16, 0.02, 0.05


def negligible_tasks(tasks: list[tuple[dict[str, int], float | None, int]],
                     estimates: dict[str, float | None]) -> dict[int, float]:
    """(weights by variant, best seconds or None, trials) per task -> index -> its largest
    share of a variant's estimate, for the tasks too small to tune on."""
    shares = {}
    for i, (weights, best_s, trials) in enumerate(tasks):
        if best_s is None or trials < NEGLIGIBLE_AFTER or not weights:
            continue
        if all(estimates.get(v) for v in weights):
            shares[i] = {v: 1000.0 * w * best_s / estimates[v] for v, w in weights.items()}
    out, totals = {}, {}
    for i in sorted(shares, key=lambda k: max(shares[k].values())):
        share = shares[i]
        if max(share.values()) >= NEGLIGIBLE_SHARE:
            break
        if all(totals.get(v, 0.0) + x < NEGLIGIBLE_TOTAL for v, x in share.items()):
            for v, x in share.items():
                totals[v] = totals.get(v, 0.0) + x
            out[i] = max(share.values())
    return out


# MetaSchedule's gradient scheduler first gives every task one batch, in the order it is
# given them, then favours the task with the largest weight x best latency / rounds, as if
# one graph ran every task: a slower variant's tasks look like the larger gains. (MobileNet,
# 396 trials left after the first batches: all went to NCHW while NCHW8c led, by 1.14x.)
# So the leading variant's tasks go first, heaviest first, and the scheduler weighs a
# task the leading variant does not run by this much: such a variant still gets trials
# (it may catch up), but not ahead of the one export would build.
OTHER_VARIANT_WEIGHT = 0.25


def scheduling_order(tasks: list[tuple[dict[str, int], float | None]],
                     leader: str | None) -> list[tuple[int, float]]:
    """(weights by variant, best seconds or None) per task -> (task index, factor for its
    scheduler weight), in the order to hand the tasks to MetaSchedule; `leader`: the
    fastest complete variant (None: keep the order, every factor 1)."""
    if leader is None:
        return [(i, 1.0) for i in range(len(tasks))]

    def key(i: int):
        weight = tasks[i][0].get(leader, 0)
        return (weight == 0, -weight * (tasks[i][1] or 0.0))

    return [(i, 1.0 if tasks[i][0].get(leader, 0) else OTHER_VARIANT_WEIGHT)
            for i in sorted(range(len(tasks)), key=key)]
