"""Who is off when a float parity check fails: both sides against the graph in float64.

The float64 graph is tvmtui's own import of the model (`graph/float64.py`), built untuned
and run on the frame where the two sides differed most. Per output in dispute, each side's
distance from it (the parity metric, `|x - exact| / max(|exact|, 1)`) says which side is
wrong: one that is past the tolerance and ten times further than the other is off; two
sides at the same distance are both float32 rounding of an ill-conditioned output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tvmtui.baselines.model import BenchModel

FAR = 10.0  # how many times further from exact a side must be to be called off


@dataclass
class ExactReference:
    """The model's graph in float64, compiled on first use."""

    model: BenchModel
    _vm: Any = field(default=None, repr=False)

    def outputs(self, frame: list[np.ndarray]) -> list[np.ndarray]:
        if self._vm is None:
            self._vm = self._build()
        tvm, vm = self._vm
        out = vm["main"](*[tvm.runtime.tensor(x.astype(np.float64) if x.dtype.kind == "f" else x)
                           for x in frame])
        return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]

    def _build(self):
        from tvmtui.devices.local import local_cpu_target
        from tvmtui.graph.float64 import as_float64
        from tvmtui.graph.relax_import import load_relax
        from tvmtui.kernels.tvm_env import import_tvm

        target = local_cpu_target()
        tvm = import_tvm(target)
        from tvm import relax

        mod = load_relax(self.model.native, self.model.files[self.model.native],
                         self.model.input_shapes)
        lib = relax.build(relax.get_pipeline()(as_float64(mod)), target=tvm.target.Target(target))
        return tvm, relax.VirtualMachine(lib, tvm.cpu())


def distance(x: np.ndarray, exact: np.ndarray) -> float:
    diff = np.abs(x.astype(np.float64) - exact)
    return float((diff / np.maximum(np.abs(exact), 1.0)).max(initial=0.0))


def judge(exact: ExactReference, frame: list[np.ndarray], frame_index: int,
          mine: list[np.ndarray], theirs: list[np.ndarray], mine_name: str, their_name: str,
          disputed: list[int], tolerance: float) -> tuple[str, dict]:
    """(one-line verdict, figures) for the outputs in `disputed` on one frame: `mine` is the
    reference runtime's outputs (TVM), `theirs` the baseline's."""
    truth = exact.outputs(frame)
    rows, said = [], []
    for i in disputed:
        ours, other = distance(mine[i], truth[i]), distance(theirs[i], truth[i])
        if ours > tolerance and ours >= FAR * other:
            side, text = "reference", f"{mine_name} is off ({ours:.1e} from exact, " \
                f"{their_name} {other:.1e})"
        elif other > tolerance and other >= FAR * ours:
            side, text = "baseline", f"{their_name} is off ({other:.1e} from exact, " \
                f"{mine_name} {ours:.1e})"
        else:
            side = "neither"
            closer = mine_name if ours < other else their_name
            text = (f"neither is wrong: {mine_name} {ours:.1e} and {their_name} {other:.1e} "
                    f"from exact ({closer} closer), both float32 rounding")
            if min(ours, other) > tolerance:
                text += (f"; float32 holds this output no closer than about "
                         f"{min(ours, other):.1e}, past --tolerance {tolerance:g}")
        shape = "x".join(str(d) for d in truth[i].shape)
        said.append(f"output {i} ({shape}): {text}")
        rows.append({"index": i, "reference_err": ours, "baseline_err": other, "off": side})
    verdict = f"against the graph in float64 on frame {frame_index}: " + "; ".join(said)
    return verdict, {"frame": frame_index, "outputs": rows}
