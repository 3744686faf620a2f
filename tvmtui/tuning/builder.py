"""A MetaSchedule builder whose worker processes live as long as the tuning run.

Stock `LocalBuilder` starts a fresh process pool for every batch, and its build function
imports `tvm.s_tir.tensor_intrin` (~30 s) in each new process, against a 30 s timeout:
on 2 cores nearly every candidate timed out. Here the pool is created once, the build
function imports only what compiling needs, and each result carries its build time.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections import deque

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind


def _build_and_export(mod, target) -> tuple[str, float]:
    """Runs in a pool process: compile one scheduled candidate, export it, time it."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from tvmtui.graph.lowering import codegen_target

    start = time.perf_counter()
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    rt_mod = tvm_build(mod, target=codegen_target(target))
    # A linked .so: linking here runs in parallel, in the runner it would be serial.
    # For a board of another architecture, linked by its cross compiler.
    from tvmtui.devices.cross import export_options

    artifact = os.path.join(tempfile.mkdtemp(prefix="tvmtui-build-"), "candidate.so")
    rt_mod.export_library(artifact, **export_options(target))
    return artifact, time.perf_counter() - start


def _warm_up() -> None:
    """Pool initializer: pay for the TVM import once per process, not per candidate."""
    import tvm.driver  # noqa: F401
    import tvm.s_tir.transform  # noqa: F401


# A candidate still building after this many times the slowest tenth of recent builds
# (and after TIMEOUT_FLOOR_S) is given up: a schedule that makes LLVM run for a minute
# (seen: a face detector's head convolution, most of whose candidates built in 6-11 s)
# had held one of the two build processes for the whole 60 s timeout.
TIMEOUT_SPREAD = 10.0
TIMEOUT_FLOOR_S = 20.0
RECENT_BUILDS = 128


@derived_object
class PersistentBuilder(PyBuilder):
    """Builds candidates in a long-lived pool; remembers how long each build took."""

    def __init__(self, max_workers: int, timeout_sec: float = 60.0) -> None:
        super().__init__()
        self.max_workers = max_workers
        self.timeout_sec = timeout_sec
        self.build_seconds: dict[str, float] = {}
        self.timeout_seconds_lost = 0.0
        self.recent: deque[float] = deque(maxlen=RECENT_BUILDS)  # seconds of recent builds
        self.last_batch_s = 0.0
        self.last_batch_end = 0.0
        self.pool = PopenPoolExecutor(
            max_workers=max_workers, timeout=timeout_sec, initializer=_warm_up
        )
        # Start the pool processes now, so their imports overlap the first search.
        for _ in range(max_workers):
            self.pool.submit(_warm_up)

    def batch_timeout(self) -> float:
        """Seconds a candidate of the next batch may take to build: the configured timeout,
        or less once recent builds show how long a build takes here (see TIMEOUT_SPREAD)."""
        if len(self.recent) < 16:
            return self.timeout_sec
        slow = statistics.quantiles(self.recent, n=10)[-1]
        return min(self.timeout_sec, max(TIMEOUT_FLOOR_S, TIMEOUT_SPREAD * slow))

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        start = time.perf_counter()
        results = []
        timeout = self.batch_timeout()
        self.pool._timeout = timeout  # read by each submit (PopenPoolExecutor has no setter)
        jobs = [(inp.mod, inp.target) for inp in build_inputs]
        for res in self.pool.map_with_error_catching(lambda job: _build_and_export(*job), jobs):
            if res.status == StatusKind.COMPLETE:
                artifact, seconds = res.value
                self.build_seconds[artifact] = seconds
                self.recent.append(seconds)
                results.append(BuilderResult(artifact, None))
            elif res.status == StatusKind.TIMEOUT:
                self.timeout_seconds_lost += timeout
                results.append(BuilderResult(None, f"build timeout: killed after {timeout:.0f} s"))
            else:
                results.append(BuilderResult(None, f"build error: {res.value}"))
        self.last_batch_end = time.perf_counter()
        self.last_batch_s = self.last_batch_end - start
        return results

    def shutdown(self) -> None:
        self.pool.shutdown()
