"""An int8 zoo twin's float network, tuned on this chip, timed beside the int8 bench.

`tvmtui bench mobilenet-int8` answers "is int8 worth it here?" as well as "is TVM ahead of
the int8 runtimes?": when a session tuned the float network the twin was quantized from
(`workloads.int8.INT8_TWINS`) for the same target on this very chip, its tuned build runs
in the same interleaved timing rounds, on a frame of its own input, and the report carries
`float_twin` (its median and int8's speedup over it) and a note: `int8 vs float: 1.9x`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tvmtui.baselines.builds import tuned_library
from tvmtui.baselines.host import RemoteRunner, RunnerSpec
from tvmtui.baselines.model import BenchModel, bench_model
from tvmtui.core.errors import UserError
from tvmtui.sessions import store as st

FLOAT_TWIN = "tvm-float"  # its runner's name in the timing rounds


@dataclass
class FloatTwin:
    """The float network an int8 zoo twin was quantized from, tuned on this chip."""

    workload: str
    model: BenchModel
    session: st.Session


def find_float_twin(root: Path, source: str, target: dict) -> FloatTwin | None:
    """For an int8 zoo twin (`source` "builtin:mobilenet-int8"), its float network's best
    session for this target on this chip, or None."""
    from tvmtui.sessions.launch import best_same_chip_session
    from tvmtui.workloads import int8, load_workload

    name = source.removeprefix("builtin:")
    if not source.startswith("builtin:") or name not in int8.INT8_TWINS:
        return None
    workload = load_workload(int8.INT8_TWINS[name])
    session = best_same_chip_session(root, workload.graph_hash, target)
    if session is None:
        return None
    return FloatTwin(workload.name, bench_model(workload.meta(), workload.model_bytes), session)


def start(twin: FloatTwin | None, threads: int, options: dict) -> tuple[RemoteRunner | None, str]:
    """Its tuned build started in a runner process (or None) and why not."""
    if twin is None:
        return None, ""
    try:
        lib = tuned_library(twin.session)
    except UserError as exc:
        return None, str(exc)
    runner = RemoteRunner(RunnerSpec(name=FLOAT_TWIN, model=twin.model, threads=threads,
                                     options=options, library=lib,
                                     detail=f"TVM float32, session {twin.session.name}"))
    reason = runner.start()
    return (None, reason) if reason is not None else (runner, "")


def report(twin: FloatTwin, times: list[float] | None, tuned_ms: float | None,
           reason: str) -> dict:
    """The bench report's `float_twin`: the session, its median and int8's speedup."""
    ms = float(np.median(times) * 1000) if times else None
    return {"workload": twin.workload, "session": twin.session.name, "median_ms": ms,
            "int8_speedup": ms / tuned_ms if ms and tuned_ms else None,
            "reason": reason or None}


def note(row: dict) -> str:
    """`int8 vs float: 1.90x (tuned float mobilenet, session S: 5.646 ms)`, or why not."""
    if row["int8_speedup"] is None:
        return f"int8 vs float: not timed ({row['reason'] or 'no tuned int8 time'})"
    return (f"int8 vs float: {row['int8_speedup']:.2f}x (tuned float {row['workload']}, "
            f"session {row['session']}: {row['median_ms']:.3f} ms)")
