"""The tuning worker: one detached process per running session.

It extracts MetaSchedule tasks, tunes them, and appends every trial and state change to
the session store. Everything else (CLI, TUI, replay) reads that store. Started as
`python -m tvmtui.tuning.worker SESSION_DIR`; it holds the session's lock while it lives.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

# TVM's own modules are safe to import here: only `tvm.s_tir.tensor_intrin` is expensive,
# and `import_tvm` decides which of its parts load before anything imports it.
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from tvmtui.errors import UserError
from tvmtui.sessions import store as st
from tvmtui.sessions.msdb import repair_json_lines
from tvmtui.tuning import events as ev

log = logging.getLogger("tvmtui.worker")

ERROR_CHARS = 2000  # error messages are cut to this many characters in events


@dataclass
class Control:
    """Requests from other processes, shared between the control thread and the tuner."""

    budget: int
    stop: bool = False
    stop_reason: str = ""
    paused: bool = False
    wake: threading.Condition = field(default_factory=threading.Condition)

    def set(self, **values) -> None:
        with self.wake:
            for key, value in values.items():
                setattr(self, key, value)
            self.wake.notify_all()


@dataclass
class TaskState:
    info: ev.TaskInfo
    trials: int = 0
    best_s: float | None = None
    build_errors: int = 0
    run_errors: int = 0
    without: str | None = None  # the rule or postprocessor its design space leaves out
    failed: str | None = None  # why MetaSchedule cannot search it (it keeps the default)


class ControlThread(threading.Thread):
    """Polls the session's control table and beats a heartbeat into its metadata."""

    def __init__(self, session_path: Path, control: Control, after: int):
        super().__init__(daemon=True, name="tvmtui-control")
        self.session = st.Session.open(session_path.parent, session_path.name)
        self.control = control
        self.after = after
        self.done = threading.Event()

    def run(self) -> None:
        last_beat = 0.0
        while not self.done.wait(0.25):
            try:
                for cid, command, arg in self.session.commands(self.after):
                    self.after = cid
                    self.apply(command, arg)
                now = time.time()
                if now - last_beat >= 2.0:
                    self.session.set_meta(heartbeat=now)
                    last_beat = now
            except Exception:  # noqa: BLE001 - a busy database must not kill the worker
                log.exception("control thread")

    def apply(self, command: str, arg) -> None:
        c = self.control
        if command == "pause":
            c.set(paused=True)
        elif command == "resume":
            c.set(paused=False)
        elif command == "stop":
            c.set(stop=True, stop_reason=arg or "stopped by user", paused=False)
        elif command == "budget":
            c.set(budget=int(arg))
            self.session.set_meta(budget=int(arg))


class Tuner:
    """Owns the MetaSchedule objects of one worker run and turns callbacks into events."""

    def __init__(self, session: st.Session, control: Control):
        self.session = session
        self.control = control
        meta = session.meta()
        self.meta = meta
        self.options = meta.get("options", {})
        self.run_index = session.count_events(ev.SESSION_STARTED)
        self.prior_trials = session.count_events(ev.TRIAL)
        self.trials_total = self.prior_trials
        self.tasks: list[TaskState] = []
        self.memory = None  # SearchMemory, created with the TVM imports
        self.pending_model_metrics: dict | None = None
        self.started = time.time()
        self.device_log_offset = 0
        self.device_seen: dict[str, dict] = {}  # runner-hook lines not yet matched to a trial
        self.transfer_source: Path | None = None
        self.retired_variants: set[str] = set()  # variants clearly slower than the best
        self.task_keys: dict[int, str] = {}  # task -> hash of the module its context tunes
        self.diagnosed: set[int] = set()  # tasks whose design space was checked

    # ---- set-up ---------------------------------------------------------------------
    def prepare(self):
        from tvmtui.graph.relax_import import load_relax
        from tvmtui.graph.tasks import extract_variant_tasks
        from tvmtui.tuning.tvm_env import import_tvm

        target_dict = self.meta["target"]
        tvm = import_tvm(target_dict)
        from tvm.s_tir import analysis

        self.tvm = tvm
        self.target = tvm.target.Target(target_dict)
        workload = self.meta["workload"]
        model_bytes = self.session.file(st.model_file(workload)).read_bytes()
        base = load_relax(workload.get("format", "onnx"), model_bytes, workload["input_shapes"])
        # Sessions from before variants tuned the stock graph only: keep it so on resume.
        found = extract_variant_tasks(base, self.target, self.options.get("variants", ["nchw"]))
        if not found.tasks:
            raise RuntimeError("the model has no operators MetaSchedule can tune")
        infos = [
            ev.TaskInfo(i, t.task_name, float(analysis.estimate_tir_flops(t.dispatched[0])),
                        found.weights[i].get("nchw", 0), found.variant_of(i), found.weights[i])
            for i, t in enumerate(found.tasks)
        ]
        from tvmtui.tuning.search import SearchMemory

        self.memory = SearchMemory()
        self._check_same_tasks(infos)
        self.extracted = found.tasks
        self.plans = {v: p.to_json() for v, p in found.plans.items()}
        self.variant_notes = list(dict.fromkeys(
            found.skipped + [n for p in found.plans.values() for n in p.notes]))
        self.tasks = [TaskState(info) for info in infos]
        self._replay_history()
        return infos

    def _check_same_tasks(self, infos: list[ev.TaskInfo]) -> None:
        previous = next(self.session.iter_events(ev.TASKS_EXTRACTED), None)
        if previous is None:
            return
        before = [t["name"] for t in previous["tasks"]]
        now = [t.name for t in infos]
        if before != now:
            raise RuntimeError(
                f"the tasks extracted now ({len(now)}) differ from the session's ({len(before)}); "
                "was the session made with another TVM version?"
            )

    def _replay_history(self) -> None:
        """Per-task counts, bests and measured hashes from earlier runs of this session
        (latencies from before a transfer were measured on another chip: not bests here),
        and the design-space verdicts found before."""
        for verdict in self.session.iter_events(ev.TASK_SPACE):
            task = self.tasks[verdict["task"]]
            task.without, task.failed = verdict.get("without"), verdict.get("error")
        from tvmtui.tuning.tally import Tally

        self.tally = Tally(self.tasks)
        self.ran_before = 0  # earlier trials that ran (each left a database record)
        for event in self.session.iter_events(ev.SESSION_STARTED, ev.TRIAL):
            if event["event"] == ev.SESSION_STARTED:
                self.tally.started(event)
            elif event["event"] == ev.TRIAL:
                self.tally.trial(event)
                self.ran_before += bool(event.get("run_s"))
                if event.get("shash") and event.get("error_kind") not in ev.NOT_RUN:
                    self.memory.known.add(event["shash"])

    def make_parts(self):
        from tvm.s_tir import meta_schedule as ms

        from tvmtui.devices.local import cpu_count
        from tvmtui.tuning.builder import PersistentBuilder
        from tvmtui.tuning.cost_model import TrackedXGBModel

        cores = int(self.meta["target"].get("num-cores", 1))
        self.builder = PersistentBuilder(
            max_workers=cpu_count(), timeout_sec=float(self.options.get("build_timeout", 60))
        )
        evaluator = ms.runner.EvaluatorConfig(
            number=1, repeat=3, min_repeat_ms=25, enable_cpu_cache_flush=False
        )
        run_timeout = float(self.options.get("run_timeout", 30))
        device = self.meta.get("device") or {"kind": "local"}
        if device.get("kind", "local") in ("local", "cuda"):
            self.runner = ms.runner.LocalRunner(timeout_sec=run_timeout, evaluator_config=evaluator)
        else:
            self.runner = self._rpc_runner(device, evaluator, run_timeout)
        for name in (st.WORKLOAD_DB, st.RECORD_DB):
            dropped = repair_json_lines(self.session.file(name))
            if dropped:
                self.emit_notice(
                    f"repaired {name}: dropped {dropped} line(s) cut short by a crash "
                    f"(original kept as {name}.broken)"
                )
        transfer = self.meta.get("transfer") or {}
        if transfer.get("pending"):
            # Records measured on another chip are not trusted here: set them aside; the
            # best of them are measured again (`transfer_records`) into a fresh database.
            old = self.session.file(st.RECORD_DB)
            aside = self.session.file(f"database_tuning_record.{transfer['from']['id']}.json")
            if old.exists() and not aside.exists():
                old.rename(aside)
            self.transfer_source = aside
        self.database = ms.database.JSONDatabase(
            path_workload=str(self.session.file(st.WORKLOAD_DB)),
            path_tuning_record=str(self.session.file(st.RECORD_DB)),
            module_equality="structural",
        )
        self.cost_model = TrackedXGBModel(
            num_tuning_cores=cores,
            num_warmup_samples=int(self.options.get("warmup_samples", 32)),
            on_update=self._on_model_update,
            on_samples=self.session.add_samples,
        )
        self._known_from_database()
        samples = self.session.samples()
        if samples:
            self.cost_model.restore(str(self.session.file(st.COST_MODEL_FILE)), samples)
        elif self.prior_trials == 0:
            # One sampled batch per task, small enough that every task gets measured
            # within the budget (so the end-to-end estimate exists early).
            self.memory.cold_batches = len(self.tasks)
            share = int(self.meta["budget"]) // len(self.tasks)
            self.memory.cold_batch_size = max(2, min(16, share))

    def _known_from_database(self) -> None:
        """Schedules in the database count as measured even without a trial event: a kill
        between MetaSchedule's AddToDatabase and the event leaves such records."""
        from tvm.s_tir import Schedule

        from tvmtui.tuning.search import module_hash

        records = self.database.get_all_tuning_records()
        if len(records) <= self.ran_before:
            return  # every record has its event (the usual case): nothing to replay
        added = 0
        for record in records:
            try:
                sch = Schedule(record.workload.mod)
                record.trace.apply_to_schedule(sch, remove_postproc=False)
            except Exception:  # noqa: BLE001 - a record that no longer replays is skipped
                continue
            key = module_hash(sch.mod)
            if key not in self.memory.known:
                self.memory.known.add(key)
                added += 1
        if added:
            self.emit_notice(f"{added} database record(s) had no trial event (the worker was "
                             "killed mid-batch): they count as measured and are not measured again")

    def _rpc_runner(self, device: dict, evaluator, run_timeout: float):
        """MetaSchedule's RPCRunner over the tracker (one worker per server: a farm of N
        boards measures N candidates at once), with tvmtui's queue-aware hooks."""
        from tvm.s_tir import meta_schedule as ms

        from tvmtui.devices import rpc

        dev = rpc.Device(**device)
        servers = rpc.check_device(dev)
        queue_timeout = float(self.options.get("queue_timeout", 120))
        os.environ[rpc.HEALTH_LOG_ENV] = str(self.session.file(st.DEVICE_LOG))
        os.environ[rpc.QUEUE_TIMEOUT_ENV] = str(queue_timeout)
        os.environ[rpc.RUN_TIMEOUT_ENV] = str(run_timeout)
        # The config's timeout bounds the whole job (queue wait + run); the board's own
        # session timeout is the run timeout alone (set by the hook).
        key = dev.key if dev.kind == "tracker" else dev.url()  # rpc://: the hook connects
        config = ms.runner.RPCConfig(tracker_host=dev.host, tracker_port=dev.port, tracker_key=key,
                                     session_timeout_sec=int(queue_timeout + run_timeout))
        self.emit_notice(f"measuring on {dev.url()}: {servers} server(s)")
        return ms.runner.RPCRunner(
            rpc_config=config,
            evaluator_config=evaluator,
            max_workers=servers,
            f_create_session=rpc.runner_create_session,
            f_upload_module=rpc.runner_upload_module,
            f_cleanup=rpc.runner_cleanup,
        )

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
        self._remeasure(self._open_db(self.transfer_source), k, remeasured=True, skip=done)
        self.session.set_meta(fingerprint=transfer["to"],
                              transfer=dict(transfer, pending=False, done=time.time()))

    def reuse_records(self) -> None:
        """A new session warm-starts from the best records of other sessions on this chip
        and target with the same tasks (ResNet-18's convolutions are C1-C12): each is
        measured again here before it counts, and its trial says where it came from."""
        from tvmtui.sessions.launch import same_chip_sessions

        fingerprint = (self.meta.get("fingerprint") or {}).get("id")
        if (self.prior_trials or not self.options.get("reuse", False) or not fingerprint
                or (self.meta.get("transfer") or {}).get("pending")):
            return
        root = self.session.path.parent
        sources = [s.name for s in same_chip_sessions(root, None, self.meta["target"], fingerprint)
                   if s.name != self.session.name and s.trials]
        # At most half the budget goes to re-measuring: tuning is still what it is for.
        k = int(self.options.get("reuse_k", 4))
        spare = max(0, int(self.meta["budget"]) // 2)
        used, reused_tasks = 0, set()
        for name in sources:
            if self.control.stop or used >= spare:
                break
            path = root / name
            try:
                db = self._open_db(path / st.RECORD_DB, path / st.WORKLOAD_DB)
            except Exception:  # noqa: BLE001 - a session being written or broken: skip it
                continue
            tasks = self._remeasure(db, min(k, spare - used), reused_from=name,
                                    skip=reused_tasks, limit=spare - used)
            used += sum(tasks.values())
            reused_tasks |= set(tasks)
            if tasks:
                self.emit_notice(
                    f"reuse: {len(tasks)} task(s) warm-started from session {name!r} "
                    f"({sum(tasks.values())} records measured again here)")

    def _open_db(self, records: Path, workloads: Path | None = None):
        from tvm.s_tir import meta_schedule as ms

        return ms.database.JSONDatabase(
            path_workload=str(workloads or self.session.file(st.WORKLOAD_DB)),
            path_tuning_record=str(records), module_equality="structural",
        )

    def _remeasure(self, old_db, k: int, remeasured: bool = False, reused_from: str | None = None,
                   skip: set | None = None, limit: int | None = None) -> dict[int, int]:
        """Measure the best `k` records `old_db` has for each task on this device, commit
        those that ran into the session's database; returns task -> records measured."""
        from tvm.s_tir import Schedule
        from tvm.s_tir import meta_schedule as ms

        done: dict[int, int] = {}
        for task_id, task in enumerate(self.extracted):
            mod = task.dispatched[0]
            if self.control.stop or (skip and task_id in skip) or not old_db.has_workload(mod):
                continue
            left = None if limit is None else limit - sum(done.values())
            if left is not None and left <= 0:
                break
            candidates = []
            for record in old_db.get_top_k(old_db.commit_workload(mod), min(k, left or k)):
                sch = Schedule(mod)
                record.trace.apply_to_schedule(sch, remove_postproc=False)
                candidates.append(ms.MeasureCandidate(
                    sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
            if not candidates:
                continue
            self._measure(task_id, candidates, remeasured=remeasured, reused_from=reused_from)
            done[task_id] = len(candidates)
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

    def _device_records(self) -> dict[str, dict]:
        """The runner hooks' log by artifact path (which server measured it). Lines read
        are kept until their batch is recorded: with several tasks in flight, another
        batch's lines can arrive first."""
        path = self.session.file(st.DEVICE_LOG)
        if not path.exists():
            return self.device_seen
        import json

        with open(path) as fh:
            fh.seek(self.device_log_offset)
            lines = fh.readlines()
            self.device_log_offset = fh.tell()
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("artifact"):
                self.device_seen[rec["artifact"]] = rec
        return self.device_seen

    def emit_notice(self, message: str) -> None:
        self.session.append(ev.NOTICE, {"message": message})

    def _on_model_update(self, metrics: dict) -> None:
        self.pending_model_metrics = metrics

    # ---- the tuning loop -----------------------------------------------------------
    def tune(self) -> str:
        """Tune until the budget is spent or a stop is asked; returns the final state."""

        self._cold_pass()
        failures = 0
        while not self.control.stop and self.trials_total < self.control.budget:
            before = self.trials_total
            self.memory.allowance = self.control.budget - before
            self.memory.in_flight = 0
            ids = [i for i, t in enumerate(self.tasks) if not t.failed]
            if not ids:
                return ev.FINISHED
            contexts, weights, ids = self._contexts(ids, before + 7919 * failures)
            if not contexts:
                return ev.FINISHED
            self.retire_losing_variants()
            try:
                self._tune_all(contexts, weights, ids)
            except RuntimeError as exc:
                # A task whose space cannot be searched fails the whole call: find it and
                # tune it without the rule at fault, or fail just that task.
                if self._diagnose(ids):
                    continue
                # Otherwise a schedule the search sampled failed to replay ("The block no
                # longer exists in the IRModule"): seed-dependent, so try another seed.
                failures += 1
                if failures > 3:
                    raise
                self.emit_notice(f"a search round failed ({_last_line(exc)}); "
                                 "retrying with another seed")
                continue
            if self.trials_total == before and not self.control.stop:
                return ev.FINISHED  # the search found nothing new to measure
        return ev.STOPPED if self.control.stop else ev.FINISHED

    def _tune_all(self, contexts, weights, ids: list[int]) -> None:
        from tvm.s_tir import meta_schedule as ms

        ms.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=str(self.session.path),
            max_trials_global=self.control.budget - self.trials_total,
            num_trials_per_iter=int(self.options.get("batch", 32)),
            builder=self.builder,
            runner=self.runner,
            database=self.database,
            cost_model=self.cost_model,
            measure_callbacks=[
                ms.measure_callback.AddToDatabase(),
                ms.measure_callback.UpdateCostModel(),
                ms.measure_callback.RemoveBuildArtifact(),
                Recorder(self, task_ids=ids),
            ],
            task_scheduler="gradient",
        )

    def _contexts(self, ids: list[int], before: int):
        """Tune contexts of the tasks `ids`, each with its own design space; with their
        weights and the tasks they are."""
        from tvm.s_tir import meta_schedule as ms

        from tvmtui.tuning.search import DedupSearch, module_hash
        from tvmtui.tuning.spaces import space_generator

        strategy = DedupSearch(
            population_size=int(self.options.get("population", 256)),
            genetic_num_iters=int(self.options.get("genetic_iters", 3)),
            memory=self.memory,
            score=self.cost_model.score,
        )
        seed = int(self.options.get("seed", 0)) + self.run_index * 1000 + before
        contexts, weights, kept = [], [], []
        for i in ids:
            ctx, weight = ms.relax_integration.extracted_tasks_to_tune_contexts(
                [self.extracted[i]], work_dir=str(self.session.path),
                space=space_generator(self.target, self.tasks[i].without), strategy=strategy,
                num_threads=int(self.meta["target"].get("num-cores", 1)), seed=seed + 31 * i)
            if ctx:  # an already scheduled function has nothing to tune
                contexts += ctx
                weights += weight
                kept.append(i)
                self.task_keys[i] = module_hash(ctx[0].mod)
        return contexts, weights, kept

    def _diagnose(self, ids: list[int]) -> bool:
        """Check the design space of each task in `ids` not checked yet; a task that needs
        a rule left out gets it, one nothing fixes is failed. True if any changed."""
        from tvmtui.tuning.spaces import diagnose

        changed = False
        for i in ids:
            task = self.tasks[i]
            if i in self.diagnosed or task.failed:
                continue
            self.diagnosed.add(i)
            verdict = diagnose(self.extracted[i].dispatched[0], self.target)
            if verdict.without is None and not verdict.failed:
                continue
            changed = True
            task.without, task.failed = verdict.without, verdict.error
            self.session.append(ev.TASK_SPACE, dict(verdict.to_json(), task=i,
                                                    task_name=task.info.name))
            if verdict.failed:
                self.emit_notice(f"task {i} ({task.info.name}) cannot be tuned: {verdict.error}; "
                                 "it keeps TVM's default schedule, the other tasks tune on")
                self._measure_default(i)
            else:
                self.emit_notice(f"task {i} ({task.info.name}): tuned without {verdict.without}, "
                                 "which broke its design space")
        return changed

    def _measure_default(self, task_id: int) -> None:
        """One trial of a failed task's default schedule, so the estimate stays whole."""
        from tvm.s_tir import Schedule
        from tvm.s_tir import meta_schedule as ms

        mod = self.extracted[task_id].dispatched[0]
        sch = Schedule(mod)
        self._measure(task_id, [ms.MeasureCandidate(
            sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))])

    def _cold_pass(self) -> None:
        """A new session's first, sampled batch of each task, one task at a time.
        MetaSchedule's scheduler sends a batch of every task before it records any: with
        the variants' 50 ResNet-18 tasks the first trial waited for 50 searches and builds
        (over 10 minutes); here each task's trials arrive as soon as they are measured."""

        if self.memory.cold_batches <= 0:
            return  # resumed, or warm-started: there is something to evolve from
        for index, task in enumerate(self.extracted):
            left = self.control.budget - self.trials_total
            if self.control.stop or left <= 0:
                break
            if self.tasks[index].failed:
                continue
            size = min(left, self.memory.cold_batch_size)
            self.memory.allowance, self.memory.in_flight = size, 0
            self.memory.cold_batches = 1
            contexts, weights, _ = self._contexts([index], self.trials_total)
            if not contexts:
                continue
            had = self.tasks[index].trials
            try:
                self._tune_one(index, contexts, weights, size)
                if self.tasks[index].trials > had or self.control.stop:
                    continue
                error = "no candidate passed the postprocessors"  # the search gave up on it
            except RuntimeError as exc:  # one task's failure is not the session's
                error = _last_line(exc)
            if self._diagnose([index]) and not self.tasks[index].failed:
                contexts, weights, _ = self._contexts([index], self.trials_total + 1)
                try:
                    self._tune_one(index, contexts, weights, size)
                    continue
                except RuntimeError as exc:
                    error = _last_line(exc)
            if not self.tasks[index].failed:
                self.emit_notice(f"task {index} ({task.task_name}): its first sampled batch "
                                 f"failed ({error}); the other tasks go on")
        self.memory.cold_batches = 0

    def _tune_one(self, index: int, contexts, weights, size: int) -> None:
        from tvm.s_tir import meta_schedule as ms

        ms.tune_tasks(
            tasks=contexts, task_weights=weights, work_dir=str(self.session.path),
            max_trials_global=size, num_trials_per_iter=size, builder=self.builder,
            runner=self.runner, database=self.database, cost_model=self.cost_model,
            measure_callbacks=[
                ms.measure_callback.AddToDatabase(),
                ms.measure_callback.UpdateCostModel(),
                ms.measure_callback.RemoveBuildArtifact(),
                Recorder(self, task_ids=[index]),
            ],
            task_scheduler="round-robin",
        )

    # ---- per batch -----------------------------------------------------------------
    def record_batch(self, task_id, candidates, builder_results, runner_results,
                     remeasured: bool = False, reused_from: str | None = None) -> None:
        from tvmtui.tuning.search import module_hash

        task = self.tasks[task_id]
        self.memory.in_flight = max(0, self.memory.in_flight - len(candidates))
        out: list[tuple[str, dict]] = []
        traces: list[tuple[int, str]] = []
        boards = self._device_records()
        for cand, bres, rres in zip(candidates, builder_results, runner_results):
            shash = module_hash(cand.sch.mod)
            run_s = [float(x) for x in rres.run_secs] if rres.run_secs else None
            berr, rerr = bres.error_msg, rres.error_msg
            kind = ev.classify_error(berr, rerr if run_s is None else None)
            if kind is None and run_s is None:
                kind, rerr = ev.RUN_ERROR, rerr or "the runner returned no timings"
            if kind not in ev.NOT_RUN:
                self.memory.known.add(shash)  # never run (no board): a later round may
            self.trials_total += 1
            error = (berr or rerr) if kind else None
            trial = ev.Trial(
                task=task_id,
                task_name=task.info.name,
                trial=self.trials_total,
                build_s=self.builder.build_seconds.pop(bres.artifact_path, None)
                if bres.artifact_path
                else None,
                run_s=run_s if kind is None else None,
                predicted=self.memory.scores.pop(shash, None),
                error_kind=kind,
                error=error[:ERROR_CHARS] if error else None,
                shash=shash,
                run=self.run_index,
                device=boards.get(bres.artifact_path or "", {}).get("server"),
                queue_s=boards.pop(bres.artifact_path or "", {}).get("queue_s"),
                remeasured=remeasured,
                variant=task.info.variant,
                reused_from=reused_from,
            )
            out.append((ev.TRIAL, trial.to_json()))
            traces.append((trial.trial, _trace_text(cand.sch)))
            previous = task.best_s
            if self.tally.trial(out[-1][1]) is not None:
                out.append(
                    (
                        ev.TASK_BEST,
                        {
                            "task": task_id,
                            "task_name": task.info.name,
                            "trial": trial.trial,
                            "best_s": task.best_s,
                            "previous_s": previous,
                            "gflops": task.info.flops / task.best_s / 1e9,
                        },
                    )
                )
        metrics = self.pending_model_metrics
        self.pending_model_metrics = None
        if metrics is not None:
            out.append((ev.COST_MODEL_UPDATED, dict(metrics, task=task_id)))
            if metrics.get("retrained"):
                self.cost_model.save_booster(str(self.session.file(st.COST_MODEL_FILE)))
        from tvmtui.tuning.estimate import choose

        per_variant = self.estimates()
        variant, estimate = choose(per_variant)
        out.append(
            (
                ev.ROUND_DONE,
                {
                    "task": task_id,
                    "variant": variant,
                    "variants_ms": per_variant,
                    "batch": len(candidates),
                    "trials": self.trials_total,
                    "budget": self.control.budget,
                    "best_ms": estimate,
                    "build_timeout_lost_s": self.builder.timeout_seconds_lost,
                    "search_s": round(self.memory.search_s, 3),
                    "skipped_measured": self.memory.skipped,
                    "build_wall_s": round(self.builder.last_batch_s, 3),
                    "run_wall_s": round(time.perf_counter() - self.builder.last_batch_end, 3),
                    "elapsed_s": time.time() - self.started,
                },
            )
        )
        self.session.append_many(
            out, meta={"trials": self.trials_total, "best_ms": estimate, "variant": variant},
            traces=traces
        )
        self.retire_losing_variants()
        kinds = {event["error_kind"] for name, event in out if name == ev.TRIAL}
        if kinds == {ev.DEVICE_LOST}:
            self._stop_if_unreachable()
        self._obey()

    def _stop_if_unreachable(self) -> None:
        """A batch that lost the device on every candidate: when the board (or its tracker)
        no longer answers, stop rather than spend the budget on trials that cannot run."""
        from tvmtui.devices import rpc

        device = self.meta.get("device") or {}
        if device.get("kind") not in ("tracker", "rpc"):
            return
        try:
            rpc.check_device(rpc.Device(**device))
        except (UserError, OSError, RuntimeError) as exc:
            reason = (f"the device stopped answering ({exc}); nothing is lost: "
                      f"`tvmtui resume {self.session.name}` when it is back")
            self.emit_notice(reason[:ERROR_CHARS])
            self.control.set(stop=True, stop_reason=reason[:ERROR_CHARS])

    def estimates(self) -> dict[str, float | None]:
        """End-to-end estimate (ms) of each variant, once each of its tasks has a best."""
        from tvmtui.tuning.estimate import variant_estimates

        return variant_estimates((t.info.weights, t.best_s) for t in self.tasks)

    def retire_losing_variants(self) -> None:
        """Stop tuning the tasks only clearly slower variants run (a bandit over variants:
        trials go to the variants still in the race)."""
        from tvmtui.tuning.estimate import losing_variants

        if not self.task_keys:
            return
        min_trials: dict[str, int] = {}
        for t in self.tasks:
            if t.info.flops > 0:
                for v in t.info.weights:
                    min_trials[v] = min(min_trials.get(v, t.trials), t.trials)
        labels = {v: p.get("label", v) for v, p in self.plans.items()}
        losing = losing_variants(self.estimates(), min_trials, labels)
        for variant, why in losing.items():
            if variant in self.retired_variants:
                continue
            self.retired_variants.add(variant)
            label = self.plans.get(variant, {}).get("label", variant)
            self.emit_notice(f"variants: {label} gets no more trials ({why})")
        for i, task in enumerate(self.tasks):
            if i in self.task_keys and set(task.info.weights) <= self.retired_variants:
                self.memory.retired.add(self.task_keys[i])

    def estimate_ms(self) -> float | None:
        """The session's estimate: that of the fastest complete variant."""
        from tvmtui.tuning.estimate import choose

        return choose(self.estimates())[1]

    def _obey(self) -> None:
        """Apply pause / stop / budget between batches (the only safe point)."""
        c = self.control
        if c.paused and not c.stop:
            self.set_state(ev.PAUSED, "paused by user")
            with c.wake:
                while c.paused and not c.stop:
                    c.wake.wait(1.0)
            if not c.stop:
                self.set_state(ev.RESUMED, "resumed by user")
                self.set_state(ev.RUNNING, "")
        # Never terminate tasks from here: the scheduler may terminate the same task right
        # after this callback. An exhausted allowance makes the search end them instead.
        left = c.budget - self.trials_total - self.memory.in_flight
        self.memory.allowance = 0 if c.stop else max(0, left)

    def set_state(self, state: str, reason: str, **extra) -> None:
        status = {ev.RESUMED: ev.RUNNING}.get(state, state)
        self.session.append(ev.STATE, dict(extra, state=state, reason=reason))
        self.session.set_meta(status=status)

    def close(self) -> None:
        for part in ("builder",):
            obj = getattr(self, part, None)
            if obj is not None:
                obj.shutdown()


def _last_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[-1] if lines else type(exc).__name__)[:300]


def _trace_text(sch) -> str:
    try:
        return "\n".join(str(line) for line in sch.trace.as_python(remove_postproc=False))
    except Exception as exc:  # noqa: BLE001 - a trace we cannot print must not stop tuning
        return f"(trace unavailable: {exc})"


@derived_object
class Recorder(PyMeasureCallback):
    """Turns each measured batch into session events, then obeys control requests."""

    def __init__(self, tuner: Tuner, task_ids: list[int] | None = None):
        super().__init__()
        self.tuner = tuner
        self.task_ids = task_ids  # the session's index of each task of this tuning call

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        index = self.task_ids[task_id] if self.task_ids else task_id
        self.tuner.record_batch(index, measure_candidates, builder_results, runner_results)


def _hold_lock(session_path: Path):
    fh = open(session_path / st.LOCK_FILE, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def run(session_path: Path) -> int:
    session = st.Session.open(session_path.parent, session_path.name)
    lock = _hold_lock(session_path)
    if lock is None:
        print(f"tvmtui worker: session {session.name} already has a worker", file=sys.stderr)
        return 1
    meta = session.meta()
    if (meta.get("device") or {}).get("kind", "local") in ("local", "cuda"):
        # The runner's processes inherit this. Unset, TVM on x86 halves the hardware
        # threads (it assumes hyper-threading): 1 thread on a 2-vCPU machine, so every
        # candidate would be measured, and ranked, single-threaded.
        os.environ["TVM_NUM_THREADS"] = str(int(meta["target"].get("num-cores", 1)))
    control = Control(budget=int(meta["budget"]))
    control_thread = ControlThread(session_path, control, after=session.last_command_id())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(
        signal.SIGTERM, lambda *_: control.set(stop=True, stop_reason="worker got SIGTERM")
    )
    tuner = Tuner(session, control)
    session.set_meta(status="starting", pid=os.getpid(), error=None)
    control_thread.start()
    try:
        session.append(
            ev.SESSION_STARTED,
            {
                "workload": meta["workload"]["name"],
                "graph_hash": meta["workload"]["graph_hash"],
                "target": meta["target"],
                "budget": control.budget,
                "run": tuner.run_index,
                "resumed": tuner.run_index > 0,
                "prior_trials": tuner.prior_trials,
                # Trials before this number were measured on another chip (a transfer).
                "trusted_from": int(meta.get("trusted_from", 0)),
                "pid": os.getpid(),
            },
        )
        faked = (meta.get("fingerprint") or {}).get("faked")
        if faked:
            tuner.emit_notice(f"the chip fingerprint is FAKED (TVMTUI_FAKE_FINGERPRINT={faked}): "
                              "chip checks are pretended, for tests and demos only")
        infos = tuner.prepare()
        session.append(ev.TASKS_EXTRACTED, {"tasks": [i.__dict__ for i in infos],
                                            "variants": tuner.plans})
        for note in tuner.variant_notes:
            tuner.emit_notice(f"variants: {note}")
        tuner.make_parts()
        tuner.set_state(ev.RUNNING, "")
        tuner.transfer_records()
        try:
            tuner.reuse_records()
        except Exception as exc:  # noqa: BLE001 - a warm start is a bonus, never a failure
            log.exception("reuse")
            tuner.emit_notice(f"reuse skipped: {type(exc).__name__}: {exc}"[:ERROR_CHARS])
        final = tuner.tune()
        reason = control.stop_reason if final == ev.STOPPED else (
            "budget reached" if tuner.trials_total >= control.budget else "search space exhausted"
        )
        tuner.set_state(final, reason, trials=tuner.trials_total, best_ms=tuner.estimate_ms())
        return 0
    except Exception as exc:  # noqa: BLE001 - every failure becomes a recorded state
        first = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {first[-1] if first else ''}"[:ERROR_CHARS]
        traceback.print_exc()
        tuner.set_state(ev.FAILED, reason)
        session.set_meta(error=reason)
        return 1
    finally:
        control_thread.done.set()
        tuner.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m tvmtui.tuning.worker SESSION_DIR", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    return run(Path(argv[0]).resolve())


if __name__ == "__main__":
    sys.exit(main())
