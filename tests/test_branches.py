"""An IF's branches get their weights as constants (rewrite revision 21, `graph/calls.py`):
checked against LiteRT on both branches, and by the kernels left to tune."""

from __future__ import annotations

import numpy as np
import pytest

from tests.user_models import if_branch_tflite
from tvmtui.graph import lowering
from tvmtui.graph import variants as gv
from tvmtui.graph.relax_import import load_relax

SHAPE = [1, 24]


def _target():
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    return tvm, tvm.target.Target(local_cpu_target())


def _litert(model: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=model)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def _transposes(revision: int) -> int:
    """How many of the model's kernels to tune transpose something, at `revision`."""
    _, target = _target()
    base = load_relax("tflite", if_branch_tflite(), {"x": SHAPE}, revision)
    mod, _ = gv.prepare(base, target, gv.DEFAULT, revision=revision)
    tasks = lowering.extract_tasks(mod, target, revision)
    return sum("transpose" in t.task_name for t in tasks)


def test_an_if_branch_no_longer_transposes_its_weights_at_each_call():
    assert _transposes(20) == 1  # each branch's weight, the same shape: one task
    assert _transposes(gv.REWRITE_REVISION) == 0


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_both_branches_match_litert(sign):
    tvm, target = _target()
    from tvm import relax

    model = if_branch_tflite()
    base = load_relax("tflite", model, {"x": SHAPE})
    mod, _ = gv.prepare(base, target, gv.DEFAULT)
    vm = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())
    x = (np.random.default_rng(0).standard_normal(SHAPE) * sign).astype(np.float32)
    want = _litert(model, x)
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    other = _litert(model, -x)
    assert np.max(np.abs(other - want)) > 0.1  # the two frames took different branches
