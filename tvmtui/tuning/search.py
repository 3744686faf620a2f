"""Evolutionary search that never sends an already-measured schedule to the board again.

MetaSchedule's `EvolutionarySearch` only remembers what it measured itself (upstream
TODO: "add records from the database to avoid re-measuring"), so a resumed session would
re-measure the database's best schedules. This wrapper filters every batch against the
structural hashes of everything the session has measured, and asks the cost model for the
score of each candidate at the moment it is picked.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch, PySearchStrategy

from tvmtui.tuning.schedules import module_hash

MAX_REGENERATE = 4  # batches to draw before deciding the space near the records is used up
# A space is used up when MAX_REGENERATE batches in a row bring nothing new. Batches that
# bring only a few are no sign of it in a small space (no tile to sample, like a blocked
# Winograd's few register tiles): each round samples 32 of it afresh, starting from the
# best measured records, and repeats itself. Ended at the first batch under half new, C12's
# Winograd task stopped after 17 of its 32 schedules (4 register tiles x 4 unrolls x 2)
# and the best was its 24th; two such batches in a row still ended a 31-schedule space at
# 20. Searching on costs a round of sampling (2-4 s), not an evolution.
SMALL_SPACE_POPULATION = 32  # evolution's population for a space with no tile to sample
COLD_SAMPLES_PER_TRIAL = 4  # random schedules sampled per candidate of a cold batch
# Unless --population fixes it, each round sizes a task's population so that its search
# takes about as long as measuring the last batch did (at least MIN_SEARCH_S): a schedule
# costs 15-40 ms to sample, postprocess and score, so the old fixed 256 x (3 + 1) spent
# 17-38 s per round evolving a 16-channel conv whose batch took 2 s to build and run.
MAX_POPULATION = 256
MIN_POPULATION = 64  # and at least twice the batch
MIN_SEARCH_S = 3.0
# The session's first batch is what the screen waits for: it takes the sampled schedules
# least unrolled first. One C12 candidate that asked LLVM to unroll 512 steps built in
# 5.7 s, its batch-mates (16-64) in 0.2-0.3 s, and the first trial waited for it.
UNROLL_KEY = "pragma_auto_unroll_max_step"
QUICK_POOL = 16  # sampled schedules it picks them from
# An evolved batch asks for a few more than it sends. A candidate dropped as measured
# before left the batch short, and the rest of the turn's allowance (often one trial) cost
# a whole evolution: C12's last trial of 64 took 8.5 s. What a batch has no room for waits
# for the task's next call in the same turn, which sends it without searching if it is
# all that call may send.
SPARE = 4


@dataclass
class SearchMemory:
    """Shared by every clone of the strategy (TVM clones it per task) and the worker."""

    known: set[str] = field(default_factory=set)  # hashes of every measured schedule
    scores: dict[str, float] = field(default_factory=dict)  # cost-model score at pick time
    skipped: int = 0  # candidates dropped because they were measured before
    allowance: int | None = None  # candidates still allowed (budget); 0 ends the search
    in_flight: int = 0  # handed out but not yet recorded (the scheduler overlaps tasks)
    search_s: float = 0.0  # wall time of the last generate call
    cold_batches: int = 0  # batches to draw without evolution (nothing to evolve from yet)
    cold_pass: bool = False  # in the cold pass: no evolved batch follows a short cold one
    cold_batch_size: int = 16  # a small first batch: first results sooner
    retired: set[str] = field(default_factory=set)  # tasks (module hashes) to tune no more
    seeded: set[str] = field(default_factory=set)  # tasks whose seeds (`seeds.py`) were drawn
    seeds_sent: int = 0  # candidates of cold batches that were seeds
    seed_hashes: set[str] = field(default_factory=set)  # those not yet recorded
    pending_seeds: dict[str, list] = field(default_factory=dict)  # per task: cut from a batch
    exhausted: set[str] = field(default_factory=set)  # tasks whose space is used up
    enumerated: set[str] = field(default_factory=set)  # small spaces sampled per design
    spaces: dict[str, list | None] = field(default_factory=dict)  # small spaces, enumerated
    unit_s: dict[str, float] = field(default_factory=dict)  # per task: search s per schedule
    populations: dict[str, int] = field(default_factory=dict)  # per task: its last search's
    pace_s: dict[str, float] = field(default_factory=dict)  # per task: s to measure one
    quick_first: bool = False  # the next cold batch takes its quickest builds (see UNROLL_KEY)


def population_for(memory: SearchMemory, key: str | None, iters: int, batch: int) -> int:
    """An evolutionary population whose search (population x (iters + 1) schedules sampled
    or mutated, then scored) should take about as long as measuring the `batch` candidates
    it is for, at the pace the task's last batch was built and run. (Sized by the last
    batch of any task, C12's final 2 trials searched 11 s, after a Winograd batch of 16
    that took 13 s to measure.)"""
    floor = max(MIN_POPULATION, 2 * batch)
    unit = memory.unit_s.get(key) if key else None
    if not key or unit is None or unit <= 0:
        return max(floor, MAX_POPULATION)
    budget = max(MIN_SEARCH_S, memory.pace_s.get(key, 0.0) * batch)
    return max(floor, min(MAX_POPULATION, int(budget / (unit * (iters + 1)))))


def unroll_steps(candidate) -> int:
    """The deepest unrolling a candidate asks of the compiler (0: none)."""
    return max((int(inst.inputs[1]) for inst in candidate.sch.trace.insts
                if inst.kind.name == "Annotate" and str(inst.attrs[0]) == UNROLL_KEY),
               default=0)


@derived_object
class DedupSearch(PySearchStrategy):
    """Delegates to EvolutionarySearch; drops candidates whose hash is already known."""

    def __init__(
        self,
        *,
        population_size: int,
        genetic_num_iters: int,
        memory: SearchMemory,
        score: Callable | None = None,
        inner=None,
        cold=None,
    ) -> None:
        super().__init__()
        self.population_size = population_size
        self.genetic_num_iters = genetic_num_iters
        self.memory = memory
        self.score = score
        self.inner = inner or EvolutionarySearch(
            population_size=population_size, genetic_num_iters=genetic_num_iters
        )
        # With no measured records and an untrained model, evolution only reshuffles random
        # samples by random scores: the first batch samples the space directly instead, and
        # samples a few times the batch, not the whole population (sooner first trials).
        cold_population = min(population_size, COLD_SAMPLES_PER_TRIAL * memory.cold_batch_size)
        self.cold = cold or EvolutionarySearch(
            population_size=cold_population, genetic_num_iters=0,
            init_min_unmeasured=min(50, cold_population // 2),
        )
        self.active = self.inner
        self.context: Any = None  # TVM's TuneContext, given before the search starts
        self.key = ""  # its module's hash (`module_hash`)
        self.design_spaces: list = []
        self.batch = memory.cold_batch_size
        self.small_space = False
        self.spare: list = []  # evolved candidates a batch of this turn had no room for

    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self.key = module_hash(context.mod)
        self.inner._initialize_with_tune_context(context)
        self.cold._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        self.design_spaces = list(design_spaces)
        self.batch = num_trials_per_iter
        self.small_space = not any(inst.kind.name == "SamplePerfectTile"
                                   for design in self.design_spaces
                                   for inst in design.trace.insts)
        if self.small_space:
            # No tile to sample (a layout transform, a blocked Winograd's fixed register
            # tiles): a few dozen schedules in all, so a small population sampled afresh
            # and ranked by the cost model finds them, without evolving it; the full one
            # cost a blocked Winograd 13 s a generation scoring its big stages, one evolved
            # generation of 32 still 4 s (C12: for a batch of 4), and sampling until 50 of
            # it are unmeasured never ends well in a space this small.
            population = min(self.population_size, SMALL_SPACE_POPULATION)
            self.inner = EvolutionarySearch(population_size=population, genetic_num_iters=0,
                                            init_min_unmeasured=population // 4,
                                            max_fail_count=2)
            self.inner._initialize_with_tune_context(self.context)
            # Its cold batch too: C12's blocked Winograd sampled 64 schedules (7.8 s) to
            # send 16.
            self.cold = EvolutionarySearch(population_size=population, genetic_num_iters=0,
                                           init_min_unmeasured=population // 2)
            self.cold._initialize_with_tune_context(self.context)
        self.inner.pre_tuning(max_trials + SPARE, num_trials_per_iter + SPARE, design_spaces,
                              database, cost_model)
        # A cold batch samples more than it sends (the allowance cuts it): SPARE to make up
        # for candidates measured before (C12's NCHW cold batch sent 15 of 16, and its
        # remaining trial later cost a full search), and a quick first batch picks from more.
        pool = max(num_trials_per_iter + SPARE, QUICK_POOL if self.memory.quick_first else 0)
        self.cold.pre_tuning(max(max_trials, pool), pool, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()
        self.cold.post_tuning()

    def generate_measure_candidates(self):
        start = time.perf_counter()
        try:
            return self._generate()
        finally:
            self.memory.search_s = time.perf_counter() - start

    def _generate(self):
        allowance = self.memory.allowance
        if ((allowance is not None and allowance <= 0) or self.key in self.memory.retired
                or self.key in self.memory.exhausted):
            return None  # the scheduler then terminates the task itself
        self.active = self.inner
        if self.memory.cold_batches > 0:
            self.memory.cold_batches -= 1
            self.active = self.cold
            cap = self.memory.cold_batch_size
            allowance = cap if allowance is None else min(allowance, cap)
        elif self.memory.cold_pass:
            # A cold batch that lost a candidate to the dedup leaves its task short of the
            # cold pass's trials, and the scheduler asks again: an evolved search of the
            # full population (8 s on C12) for one trial, ahead of the other tasks.
            return None
        spare, self.spare = self._unmeasured(self.spare), []
        if self.active is self.inner and spare and allowance is not None \
                and allowance <= len(spare):
            batch, self.spare = spare[:allowance], spare[allowance:]
            return self._send(batch, [module_hash(c.sch.mod) for c in batch])
        space = self._space()
        if space is not None:
            return self._from_space(space, allowance)
        seeded = self._seeds()
        designs = self._one_per_design() if self.active is self.cold else []
        quick, self.memory.quick_first = self.memory.quick_first, False
        for _ in range(MAX_REGENERATE):
            started = time.perf_counter()
            candidates = self.active.generate_measure_candidates()
            self._timed(time.perf_counter() - started)
            if quick and candidates:
                candidates = sorted(candidates, key=unroll_steps)
            if candidates is None and not seeded and not designs:
                return None
            fresh, hashes = [], []
            for cand in [*seeded, *designs, *(candidates or [])]:
                h = module_hash(cand.sch.mod)
                if h in self.memory.known or h in hashes:
                    self.memory.skipped += 1
                    continue
                fresh.append(cand)
                hashes.append(h)
            limit = allowance
            if seeded or self.active is self.inner:  # (the inner asks for SPARE more)
                limit = self.batch if limit is None else min(limit, self.batch)
            if limit is not None:
                # Seeds a batch has no room for (a quick first batch sends 4 of D1's 12)
                # lead the task's next batch, evolved or not.
                cut = [c for c in fresh[limit:] if any(c is x for x in seeded)]
                if cut:
                    self.memory.pending_seeds[self.key] = cut
                if self.active is self.inner:
                    self.spare = [c for c in fresh[limit:] if not any(c is x for x in cut)]
                fresh, hashes = fresh[:limit], hashes[:limit]
            sent = [h for c, h in zip(fresh, hashes) if any(c is x for x in seeded)]
            self.memory.seeds_sent += len(sent)
            self.memory.seed_hashes.update(sent)
            seeded, designs = [], []
            if fresh:
                return self._send(fresh, hashes)
        self.memory.exhausted.add(self.key)  # batch after batch brought nothing new
        return None

    def _space(self) -> list | None:
        """A small space's every schedule as candidates (see `schedules.every_schedule`), or
        None for a space too big or not enumerable: sampled then, as the others."""
        from tvmtui.tuning.schedules import every_schedule

        if not self.small_space:
            return None
        if self.key not in self.memory.spaces:
            postprocs = list(self.context.space_generator.postprocs)
            found = every_schedule(self.context.mod, self.design_spaces, postprocs)
            if found is not None:
                # In a random order: taken in the enumeration's, C12's Winograd cold batch
                # held only the two shallowest of its four unroll depths.
                random.Random(int(self.context.rand_state)).shuffle(found)
            self.memory.spaces[self.key] = (
                None if found is None else [self._candidate(sch) for sch in found])
        return self.memory.spaces[self.key]

    def _from_space(self, space: list, allowance: int | None):
        """The next batch of an enumerated space: its unmeasured schedules, the cost
        model's favourites first (the session's first batch: the least unrolled); None
        once every schedule has been measured."""
        left = self._unmeasured(space)
        if not left:
            self.memory.exhausted.add(self.key)
            return None
        quick, self.memory.quick_first = self.memory.quick_first, False
        if quick:
            left = sorted(left, key=unroll_steps)
        elif self.active is self.inner:
            scores = self.score(self.context, left) if self.score else None
            if scores is not None:
                left = [c for _, c in sorted(zip(scores, left), key=lambda x: -x[0])]
        limit = self.batch if allowance is None else min(allowance, self.batch)
        batch = left[:limit]
        return self._send(batch, [module_hash(c.sch.mod) for c in batch])

    def _unmeasured(self, candidates: list) -> list:
        return [c for c in candidates if module_hash(c.sch.mod) not in self.memory.known]

    def _send(self, fresh: list, hashes: list[str]) -> list:
        """Hand a batch to the builder: count it against the allowance, keep its scores."""
        self.memory.in_flight += len(fresh)
        if self.memory.allowance is not None:
            self.memory.allowance -= len(fresh)
        scores = self.score(self.context, fresh) if self.score else None
        if scores is not None:
            self.memory.scores.update(zip(hashes, scores))
        return fresh

    def _timed(self, seconds: float) -> None:
        """Remember what one schedule cost this task's search (see `population_for`)."""
        strategy = self.active
        self.memory.populations[self.key] = strategy.population_size
        units = strategy.population_size * (strategy.genetic_num_iters + 1)
        if units > 0:
            self.memory.unit_s[self.key] = seconds / units

    def _one_per_design(self) -> list:
        """A small space's first batch starts with a schedule of each design space."""
        from tvmtui.tuning.schedules import one_per_design

        if not self.small_space or self.key in self.memory.enumerated:
            return []
        self.memory.enumerated.add(self.key)
        postprocs = list(self.context.space_generator.postprocs)
        return [self._candidate(sch) for sch in
                one_per_design(self.context.mod, self.design_spaces, postprocs)]

    @staticmethod
    def _candidate(sch):
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    def _seeds(self) -> list:
        """This task's register-blocked starting points: those a batch had no room for,
        then, the first time it is cold-sampled, all of them."""
        from tvmtui.graph.blocking import vector_block, vector_registers
        from tvmtui.tuning.seeds import seeds

        pending = self.memory.pending_seeds.pop(self.key, [])
        if (self.active is not self.cold or self.key in self.memory.seeded
                or not self.design_spaces):
            return pending
        self.memory.seeded.add(self.key)
        postprocs = list(self.context.space_generator.postprocs)
        target = self.context.target
        return pending + [self._candidate(sch) for sch in
                          seeds(self.context.mod, self.design_spaces, postprocs,
                                lanes=vector_block(target), vregs=vector_registers(target))]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.active.notify_runner_results(measure_candidates, results)

    def clone(self):
        return DedupSearch(
            population_size=self.population_size,
            genetic_num_iters=self.genetic_num_iters,
            memory=self.memory,
            score=self.score,
            inner=self.inner.clone(),
            cold=self.cold.clone(),
        )
