"""The best few records of each layer measured again once tuning is done, and the one
with the lowest median kept for export and bench. Part of the worker's `Tuner`.

A task's best is the minimum over every trial of a mean of 3 runs: on a noisy machine
the record that drew the luckiest runs wins, not the fastest code (C2's best recorded
1.39 ms and ran 1.69 ms deployed, while another of its top 5 ran 1.47 ms). Here the top
`CONFIRM_K` records of each task the chosen variant runs (one with a single record has
nothing to choose between) are measured `CONFIRM_ROUNDS` times more, interleaved so that
a slow spell hits them alike; the lowest median wins.
The winners go into a database of their own (`CONFIRMED_*` files), which export and
bench consult first (`sessions.msdb.tuned_database`) while no trial came after it.
"""

from __future__ import annotations

import os
import shutil
import statistics

from tvmtui.sessions import store as st
from tvmtui.tuning import events as ev

CONFIRM_K = 4  # records measured again per task
CONFIRM_ROUNDS = 3  # times each is measured again (3 runs each, as in a trial)
MIN_SHARE = 0.02  # tasks below this share of the estimate keep their recorded best


class Confirm:
    """The `Tuner`'s last step (see `worker.Tuner` for its state)."""

    def confirm_best(self) -> float | None:
        """Measure each heavy task's best records again and keep the lowest median;
        returns the estimate with the confirmed medians (None when nothing was confirmed)."""
        from tvm.s_tir import meta_schedule as ms

        from tvmtui.tuning.estimate import choose

        variant, total = choose(self.estimates())
        if total is None:
            return None
        for name in (st.CONFIRMED_RECORD_DB, st.CONFIRMED_WORKLOAD_DB):
            self.session.file(name).unlink(missing_ok=True)
        self.session.set_meta(confirmed_trials=None)
        heavy = [i for i, t in enumerate(self.tasks)
                 if t.best_s is not None and t.info.weights.get(variant)
                 and 1000.0 * t.info.weights[variant] * t.best_s >= MIN_SHARE * total]
        if not heavy:
            return None
        self.emit_notice(f"confirming: the best {CONFIRM_K} records of {len(heavy)} task(s) "
                         f"measured {CONFIRM_ROUNDS} more times each; the lowest median is kept")
        confirmed = ms.database.JSONDatabase(
            path_workload=str(self.session.file(st.CONFIRMED_WORKLOAD_DB)),
            path_tuning_record=str(self.session.file(st.CONFIRMED_RECORD_DB)),
            module_equality="structural",
        )
        estimate = total
        for task_id in heavy:
            if self.control.stop:
                return None
            picked = self._confirm_task(task_id, variant, confirmed)
            if picked is not None:
                weight = self.tasks[task_id].info.weights[variant]
                estimate += 1000.0 * weight * (picked - self.tasks[task_id].best_s)
        self.session.set_meta(confirmed_trials=self.trials_total)
        return estimate

    def _confirm_task(self, task_id: int, variant: str, confirmed) -> float | None:
        """Measure one task's top records again; commit and announce the winner, and
        return its median seconds (None when none of them ran)."""
        from tvm.s_tir import meta_schedule as ms

        from tvmtui.tuning.search import module_hash
        from tvmtui.tuning.warmstart import record_candidate

        mod = self.extracted[task_id].dispatched[0]
        records, candidates, seen = [], [], set()
        for record in self.database.get_top_k(self.database.commit_workload(mod), 2 * CONFIRM_K):
            try:
                candidate = record_candidate(mod, record.trace)
            except Exception:  # noqa: BLE001 - a record that no longer replays is skipped
                continue
            key = module_hash(candidate.sch.mod)
            if key in seen:
                continue  # the same schedule recorded twice (a reuse, a transfer)
            seen.add(key)
            records.append(record)
            candidates.append(candidate)
            if len(records) == CONFIRM_K:
                break
        if len(records) < 2:
            return None  # nothing to choose between
        runs = self._measure_again(candidates)
        rows = []
        for rank, (record, times) in enumerate(zip(records, runs)):
            recorded = [float(x) for x in record.run_secs]
            rows.append({
                "rank": rank,
                "recorded_ms": 1000.0 * sum(recorded) / len(recorded),
                "median_ms": 1000.0 * statistics.median(times) if times else None,
                "runs": len(times),
            })
        ran = [r for r in rows if r["median_ms"] is not None]
        if not ran:
            return None
        pick = min(ran, key=lambda r: r["median_ms"])
        workload = confirmed.commit_workload(mod)
        times = runs[pick["rank"]]
        record = records[pick["rank"]]
        confirmed.commit_tuning_record(ms.database.TuningRecord(
            record.trace, workload, times, self.target, candidates[pick["rank"]].args_info))
        task = self.tasks[task_id]
        self.session.append(ev.CONFIRMED, {
            "task": task_id, "task_name": task.info.name, "variant": variant,
            "recorded_best_ms": 1000.0 * task.best_s, "candidates": rows,
            "pick": pick["rank"], "confirmed_ms": pick["median_ms"],
        })
        return pick["median_ms"] / 1000.0

    def _measure_again(self, candidates) -> list[list[float]]:
        """Build `candidates` once and run them CONFIRM_ROUNDS times, all of them per
        round; per candidate, every run's seconds ([] when it failed to build or run)."""
        from tvm.s_tir import meta_schedule as ms

        device_type = "cpu" if self.target.kind.name == "llvm" else self.target.kind.name
        built = self.builder.build(
            [ms.builder.BuilderInput(c.sch.mod, self.target) for c in candidates])
        ok = [i for i, b in enumerate(built) if b.error_msg is None]
        times: list[list[float]] = [[] for _ in candidates]
        try:
            for _ in range(CONFIRM_ROUNDS):
                futures = self.runner.run([
                    ms.runner.RunnerInput(built[i].artifact_path, device_type,
                                          candidates[i].args_info) for i in ok])
                for i, future in zip(ok, futures):
                    res = future.result()
                    if res.error_msg is None and res.run_secs:
                        times[i].extend(float(x) for x in res.run_secs)
        finally:
            for b in built:
                self.builder.build_seconds.pop(b.artifact_path, None)
                if b.artifact_path:
                    shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
        return times
