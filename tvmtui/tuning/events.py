"""The typed events a worker appends to its session; readers see them as JSON objects.

Contract (scripts rely on it): every event has `event` and `t`; names are the constants
below; a `trial` has `task`, `trial`, `build_s`, `run_s`, `predicted`, `error_kind`, `error`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SESSION_STARTED = "session_started"
TASKS_EXTRACTED = "tasks_extracted"
TRIAL = "trial"
COST_MODEL_UPDATED = "cost_model_updated"
TASK_BEST = "task_best"
ROUND_DONE = "round_done"
STATE = "state"
NOTICE = "notice"  # a warning the user should see (e.g. a repaired database)
BENCH = "bench"  # a `tvmtui bench` report (written by the bench process, not the worker)

EVENT_NAMES = (
    SESSION_STARTED,
    TASKS_EXTRACTED,
    TRIAL,
    COST_MODEL_UPDATED,
    TASK_BEST,
    ROUND_DONE,
    STATE,
    NOTICE,
    BENCH,
)

# Values of a `state` event's `state` field.
RUNNING, PAUSED, RESUMED, FINISHED, STOPPED, FAILED = (
    "running",
    "paused",
    "resumed",
    "finished",
    "stopped",
    "failed",
)

# Values of a trial's `error_kind`.
BUILD_ERROR, BUILD_TIMEOUT, RUN_ERROR, RUN_TIMEOUT = (
    "build_error",
    "build_timeout",
    "run_error",
    "run_timeout",
)


@dataclass(frozen=True)
class TaskInfo:
    index: int
    name: str
    flops: float
    weight: int


@dataclass(frozen=True)
class Trial:
    task: int
    task_name: str
    trial: int
    build_s: float | None
    run_s: list[float] | None
    predicted: float | None
    error_kind: str | None
    error: str | None
    shash: str
    run: int  # which worker run of the session measured it (0 = first)

    @property
    def latency_s(self) -> float | None:
        return sum(self.run_s) / len(self.run_s) if self.run_s else None

    def to_json(self) -> dict:
        return asdict(self)


def classify_error(build_error: str | None, run_error: str | None) -> str | None:
    """Error kind of one candidate from MetaSchedule's builder and runner messages."""
    if build_error:
        return BUILD_TIMEOUT if "timeout" in build_error.lower() else BUILD_ERROR
    if run_error:
        return RUN_TIMEOUT if "timeout" in run_error.lower() else RUN_ERROR
    return None
