"""The best few records of each layer measured again once tuning is done, and the one
with the lowest median kept for export and bench. Part of the worker's `Tuner`.

A task's best is the minimum over every trial of a mean of 3 runs: on a noisy machine
the record that drew the luckiest runs wins, not the fastest code (C2's best recorded
1.39 ms and ran 1.69 ms deployed, while another of its top 5 ran 1.47 ms). Here the top
`CONFIRM_K` records of each heavy task of the variants still in the race (one with a
single record has nothing to choose between) are measured `CONFIRM_ROUNDS` times more,
interleaved so that a slow spell hits them alike; the lowest median wins, and the variant
fastest with the winners is the one export builds.
The winners go into a database of their own (`CONFIRMED_*` files), which export and
bench consult first (`sessions.msdb.tuned_database`) while no trial came after it.
"""

from __future__ import annotations

import os
import shutil
import statistics
from dataclasses import dataclass

from tvmtui.core import events as ev
from tvmtui.sessions import store as st
from tvmtui.tuning.state import TunerState

CONFIRM_K = 4  # records measured again per task
CONFIRM_ROUNDS = 3  # times each is measured again (3 runs each, as in a trial)
MIN_SHARE = 0.02  # tasks below this share of the estimate keep their recorded best


@dataclass(frozen=True)
class Confirmation:
    """What measuring again decided."""

    variant: str  # the variant export builds: the fastest once its tasks are measured again
    confirmed_ms: float  # its estimate with the confirmed medians
    tuned_ms: float  # its estimate with the tuned bests


class Confirm(TunerState):
    """The `Tuner`'s last step (see `worker.Tuner` for its state)."""

    def confirm_best(self) -> Confirmation | None:
        """Measure the heavy tasks of every variant still in the race again, all in the same
        rounds, keep each task's lowest median, and pick the variant fastest with them
        (None when nothing was confirmed). A variant that led on one lucky reading loses to
        one whose kernels measure the same every time: DQN's Winograd 7x7 layer recorded
        0.017-0.021 ms in tuning and measured 0.028-0.032 ms again, its NCHW8c rival
        0.024 both times."""
        from tvm.s_tir import meta_schedule as ms

        from tvmtui.tuning.estimate import confirmed_estimates, contenders

        estimates = self.estimates()
        rivals = contenders(estimates)
        if not rivals:
            return None
        known = {v: e for v in rivals if (e := estimates[v]) is not None}  # all of them
        for name in (st.CONFIRMED_RECORD_DB, st.CONFIRMED_WORKLOAD_DB):
            self.session.file(name).unlink(missing_ok=True)
        self.session.set_meta(confirmed_trials=None)
        heavy = [i for i, t in enumerate(self.tasks)
                 if t.best_s is not None and any(
                     t.info.weights.get(v) and
                     1000.0 * t.info.weights[v] * t.best_s >= MIN_SHARE * known[v]
                     for v in rivals)]
        if not heavy:
            return None
        labels = [self.plans.get(v, {}).get("label", v) for v in rivals]
        self.emit_notice(f"confirming: the best {CONFIRM_K} records of {len(heavy)} task(s) "
                         f"({' and '.join(labels)}) measured {CONFIRM_ROUNDS} more times each; "
                         "the lowest median is kept")
        confirmed = ms.database.JSONDatabase(
            path_workload=str(self.session.file(st.CONFIRMED_WORKLOAD_DB)),
            path_tuning_record=str(self.session.file(st.CONFIRMED_RECORD_DB)),
            module_equality="structural",
        )
        picks = self._confirm_tasks(heavy, confirmed)
        if picks is None:
            return None  # stopped
        per_variant = confirmed_estimates(
            ((t.info.weights, t.best_s, picks.get(i)) for i, t in enumerate(self.tasks)), rivals)
        confirmed_ms = {v: e for v in rivals if (e := per_variant[v]) is not None}
        variant = min(confirmed_ms, key=confirmed_ms.__getitem__)
        if variant != rivals[0]:
            label, was = labels[rivals.index(variant)], labels[0]
            self.emit_notice(
                f"variants: {label} runs {confirmed_ms[variant]:.4f} ms measured again, "
                f"{was} {confirmed_ms[rivals[0]]:.4f} ms (it led on its tuned bests, "
                f"{known[rivals[0]]:.4f} against {known[variant]:.4f}): "
                f"export builds {label}")
        self.session.set_meta(confirmed_trials=self.trials_total, variant=variant,
                              best_ms=known[variant])
        return Confirmation(variant, confirmed_ms[variant], known[variant])

    def _confirm_tasks(self, heavy: list[int], confirmed) -> dict[int, float] | None:
        """Measure the top records of the tasks `heavy` again; commit and announce each
        task's winner. Returns task -> its winner's median seconds (None when stopped)."""
        from tvmtui.tuning.schedules import module_hash
        from tvmtui.tuning.warmstart import record_candidate

        picked: dict[int, tuple[list, list]] = {}
        for task_id in heavy:
            mod = self.extracted[task_id].dispatched[0]
            records, candidates, seen = [], [], set()
            for record in self.database.get_top_k(self.database.commit_workload(mod),
                                                  2 * CONFIRM_K):
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
            if len(records) >= 2:  # else nothing to choose between
                picked[task_id] = (records, candidates)
        if not picked:
            return {}
        # Every task's candidates in each round: a slow spell of the host hits them alike.
        runs = self._measure_again([c for _, cands in picked.values() for c in cands])
        if runs is None:
            return None
        out = {}
        for task_id, (records, candidates) in picked.items():
            times, runs = runs[:len(candidates)], runs[len(candidates):]
            seconds = self._commit_pick(task_id, records, candidates, times, confirmed)
            if seconds is not None:
                out[task_id] = seconds
        return out

    def _commit_pick(self, task_id: int, records, candidates, runs, confirmed) -> float | None:
        """Keep the record with the lowest median of `runs` (per record, every run's
        seconds) in `confirmed` and announce it; its median seconds (None: none ran)."""
        from tvm.s_tir import meta_schedule as ms

        rows = []
        for rank, (record, times) in enumerate(zip(records, runs)):
            recorded = [float(x) for x in record.run_secs]
            rows.append({
                "rank": rank,
                "recorded_ms": 1000.0 * sum(recorded) / len(recorded),
                "median_ms": 1000.0 * statistics.median(times) if times else None,
                "runs": len(times),
            })
        ran = [(median, r) for r in rows if (median := r["median_ms"]) is not None]
        if not ran:
            return None
        median_ms, pick = min(ran, key=lambda x: x[0])
        mod = self.extracted[task_id].dispatched[0]
        workload = confirmed.commit_workload(mod)
        record = records[pick["rank"]]
        confirmed.commit_tuning_record(ms.database.TuningRecord(
            record.trace, workload, runs[pick["rank"]], self.target,
            candidates[pick["rank"]].args_info))
        task = self.tasks[task_id]
        self.session.append(ev.CONFIRMED, {
            "task": task_id, "task_name": task.info.name, "variant": task.info.variant,
            "recorded_best_ms": 1000.0 * (task.best_s or 0.0), "candidates": rows,
            "pick": pick["rank"], "confirmed_ms": median_ms,
        })
        return median_ms / 1000.0

    def _measure_again(self, candidates) -> list[list[float]] | None:
        """Build `candidates` once and run them CONFIRM_ROUNDS times, all of them per
        round; per candidate, every run's seconds ([] when it failed to build or run).
        None when a stop is asked between rounds."""
        from tvm.s_tir import meta_schedule as ms

        device_type = "cpu" if self.target.kind.name == "llvm" else self.target.kind.name
        built = self.builder.build(
            [ms.builder.BuilderInput(c.sch.mod, self.target) for c in candidates])
        ok = [i for i, b in enumerate(built) if b.error_msg is None]
        times: list[list[float]] = [[] for _ in candidates]
        try:
            for _ in range(CONFIRM_ROUNDS):
                if self.control.stop:
                    return None
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
