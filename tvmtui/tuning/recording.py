"""Each measured batch becomes session events (trials, task bests, the round), and the
variant bandit and the end-to-end estimate are updated from it. Part of the worker's `Tuner`."""

from __future__ import annotations

import time

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from tvmtui.core import events as ev
from tvmtui.core.errors import UserError
from tvmtui.sessions import store as st
from tvmtui.tuning.state import TunerState

ERROR_CHARS = 2000  # error messages are cut to this many characters in events


class BatchRecording(TunerState):
    """The `Tuner`'s side of a measured batch (see `worker.Tuner` for its state)."""

    def record_batch(self, task_id, candidates, builder_results, runner_results,
                     remeasured: bool = False, reused_from: str | None = None) -> None:
        from tvmtui.tuning.schedules import module_hash

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
                instruction=task.info.instruction,
                reused_from=reused_from,
                seed=shash in self.memory.seed_hashes,
            )
            self.memory.seed_hashes.discard(shash)
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
        run_wall_s = time.perf_counter() - self.builder.last_batch_end
        if task_id in self.task_keys and candidates:
            self.memory.pace_s[self.task_keys[task_id]] = (
                (self.builder.last_batch_s + run_wall_s) / len(candidates))
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
                    # The evolutionary population of the task's last search.
                    "population": self.memory.populations.get(self.task_keys.get(task_id, "")),
                    "skipped_measured": self.memory.skipped,
                    "seeds_measured": self.memory.seeds_sent,
                    "build_wall_s": round(self.builder.last_batch_s, 3),
                    "run_wall_s": round(run_wall_s, 3),
                    "elapsed_s": time.time() - self.started,
                },
            )
        )
        self.session.append_many(
            out, meta={"trials": self.trials_total, "best_ms": estimate, "variant": variant},
            traces=traces
        )
        self.retire_losing_variants()
        self._notice_exhausted()
        kinds = {event["error_kind"] for name, event in out if name == ev.TRIAL}
        if kinds == {ev.DEVICE_LOST}:
            self._stop_if_unreachable()
        self._obey()

    def _notice_exhausted(self) -> None:
        """Say once for each task whose design space the search found used up."""
        for i, key in self.task_keys.items():
            if key in self.memory.exhausted and i not in self.exhausted_noticed:
                self.exhausted_noticed.add(i)
                task = self.tasks[i]
                self.emit_notice(f"task {i} ({task.info.name}): its design space is used up "
                                 f"after {task.trials} trials; the rest of the budget goes "
                                 "to the other tasks")

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
            self.control.set(stop=True, stop_reason=reason[:ERROR_CHARS], device_lost=True)

    def estimates(self) -> dict[str, float | None]:
        """End-to-end estimate (ms) of each variant, once each of its tasks has a best."""
        from tvmtui.tuning.estimate import variant_estimates

        return variant_estimates((t.info.weights, t.best_s) for t in self.tasks)

    def retire_losing_variants(self) -> None:
        """Stop tuning the tasks only clearly slower variants run (a bandit over variants:
        trials go to the variants still in the race), and those too small to matter."""
        from tvmtui.tuning.estimate import losing_variants, partial_estimates

        if not self.task_keys:
            return
        min_trials: dict[str, int] = {}
        for t in self.tasks:
            if t.info.flops > 0:
                for v in t.info.weights:
                    min_trials[v] = min(min_trials.get(v, t.trials), t.trials)
        labels = {v: p.get("label", v) for v, p in self.plans.items()}
        partial = partial_estimates((t.info.weights, t.best_s, t.trials) for t in self.tasks
                                    if t.info.flops > 0)
        estimates = self.estimates()
        losing = losing_variants(estimates, min_trials, labels, partial)
        for variant, why in losing.items():
            if variant in self.retired_variants:
                continue
            self.retired_variants.add(variant)
            label = self.plans.get(variant, {}).get("label", variant)
            self.emit_notice(f"variants: {label} gets no more trials ({why})")
        for i, task in enumerate(self.tasks):
            if i in self.task_keys and set(task.info.weights) <= self.retired_variants:
                self.memory.retired.add(self.task_keys[i])
        self._retire_negligible_tasks(estimates)

    def _retire_negligible_tasks(self, estimates: dict[str, float | None]) -> None:
        """Stop tuning the tasks too small to move any variant's estimate."""
        from tvmtui.tuning.estimate import negligible_tasks

        small = negligible_tasks([(t.info.weights, t.best_s, t.trials) for t in self.tasks],
                                 estimates)
        for i, share in small.items():
            key = self.task_keys.get(i)
            if key is None or key in self.memory.retired or key in self.memory.exhausted:
                continue
            self.memory.retired.add(key)
            task = self.tasks[i]
            self.emit_notice(f"task {i} ({task.info.name}) gets no more trials: "
                             f"{1000 * (task.best_s or 0.0):.4f} ms after {task.trials} trials, "
                             f"{100 * share:.1f}% of the estimate")

    def estimate_ms(self) -> float | None:
        """The session's estimate: that of the fastest complete variant."""
        from tvmtui.tuning.estimate import choose

        return choose(self.estimates())[1]


def _trace_text(sch) -> str:
    try:
        return "\n".join(str(line) for line in sch.trace.as_python(remove_postproc=False))
    except Exception as exc:  # noqa: BLE001 - a trace we cannot print must not stop tuning
        return f"(trace unavailable: {exc})"


@derived_object
class Recorder(PyMeasureCallback):
    """Turns each measured batch into session events, then obeys control requests."""

    def __init__(self, tuner: TunerState, task_ids: list[int] | None = None):
        super().__init__()
        self.tuner = tuner
        self.task_ids = task_ids  # the session's index of each task of this tuning call

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        index = self.task_ids[task_id] if self.task_ids else task_id
        self.tuner.record_batch(index, measure_candidates, builder_results, runner_results)
