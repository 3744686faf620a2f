"""Fold a session's event stream into what a reader shows: per-task table, totals, ETA.

Shared by the headless CLI view (`commands/follow.py`), the app's live and replay screens
and the bench; fed live or from a replay.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from tvmtui.core import events as ev
from tvmtui.core.tally import Tally, latency_s

_LABELS = {"nchw": "NCHW", "nchwc": "NCHWc", "winograd": "Winograd", "shared": "shared"}


@dataclass
class TaskRow:
    index: int
    name: str
    flops: float
    weight: int
    trials: int = 0
    best_s: float | None = None
    build_errors: int = 0
    run_errors: int = 0
    variant: str = "nchw"  # the layout/algorithm the task implements, or "shared"
    weights: dict = field(default_factory=dict)  # variant -> times that variant runs it
    without: str | None = None  # the schedule rule / postprocessor its space leaves out
    failed: str | None = None  # why it cannot be tuned (it runs TVM's default schedule)
    confirmed_ms: float | None = None  # its best records' lowest median, measured again
    instruction: str | None = None  # its dot-product instruction ("avx512-vnni"), if any

    @property
    def gflops(self) -> float | None:
        return self.flops / self.best_s / 1e9 if self.best_s else None

    @property
    def shown_name(self) -> str:
        """The name with how its space was made, when not as usual."""
        if self.failed:
            return f"{self.name} [failed: default schedule]"
        if self.without:
            return f"{self.name} [without {self.without.split(':', 1)[-1]}]"
        return self.name


@dataclass
class BoardHealth:
    """One RPC server as the trial stream saw it."""

    ok: int = 0
    lost: int = 0
    queue_timeouts: int = 0
    run_errors: int = 0
    queue_s: float = 0.0
    last_t: float | None = None

    def add(self, e: dict) -> None:
        kind = e.get("error_kind")
        if kind == ev.DEVICE_LOST:
            self.lost += 1
        elif kind == ev.QUEUE_TIMEOUT:
            self.queue_timeouts += 1
        elif kind in (ev.RUN_ERROR, ev.RUN_TIMEOUT):
            self.run_errors += 1
        elif not kind:
            self.ok += 1
            self.last_t = e["t"]
        self.queue_s += e.get("queue_s") or 0.0

    @property
    def mean_queue_s(self) -> float:
        n = self.ok + self.run_errors
        return self.queue_s / n if n else 0.0


@dataclass
class SessionView:
    """Reducer over events; `apply` every event in order."""

    workload: str = ""
    target: dict = field(default_factory=dict)
    state: str = "starting"
    reason: str = ""
    budget: int = 0
    trials: int = 0
    best_ms: float | None = None
    confirmed_ms: float | None = None  # the estimate with the confirmed medians
    tasks: list[TaskRow] = field(default_factory=list)
    variant: str = "nchw"  # the fastest complete variant (what export builds)
    variants_ms: dict = field(default_factory=dict)  # variant -> estimate ms (None: incomplete)
    variant_labels: dict = field(default_factory=dict)  # variant -> "NCHW8c", ...
    notices: list[str] = field(default_factory=list)
    recent: deque = field(default_factory=lambda: deque(maxlen=200))
    estimates: deque = field(default_factory=lambda: deque(maxlen=2000))  # (trials, best_ms)
    pairs: deque = field(default_factory=lambda: deque(maxlen=500))  # (predicted, GFLOPS)
    # per task: (trial, best ms) at each improvement; improvements are rare, capped anyway
    task_history: dict = field(default_factory=dict)
    run_start_t: float | None = None
    run_start_trials: int = 0
    deadline: float | None = None  # when this run's time budget ends its search
    bench: dict | None = None  # the latest `tvmtui bench` report saved into the session
    boards: dict = field(default_factory=dict)  # RPC server -> BoardHealth
    last_t: float | None = None
    tally: Tally = field(default_factory=lambda: Tally([]))  # the shared trial reducer

    def apply(self, e: dict) -> None:
        kind = e["event"]
        self.last_t = e["t"]
        if kind == ev.SESSION_STARTED:
            self.workload = e["workload"]
            self.target = e["target"]
            self.budget = e["budget"]
            self.trials = e.get("prior_trials", 0)
            self.run_start_t = e["t"]
            self.run_start_trials = self.trials
            self.deadline = e.get("deadline")
            self.state = "starting"
            self.tally.started(e)
            self.confirmed_ms = None  # a new run tunes on: confirmed again when it is done
            for row in self.tasks:
                row.confirmed_ms = None
        elif kind == ev.TASKS_EXTRACTED:
            if not self.tasks:
                infos = [ev.TaskInfo.from_json(t) for t in e["tasks"]]
                self.tasks = [TaskRow(i.index, i.name, i.flops, i.weight, variant=i.variant,
                                      weights=i.weights, instruction=i.instruction)
                              for i in infos]
                self.tally.tasks = self.tasks
            self.variant_labels = {v: p["label"] for v, p in (e.get("variants") or {}).items()}
        elif kind == ev.TRIAL:
            self.trials = max(self.trials, e["trial"])
            if e.get("device") or e.get("error_kind") in (ev.QUEUE_TIMEOUT, ev.DEVICE_LOST):
                board = self.boards.setdefault(e.get("device") or "(tracker queue)",
                                               BoardHealth())
                board.add(e)
            self.recent.append(e)
            improved = self.tally.trial(e)
            if improved is not None:
                history = self.task_history.setdefault(e["task"], deque(maxlen=500))
                history.append((e["trial"], improved * 1000))
            lat = latency_s(e)
            if lat and e.get("predicted") is not None and e["task"] < len(self.tasks):
                self.pairs.append((e["predicted"], self.tasks[e["task"]].flops / lat / 1e9))
        elif kind == ev.ROUND_DONE:
            self.best_ms = e.get("best_ms")
            self.variant = e.get("variant", self.variant)
            self.variants_ms = e.get("variants_ms") or self.variants_ms
            self.budget = e.get("budget", self.budget)
            if self.best_ms is not None:
                self.estimates.append((e["trials"], self.best_ms))
        elif kind == ev.STATE:
            self.state = e["state"]
            self.reason = e.get("reason", "")
            if e.get("confirmed_ms") is not None:
                self.confirmed_ms = e["confirmed_ms"]
            if e.get("variant"):  # chosen again once measured again (confirm.py)
                self.variant = e["variant"]
                self.best_ms = e.get("best_ms", self.best_ms)
            if self.state == ev.RESUMED:
                self.state = ev.RUNNING
        elif kind == ev.NOTICE:
            self.notices.append(e["message"])
            if "deadline" in e:  # the time budget changed while tuning
                self.deadline = e["deadline"]
        elif kind == ev.TASK_SPACE and e["task"] < len(self.tasks):
            row = self.tasks[e["task"]]
            row.without, row.failed = e.get("without"), e.get("error")
            self.tally.space(e)
        elif kind == ev.BENCH:
            self.bench = e
        elif kind == ev.CONFIRMED and e["task"] < len(self.tasks):
            self.tasks[e["task"]].confirmed_ms = e["confirmed_ms"]

    def label(self, variant: str) -> str:
        """How a variant is shown ("NCHW8c"); streams from before variants named none."""
        return self.variant_labels.get(variant) or _LABELS.get(variant, variant)

    def layers(self) -> list[dict]:
        """The tasks the chosen variant runs, with their share of its estimate."""
        rows = [r for r in self.tasks if self.variant in r.weights]
        total = sum(r.weights[self.variant] * r.best_s for r in rows if r.best_s) or None
        return [
            {
                "task": r.index,
                "name": r.name,
                "variant": r.variant,
                "instruction": r.instruction,
                "weight": r.weights[self.variant],
                "best_ms": r.best_s * 1000 if r.best_s else None,
                "gflops": r.gflops,
                "share": r.weights[self.variant] * r.best_s / total if total and r.best_s else None,
                "confirmed_ms": r.confirmed_ms,
                "failed": r.failed,
                "without": r.without,
            }
            for r in rows
        ]

    @property
    def flops_by_task(self) -> dict[int, float]:
        return {row.index: row.flops for row in self.tasks}

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left at this run's trial rate, or until its time budget ends the search."""
        if self.run_start_t is None or self.state not in (ev.RUNNING, "starting"):
            return None
        now = now or time.time()
        left = None if self.deadline is None else max(0.0, self.deadline - now)
        done = self.trials - self.run_start_trials
        if done <= 0:
            return left
        rate = max(0.0, (self.budget - self.trials) * (now - self.run_start_t) / done)
        return rate if left is None else min(rate, left)

    def trials_text(self) -> str:
        """"trials 40/800", with the time budget's end while the search runs under one."""
        text = f"trials {self.trials}/{self.budget}"
        if self.deadline is not None and self.state in (ev.RUNNING, "starting", ev.PAUSED):
            text += time.strftime(" or until %H:%M", time.localtime(self.deadline))
        return text

    def elapsed_s(self, now: float | None = None) -> float | None:
        if self.run_start_t is None:
            return None
        end = now or time.time()
        if self.state in (ev.FINISHED, ev.STOPPED, ev.FAILED) and self.last_t:
            end = self.last_t
        return end - self.run_start_t


def view_of(session) -> SessionView:
    """A session's whole stream folded into a view."""
    view = SessionView()
    for e in session.events(0):
        view.apply(e)
    return view


def variants_line(view: SessionView) -> str:
    """One line: each variant's estimate, the chosen one marked."""
    if len(view.variants_ms) <= 1 and len(view.variant_labels) <= 1:
        return ""
    names = list(view.variant_labels) or list(view.variants_ms)
    parts = []
    for v in names:
        ms = view.variants_ms.get(v)
        text = f"{view.label(v)} {ms:.3f} ms" if ms is not None else f"{view.label(v)} -"
        parts.append(text + (" (chosen)" if v == view.variant and ms is not None else ""))
    return "variants: " + " | ".join(parts)
