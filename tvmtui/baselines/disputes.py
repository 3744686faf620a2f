"""A float parity miss judged: against the graph in float64 on the frame where it missed
most (`exact`), then layer by layer (`layers`) where the baseline read the model's own file."""

from __future__ import annotations

from typing import Any

import numpy as np

from tvmtui.baselines.host import RemoteRunner
from tvmtui.baselines.model import BenchModel


def judge_misses(req: Any, reference: RemoteRunner, loaded: dict, results: dict) -> None:
    """Each float output that missed the tolerance (`results`: bench's rows by runtime;
    `req`: its request), judged against the graph in float64 on the frame where it missed
    most (`exact`): which side is off; then layer by layer."""
    from tvmtui.baselines.exact import ExactReference, judge

    exact = ExactReference(req.model)
    for name, runner in loaded.items():
        parity = results[name].parity
        if runner is reference or parity is None or parity.passed or parity.error:
            continue
        disputed = [row["index"] for row in parity.outputs
                    if not row["passed"] and "max_rel_err" in row]
        if not disputed or parity.worst_frame is None:
            continue
        frame = req.frames[parity.worst_frame]
        try:
            parity.verdict, parity.exact = judge(
                exact, frame, parity.worst_frame, reference.infer(frame), runner.infer(frame),
                reference.name, name, disputed, req.tolerance)
        except Exception as exc:  # noqa: BLE001 - the verdict is extra; the miss stands
            parity.verdict = f"no float64 verdict: {type(exc).__name__}: {exc}"[:300]
            continue
        if req.device is None and _reads_native(name, req.model):
            _judge_layers(req, name, reference.name, frame, parity)


def _reads_native(name: str, model: BenchModel) -> bool:
    """Whether runtime `name` read the model's own file (not a twin in another format)."""
    own = {"tflite": ("tflite", "acl"), "onnx": ("onnxruntime",)}[model.native]
    return len(model.files) == 1 or name in own


def _judge_layers(req: Any, name: str, reference: str, frame: list[np.ndarray],
                  parity) -> None:
    """The dispute traced layer by layer (`layers`): its summary joins the verdict, its
    rows go to `exact["layers"]`."""
    from tvmtui.baselines.layers import judge_layers, run_layers

    try:
        sides = run_layers(req.model, req.target, name, req.threads, req.options, frame)
        said, rows = judge_layers(sides, reference, name, req.tolerance)
    except Exception as exc:  # noqa: BLE001 - the trace is extra; the verdict stands
        said, rows = f"no layer-by-layer trace: {type(exc).__name__}: {exc}"[:300], []
    parity.verdict += "; " + said
    parity.exact["layers"] = rows
