"""Channel splits, slices and concats in the blocked variants (rewrite revision 19): a
YOLOv8-style C2f block (split, convolutions on one half, concat of every part) gets its
blocked and Winograd variants, each matching ONNX Runtime, with no layout transform left
between its layers."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.test_variants import _run_variant, _target
from tvmtui.graph import variants as gv
from tvmtui.graph.relax_import import load_relax


def c2f_net(shape, misaligned: bool = False, seed: int = 0) -> bytes:
    """Conv 32 -> Split [16, 16] -> 3x3 Conv on the second half -> Concat of all three ->
    1x1 Conv 48 -> 32 -> a Slice of channels 16..32 (2..18 with `misaligned`: not on a
    block) -> 3x3 Conv 16 -> 16."""
    rng = np.random.default_rng(seed)
    inits = []

    def conv(name, x, cin, cout, k):
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)))
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"{name}_w"))
        inits.append(numpy_helper.from_array(
            (0.1 * rng.standard_normal(cout)).astype(np.float32), f"{name}_b"))
        p = (k - 1) // 2
        return helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name],
                                kernel_shape=[k, k], pads=[p, p, p, p])

    begin = 2 if misaligned else 16
    for name, values in (("split", [16, 16]), ("starts", [begin]), ("ends", [begin + 16]),
                         ("axes", [1])):
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
    nodes = [
        conv("c0", "input", shape[1], 32, 3),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Split", ["r0", "split"], ["a", "b"], axis=1),
        conv("c1", "b", 16, 16, 3),
        helper.make_node("Concat", ["a", "b", "c1"], ["cat"], axis=1),
        conv("c2", "cat", 48, 32, 1),
        helper.make_node("Slice", ["c2", "starts", "ends", "axes"], ["part"]),
        conv("output", "part", 16, 16, 3),
    ]
    graph = helper.make_graph(
        nodes, "c2f", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                       [1, 16, shape[2], shape[3]])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


SHAPE = (1, 32, 9, 11)


@pytest.mark.parametrize("misaligned", [False, True])
@pytest.mark.parametrize("variant", gv.VARIANTS)
def test_a_c2f_block_matches_onnxruntime_in_every_variant(variant, misaligned):
    err, plan = _run_variant(c2f_net(SHAPE, misaligned), SHAPE, variant)
    assert err < 1e-4, (variant, misaligned, err)
    if variant in ("nchwc", "winograd"):
        assert plan.rewritten >= 3, plan  # before revision 19 the variant was lost


def test_the_blocked_c2f_block_keeps_its_channels_blocked():
    """Revision 18 loses the variant (TVM's ConvertLayout keeps a split's points in
    NCHW16c); revision 19 slices and concatenates the blocked tensors: the graph's input
    and output are its only layout transforms."""
    from tvm import relax

    _, target = _target()
    model = c2f_net(SHAPE)
    base = load_relax("onnx", model, {"input": list(SHAPE)})
    with target:
        with pytest.raises(Exception, match="channel size"):
            gv._blocked(base, 16, gv.Plan("nchwc", ""), 18)
        mod = gv._blocked(base, 16, gv.Plan("nchwc", ""), 19)
    names = [getattr(b.value.op, "name", "") for b in mod["main"].body.blocks[0].bindings
             if isinstance(b.value, relax.Call)]
    assert names.count("relax.layout_transform") == 2, names
    assert "relax.split" not in names and names.count("relax.strided_slice") == 3, names
