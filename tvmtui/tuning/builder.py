"""A MetaSchedule builder whose worker processes live as long as the tuning run.

Stock `LocalBuilder` starts a fresh process pool for every batch, and its build function
imports `tvm.s_tir.tensor_intrin` (~30 s) in each new process, against a 30 s timeout:
on 2 cores nearly every candidate timed out. Here the pool is created once, the build
function imports only what compiling needs, and each result carries its build time.
"""

from __future__ import annotations

import os
import tempfile
import time

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


@derived_object
class PersistentBuilder(PyBuilder):
    """Builds candidates in a long-lived pool; remembers how long each build took."""

    def __init__(self, max_workers: int, timeout_sec: float = 60.0) -> None:
        super().__init__()
        self.max_workers = max_workers
        self.timeout_sec = timeout_sec
        self.build_seconds: dict[str, float] = {}
        self.timeout_seconds_lost = 0.0
        self.last_batch_s = 0.0
        self.last_batch_end = 0.0
        self.pool = PopenPoolExecutor(
            max_workers=max_workers, timeout=timeout_sec, initializer=_warm_up
        )
        # Start the pool processes now, so their imports overlap the first search.
        for _ in range(max_workers):
            self.pool.submit(_warm_up)

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        start = time.perf_counter()
        results = []
        jobs = [(inp.mod, inp.target) for inp in build_inputs]
        for res in self.pool.map_with_error_catching(lambda job: _build_and_export(*job), jobs):
            if res.status == StatusKind.COMPLETE:
                artifact, seconds = res.value
                self.build_seconds[artifact] = seconds
                results.append(BuilderResult(artifact, None))
            elif res.status == StatusKind.TIMEOUT:
                self.timeout_seconds_lost += self.timeout_sec
                results.append(
                    BuilderResult(None, f"build timeout: killed after {self.timeout_sec:.0f} s")
                )
            else:
                results.append(BuilderResult(None, f"build error: {res.value}"))
        self.last_batch_end = time.perf_counter()
        self.last_batch_s = self.last_batch_end - start
        return results

    def shutdown(self) -> None:
        self.pool.shutdown()
