"""The tuning worker: one detached process per running session.

It extracts MetaSchedule tasks, tunes them, and appends every trial and state change to
the session store. Everything else (CLI, TUI, replay) reads that store. Started as
`python -m tvmtui.tuning.worker SESSION_DIR`; it holds the session's lock while it lives.
The `Tuner` is split by what it does: set-up here, the search loop (`loop.py`), each
measured batch into events (`recording.py`), records measured again (`warmstart.py`)
and the best ones confirmed at the end (`confirm.py`).
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
from pathlib import Path

from tvmtui.core import events as ev
from tvmtui.sessions import store as st
from tvmtui.sessions.msdb import open_own_database, repair_json_lines
from tvmtui.tuning.confirm import Confirm
from tvmtui.tuning.control import Control, ControlThread
from tvmtui.tuning.loop import SearchLoop
from tvmtui.tuning.recording import ERROR_CHARS, BatchRecording
from tvmtui.tuning.state import TaskState
from tvmtui.tuning.warmstart import WarmStart

log = logging.getLogger("tvmtui.worker")


class Tuner(SearchLoop, BatchRecording, WarmStart, Confirm):
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
        self.turn_end: int | None = None  # trials total the current tuning call stops at
        self.noticed_leader: str | None = None  # the leading variant last said to get trials
        self.exhausted_noticed: set[int] = set()  # tasks said to have a used-up space
        self.task_keys: dict[int, str] = {}  # task -> hash of the module its context tunes
        self.diagnosed: set[int] = set()  # tasks whose design space was checked

    # ---- set-up ---------------------------------------------------------------------
    def prepare(self):
        from tvmtui.graph.relax_import import load_relax
        from tvmtui.graph.tasks import extract_variant_tasks
        from tvmtui.graph.variants import session_revision
        from tvmtui.kernels.tvm_env import import_tvm

        target_dict = self.meta["target"]
        tvm = import_tvm(target_dict)
        from tvm.s_tir import analysis

        self._start_processes()

        self.tvm = tvm
        self.target = tvm.target.Target(target_dict)
        workload = self.meta["workload"]
        model_bytes = self.session.file(st.model_file(workload)).read_bytes()
        revision = session_revision(self.meta)  # as the session was tuned
        base = load_relax(workload.get("format", "onnx"), model_bytes, workload["input_shapes"],
                          revision)
        # Sessions from before variants tuned the stock graph only: keep it so on resume.
        found = extract_variant_tasks(base, self.target, self.options.get("variants", ["nchw"]),
                                      revision=revision)
        if not found.tasks:
            raise RuntimeError("the model has no operators MetaSchedule can tune")
        from tvmtui.graph.dotprod import task_instruction

        infos = [
            ev.TaskInfo(i, t.task_name, float(analysis.estimate_tir_flops(t.dispatched[0])),
                        found.weights[i].get("nchw", 0), found.variant_of(i), found.weights[i],
                        task_instruction(t.dispatched[0], self.target))
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
        from tvmtui.core.tally import Tally

        self.tally = Tally(self.tasks)
        self.ran_before = 0  # earlier trials that ran (each left a database record)
        for event in self.session.iter_events(ev.SESSION_STARTED, ev.TRIAL, ev.TASK_SPACE):
            if event["event"] == ev.TASK_SPACE:
                task = self.tasks[event["task"]]
                task.without, task.failed = event.get("without"), event.get("error")
                self.tally.space(event)
            elif event["event"] == ev.SESSION_STARTED:
                self.tally.started(event)
            elif event["event"] == ev.TRIAL:
                self.tally.trial(event)
                self.ran_before += bool(event.get("run_s"))
                if event.get("shash") and event.get("error_kind") not in ev.NOT_RUN:
                    self.memory.known.add(event["shash"])

    def make_parts(self):
        from tvmtui.tuning.cost_model import TrackedXGBModel

        cores = int(self.meta["target"].get("num-cores", 1))
        device = self.meta.get("device") or {"kind": "local"}
        if self._runner_thread is not None:
            self._runner_thread.join()
        else:
            self.runner = self._rpc_runner(device, self._evaluator(), self._run_timeout())
        if self.runner is None:
            raise RuntimeError("the local runner did not start (see the worker log)")
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
        self.database, set_aside, wrong = open_own_database(self.session.file(st.WORKLOAD_DB),
                                                            self.session.file(st.RECORD_DB))
        if set_aside:
            self.emit_notice(f"{set_aside} tuning record(s) set aside in "
                             f"{st.RECORD_DB}.unreplayable: their schedules do not replay in "
                             "this TVM; the others are kept and tuning goes on")
        if wrong:
            self.emit_notice(f"{wrong} tuning record(s) set aside in {st.RECORD_DB}.wrong: "
                             "TVM's RewriteLayout packed their weight by the wrong axis; "
                             "their tasks tune again without it")
        self._avoid_layout_rewrite_hazards()
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
            # within the budget (so the end-to-end estimate exists early); under a time
            # budget, within the trials it would hold at COLD_TRIALS_PER_S.
            self.memory.cold_batches = len(self.tasks)
            budget = int(self.meta["budget"])
            minutes = self.options.get("minutes")
            if minutes:
                budget = min(budget, int(60 * float(minutes) * COLD_TRIALS_PER_S))
            self.memory.cold_batch_size = max(2, min(16, budget // len(self.tasks)))

    def _evaluator(self):
        """How a candidate is timed: the median of 3 repeats of at least 10 ms each. With
        25 ms, timing took 0.11-0.15 s of the 0.8-0.9 s a conv:C12 Winograd trial cost
        (this 2-core VM); the confirming step measures the best records 9 more times."""
        from tvm.s_tir import meta_schedule as ms

        return ms.runner.EvaluatorConfig(
            number=1, repeat=3, min_repeat_ms=10, enable_cpu_cache_flush=False
        )

    def _run_timeout(self) -> float:
        return float(self.options.get("run_timeout", 30))

    def _start_processes(self) -> None:
        """Start the builder's pool and, for the local CPU, the runner's process now: their
        TVM imports (2-3 s) then overlap the task extraction instead of following it."""
        from tvm.s_tir import meta_schedule as ms

        from tvmtui.devices.local import cpu_count
        from tvmtui.tuning.arguments import alloc_reused
        from tvmtui.tuning.builder import PersistentBuilder

        self.builder = PersistentBuilder(
            max_workers=cpu_count(), timeout_sec=float(self.options.get("build_timeout", 60))
        )
        self.runner, self._runner_thread = None, None
        if (self.meta.get("device") or {}).get("kind", "local") not in ("local", "cuda"):
            return  # a board's runner asks its tracker first: made in make_parts

        def start_runner() -> None:
            try:  # LocalRunner waits for its process to answer a first job
                self.runner = ms.runner.LocalRunner(timeout_sec=self._run_timeout(),
                                                    evaluator_config=self._evaluator(),
                                                    f_alloc_argument=alloc_reused)
            except Exception:  # noqa: BLE001 - make_parts reports it
                log.exception("local runner")

        self._runner_thread = threading.Thread(target=start_runner, daemon=True,
                                               name="tvmtui-runner-start")
        self._runner_thread.start()

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

    def emit_notice(self, message: str) -> None:
        self.session.append(ev.NOTICE, {"message": message})

    def _on_model_update(self, metrics: dict) -> None:
        self.pending_model_metrics = metrics

    def set_state(self, state: str, reason: str, **extra) -> None:
        status = {ev.RESUMED: ev.RUNNING}.get(state, state)
        self.session.append(ev.STATE, dict(extra, state=state, reason=reason))
        self.session.set_meta(status=status)

    def close(self) -> None:
        for part in ("builder",):
            obj = getattr(self, part, None)
            if obj is not None:
                obj.shutdown()


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


# Trials a second assumed when a time budget sizes the cold pass: a cautious guess (this
# 2-core VM measures 2-3 on the corpus). With a 10-minute budget and batches sized for
# the 20000-trial cap, NudeNet's cold pass (127 tasks x 16) outlasted the budget.
COLD_TRIALS_PER_S = 1.0


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
    minutes = (meta.get("options") or {}).get("minutes")
    control = Control(budget=int(meta["budget"]),
                      deadline=time.time() + 60.0 * float(minutes) if minutes else None)
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
                "minutes": minutes,  # this run's time budget, None without one
                "deadline": control.deadline,  # when its search stops (time.time())
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
        said = {e.get("message") for e in session.iter_events(ev.NOTICE)}
        for note in meta["workload"].get("notices", []):  # e.g. a dynamic batch tuned at 1
            if note not in said:
                tuner.emit_notice(note)
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
            "budget reached" if tuner.trials_total >= control.budget
            else f"time budget reached ({minutes:g} min)" if control.out_of_time()
            else "search space exhausted"
        )
        lost = {"device_lost": True} if control.device_lost else {}
        confirmed, best_ms = {}, tuner.estimate_ms()
        if final == ev.FINISHED:
            try:
                pick = tuner.confirm_best()
            except Exception as exc:  # noqa: BLE001 - the tuned records stand without it
                log.exception("confirm")
                tuner.emit_notice(f"confirming skipped: {type(exc).__name__}: {exc}"[:ERROR_CHARS])
                pick = None
            if pick is not None:
                confirmed = {"confirmed_ms": pick.confirmed_ms, "variant": pick.variant}
                best_ms = pick.tuned_ms
        tuner.set_state(final, reason, trials=tuner.trials_total, best_ms=best_ms,
                        **lost, **confirmed)
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
