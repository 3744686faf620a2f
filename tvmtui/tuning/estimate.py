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
            total = totals.setdefault(variant, 0.0)
            if best_s is None:
                totals[variant] = None
            elif total is not None:
                totals[variant] = total + 1000.0 * weight * best_s
    return totals


def choose(estimates: dict[str, float | None]) -> tuple[str, float | None]:
    """The fastest variant with a complete estimate, or the stock one while none has."""
    complete = {v: ms for v, ms in estimates.items() if ms is not None}
    if not complete:
        return (DEFAULT_VARIANT if DEFAULT_VARIANT in estimates or not estimates
                else next(iter(estimates))), None
    best = min(complete, key=complete.__getitem__)
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
    best = min(complete, key=complete.__getitem__)
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
    return sorted((v for v, ms in complete.items() if ms <= ratio * best), key=complete.__getitem__)


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
# gradient scheduler, used before `next_turn`, gave every task a batch (32) first: DQN's
# 512x18 dense, 1% of the network, took 47 of 288 trials (16 of them cold), its first conv 40.
NEGLIGIBLE_AFTER, NEGLIGIBLE_SHARE, NEGLIGIBLE_TOTAL = 16, 0.02, 0.05


def negligible_tasks(tasks: list[tuple[dict[str, int], float | None, int]],
                     estimates: dict[str, float | None]) -> dict[int, float]:
    """(weights by variant, best seconds or None, trials) per task -> index -> its largest
    share of a variant's estimate, for the tasks too small to tune on."""
    shares = {}
    for i, (weights, best_s, trials) in enumerate(tasks):
        if best_s is None or trials < NEGLIGIBLE_AFTER or not weights:
            continue
        known = {v: est for v in weights if (est := estimates.get(v))}
        if len(known) == len(weights):
            shares[i] = {v: 1000.0 * w * best_s / known[v] for v, w in weights.items()}
    out: dict[int, float] = {}
    totals: dict[str, float] = {}
    for i in sorted(shares, key=lambda k: max(shares[k].values())):
        share = shares[i]
        if max(share.values()) >= NEGLIGIBLE_SHARE:
            break
        if all(totals.get(v, 0.0) + x < NEGLIGIBLE_TOTAL for v, x in share.items()):
            for v, x in share.items():
                totals[v] = totals.get(v, 0.0) + x
            out[i] = max(share.values())
    return out


# MetaSchedule's gradient scheduler gives every task one batch before it weighs them, and
# weighs them as if one graph ran every task. MobileNet's 400 trials after the cold pass
# went one batch to each of 14 tasks: its 14x14 512->512 conv, run 5 times and 42% of the
# network, got 29 like a conv of 4%. So each tuning call after the cold pass takes a few
# tasks picked by stride: the task with the fewest trials per unit of stake goes next, where
# a task's stake is its share of the estimate of the variant it weighs most in (a sum of
# the measured tasks while that variant is incomplete), and a task the leading variant does
# not run has this much of it: such a variant still gets trials (it may catch up), but not
# ahead of the one export would build.
OTHER_VARIANT_WEIGHT = 0.25
TURN_TASKS = 4  # tasks one tuning call takes at most (each gets a batch)


def stakes(tasks: list[tuple[dict[str, int], float | None]], leader: str | None) -> list[float]:
    """(weights by variant, best seconds or None) per task -> its stake (see above); a task
    not measured yet has the largest, 1; `leader`: the fastest complete variant, or None
    (every variant counts in full)."""
    totals: dict[str, float] = {}
    for weights, best_s in tasks:
        for variant, weight in weights.items():
            totals[variant] = totals.get(variant, 0.0) + weight * (best_s or 0.0)
    out = []
    for weights, best_s in tasks:
        if best_s is None:
            out.append(1.0)
            continue
        out.append(max((weight * best_s / totals[v]
                        * (1.0 if leader in (None, v) else OTHER_VARIANT_WEIGHT)
                        for v, weight in weights.items() if totals.get(v, 0.0) > 0),
                       default=0.0))
    return out


def next_turn(stake: list[float], trials: list[int], batch: int,
              slots: int = TURN_TASKS, cost: list[float] | None = None) -> tuple[list[int], int]:
    """The tasks (indices into `stake`) of the next tuning call and the batches it measures
    in all. Stride picks: the task with the fewest (trials + 1) * cost / stake goes next and
    counts a batch more, up to `slots` picks; the turn ends at a task picked already, except
    that a task picked again and again from the start takes those batches alone. `cost`:
    what a trial of each task takes (1 each when None), so that under a time budget each
    task's share of the time, not of the trials, follows its stake."""
    had = list(trials)
    unit = cost or [1.0] * len(stake)
    live = [i for i, s in enumerate(stake) if s > 0]
    picks: list[int] = []
    for _ in range(slots if live else 0):
        i = min(live, key=lambda k: ((had[k] + 1) * unit[k] / stake[k], k))
        if picks and set(picks) != {i} and (i in picks or len(picks) > len(set(picks))):
            break  # a task comes round again, or another follows one task's run alone
        picks.append(i)
        had[i] += batch
    return list(dict.fromkeys(picks)), len(picks)
