"""The one reducer over trial events: per-task trial counts, errors and best latency.

The worker (its history on resume, and every new batch) and every reader (CLI, app,
replay, reports, via `sessions/view.py`) fold trials with `count_trial`, so they cannot
disagree. Latencies of trials before `trusted_from` (measured on another chip, before a
`resume --transfer`) count as trials but never as bests.
"""

from __future__ import annotations

from typing import Protocol

from tvmtui.core import events as ev


class Tallied(Protocol):
    trials: int
    best_s: float | None
    build_errors: int
    run_errors: int


def latency_s(trial: dict) -> float | None:
    """A trial's measured latency (mean of its runs), or None when it did not run."""
    runs = trial.get("run_s")
    return sum(runs) / len(runs) if runs and not trial.get("error_kind") else None


def count_trial(task: Tallied, trial: dict, trusted_from: int = 0) -> float | None:
    """Fold one `trial` event into `task`; returns the new best latency when it improved."""
    task.trials += 1
    kind = trial.get("error_kind")
    if kind in (ev.BUILD_ERROR, ev.BUILD_TIMEOUT):
        task.build_errors += 1
    elif kind:
        task.run_errors += 1
    else:
        lat = latency_s(trial)
        if lat is not None and trial["trial"] >= trusted_from and \
                (task.best_s is None or lat < task.best_s):
            task.best_s = lat
            return lat
    return None


class Tally:
    """Trials folded into a list of tasks, minding where a transfer made bests untrusted."""

    def __init__(self, tasks: list):
        self.tasks = tasks
        self.trusted_from = 0

    def started(self, event: dict) -> None:
        """A `session_started` event: from a transfer on, earlier bests are another chip's."""
        trusted_from = int(event.get("trusted_from") or 0)
        if trusted_from > self.trusted_from:
            self.trusted_from = trusted_from
            for task in self.tasks:
                task.best_s = None

    def space(self, event: dict) -> None:
        """A `task_space` event: with `reset_best`, the task's earlier trials computed it
        wrong (see `kernels/hazards.py`): they count as trials but no longer as its best."""
        if event.get("reset_best") and event["task"] < len(self.tasks):
            self.tasks[event["task"]].best_s = None

    def trial(self, event: dict) -> float | None:
        """A `trial` event; the task's new best latency when it improved."""
        if event["task"] >= len(self.tasks):
            return None
        return count_trial(self.tasks[event["task"]], event, self.trusted_from)
