"""Rewrite revision 19 in the blocked variants: a YOLOv8-style C2f block (channel split,
convolutions on one half, concat of every part) gets its blocked and Winograd variants;
a float TFLite model (NHWC, 1-D biases) gets its blocked variant at all. Each matches its
runtime, with no layout transform left between its layers."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.test_variants import _run_variant, _target
from tvmtui.graph import variants as gv
from tvmtui.graph.relax_import import load_relax
from tvmtui.workloads import nets
from tvmtui.workloads.litert import make_interpreter
from tvmtui.workloads.tflite_writer import TfliteNet


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

    _, target = _target()
    model = c2f_net(SHAPE)
    base = load_relax("onnx", model, {"input": list(SHAPE)})
    with target:
        with pytest.raises(Exception, match="channel size"):
            gv._blocked(base, 16, gv.Plan("nchwc", ""), 18)
        mod = gv._blocked(base, 16, gv.Plan("nchwc", ""), 19)
    names = _ops(mod)
    assert names.count("relax.layout_transform") == 2, names
    assert "relax.split" not in names and names.count("relax.strided_slice") == 3, names


def _ops(mod) -> list[str]:
    from tvm import relax

    return [getattr(b.value.op, "name", "") for b in mod["main"].body.blocks[0].bindings
            if isinstance(b.value, relax.Call)]


def mobile_block_tflite(shape=(1, 3, 19, 21), expand: int = 32) -> bytes:
    """A float MobileNetV2-style TFLite model: a strided RGB conv, a 3x3 conv, an expanding
    1x1 (to `expand` channels), a depthwise 3x3, a projecting 1x1 with a residual add, each
    with its 1-D bias."""
    rng = np.random.default_rng(3)
    net = TfliteNet("block", list(shape))

    def conv(x, cin, cout, k, stride=1, groups=1, act="relu6"):
        w = nets._he(rng, (cout, cin // groups, k, k), (cin // groups) * k * k)
        y = net.conv(x, w, (0.1 * rng.standard_normal(cout)).astype(np.float32), stride,
                     (k - 1) // 2, groups=groups)
        return getattr(net, act)(y) if act else y

    x = conv(conv("input", shape[1], 16, 3, stride=2), 16, 16, 3)
    y = conv(conv(x, 16, expand, 1), expand, expand, 3, groups=expand)
    return net.finish(net.add(conv(y, expand, 16, 1, act=None), x))


@pytest.mark.parametrize("variant", gv.VARIANTS)
def test_a_float_tflite_model_is_blocked_and_matches_litert(variant):
    import tvm
    from tvm import relax

    _, target = _target()
    model = mobile_block_tflite()
    it = make_interpreter(model, 1)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    shapes = {inp["name"]: [int(d) for d in inp["shape"]]}
    x = np.random.default_rng(1).standard_normal(inp["shape"]).astype(np.float32)
    it.set_tensor(inp["index"], x)
    it.invoke()
    want = it.get_tensor(it.get_output_details()[0]["index"])
    base = load_relax("tflite", model, shapes)
    mod, plan = gv.prepare(base, target, variant)
    got = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())["main"](
        tvm.runtime.tensor(x))
    got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if variant == "winograd":
        assert plan.rewritten == 1, plan  # the 3x3 16 -> 16 layer
    if variant != "nchwc":
        return
    assert plan.rewritten == 5, plan
    with target:
        assert gv.prepare(base, target, variant, revision=18)[1].rewritten == 0
        blocked = gv._blocked(base, 16, gv.Plan("nchwc", ""), 19)
    # In and out of the blocked layout once; the RGB layer's input block is its own.
    assert _ops(blocked).count("relax.layout_transform") <= 3, _ops(blocked)


def clip_by_max_net(shape) -> bytes:
    """Conv -> LeakyRelu -> Max(x, c) -> Min(x, c'), as a Keras clip reaches ONNX: TVM
    imports each as a reduction over a stack of its inputs."""
    rng = np.random.default_rng(4)
    cin, cout = shape[1], 32
    w = (rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.full((1, cout, shape[2], shape[3]), -0.05,
                                             np.float32), "floor"),
             numpy_helper.from_array(np.float32(0.4 * rng.standard_normal(
                 (1, cout, 1, 1))), "ceiling")]
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["l"], alpha=0.2),
             helper.make_node("Max", ["l", "floor"], ["m"]),
             helper.make_node("Min", ["m", "ceiling"], ["output"])]
    graph = helper.make_graph(
        nodes, "clip", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                       [1, cout, shape[2], shape[3]])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("variant", ["nchw", "nchwc"])
def test_a_clip_written_as_a_stacked_max_is_one_elementwise_operator(variant):
    shape = (1, 16, 7, 9)
    model = clip_by_max_net(shape)
    err, plan = _run_variant(model, shape, variant)
    assert err < 1e-5, err
    _, target = _target()
    base = load_relax("onnx", model, {"input": list(shape)})
    assert "relax.stack" in _ops(base)  # as TVM imports it
    from tvmtui.graph.simplify import simplified

    ops = _ops(simplified(base))
    assert "relax.stack" not in ops and "relax.broadcast_to" not in ops, ops
    assert ops.count("relax.maximum") == ops.count("relax.minimum") == 1, ops
    mod, plan = gv.prepare(base, target, variant)
    assert plan.rewritten == (variant == "nchwc")
    with target:  # sessions from before keep their graph: the blocked one failed
        if variant == "nchwc":
            with pytest.raises(Exception, match="SLayout"):
                gv.prepare(base, target, variant, revision=18)
        else:
            assert gv.prepare(base, target, variant, revision=18)[0].script() != mod.script()
