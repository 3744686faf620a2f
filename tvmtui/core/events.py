"""The typed events a worker appends to its session; readers see them as JSON objects.

Contract (scripts rely on it): every event has `event` and `t`; names are the constants
below; a `trial` has `task`, `trial`, `build_s`, `run_s`, `predicted`, `error_kind`, `error`,
`variant`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SESSION_STARTED = "session_started"
TASKS_EXTRACTED = "tasks_extracted"
TRIAL = "trial"
COST_MODEL_UPDATED = "cost_model_updated"
TASK_BEST = "task_best"
ROUND_DONE = "round_done"
# `state`, `reason`; a finished one after confirming (`confirm.py`) also `confirmed_ms` and
# `variant`: the variant export builds, fastest measured again (it may differ from the
# last `round_done`'s, which ranks by the tuned bests), `best_ms` its tuned estimate.
STATE = "state"
NOTICE = "notice"  # a warning the user should see (e.g. a repaired database)
# A task whose design space MetaSchedule cannot search as usual: tuned without one rule or
# postprocessor (`without`), or failed (`error`: it keeps TVM's default schedule).
TASK_SPACE = "task_space"
BENCH = "bench"  # a `tvmtui bench` report (written by the bench process, not the worker)
# A task's best records measured again after tuning (`confirm.py`): `task`, `variant` (the
# task's), `recorded_best_ms`, `candidates` (rank, recorded_ms, median_ms, runs), `pick`,
# `confirmed_ms` (the median of the record export and bench build).
CONFIRMED = "confirmed"

EVENT_NAMES = (
    SESSION_STARTED,
    TASKS_EXTRACTED,
    TRIAL,
    COST_MODEL_UPDATED,
    TASK_BEST,
    ROUND_DONE,
    STATE,
    NOTICE,
    TASK_SPACE,
    BENCH,
    CONFIRMED,
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

# Values of a trial's `error_kind`. On a board: `queue_timeout` means no server of the key
# became free in time (nothing ran), `device_lost` that the board went away (connection
# refused, reset or closed), `run_timeout` that it ran too long on the device.
BUILD_ERROR, BUILD_TIMEOUT, RUN_ERROR, RUN_TIMEOUT, QUEUE_TIMEOUT, DEVICE_LOST = (
    "build_error",
    "build_timeout",
    "run_error",
    "run_timeout",
    "queue_timeout",
    "device_lost",
)
# Trials whose candidate never ran (no board answered): not measured, so not "known".
NOT_RUN = (QUEUE_TIMEOUT, DEVICE_LOST)
_LOST_WORDS = ("device_lost", "connection reset", "connection refused", "broken pipe",
               "connection closed", "socket closed", "eof", "unexpectedly closed",
               "code=kshutdown")


@dataclass(frozen=True)
class TaskInfo:
    index: int
    name: str
    flops: float
    weight: int  # how often the stock-layout graph runs it (0: another variant's task)
    variant: str = "nchw"  # the layout/algorithm it implements, or "shared" by all variants
    weights: dict = field(default_factory=dict)  # variant -> how often that variant runs it
    # the dot-product instruction its kernel is tensorized with ("avx512-vnni"), if any
    instruction: str | None = None

    @staticmethod
    def from_json(t: dict) -> "TaskInfo":
        """Read a `tasks_extracted` entry (sessions older than variants have none)."""
        return TaskInfo(t["index"], t["name"], t["flops"], t["weight"], t.get("variant", "nchw"),
                        t.get("weights") or {"nchw": t["weight"]}, t.get("instruction"))


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
    device: str | None = None  # the RPC server (host:port) that measured it, on a board
    queue_s: float | None = None  # seconds it waited in the tracker queue
    remeasured: bool = False  # a record from another chip measured again here (transfer)
    variant: str = "nchw"  # the task's layout/algorithm variant (see TaskInfo.variant)
    reused_from: str | None = None  # another session's record, measured again here (reuse)
    seed: bool = False  # a register-blocked starting point (`seeds.py`), not a sample
    instruction: str | None = None  # the task's dot-product instruction (TaskInfo.instruction)

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
        lowered = run_error.lower()
        if QUEUE_TIMEOUT in lowered:
            return QUEUE_TIMEOUT
        if any(word in lowered for word in _LOST_WORDS):
            return DEVICE_LOST
        return RUN_TIMEOUT if "timeout" in lowered else RUN_ERROR
    return None
