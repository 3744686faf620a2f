"""The search loop: a cold pass that samples each task once, then MetaSchedule rounds
over every task still in the race, with a failing task diagnosed rather than fatal.
Part of the worker's `Tuner`."""

from __future__ import annotations

from tvmtui.core import events as ev
from tvmtui.tuning.recording import Recorder
from tvmtui.tuning.state import TunerState

FIRST_BATCH = 4  # candidates in a new session's first measured batch
SLOW_BUILDS = ("winograd",)  # variants whose candidates take seconds to compile


class SearchLoop(TunerState):
    """The `Tuner`'s tuning rounds (see `worker.Tuner` for its state)."""

    def tune(self) -> str:
        """Tune until the budget is spent or a stop is asked; returns the final state."""
        final = self._rounds()
        # A search that finds a space used up while building a batch ends that task with
        # no batch to record: say so here too.
        self._notice_exhausted()
        return final

    def _rounds(self) -> str:
        self._cold_pass()
        failures = 0
        idle: set[int] = set()  # tasks whose turn measured nothing: no turn of theirs again
        while (not self.control.stop and self.trials_total < self.control.budget
               and not self._time_up()):
            before = self.trials_total
            self.retire_losing_variants()
            ids = [i for i, t in enumerate(self.tasks) if not t.failed and i not in idle
                   and self.task_keys.get(i) not in self.memory.retired | self.memory.exhausted]
            if self.control.out_of_time():  # and no variant complete (see _time_up): only
                near = self._nearest_variant()  # its unmeasured tasks, then the end
                ids = [i for i in ids if self.tasks[i].best_s is None
                       and near in self.tasks[i].info.weights]
            picked, batches = self._turn(ids)
            if not picked:
                return ev.FINISHED
            contexts, weights, turn = self._contexts(picked, before + 7919 * failures)
            idle.update(set(picked) - set(turn))  # already scheduled: nothing to tune
            if not contexts:
                continue
            self.turn_end = min(self.control.budget, before + batches * self._batch())
            self.memory.allowance = self.turn_end - before
            self.memory.in_flight = 0
            try:
                self._tune_all(contexts, weights, turn)
            except RuntimeError as exc:
                # A task whose space cannot be searched fails the whole call: find it and
                # tune it without the rule at fault, or fail just that task.
                if self._diagnose(turn):
                    continue
                # Otherwise a schedule the search sampled failed to replay ("The block no
                # longer exists in the IRModule"): seed-dependent, so try another seed.
                failures += 1
                if failures > 3:
                    raise
                self.emit_notice(f"a search round failed ({last_line(exc)}); "
                                 "retrying with another seed")
                continue
            finally:
                self.turn_end = None
            if self.trials_total == before and not self.control.stop:
                idle.update(turn)  # the search found nothing new to measure for them
        return ev.STOPPED if self.control.stop else ev.FINISHED

    def _batch(self) -> int:
        return int(self.options.get("batch") or 32)

    def _tune_all(self, contexts, weights, ids: list[int]) -> None:
        from tvm.s_tir import meta_schedule as ms

        assert self.turn_end is not None  # set by the turn that calls this
        ms.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=str(self.session.path),
            max_trials_global=self.turn_end - self.trials_total,
            num_trials_per_iter=self._batch(),
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
            task_scheduler="round-robin",
        )

    def _turn(self, ids: list[int]) -> tuple[list[int], int]:
        """The tasks of the next tuning call, of those in the race (`ids`), and the batches
        it measures (see `estimate.next_turn`)."""
        from tvmtui.tuning.estimate import choose, next_turn, stakes

        leader, estimate = choose(self.estimates())
        lead = leader if estimate is not None and len(self.plans) > 1 else None
        stake = stakes([(t.info.weights, t.best_s) for t in self.tasks], lead)
        if lead is not None and lead != self.noticed_leader:
            self.noticed_leader = lead
            others = sum(1 for i in ids if lead not in self.tasks[i].info.weights)
            if others:
                label = self.plans.get(lead, {}).get("label", lead)
                self.emit_notice(f"variants: trials go to {label}'s tasks first (leading at "
                                 f"{estimate:.3f} ms); the {others} task(s) only other "
                                 "variants run weigh a quarter")
        picks, batches = next_turn([stake[i] for i in ids], [self.tasks[i].trials for i in ids],
                                   self._batch(), cost=self._trial_costs(ids))
        return [ids[k] for k in picks], batches

    def _trial_costs(self, ids: list[int]) -> list[float] | None:
        """Under a time budget, what a trial of each task takes against the median task's
        (its last batch's seconds per candidate; the median for a task not measured in this
        run): the face detector's NCHW head convolution, reading a blocked input, built in
        6-11 s a candidate where most took 0.3, and its 32-candidate batch had taken 4 of
        the 10 minutes. None without a time budget: trials are the budget then."""
        import statistics

        if self.control.deadline is None:
            return None
        paces = [self.memory.pace_s.get(self.task_keys.get(i, ""), 0.0) for i in ids]
        known = [p for p in paces if p > 0]
        if not known:
            return None
        typical = statistics.median(known)
        return [(p or typical) / typical for p in paces]

    def _contexts(self, ids: list[int], before: int):
        """Tune contexts of the tasks `ids`, each with its own design space; with their
        weights and the tasks they are."""
        from tvm.s_tir import meta_schedule as ms

        from tvmtui.tuning.schedules import module_hash
        from tvmtui.tuning.search import DedupSearch, population_for
        from tvmtui.tuning.spaces import is_tiny, space_generator

        iters = self.options.get("genetic_iters")
        iters = 3 if iters is None else int(iters)
        fixed = self.options.get("population")  # else sized per task and round
        seed = int(self.options.get("seed", 0)) + self.run_index * 1000 + before
        contexts, weights, kept = [], [], []
        # The batch each search is for: the budget's remainder caps it.
        batch = max(1, min(self._batch(), self.control.budget - self.trials_total))
        for i in ids:
            population = int(fixed) if fixed else population_for(
                self.memory, self.task_keys.get(i), iters, batch)
            strategy = DedupSearch(population_size=population, genetic_num_iters=iters,
                                   memory=self.memory, score=self.cost_model.score)
            ctx, weight = ms.relax_integration.extracted_tasks_to_tune_contexts(
                [self.extracted[i]], work_dir=str(self.session.path),
                space=space_generator(self.target, self.tasks[i].without,
                                      is_tiny(self.extracted[i].dispatched[0],
                                              self.tasks[i].info.flops)),
                strategy=strategy,
                num_threads=int(self.meta["target"].get("num-cores", 1)), seed=seed + 31 * i)
            if ctx:  # an already scheduled function has nothing to tune
                contexts += ctx
                weights += weight
                kept.append(i)
                self.task_keys[i] = module_hash(ctx[0].mod)
        return contexts, weights, kept

    def _avoid_layout_rewrite_hazards(self) -> None:
        """Tasks that RewriteLayout would compute wrong (see `kernels/hazards.py`) are tuned
        without it; said once, as a design-space verdict, so a resume keeps it."""
        from tvmtui.kernels.hazards import layout_rewrite_hazard
        from tvmtui.tuning.spaces import Verdict

        for i, task in enumerate(self.tasks):
            if task.without is not None or task.failed:
                continue
            why = layout_rewrite_hazard(self.extracted[i].dispatched[0])
            if why is None:
                continue
            verdict = Verdict(without="postproc:RewriteLayout")
            task.without = verdict.without
            # Its bests so far were measured with it (sessions from before this check).
            event = dict(verdict.to_json(), task=i, why=why, task_name=task.info.name,
                         reset_best=task.best_s is not None)
            self.session.append(ev.TASK_SPACE, event)
            self.tally.space(event)
            self.emit_notice(f"task {i} ({task.info.name}): tuned without RewriteLayout, "
                             f"which would compute it wrong ({why})"
                             + ("; its earlier bests no longer count" if event["reset_best"]
                                else ""))

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

    def _cold_pass(self) -> None:
        """A new session's first, sampled batch of each task, one task at a time.
        MetaSchedule's scheduler sends a batch of every task before it records any: with
        the variants' 50 ResNet-18 tasks the first trial waited for 50 searches and builds
        (over 10 minutes); here each task's trials arrive as soon as they are measured."""
        if self.memory.cold_batches <= 0:
            return  # resumed, or warm-started: there is something to evolve from
        self.memory.cold_pass = True
        try:
            self._cold_batches_in_turn()
        finally:
            self.memory.cold_pass = False
            self.memory.cold_batches = 0

    def _cold_batches_in_turn(self) -> None:
        """Each task's cold batch (see `_cold_batches`); a task that fails its own."""
        for n, (index, size) in enumerate(self._cold_batches()):
            task = self.extracted[index]
            self.memory.quick_first = n == 0
            left = self.control.budget - self.trials_total
            if self.control.stop or left <= 0 or self._time_up():
                break
            if self.tasks[index].failed or self.control.out_of_time() and \
                    self._nearest_variant() not in self.tasks[index].info.weights:
                continue  # out of time: only what completes a variant's estimate
            size = min(left, size)
            self.memory.allowance, self.memory.in_flight = size, 0
            self.memory.cold_batches = 1
            contexts, weights, _ = self._contexts([index], self.trials_total)
            if not contexts:
                continue
            had = self.tasks[index].trials
            try:
                self._tune_one(index, contexts, weights, size)
                if self.tasks[index].trials > had or self.control.stop or had:
                    continue  # (measured before: a small space, e.g. a layout transform's)
                error = "no candidate passed the postprocessors"  # the search gave up on it
            except RuntimeError as exc:  # one task's failure is not the session's
                error = last_line(exc)
            if self._diagnose([index]) and not self.tasks[index].failed:
                self.memory.cold_batches = 1
                contexts, weights, _ = self._contexts([index], self.trials_total + 1)
                try:
                    self._tune_one(index, contexts, weights, size)
                    continue
                except RuntimeError as exc:
                    error = last_line(exc)
            if not self.tasks[index].failed:
                self.emit_notice(f"task {index} ({task.task_name}): its first sampled batch "
                                 f"failed ({error}); the other tasks go on")

    def _cold_batches(self) -> list[tuple[int, int]]:
        """(task, batch size) of the cold pass: cheapest tasks first, and the very first
        batch a few candidates only, so the screen shows a measured trial within seconds
        of the tasks (a first batch of 16 random C12 schedules took 12 s to build and run).
        Cheapest to build, then to run: a Winograd task has the fewest FLOPs but each of
        its candidates compiles 3-5x longer than a direct conv's (C12's first trial came
        at 16.8 s when its Winograd task went first)."""
        order = sorted(range(len(self.tasks)),
                       key=lambda i: (self.tasks[i].info.variant in SLOW_BUILDS,
                                      self.tasks[i].info.flops))
        size = self.memory.cold_batch_size
        batches = [(i, size) for i in order]
        if batches and size > FIRST_BATCH:
            batches[:1] = [(order[0], FIRST_BATCH), (order[0], size - FIRST_BATCH)]
        return batches

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
        end = c.budget if self.turn_end is None else min(c.budget, self.turn_end)
        left = end - self.trials_total - self.memory.in_flight
        self.memory.allowance = 0 if c.stop or self._time_up() else max(0, left)

    def _time_up(self) -> bool:
        """The time budget is spent and the search may end: once a variant has a complete
        estimate (each of its tasks measured), or export would build untuned kernels."""
        return self.control.out_of_time() and self.estimate_ms() is not None

    def _nearest_variant(self) -> str | None:
        """The variant fewest of whose tasks are still unmeasured (the stock one first on
        a tie): what the cold pass completes once the time budget is spent."""
        from tvmtui.tuning.estimate import DEFAULT_VARIANT

        missing: dict[str, int] = {}
        for task in self.tasks:
            for variant in task.info.weights:
                missing[variant] = missing.get(variant, 0) + (
                    task.best_s is None and not task.failed)
        if not missing:
            return None
        return min(missing, key=lambda v: (missing[v], v != DEFAULT_VARIANT))


def last_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[-1] if lines else type(exc).__name__)[:300]
