"""The parity gate: every runtime's outputs against the reference on the same frames.

Tuned TVM (or, without a tuned session, untuned TVM) is the reference. Each baseline's
outputs are compared element by element: `rel = |a - b| / max(|b|, 1)` (absolute for
values below 1, relative above); the gate passes when the largest `rel` is at most the
tolerance. Quantized outputs are compared in whole quantization steps. Figures are kept
per output, with the frame of the largest miss for `exact` to judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tvmtui.baselines.host import RemoteRunner, RuntimeFailed

TOLERANCE = 1e-4
# A quantized output passes within this many of its quantization steps. Since rewrite
# revision 14 TVM computes int8 layers as LiteRT's reference kernels do (0 steps from them);
# LiteRT's own XNNPACK kernels requantize in float and differ from the reference by up to
# 2 steps at a MobileNet's or DQN's output, as did TVM's float (QDQ) lowering before 14.
QUANT_STEPS = 2


@dataclass
class Parity:
    max_abs_err: float | None
    max_rel_err: float | None
    frames: int
    passed: bool
    against: str  # the reference it was compared with
    error: str | None = None  # why it failed, when it is not a plain tolerance miss
    max_steps: float | None = None  # quantized outputs: worst error in quantization steps
    # per output: index, shape, max_abs_err, max_rel_err (or max_steps), passed
    outputs: list[dict] = field(default_factory=list)
    # a float miss judged against the graph in float64 (`exact.judge`): who is off, and by how much
    verdict: str | None = None
    exact: dict | None = None
    worst_frame: int | None = field(default=None, repr=False)  # where the largest miss was


def _problem(ref: list[np.ndarray], got: list[np.ndarray]) -> str | None:
    """Why a frame's outputs cannot be compared at all, or None."""
    if len(ref) != len(got):
        return f"{len(got)} outputs, the reference has {len(ref)}"
    for i, (a, b) in enumerate(zip(got, ref)):
        if a.shape != b.shape:
            return f"output {i} has shape {list(a.shape)}, reference {list(b.shape)}"
    return None


def _fold_frame(rows: list[dict], ref: list[np.ndarray], got: list[np.ndarray],
                steps: tuple) -> tuple[float, float, float, str | None]:
    """One frame's differences folded into `rows` (one dict per output); returns the
    frame's (max abs error, max rel error of float outputs, max quantization steps, problem).
    Outputs with a step (both dequantized from integers) differ by whole steps."""
    worst_abs = worst_rel = worst_steps = 0.0
    for i, (mine, theirs) in enumerate(zip(got, ref)):
        if len(rows) <= i:
            rows.append({"index": i, "shape": list(theirs.shape)})
        row = rows[i]
        step = steps[i] if len(steps) == len(ref) else None
        diff = np.abs(mine.astype(np.float64) - theirs.astype(np.float64))
        if not np.all(np.isfinite(diff)):
            return np.inf, np.inf, np.inf, f"output {i} has NaN or Inf where the reference does not"
        worst_abs = max(worst_abs, float(diff.max(initial=0.0)))
        if step:
            n = float(np.rint(diff / step).max(initial=0.0))
            row["max_steps"] = max(row.get("max_steps", 0.0), n)
            worst_steps = max(worst_steps, n)
            continue
        rel = float((diff / np.maximum(np.abs(theirs.astype(np.float64)), 1.0)).max(initial=0.0))
        row["max_abs_err"] = max(row.get("max_abs_err", 0.0), float(diff.max(initial=0.0)))
        row["max_rel_err"] = max(row.get("max_rel_err", 0.0), rel)
        worst_rel = max(worst_rel, rel)
    return worst_abs, worst_rel, worst_steps, None


def check_parity(reference: RemoteRunner, others: list[RemoteRunner],
                 frames: list[list[np.ndarray]], tolerance: float,
                 steps: tuple = ()) -> dict[str, Parity]:
    """Each runner against the reference on every frame. Outputs with a quantization step
    (`steps[i]`) pass within QUANT_STEPS of it; the others within `tolerance`."""
    # per runner: max abs, max rel, max steps, problem, rel of its worst frame, that frame
    worst: dict[str, list[Any]] = {r.name: [0.0, 0.0, 0.0, None, -1.0, None] for r in others}
    per_output: dict[str, list[dict]] = {r.name: [] for r in others}
    quantized = any(s for s in steps)
    for index, frame in enumerate(frames):
        ref = reference.infer(frame)
        for r in others:
            w = worst[r.name]
            if w[3]:
                continue
            try:
                got = r.infer(frame)
            except RuntimeFailed as exc:  # a runtime failing on a frame is a result
                w[3] = str(exc)
                continue
            w[3] = _problem(ref, got)
            if w[3]:
                continue
            abs_err, rel, n, w[3] = _fold_frame(per_output[r.name], ref, got, steps)
            w[0], w[1], w[2] = max(w[0], abs_err), max(w[1], rel), max(w[2], n)
            if rel > w[4]:
                w[4], w[5] = rel, index
    out = {}
    for name, (a, rel, n, problem, _, frame) in worst.items():
        finite = problem is None
        q = n if quantized and finite else None
        for row in per_output[name]:
            row["passed"] = (row["max_steps"] <= QUANT_STEPS if "max_steps" in row
                             else row["max_rel_err"] <= tolerance)
        out[name] = Parity(
            max_abs_err=a if finite else None,
            max_rel_err=rel if finite else None,
            frames=len(frames),
            passed=finite and rel <= tolerance and (q is None or q <= QUANT_STEPS),
            against=reference.name,
            error=problem,
            max_steps=q,
            outputs=per_output[name] if finite else [],
            worst_frame=frame,
        )
    return out
