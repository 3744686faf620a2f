"""Records measured again before the search: a transfer from another chip, a warm start
from other sessions on this chip, database records a kill left without a trial event, and
the default schedule of a task MetaSchedule cannot search. Part of the worker's `Tuner`."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tvmtui.sessions import store as st
from tvmtui.tuning.state import TunerState


def record_candidate(mod, trace):
    """A database record's schedule of `mod`, as a candidate to measure again."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    sch = Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod,
                                                                        remove_preproc=True))


def replayed_hashes(mod, trace, target) -> set[str]:
    """Module hashes of a record's schedule ({} when it no longer replays): replayed with
    its recorded postprocessing, and with the postprocessors run afresh as the search ran
    them on its candidate (RewriteLayout's recorded steps, replayed, give a module that
    hashes apart from the candidate's, whose hash its trial event carries)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.tuning.schedules import module_hash
    from tvmtui.tuning.spaces import rules_kind

    keys = set()
    for recorded in (True, False):
        try:
            sch = Schedule(mod)
            trace.apply_to_schedule(sch, remove_postproc=not recorded)
            if not recorded:
                space = ms.space_generator.PostOrderApply(
                    sch_rules=[], postprocs=ms.Postproc.create(rules_kind(target)),
                    mutator_probs={})
                ctx = ms.TuneContext(mod=mod, target=target, space_generator=space,
                                     task_name="replay")
                if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                    continue
            keys.add(module_hash(sch.mod))
        except Exception:  # noqa: BLE001 - a record that no longer replays is skipped
            continue
    return keys


class WarmStart(TunerState):
    """The `Tuner`'s measurements outside the search (see `worker.Tuner` for its state)."""

    def _known_from_database(self) -> None:
        """Schedules in the database count as measured even without a trial event: a kill
        between MetaSchedule's AddToDatabase and the event leaves such records."""
        records = self.database.get_all_tuning_records()
        if len(records) <= self.ran_before:
            return  # every record has its event (the usual case): nothing to replay
        added = 0
        for record in records:
            keys = replayed_hashes(record.workload.mod, record.trace, self.target)
            if keys - self.memory.known:
                self.memory.known |= keys
                added += 1
        if added:
            self.emit_notice(f"{added} database record(s) had no trial event (the worker was "
                             "killed mid-batch): they count as measured and are not measured again")

    def transfer_records(self) -> None:
        """Re-measure each task's best K records from the other chip on this one; only
        these re-measured records go into the session's database."""
        transfer = self.meta.get("transfer") or {}
        if not transfer.get("pending") or self.transfer_source is None:
            return
        k = int(transfer.get("k", 8))
        source = transfer["from"]
        self.emit_notice(
            f"transfer: records were measured on another chip ({source.get('label', source['id'])});"
            f" re-measuring the best {k} of each task here before trusting any"
        )
        # A crash mid-transfer left some tasks re-measured already: not again.
        done = {i for i, t in enumerate(self.extracted)
                if self.database.has_workload(t.dispatched[0]) and
                self.database.get_top_k(self.database.commit_workload(t.dispatched[0]), 1)}
        db = self._open_db(self.transfer_source)

        def top(task_id: int, n: int) -> list:
            mod = self.extracted[task_id].dispatched[0]
            return db.get_top_k(db.commit_workload(mod), n) if db.has_workload(mod) else []

        self._remeasure(top, k, remeasured=True, skip=done)
        self.session.set_meta(fingerprint=transfer["to"],
                              transfer=dict(transfer, pending=False, done=time.time()))

    def reuse_records(self) -> None:
        """A new session warm-starts from the best records of other sessions on this chip
        and target with the same tasks (ResNet-18's convolutions are C1-C12): each is
        measured again here before it counts, and its trial says where it came from."""
        from tvmtui.sessions.launch import same_chip_sessions
        from tvmtui.sessions.msdb import BestRecords, workload_hashes
        from tvmtui.tuning.schedules import module_hash

        fingerprint = (self.meta.get("fingerprint") or {}).get("id")
        if (self.prior_trials or not self.options.get("reuse", False) or not fingerprint
                or (self.meta.get("transfer") or {}).get("pending")):
            return
        root = self.session.path.parent
        keys = [module_hash(task.dispatched[0]) for task in self.extracted]
        ours = set(keys)
        sources = [s.name for s in same_chip_sessions(root, None, self.meta["target"], fingerprint)
                   if s.name != self.session.name and s.trials
                   and workload_hashes(root / s.name / st.WORKLOAD_DB) & ours]
        # At most half the budget goes to re-measuring: tuning is still what it is for.
        k = int(self.options.get("reuse_k", 4))
        spare = max(0, int(self.meta["budget"]) // 2)
        used, reused_tasks = 0, set[int]()
        for name in sources:
            if self.control.stop or used >= spare:
                break
            path = root / name
            try:  # its records of our tasks, each replayed when reused: not the whole database
                best = BestRecords(path / st.WORKLOAD_DB, path / st.RECORD_DB, ours)
            except Exception:  # noqa: BLE001 - a session being written or broken: skip it
                continue
            tasks = self._remeasure(lambda i, n, best=best: best.top(keys[i], n),
                                    min(k, spare - used), reused_from=name,
                                    skip=reused_tasks, limit=spare - used)
            used += sum(tasks.values())
            reused_tasks |= set(tasks)
            if tasks:
                self.emit_notice(
                    f"reuse: {len(tasks)} task(s) warm-started from session {name!r} "
                    f"({sum(tasks.values())} records measured again here)")

    def _open_db(self, records: Path, workloads: Path | None = None):
        from tvmtui.sessions.msdb import load_database

        return load_database(workloads or self.session.file(st.WORKLOAD_DB), records)[0]

    def _remeasure(self, top, k: int, remeasured: bool = False, reused_from: str | None = None,
                   skip: set | None = None, limit: int | None = None) -> dict[int, int]:
        """Measure the best `k` records of each task (`top(task, n)`: its `n` best records
        from elsewhere) on this device, commit those that ran into the session's database;
        returns task -> records measured."""
        from tvmtui.tuning.search import unroll_steps

        done: dict[int, int] = {}
        for task_id, task in enumerate(self.extracted):
            mod = task.dispatched[0]
            if self.control.stop or (skip and task_id in skip):
                continue
            left = None if limit is None else limit - sum(done.values())
            if left is not None and left <= 0:
                break
            candidates = []
            for record in top(task_id, min(k, left or k)):
                try:
                    candidates.append(record_candidate(mod, record.trace))
                except Exception:  # noqa: BLE001 - a trace that no longer replays: skipped
                    continue
            if not candidates:
                continue
            done[task_id] = len(candidates)
            if self.trials_total == 0 and len(candidates) > 1:
                # The session's first trial: the least unrolled record alone, as in the cold
                # pass (`search.UNROLL_KEY`). One of the 4 dense records a ResNet-18
                # session reused built in 20.6 s, and its first trial came 26 s after its
                # tasks.
                candidates.sort(key=unroll_steps)
                self._measure(task_id, candidates[:1], remeasured=remeasured,
                              reused_from=reused_from)
                candidates = candidates[1:]
            self._measure(task_id, candidates, remeasured=remeasured, reused_from=reused_from)
        return done

    def _measure(self, task_id: int, candidates, remeasured: bool = False,
                 reused_from: str | None = None) -> None:
        """Build and run `candidates` of a task outside the search; those that ran go into
        the session's database, all become trials."""
        import shutil

        from tvm.s_tir import meta_schedule as ms

        device_type = "cpu" if self.target.kind.name == "llvm" else self.target.kind.name
        built = self.builder.build(
            [ms.builder.BuilderInput(c.sch.mod, self.target) for c in candidates])
        ok = [i for i, b in enumerate(built) if b.error_msg is None]
        futures = self.runner.run([
            ms.runner.RunnerInput(built[i].artifact_path, device_type, candidates[i].args_info)
            for i in ok])
        results = [ms.runner.RunnerResult(None, "not built") for _ in candidates]
        for i, future in zip(ok, futures):
            results[i] = future.result()
        workload = self.database.commit_workload(self.extracted[task_id].dispatched[0])
        for cand, res in zip(candidates, results):
            if res.run_secs and res.error_msg is None:
                self.database.commit_tuning_record(ms.database.TuningRecord(
                    cand.sch.trace, workload, res.run_secs, self.target, cand.args_info))
        self.record_batch(task_id, candidates, built, results, remeasured=remeasured,
                          reused_from=reused_from)
        for b in built:
            if b.artifact_path:
                shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)

    def _measure_default(self, task_id: int) -> None:
        """One trial of a failed task's default schedule, so the estimate stays whole."""
        from tvm.s_tir import Schedule
        from tvm.s_tir import meta_schedule as ms

        mod = self.extracted[task_id].dispatched[0]
        sch = Schedule(mod)
        self._measure(task_id, [ms.MeasureCandidate(
            sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))])
