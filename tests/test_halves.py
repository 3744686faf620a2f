"""Half blocks (rewrite revision 22, `graph/halves.py`): 24-channel layers of a float
TFLite model blocked NCHW8c on AVX-512, checked against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_revision19 import mobile_block_tflite
from tvmtui.graph import blocking
from tvmtui.graph import variants as gv
from tvmtui.graph.relax_import import load_relax
from tvmtui.workloads.litert import make_interpreter


def _target():
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    return tvm, tvm.target.Target(local_cpu_target())


@pytest.mark.parametrize("variant", ["nchwc", "winograd"])
def test_a_24_channel_block_is_half_blocked_and_matches_litert(variant):
    from tvm import relax

    tvm, target = _target()
    model = mobile_block_tflite(expand=24)
    it = make_interpreter(model, 1)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    x = np.random.default_rng(2).standard_normal(inp["shape"]).astype(np.float32)
    it.set_tensor(inp["index"], x)
    it.invoke()
    want = it.get_tensor(it.get_output_details()[0]["index"])
    base = load_relax("tflite", model, {inp["name"]: [int(d) for d in inp["shape"]]})
    mod, plan = gv.prepare(base, target, variant)
    got = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())["main"](
        tvm.runtime.tensor(x))
    got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if variant != "nchwc" or blocking.vector_block(target) != 16:
        return  # on AVX2 (block 8) 24 channels were blocked before revision 22
    # The expanding 1x1 and the depthwise layer (24 channels) are blocked by 8 now.
    assert plan.rewritten == 5, plan
    assert gv.prepare(base, target, variant, revision=21)[1].rewritten == 3
    with target:
        blocked = gv._blocked(base, 16, gv.Plan("nchwc", ""), gv.REWRITE_REVISION)
    assert str(blocked).count('data_layout="NCHW8c"') == 2
