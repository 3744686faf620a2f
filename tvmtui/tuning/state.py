"""The tuner's state: each task's (`TaskState`), and what the parts of the worker's `Tuner`
(`loop`, `recording`, `warmstart`, `confirm`) share of one another (`TunerState`), declared
once so that each part is type-checked against the whole."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tvmtui.core import events as ev

if TYPE_CHECKING:
    from tvmtui.core.tally import Tally
    from tvmtui.sessions.store import Session
    from tvmtui.tuning.control import Control


@dataclass
class TaskState:
    info: ev.TaskInfo
    trials: int = 0
    best_s: float | None = None
    build_errors: int = 0
    run_errors: int = 0
    without: str | None = None  # the rule or postprocessor its design space leaves out
    failed: str | None = None  # why MetaSchedule cannot search it (it keeps the default)


class TunerState:
    """The base of each part of `worker.Tuner`: its attributes (set by `Tuner.__init__` and
    `Tuner.prepare`; TVM's objects are `Any`) and the methods one part calls on another."""

    session: Session
    control: Control
    meta: dict
    options: dict
    run_index: int
    prior_trials: int
    trials_total: int
    tasks: list[TaskState]
    tally: Tally
    started: float
    ran_before: int
    pending_model_metrics: dict | None
    device_log_offset: int
    device_seen: dict[str, dict]
    transfer_source: Path | None
    retired_variants: set[str]
    turn_end: int | None
    noticed_leader: str | None
    exhausted_noticed: set[int]
    task_keys: dict[int, str]
    diagnosed: set[int]
    plans: dict[str, dict]
    variant_notes: list[str]
    tvm: Any
    target: Any
    extracted: list[Any]
    memory: Any  # search.SearchMemory
    builder: Any
    runner: Any
    cost_model: Any
    database: Any

    if TYPE_CHECKING:
        def emit_notice(self, message: str) -> None: ...

        def set_state(self, state: str, reason: str, **extra) -> None: ...

        def record_batch(self, task_id, candidates, builder_results, runner_results,
                         remeasured: bool = False, reused_from: str | None = None) -> None: ...

        def estimates(self) -> dict[str, float | None]: ...

        def estimate_ms(self) -> float | None: ...

        def retire_losing_variants(self) -> None: ...

        def _obey(self) -> None: ...

        def _notice_exhausted(self) -> None: ...

        def _measure_default(self, task_id: int) -> None: ...
