"""Run the baselines beside tuned TVM: time them the same way, gate every speedup on parity.

Timing protocol (the same for every runtime): each runtime lives in its own process (see
`host`), all pinned to `threads` CPUs when fewer than all. Warm-up runs first; then the
timed runs are split into rounds, and each round visits the runtimes in a rotated order,
so slow drift of the machine (frequency, a neighbour's load) spreads over all of them
instead of landing on one. The garbage collector is off while timing; a 0.25 s rest
between blocks lets the previous runtime's spinning threads go to sleep, and each block
starts with at least 50 ms of untimed runs to wake this runtime's threads (and, on a VM,
the idle virtual CPU: without it timings here were bimodal, 0.47 or 0.93 ms for the same
ONNX Runtime conv). Median and inter-quartile range are reported.

Parity (`parity`): a failed gate voids the speedup: it is reported as null with the
error, never as a number; a float miss gets a verdict against the graph in float64
(`exact`).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tvmtui.baselines import floattwin as ft
from tvmtui.baselines import runners as rn
from tvmtui.baselines.builds import tuned_library, untuned_library
from tvmtui.baselines.disputes import judge_misses
from tvmtui.baselines.host import RemoteRunner, RunnerSpec, RuntimeFailed
from tvmtui.baselines.model import BenchModel
from tvmtui.baselines.parity import TOLERANCE, Parity, check_parity
from tvmtui.core.errors import UserError

if TYPE_CHECKING:
    from tvmtui.sessions.store import Session


@dataclass
class BaselineResult:
    """One row of the contract: `tvmtui bench --json` -> `baselines[]`."""

    name: str
    available: bool
    reason: str | None = None
    median_ms: float | None = None
    iqr_ms: float | None = None
    threads: int | None = None
    speedup: float | None = None  # baseline median / tuned median; null unless parity passed
    parity: Parity | None = None
    runs: int = 0
    detail: str | None = None
    speedup_unchecked: float | None = None  # the ratio even when parity failed (not a win)
    device: str | None = None  # where it ran: "local CPU" or "board HOST:PORT[, emulated]"


@dataclass
class ReferenceCheck:
    """Rows of a quantized TFLite model against LiteRT's reference kernels (untimed):
    `steps[row]` is its worst output difference in quantization steps, over `frames`."""

    runtime: str
    frames: int
    steps: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def note(self) -> str:
        rows = ", ".join(f"{name} {_steps_text(v)}" for name, v in self.steps.items())
        return f"against {self.runtime} on {self.frames} frame(s): {rows}"


def _steps_text(value: float | None) -> str:
    if value is None:
        return "failed"
    return f"{value:g} step" + ("" if value == 1 else "s")


@dataclass
class BenchReport:
    workload: str
    graph_hash: str
    target: dict
    threads: int
    frames: int
    tolerance: float
    reference: str | None
    session: str | None
    tuned_trials: int | None
    baselines: list[BaselineResult]
    variant: str | None = None  # the layout/algorithm variant tuned TVM runs
    layers: list[dict] = field(default_factory=list)  # per task of it: variant, best, share
    notes: list[str] = field(default_factory=list)
    # a quantized TFLite model: each row's outputs against LiteRT's reference kernels
    reference_kernels: ReferenceCheck | None = None
    created: float = field(default_factory=time.time)
    seconds: float = 0.0
    device: str = "local CPU"  # where every row ran
    # an int8 zoo twin: its float network tuned on this chip, timed beside it (`floattwin`)
    float_twin: dict | None = None
    inputs: str = ""  # what the parity frames are: each input's range, or the --inputs folder

    def to_json(self) -> dict:
        return asdict(self)

    def best_baseline(self) -> BaselineResult | None:
        """The fastest baseline that passed parity (what tuned TVM has to beat)."""
        rows = [(b.median_ms, b) for b in self.baselines
                if b.name != "tvm-tuned" and b.median_ms is not None and b.speedup is not None]
        return min(rows, key=lambda row: row[0])[1] if rows else None

    def summary(self) -> dict:
        """What a session keeps in its metadata for listings."""
        best = self.best_baseline()
        tuned = next((b for b in self.baselines if b.name == "tvm-tuned" and b.available), None)
        return {
            "created": self.created,
            "tvm_ms": tuned.median_ms if tuned else None,
            "vs": best.name if best else None,
            "speedup": best.speedup if best else None,
            "failed": [b.name for b in self.baselines if b.parity and not b.parity.passed],
            "device": self.device,
        }


@dataclass
class BenchRequest:
    model: BenchModel
    target: dict
    baselines: list[str]
    frames: list[list[np.ndarray]]
    tolerance: float = TOLERANCE
    threads: int = 1
    warmup: int = 10
    repeats: int = 100
    max_seconds: float = 10.0
    session: Session | None = None  # whose records give tvm-tuned
    tuned_reason: str | None = None  # why there is no tuned session
    options: dict = field(default_factory=dict)
    graph_hash: str = ""
    device: dict | None = None  # a board session's device: everything runs on that board
    float_twin: ft.FloatTwin | None = None  # timed beside tvm-tuned, on its own frame
    inputs: str = ""  # what the frames are (`frames.describe`), for the report


class BoardLost(UserError):
    """The board stopped answering mid-bench; `report` has its rows failed, unsaved."""

    def __init__(self, message: str, report: BenchReport):
        super().__init__(message)
        self.report = report


# ---- timing ---------------------------------------------------------------------------------
def time_runners(runners: list[RemoteRunner], frame: list[np.ndarray], warmup: int,
                 repeats: int, max_seconds: float, rounds: int = 5,
                 own_frames: dict[str, list[np.ndarray]] | None = None) -> dict[str, list[float]]:
    """Seconds per timed run for each runner, measured in interleaved rounds. A runner
    whose one run is slow gets fewer runs (`max_seconds` in all, never fewer than 5);
    one named in `own_frames` runs its own frame (another model: an int8 twin's float)."""
    plan = {}
    for r in runners:
        r.prepare((own_frames or {}).get(r.name, frame))
        per_run = r.warm(warmup)
        plan[r.name] = max(5, min(repeats, int(max_seconds / max(per_run, 1e-6))))
    samples: dict[str, list[float]] = {r.name: [] for r in runners}
    for rnd in range(rounds):
        order = runners[rnd % len(runners):] + runners[:rnd % len(runners)]
        for r in order:
            samples[r.name] += r.time(-(-plan[r.name] // rounds))
            time.sleep(0.25)
    return samples


# ---- parity ---------------------------------------------------------------------------------
# ---- the whole run ----------------------------------------------------------------------------
def _pin(threads: int) -> None:
    """Keep this process (and the runtimes' thread pools it starts) on `threads` CPUs."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return
    if threads < len(cpus):
        os.sched_setaffinity(0, cpus[:threads])


def _spec(req: BenchRequest, name: str, trials: int | None) -> RunnerSpec:
    """Where each runtime comes from; the TVM builds are compiled here, in the parent."""
    common = RunnerSpec(name=name, model=req.model, threads=req.threads, options=req.options)
    if name == "tvm-tuned":
        if req.session is None:
            raise rn.Unavailable(req.tuned_reason or "no tuned session")
        try:
            lib = tuned_library(req.session)
        except UserError as exc:
            raise rn.Unavailable(str(exc)) from None
        return replace(common, library=lib, detail=f"TVM + MetaSchedule, {trials} trials")
    if name == "tvm-untuned":
        return replace(common, library=untuned_library(req.model, req.target),
                       detail="TVM, no tuning records")
    return common


def _open_board(req: BenchRequest):
    """The board of a board session, or None for the local CPU."""
    if req.device is None:
        return None
    from tvmtui.baselines.board import Board

    try:
        return Board(req.device)
    except (UserError, RuntimeError, OSError) as exc:
        raise UserError(f"cannot bench on the board: {exc}") from None


def _runner(spec: RunnerSpec, board) -> Any:
    """A runtime's client: a process here, or the same runtime on the board (a
    `BoardRunner` answers the same requests as a `RemoteRunner`)."""
    if board is None:
        return RemoteRunner(spec)
    from tvmtui.baselines.board import BoardRunner

    return BoardRunner(board, spec)


def _load_all(req: BenchRequest, wanted: list[str], trials: int | None, board, where: str,
              results: dict[str, BaselineResult]) -> dict:
    """Start each runtime (locally or on the board); a row for every one, loaded or not."""
    loaded = {}
    for name in wanted:
        try:
            spec = _spec(req, name, trials)
        except rn.Unavailable as exc:
            results[name] = BaselineResult(name, False, reason=str(exc), device=where)
            continue
        runner = _runner(spec, board)
        try:
            reason = runner.start()
        except RuntimeFailed as exc:  # the board went away while loading it
            reason = str(exc)
        if reason is not None:
            results[name] = BaselineResult(name, False, reason=reason, device=where)
            continue
        loaded[name] = runner
        results[name] = BaselineResult(name, True, threads=req.threads, detail=runner.detail,
                                       device=where)
    return loaded


def _measure(req: BenchRequest, loaded: dict, results: dict[str, BaselineResult],
             twin: RemoteRunner | None = None):
    """Parity against the reference, then timing (the float twin's too, on its own
    frame); returns (reference, samples)."""
    reference = loaded.get("tvm-tuned") or loaded.get("tvm-untuned")
    if reference is not None:
        others = [r for r in loaded.values() if r is not reference]
        for name, parity in check_parity(reference, others, req.frames, req.tolerance,
                                         req.model.output_steps).items():
            results[name].parity = parity
        judge_misses(req, reference, loaded, results)
        if reference.name == "tvm-tuned" and "tvm-untuned" in loaded:
            # the tuned row's own check: the same comparison, seen from its side
            results["tvm-tuned"].parity = results["tvm-untuned"].parity
    runners, own = list(loaded.values()), {}
    if twin is not None and req.float_twin is not None:
        from tvmtui.baselines.frames import seeded_frames

        runners.append(twin)
        own[twin.name] = seeded_frames(req.float_twin.model, 1)[0]
    samples = time_runners(runners, req.frames[0], req.warmup, req.repeats, req.max_seconds,
                           own_frames=own)
    return reference, samples


def _reference_kernels(req: BenchRequest, loaded: dict, board) -> ReferenceCheck | None:
    """A quantized TFLite model's rows (TVM, LiteRT, and ONNX Runtime and OpenVINO on its
    QDQ twin) checked against LiteRT's reference kernels on the same frames, run where the
    rows ran (here or on the board); None for float models."""
    rows = [r for name, r in loaded.items() if name != "acl"]
    if not any(req.model.output_steps) or not req.model.has("tflite") or not rows:
        return None
    ref = _runner(_spec(req, rn.REFERENCE_KERNELS, None), board)
    try:
        reason = ref.start()
        if reason is not None:
            return None
        check = ReferenceCheck(ref.detail, len(req.frames))
        for name, parity in check_parity(ref, rows, req.frames, req.tolerance,
                                         req.model.output_steps).items():
            check.steps[name] = parity.max_steps if parity.error is None else None
            if parity.error:
                check.errors[name] = parity.error
        return check
    finally:
        ref.close()


def run_bench(req: BenchRequest) -> BenchReport:
    start = time.time()
    board = _open_board(req)
    if board is None:
        _pin(req.threads)
    where = "local CPU" if board is None else board.label + (", emulated" if board.emulated else "")
    session = req.session
    trials = int(session.meta().get("trials", 0)) if session is not None else None
    wanted = [*req.baselines]
    if "tvm-tuned" not in wanted:
        wanted.append("tvm-tuned")
    results: dict[str, BaselineResult] = {}
    reference, samples, kernels = None, {}, None
    loaded = _load_all(req, wanted, trials, board, where, results)
    twin, twin_reason = (None, "") if board is not None or "tvm-tuned" not in loaded \
        else ft.start(req.float_twin, req.threads, req.options)
    try:
        if board is None or not board.lost:
            asked = [n for n in req.baselines if n != "tvm-tuned"] or req.baselines
            if not any(n in loaded for n in asked):
                place = "here" if board is None else "on the board"
                raise UserError(f"none of the baselines asked for can run {place}: " + "; ".join(
                    f"{n}: {results[n].reason}" for n in asked))
            reference, samples = _measure(req, loaded, results, twin)
            kernels = _reference_kernels(req, loaded, board)
    except RuntimeFailed:
        if board is None or not board.lost:
            raise
    finally:
        for runner in [*loaded.values(), *([twin] if twin else [])]:
            runner.close()
    twin_times = samples.pop(ft.FLOAT_TWIN, None)
    if board is not None and board.lost:
        # Nothing measured on a board that went away is trusted: its rows fail, unsaved.
        for row in results.values():
            row.available, row.reason, row.parity = False, board.lost, None
        samples = {}
    for name, times in samples.items():
        ms = np.asarray(times) * 1000
        q1, med, q3 = np.percentile(ms, [25, 50, 75])
        results[name].median_ms = float(med)
        results[name].iqr_ms = float(q3 - q1)
        results[name].runs = len(times)
    tuned = results.get("tvm-tuned")
    if tuned is not None and tuned.median_ms:
        for row in results.values():
            if row.name == "tvm-tuned" or row.median_ms is None:
                continue
            row.speedup_unchecked = row.median_ms / tuned.median_ms
            if row.parity is not None and row.parity.passed:
                row.speedup = row.speedup_unchecked
    variant, layers = None, []
    if session is not None:
        from tvmtui.sessions.view import view_of

        view = view_of(session)
        variant, layers = view.label(view.variant), view.layers()
        for layer in layers:
            layer["variant_label"] = view.label(layer["variant"])
    report = BenchReport(
        variant=variant,
        layers=layers,
        workload=req.model.name,
        graph_hash=req.graph_hash,
        target=req.target,
        threads=req.threads,
        frames=len(req.frames),
        tolerance=req.tolerance,
        reference=reference.name if reference else None,
        session=session.name if session is not None else None,
        tuned_trials=trials,
        baselines=[results[n] for n in wanted],
        seconds=round(time.time() - start, 1),
        device=where,
        reference_kernels=kernels,
        inputs=req.inputs,
    )
    if kernels is not None:
        report.notes.append(kernels.note())
    if req.float_twin is not None and board is None:
        report.float_twin = ft.report(req.float_twin, twin_times,
                                      tuned.median_ms if tuned else None, twin_reason)
        report.notes.append(ft.note(report.float_twin))
    if board is not None:
        if board.emulated:
            report.notes.append(f"measured on an emulated board ({board.emulated}): the "
                                "timings and speedups are meaningless, parity is what counts")
        if board.lost:
            raise BoardLost(f"{board.lost}: nothing was saved; bench again when it is back",
                            report)
    return report


def parse_baselines(text: str | None) -> list[str]:
    if not text:
        return list(rn.DEFAULT)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"--baselines {text!r} names no baseline: choose from {', '.join(rn.NAMES)}")
    bad = [n for n in names if n not in rn.NAMES]
    if bad:
        raise UserError(
            f"unknown baseline {', '.join(bad)}: choose from {', '.join(rn.NAMES)}"
        )
    return names
