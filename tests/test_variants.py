"""Layout and algorithm variants: each rewrite checked against ONNX Runtime, and the
variant's path through tuning, resume, `sessions show --json`, export and bench."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import load_from_string as onnx_load

from tvmtui.graph import blocking, lowering
from tvmtui.graph import variants as gv
from tvmtui.graph.relax_import import load_relax
from tvmtui.graph.winograd import MIN_CHANNELS, winograd_error
from tvmtui.sessions.store import RECORD_DB, WORKLOAD_DB


def conv_net(layers, in_shape, seed=0) -> bytes:
    """A chain of Conv(+Relu) layers: (cout, kernel, stride) each, 'same' padding."""
    rng = np.random.default_rng(seed)
    nodes, inits, x, cin = [], [], "input", in_shape[1]
    h, w_ = in_shape[2], in_shape[3]
    for i, (cout, k, stride) in enumerate(layers):
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32) * 0.1
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        p = (k - 1) // 2
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[p, p, p, p]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x, cin = f"r{i}", cout
        h, w_ = (h + 2 * p - k) // stride + 1, (w_ + 2 * p - k) // stride + 1
    nodes.append(helper.make_node("Identity", [x], ["output"]))
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("input", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, cin, h, w_])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _target():
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    return tvm, tvm.target.Target(local_cpu_target())


def _run_variant(model: bytes, shape, variant, tolerance=1e-4, revision=gv.REWRITE_REVISION):
    tvm, target = _target()
    from tvm import relax

    base = load_relax("onnx", model, {"input": list(shape)}, revision)
    mod, plan = gv.prepare(base, target, variant, tolerance, revision)
    vm = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    want = ort.InferenceSession(model).run(None, {"input": x})[0]
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0))), plan


# Odd sizes on purpose: 7x7 outputs, sizes that are no multiple of the Winograd tile (4),
# channel counts that are no multiple of the block (12, 20; 24 on AVX-512), a strided and a
# 1x1 layer. Each net means the same on AVX2 (block 8) and AVX-512 (block 16).
NETS = {
    "7x7-16-32": ([(32, 3, 1)], (1, 16, 7, 7)),
    "9x11-32-16-12": ([(16, 3, 1), (12, 3, 1)], (1, 32, 9, 11)),
    "stride2-1x1": ([(32, 3, 2), (16, 1, 1), (20, 3, 1)], (1, 16, 13, 13)),
    # First layers: an RGB input (blocked NCHW1c in, NCHW[x]c out) and DQN's 4-frame
    # 8x8 stride-4 one (NCHW4c in).
    "rgb-15x15": ([(16, 3, 2), (24, 3, 1)], (1, 3, 15, 15)),
    "4ch-8x8s4": ([(16, 8, 4)], (1, 4, 21, 21)),
    # MobileNet-style channel counts that divide by 8 and not 16 (NCHW8c on AVX-512 from
    # revision 22): into 24 from a 16-block, 24 -> 24 (Winograd at 8 lanes), 24 -> 40.
    "24-40-ch": ([(24, 3, 1), (24, 3, 1), (40, 1, 1), (16, 3, 1)], (1, 16, 9, 10)),
}


@pytest.mark.parametrize("variant", gv.VARIANTS)
@pytest.mark.parametrize("net", NETS)
def test_each_variant_matches_onnxruntime(variant, net):
    layers, shape = NETS[net]
    err, plan = _run_variant(conv_net(layers, shape), shape, variant)
    assert err < 1e-4, (variant, net, err)
    block = blocking.vector_block(_target()[1])
    half = block // 2 if block // 2 >= 4 else block  # revision 22's smaller output block

    def out_block(co: int) -> int:
        return block if co % block == 0 else half if co % half == 0 else 0

    if variant == "nchwc":  # every layer whose output channels divide by a block
        assert plan.rewritten == sum(out_block(co) > 0 for co, _, _ in layers)
    if variant == "winograd":  # the 3x3 stride-1 layers with >= 16 channels, but for
        # those blocked out and not in (a smaller input block): they run blocked direct
        cins = [shape[1]] + [c for c, _, _ in layers[:-1]]
        assert plan.rewritten == sum(
            k == 3 and s == 1 and min(ci, co) >= MIN_CHANNELS
            and not (co % block == 0 and ci % block != 0)
            for ci, (co, k, s) in zip(cins, layers))
        assert plan.rewritten >= 1 or all(k != 3 for _, k, _ in layers)  # 4ch-8x8s4: none


def test_sessions_keep_the_rewrite_they_were_tuned_with():
    """Revision 1 (sessions from before `options.rewrite`) leaves a layer whose input
    channels do not divide by the block in NCHW, as it was tuned; revision 2 blocks it."""
    layers, shape = NETS["rgb-15x15"]
    model = conv_net(layers, shape)
    _, target = _target()
    base = load_relax("onnx", model, {"input": list(shape)})
    block = blocking.vector_block(target)
    old = gv.prepare(base, target, "nchwc", revision=1)[1]
    new = gv.prepare(base, target, "nchwc", revision=2)[1]
    assert old.rewritten == sum(ci % block == 0 and co % block == 0
                                for ci, (co, _, _) in zip([3, 16], layers))
    assert new.rewritten == old.rewritten + 1
    assert [blocking.input_block(c, 8) for c in (3, 4, 12, 16)] == [1, 4, 4, 8]


def relu6_net(shape=(1, 16, 9, 9), seed=0) -> bytes:
    """Conv -> Clip(0, 6) with shape-(1,) bounds (as exported MobileNets have) -> Conv."""
    rng = np.random.default_rng(seed)
    c = shape[1]
    inits = [numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3,
                                     f"w{i}") for i in range(2)]
    inits += [numpy_helper.from_array(np.array([v], np.float32), n)
              for v, n in ((0.0, "lo"), (6.0, "hi"))]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c0", "lo", "hi"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["output"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "relu6", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _activation_transforms(mod) -> int:
    return sum("R.layout_transform(" in line and "GenericConst" not in line
               for line in str(mod).splitlines())


def test_blocked_layout_passes_through_relu6():
    """Clip as Relax max/min against 0-d bounds: the blocked graph keeps only its input and
    output transforms (the stock import's TE clip forced two more around every ReLU6),
    and still matches ONNX Runtime."""
    from tvm import relax

    shape = (1, 16, 9, 9)
    model = relu6_net(shape)
    err, plan = _run_variant(model, shape, "nchwc")
    assert err < 1e-4 and plan.rewritten == 2
    _, target = _target()
    block = blocking.vector_block(target)
    for revision, transforms in ((2, 2), (1, 4)):
        base = load_relax("onnx", model, {"input": list(shape)}, revision)
        plan = gv.Plan("nchwc", "")
        blocked = relax.transform.ConvertLayout(
            {}, gv._blocked_layouts(block, plan, revision))(base)
        assert _activation_transforms(blocked) == transforms, revision


def meeting_net(shape) -> bytes:
    """Two 24-channel layers concatenated, then read by a 24-channel layer and a 64-channel
    one: on AVX-512, half blocks (NCHW8c) meeting a full one (NCHW16c)."""
    rng = np.random.default_rng(5)
    inits, nodes = [], []

    def conv(name: str, x: str, cout: int, cin: int, k: int) -> None:
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name + "_w"))
        nodes.append(helper.make_node("Conv", [x, name + "_w"], [name], kernel_shape=[k, k],
                                      pads=[k // 2] * 4))

    conv("a", "input", 24, shape[1], 1)
    conv("b", "input", 24, shape[1], 3)
    nodes.append(helper.make_node("Concat", ["a", "b"], ["ab"], axis=1))
    conv("c", "ab", 24, 48, 3)
    conv("d", "ab", 64, 48, 1)
    nodes.append(helper.make_node("Concat", ["c", "d"], ["output"], axis=1))
    return _onnx(nodes, "meeting", shape, [1, 88, *shape[2:]], inits)


def _onnx(nodes, name: str, shape, out_shape, inits) -> bytes:
    """An opset-17 ONNX model of `nodes` from "input" to "output"."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("variant", ["nchwc", "winograd"])
def test_half_blocks_that_would_meet_full_ones_stay_in_nchw(variant):
    """TVM's ConvertLayout cannot convert NCHW8c to NCHW16c: the graph keeps the half
    blocks that meet no full one, says how many it left, and matches ONNX Runtime."""
    shape = (1, 16, 9, 9)
    err, plan = _run_variant(meeting_net(shape), shape, variant)
    assert err < 1e-4
    if blocking.vector_block(_target()[1]) == 16 and variant == "nchwc":  # AVX-512: 24
        # channels are half blocks (the Winograd variant leaves its 3x3 ones in NCHW)
        assert any("left in NCHW rather than half-blocked" in n for n in plan.notes)
        assert plan.rewritten >= 2  # the 64-channel layer, and a 24-channel one


def hard_swish_net(shape) -> bytes:
    """A depthwise 3x3 layer with PaddlePaddle's hard-swish, `x * relu6(x + 3) / 6`, then
    a division by a per-channel constant."""
    rng = np.random.default_rng(8)
    c = shape[1]
    inits = [numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3)) / 3).astype(np.float32),
                                     "w"),
             numpy_helper.from_array(np.array(3.0, np.float32), "three"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(6.0, np.float32), "six"),
             numpy_helper.from_array((rng.random((1, c, 1, 1)) + 0.5).astype(np.float32), "d")]
    nodes = [helper.make_node("Conv", ["input", "w"], ["y"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], group=c),
             helper.make_node("Add", ["y", "three"], ["y3"]),
             helper.make_node("Clip", ["y3", "zero", "six"], ["r6"]),
             helper.make_node("Mul", ["y", "r6"], ["m"]),
             helper.make_node("Div", ["m", "six"], ["hs"]),
             helper.make_node("Div", ["hs", "d"], ["output"])]
    return _onnx(nodes, "hard_swish", shape, list(shape), inits)


@pytest.mark.parametrize("variant", ["nchw", "nchwc"])
def test_divisions_by_constants_are_multiplications_from_revision_23(variant):
    from tvmtui.graph.simplify import simplified

    shape = (1, 16, 9, 11)
    model = hard_swish_net(shape)
    base = load_relax("onnx", model, {"input": list(shape)})
    assert str(simplified(base)).count("R.divide") == 2
    assert "R.divide" not in str(simplified(base, reciprocals=True))
    for revision in (22, 23):
        err, _ = _run_variant(model, shape, variant, revision=revision)
        assert err < 1e-5, (revision, err)


def prelu_net(shape) -> bytes:
    """A convolution, then ONNX PRelu with a per-channel slope (some negative, some above
    1), then a 1x1 convolution to 12 channels (no multiple of the block)."""
    rng = np.random.default_rng(24)
    c = shape[1]
    inits = [numpy_helper.from_array((rng.standard_normal((32, c, 3, 3)) / 3).astype(np.float32),
                                     "w"),
             numpy_helper.from_array(rng.uniform(-0.5, 1.5, (32, 1, 1)).astype(np.float32),
                                     "slope"),
             numpy_helper.from_array((rng.standard_normal((12, 32, 1, 1)) / 3).astype(np.float32),
                                     "w2")]
    nodes = [helper.make_node("Conv", ["input", "w"], ["y"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("PRelu", ["y", "slope"], ["p"]),
             helper.make_node("Conv", ["p", "w2"], ["output"], kernel_shape=[1, 1])]
    return _onnx(nodes, "prelu", shape, [shape[0], 12, *shape[2:]], inits)


@pytest.mark.parametrize("variant", ["nchw", "nchwc"])
def test_prelus_are_elementwise_from_revision_24(variant):
    """ConvertLayout infers no layout for nn.prelu: until revision 23 the blocked variant
    ran it as a kernel between two layout transforms; from 24 it is in the convolution's
    kernel, in every variant, and exact."""
    from tvm import relax

    tvm, target = _target()
    shape = (1, 12, 9, 11)
    model = prelu_net(shape)

    def kernels(revision: int) -> list[str]:
        base = load_relax("onnx", model, {"input": list(shape)}, revision)
        mod, _ = gv.prepare(base, target, variant, revision=revision)
        fused = relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
        return [g.name_hint for g, f in fused.functions.items()
                if isinstance(f, relax.Function) and g.name_hint != "main"]

    if variant == "nchwc":
        assert any("transform" in name and "prelu" in name for name in kernels(23))
    fused = kernels(24)
    assert not any("prelu" in name for name in fused), fused
    assert any("conv2d" in name and "maximum" in name for name in fused), fused
    for revision in (23, 24):
        err, _ = _run_variant(model, shape, variant, revision=revision)
        assert err < 1e-5, (revision, err)


def test_softmax_exp_is_the_polynomial_form_from_revision_25():
    """YOLOv8's box decoding: a softmax over 16 bins (axis 1 of 1x16x4xN, odd N). From
    revision 25 its exp is TOPI's polynomial, no libm call per value; it matches ONNX
    Runtime either way."""
    shape = (1, 16, 4, 35)
    model = _onnx([helper.make_node("Softmax", ["input"], ["output"], axis=1)], "softmax",
                  shape, list(shape), [])
    tvm, target = _target()
    base = load_relax("onnx", model, {"input": list(shape)})
    for revision, calls_exp in ((24, True), (25, False)):
        mod, _ = gv.prepare(base, target, "nchw", revision=revision)
        assert ("T.exp(" in mod.script()) == calls_exp, revision
        err, _ = _run_variant(model, shape, "nchw", revision=revision)
        assert err < 1e-6, (revision, err)


def blazeface_block_tflite() -> bytes:
    """A BlazeFace-style block as MediaPipe's face detectors write it, in NHWC: a 16-channel
    convolution, a 1x1 one to 28 channels added to its input padded with 12 zero channels
    (TFLite PAD on the channel axis), a depthwise layer over the 28, and a 1x1 one back to
    16."""
    from tvmtui.workloads.tflite_writer import TfliteNet

    rng = np.random.default_rng(26)
    net = TfliteNet("blazeface_block", [1, 16, 10, 10])

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    x = net.relu(net.conv("input", weights(16, 16, 3, 3), weights(16), pad=1))
    widths = net._const(np.array([[0, 0], [0, 0], [0, 0], [0, 12]], np.int32), "widths")
    padded = net._op("PAD", [x, widths], [1, 28, 10, 10])
    y = net.relu(net.add(net.conv(x, weights(28, 16, 1, 1), weights(28)), padded))
    y = net.relu(net.conv(y, weights(28, 1, 3, 3), weights(28), pad=1, groups=28))
    return net.finish(net.conv(y, weights(16, 28, 1, 1), weights(16)))


def test_unblocked_tflite_layers_stay_nhwc_from_revision_26():
    """A TFLite convolution whose channels the block does not divide stayed NCHW in the
    blocked variant until revision 25, so the NHWC channel pad beside it (TVM infers no
    layout for pad) sat between transposes: a kernel of pad, transpose, add and ReLU that
    took a fifth of the short-range face detector's time. From 26 it stays NHWC, as the
    file has it: fewer layout kernels, same results as LiteRT."""
    from ai_edge_litert.interpreter import Interpreter
    from tvm import relax

    tvm, target = _target()
    data = blazeface_block_tflite()
    x = np.random.default_rng(1).standard_normal((1, 10, 10, 16)).astype(np.float32)
    lite = Interpreter(model_content=data)
    lite.allocate_tensors()
    lite.set_tensor(lite.get_input_details()[0]["index"], x)
    lite.invoke()
    want = lite.get_tensor(lite.get_output_details()[0]["index"])
    transforms = {}
    for revision in (25, 26):
        base = load_relax("tflite", data, {"input": [1, 10, 10, 16]}, revision)
        mod, plan = gv.prepare(base, target, "nchwc", revision=revision)
        fused = relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
        transforms[revision] = sum(1 for g, f in fused.functions.items()
                                   if isinstance(f, relax.Function) and
                                   ("transform" in g.name_hint or "transpose" in g.name_hint))
        vm = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        if 28 % blocking.vector_block(target):
            assert any(("stays NHWC" if revision >= 26 else "stays NCHW") in note
                       for note in plan.notes), plan.notes
    if 28 % blocking.vector_block(target):
        assert transforms[26] < transforms[25], transforms


def test_tflite_clip_becomes_max_min():
    from tvm import relax

    from tvmtui.graph.relax_import import clip_as_max_min

    tvm, target = _target()
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 3, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.clip(x, 0, 6))
        bb.emit_func_output(out)
    mod = clip_as_max_min(bb.get())
    assert "R.clip" not in str(mod) and "R.maximum" in str(mod) and "R.minimum" in str(mod)
    vm = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())
    data = np.linspace(-5, 10, 72, dtype=np.float32).reshape(1, 8, 3, 3)
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(data)).numpy(),
                                  np.clip(data, 0, 6))


def test_winograd_rejected_per_layer_when_not_accurate_enough():
    layers, shape = NETS["7x7-16-32"]
    # At a tolerance no float32 Winograd meets, the layer falls back to direct and says why.
    err, plan = _run_variant(conv_net(layers, shape), shape, "winograd", tolerance=1e-9)
    assert plan.rewritten == 0 and err < 1e-4
    assert any("F(4,3)" in n and "trying F(2,3)" in n for n in plan.notes)
    assert any("F(2,3)" in n and "stays direct" in n for n in plan.notes)


def test_winograd_error_model_tracks_the_tile():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((32, 32, 3, 3)) * 0.08).astype(np.float32)
    e4 = winograd_error(w, (14, 14), [1, 1, 1, 1], 4)
    e2 = winograd_error(w, (14, 14), [1, 1, 1, 1], 2)
    assert 0 < e2 < e4 < 1e-4


def test_parse_variants():
    assert gv.parse_variants("all") == list(gv.VARIANTS)
    assert gv.parse_variants("winograd, nchw") == ["winograd", "nchw"]
    with pytest.raises(ValueError, match="unknown variant"):
        gv.parse_variants("nhwc9")


def test_variants_through_tune_resume_show_export(cli, tmp_path):
    model = tmp_path / "twoconv.onnx"
    model.write_bytes(conv_net([(16, 3, 1), (16, 3, 1)], (1, 16, 10, 10)))
    bad = cli.run("tune", str(model), "--variants", "nchw,bogus", "--session", "bad")
    assert bad.returncode == 2 and "unknown variant" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (cli.root / "bad").exists()

    run = cli.run("tune", str(model), "--trials", "24", "--session", "v", "--json",
                  "--warmup-samples", "8", "--batch", "8")
    assert run.returncode == 0, run.stderr
    events = cli.json_lines(run.stdout)
    extracted = next(e for e in events if e["event"] == "tasks_extracted")
    # Sub-pixel has no transposed convolution to rewrite here: dropped, and said so.
    assert set(extracted["variants"]) == {"nchw", "nchwc", "winograd"}
    assert any("Sub-pixel: no layer it applies to" in e["message"]
               for e in events if e["event"] == "notice")
    # A layout transform's one schedule, measured in the first batch of 4, is no failure
    # of the rest of its cold batch.
    assert not any("failed" in e["message"] for e in events if e["event"] == "notice")
    by_task = {t["index"]: t["variant"] for t in extracted["tasks"]}
    assert {"nchw", "nchwc", "winograd"} <= set(by_task.values())
    trials = [e for e in events if e["event"] == "trial"]
    assert len(trials) == 24 and all(e["variant"] == by_task[e["task"]] for e in trials)
    # The cold pass starts with a direct conv: a Winograd candidate compiles 3-5x longer.
    assert by_task[trials[0]["task"]] != "winograd"
    done = [e for e in events if e["event"] == "round_done"][-1]
    complete = {v: ms for v, ms in done["variants_ms"].items() if ms is not None}
    assert complete and done["variant"] == min(complete, key=complete.get)
    assert done["best_ms"] == pytest.approx(complete[done["variant"]])

    # Confirming measured the heavy tasks of the variants still in the race again and
    # chose among them with the medians it kept (`contenders`, `confirmed_estimates`).
    from tvmtui.tuning.estimate import confirmed_estimates, contenders

    finished = [e for e in events if e["event"] == "state" and e["state"] == "finished"][-1]
    rivals = contenders(done["variants_ms"])
    assert finished["variant"] in rivals
    medians = {e["task"]: e["confirmed_ms"] / 1000 for e in events if e["event"] == "confirmed"}
    assert medians
    bests = {e["task"]: e["best_s"] for e in events if e["event"] == "task_best"}
    weights = {t["index"]: t["weights"] for t in extracted["tasks"]}
    again = confirmed_estimates([(weights[i], bests.get(i), medians.get(i)) for i in weights],
                                rivals)
    assert finished["variant"] == min(rivals, key=lambda v: again[v])
    assert finished["confirmed_ms"] == pytest.approx(again[finished["variant"]], rel=1e-6)
    if finished["variant"] != done["variant"]:
        assert any("export builds" in e["message"] for e in events if e["event"] == "notice")
    shown = json.loads(cli.run("sessions", "show", "v", "--json").stdout)
    assert shown["variant"] == finished["variant"]
    assert [t["variant"] for t in shown["tasks"]] == [by_task[i] for i in range(len(by_task))]
    assert sum(t["trials"] for t in shown["tasks"]) == 24

    again = cli.run("resume", "v", "--trials", "8", "--json")
    assert again.returncode == 0, again.stderr
    later = cli.json_lines(again.stdout)
    re_extracted = next(e for e in later if e["event"] == "tasks_extracted")
    assert re_extracted["tasks"] == extracted["tasks"]  # resume keeps the variants' tasks
    assert [e["trial"] for e in later if e["event"] == "trial"] == list(range(25, 33))

    out = tmp_path / "lib"
    exported = cli.run("export", "v", str(out), "--json")
    assert exported.returncode == 0, exported.stderr
    info = json.loads((out / "model.json").read_text())
    final = json.loads(cli.run("sessions", "show", "v", "--json").stdout)
    assert info["variant"] == final["variant"]
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(out / "model.so")), tvm.cpu())
    x = np.random.default_rng(3).standard_normal((1, 16, 10, 10)).astype(np.float32)
    want = ort.InferenceSession(model.read_bytes()).run(None, {"input": x})[0]
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)) < 1e-4


def test_sessions_from_before_variants_tune_the_stock_graph(cli):
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.sessions import store as st
    from tvmtui.workloads import load_workload

    wl = load_workload("conv:C12")
    session = st.Session.create(cli.root, "old", {
        "status": "created", "workload": wl.meta(), "target": local_cpu_target(), "budget": 4,
        "options": {}, "versions": {}, "device": {"kind": "local"}, "fingerprint": None})
    session.file(st.model_file(wl.meta())).write_bytes(wl.model_bytes)
    run = cli.run("resume", "old", "--json")
    assert run.returncode == 0, run.stderr
    extracted = next(e for e in cli.json_lines(run.stdout) if e["event"] == "tasks_extracted")
    assert [t["variant"] for t in extracted["tasks"]] == ["nchw"]


def test_estimates_and_the_variant_bandit():
    from tvmtui.tuning.estimate import choose, losing_variants, variant_estimates

    tasks = [({"nchw": 1, "winograd": 1}, 0.001),  # a task both variants run (e.g. a dense)
             ({"nchw": 2}, 0.002), ({"winograd": 2}, None)]
    est = variant_estimates(tasks)
    assert est == {"nchw": pytest.approx(5.0), "winograd": None}
    assert choose(est) == ("nchw", pytest.approx(5.0))
    assert choose({}) == ("nchw", None)
    est = variant_estimates([*tasks[:2], ({"winograd": 2}, 0.0005)])
    assert choose(est) == ("winograd", pytest.approx(2.0))
    # 2.5x slower: retired only once each of its tasks has had 16 trials.
    assert losing_variants(est, {"nchw": 15, "winograd": 15}) == {}
    assert set(losing_variants(est, {"nchw": 16, "winograd": 16})) == {"nchw"}
    # 4x slower or more: after a first batch (8 trials) already.
    far = {"nchw": 8.4, "winograd": 2.0}
    assert losing_variants(far, {"nchw": 7, "winograd": 7}) == {}
    assert set(losing_variants(far, {"nchw": 8, "winograd": 8})) == {"nchw"}
    assert losing_variants(est, {"nchw": 8, "winograd": 8}) == {}  # 2.5x: not yet
    close = {"nchw": 2.4, "winograd": 2.0}  # 1.2x: never retired
    assert losing_variants(close, {"nchw": 500, "winograd": 500}) == {}
    assert "no complete estimate" in losing_variants(
        {"nchw": 1.0, "nchwc": None}, {"nchw": 40, "nchwc": 40})["nchwc"]
    # A variant with a task never measured (ResNet-18's Winograd: one task of 14 had 0
    # trials after 912) is retired once its measured tasks alone lose.
    from tvmtui.tuning.estimate import partial_estimates

    parts = partial_estimates([({"winograd": 1}, 0.004, 20), ({"winograd": 1}, None, 0),
                               ({"nchwc": 1}, 0.0015, 20)])
    assert parts == {"winograd": (pytest.approx(4.0), 20), "nchwc": (pytest.approx(1.5), 20)}
    est = {"nchwc": 1.5, "winograd": None}
    why = losing_variants(est, {"nchwc": 20, "winograd": 0}, partial=parts)["winograd"]
    assert why.startswith("at least 4.000 ms")
    assert losing_variants(est, {"nchwc": 20, "winograd": 0},  # measured too little yet
                           partial={"winograd": (4.0, 15)}) == {}
    assert losing_variants(est, {"nchwc": 60, "winograd": 0},  # not clearly behind
                           partial={"winograd": (1.7, 60)}) == {}


def test_the_variant_export_builds_is_chosen_again_with_the_confirmed_medians():
    from tvmtui.tuning.estimate import confirmed_estimates, contenders

    # Within 1.25x of the fastest: still in the race, fastest first; 1.3x and incomplete
    # variants are not.
    assert contenders({"winograd": 0.144, "nchwc": 0.150, "nchw": 0.348}) == ["winograd", "nchwc"]
    assert contenders({"a": 1.0, "b": 1.25, "c": 1.3, "d": None}) == ["a", "b"]
    assert contenders({"a": None}) == [] and contenders({}) == []
    # DQN: three tasks both run, then its 7x7 conv as Winograd (0.017 ms tuned, 0.031
    # measured again) or NCHW8c (0.024, not confirmed: its tuned best stands).
    tasks = [({"nchwc": 1, "winograd": 1}, 0.000049, 0.000048),
             ({"nchwc": 1, "winograd": 1}, 0.000030, None),
             ({"winograd": 1}, 0.000017, 0.000031), ({"nchwc": 1}, 0.000024, None),
             ({"nchw": 1}, 0.000300, None)]
    est = confirmed_estimates(tasks, ["winograd", "nchwc"])
    assert est == {"winograd": pytest.approx(0.109), "nchwc": pytest.approx(0.102)}
    assert min(est, key=est.get) == "nchwc"


def test_negligible_tasks_stop_after_their_first_batches():
    """A task under 2% of every estimate it is part of gets no more trials once measured
    16 times, smallest first, while those retired stay under 5% of the estimate together."""
    from tvmtui.tuning.estimate import negligible_tasks, variant_estimates

    # DQN-like: ms 0.058 (dense), 0.045, 0.030, 0.016, 0.004 (transform), 0.0015 (dense).
    bests = [0.058, 0.045, 0.030, 0.016, 0.004, 0.0015]
    tasks = [({"winograd": 1}, b / 1000, 40) for b in bests]
    est = variant_estimates((w, b) for w, b, _ in tasks)
    assert negligible_tasks(tasks, est) == {5: pytest.approx(0.0015 / sum(bests))}
    young = [*tasks[:5], ({"winograd": 1}, 0.0015 / 1000, 15)]  # one batch short
    assert negligible_tasks(young, est) == {}
    # Twenty tasks of 1% each: only four fit under the 5% total.
    many = [({"nchw": 1}, 0.0001, 16)] * 20 + [({"nchw": 1}, 0.0079, 16)]  # 1.01% each
    assert len(negligible_tasks(many, variant_estimates((w, b) for w, b, _ in many))) == 4
    # A task also run by a variant without a complete estimate is kept.
    mixed = [*tasks, ({"winograd": 1, "nchw": 1}, 0.000001, 30), ({"nchw": 1}, None, 0)]
    est = variant_estimates((w, b) for w, b, _ in mixed)
    assert 6 not in negligible_tasks(mixed, est)


def test_trials_follow_each_task_s_stake():
    from tvmtui.tuning.estimate import (
        OTHER_VARIANT_WEIGHT,
        choose,
        next_turn,
        stakes,
        variant_estimates,
    )

    tasks = [({"nchw": 1}, 0.005), ({"nchw": 1, "nchwc": 1}, 0.0001),  # e.g. a reshape
             ({"nchwc": 5}, 0.0012), ({"nchw": 5}, 0.002), ({"nchwc": 1}, 0.003)]
    leader, _ = choose(variant_estimates(tasks))  # NCHW8c: 9.1 ms against NCHW's 15.1 ms
    assert leader == "nchwc"
    stake = stakes(tasks, leader)
    # A task's share of the variant it weighs most in; a quarter of it outside the leader.
    assert stake == pytest.approx([OTHER_VARIANT_WEIGHT * 5 / 15.1, 0.1 / 9.1, 6 / 9.1,
                                   OTHER_VARIANT_WEIGHT * 10 / 15.1, 3 / 9.1])
    assert stakes(tasks, None)[3] == pytest.approx(10 / 15.1)
    assert stakes([*tasks, ({"nchw": 1}, None)], leader)[5] == 1.0  # not measured yet
    # After 16 trials each: the 5 x 1.2 ms conv, then the 3 ms one; the conv again ends it.
    assert next_turn(stake, [16] * 5, 32) == ([2, 4], 2)
    # A task far ahead of the rest takes its batches alone.
    assert next_turn([0.42, 0.09, 0.08], [16, 16, 16], 32) == ([0], 2)
    assert next_turn([0.0, 0.0], [16, 16], 32) == ([], 0)
    # Over many turns each task's trials follow its stake.
    share, had = [0.6, 0.3, 0.1], [0, 0, 0]
    while sum(had) < 800:
        turn, batches = next_turn(share, had, 8)
        assert 1 <= len(turn) <= batches
        for i in turn:
            had[i] += 8 * batches // len(turn)
    assert [h / sum(had) for h in had] == pytest.approx(share, abs=0.03)
    # Under a time budget a trial's cost counts: a task whose candidates take 20 times as
    # long to build and run as the others' gets its stake's share of the time, not of the
    # trials (the face detector's head convolution had taken 4 of 10 minutes at 5% stake).
    share, cost, had = [0.5, 0.45, 0.05], [1.0, 1.0, 20.0], [0, 0, 0]
    while sum(h * c for h, c in zip(had, cost)) < 4000:
        turn, batches = next_turn(share, had, 8, cost=cost)
        for i in turn:
            had[i] += 8 * batches // len(turn)
    time_spent = [h * c for h, c in zip(had, cost)]
    assert [t / sum(time_spent) for t in time_spent] == pytest.approx(share, abs=0.03)
    assert had[2] < had[1] / 50


def deconv_net(cin, cout, k, stride, pad, in_hw, out_pad=0, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    w = (0.1 * rng.standard_normal((cin, cout, k, k))).astype(np.float32)
    oh = (in_hw[0] - 1) * stride - 2 * pad + k + out_pad
    ow = (in_hw[1] - 1) * stride - 2 * pad + k + out_pad
    node = helper.make_node("ConvTranspose", ["input", "w"], ["output"], kernel_shape=[k, k],
                            strides=[stride, stride], pads=[pad] * 4,
                            output_padding=[out_pad, out_pad])
    graph = helper.make_graph(
        [node], "deconv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, cin, *in_hw])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, cout, oh, ow])],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("k,stride,pad,hw,out_pad,cout", [
    (4, 2, 1, (4, 4), 0, 16),  # DCGAN's layers
    (4, 2, 1, (5, 7), 0, 16),  # odd, non-square input
    (4, 2, 1, (5, 7), 0, 6),  # output channels no multiple of the block
    (3, 2, 1, (6, 6), 1, 16),  # kernel no multiple of the stride, output padding
    (2, 2, 0, (3, 3), 0, 6),
    (5, 3, 2, (4, 5), 0, 16),  # stride 3
    (4, 1, 0, (1, 1), 0, 6),  # DCGAN's first layer: a 1x1 input (a matrix-vector product)
    (3, 2, 0, (1, 1), 0, 6),  # strided, odd kernel: the same
])
def test_subpixel_matches_onnxruntime(k, stride, pad, hw, out_pad, cout):
    shape = (1, 8, *hw)
    model = deconv_net(8, cout, k, stride, pad, hw, out_pad)
    point = hw == (1, 1)
    # NCHW phases (sessions from before), blocked phases, 1x1 inputs as matrix products,
    # phases at their own offsets
    for revision in (1, 2, 3, 5):
        err, plan = _run_variant(model, shape, "subpixel", revision=revision)
        rewritten = 0 if point and revision < 3 and stride == 1 else 1
        assert plan.rewritten == rewritten and err < 1e-5, (revision, err)
    if point:
        return
    # From revision 5, a phase convolution whose chunks each hold one phase computes
    # ceil(out / stride) rows a phase; before, more where a phase starts late.
    _, target = _target()
    base = load_relax("onnx", model, {"input": list(shape)})
    oh = (hw[0] - 1) * stride - 2 * pad + k + out_pad
    for revision in (3, 5):
        mod, _ = gv.prepare(base, target, "subpixel", revision=revision)
        rows = int(mod["conv2d_phases"].params[-1].shape[2])  # its output buffer
        block = blocking.input_block(stride * stride * cout, blocking.vector_block(target))
        exact = revision >= 5 and cout % block == 0
        late = 0 if exact else (stride - 1 + pad) // stride  # the largest phase offset
        assert rows == -(-oh // stride) + late, (revision, rows)


@pytest.mark.parametrize("name", ["dwconv:D9", "dwconv:D4"])
def test_blocked_depthwise_matches_onnxruntime(name):
    from tvmtui.workloads import load_workload

    wl = load_workload(name)
    shape = wl.input_shapes["input"]
    err, plan = _run_variant(wl.model_bytes, shape, "nchwc")
    block = blocking.vector_block(_target()[1])
    assert err < 1e-5
    assert plan.rewritten == (1 if shape[1] % block == 0 else 0)


def test_reuse_across_sessions_is_marked_and_measured_again(cli, tmp_path):
    two = tmp_path / "two.onnx"
    two.write_bytes(conv_net([(16, 3, 1), (16, 3, 1)], (1, 16, 10, 10)))
    one = tmp_path / "one.onnx"  # the same layer once: its tasks are among two's
    one.write_bytes(conv_net([(16, 3, 1)], (1, 16, 10, 10), seed=5))
    first = cli.run("tune", str(two), "--trials", "24", "--session", "src", "--json",
                    "--variants", "nchw", "--batch", "8")
    assert first.returncode == 0, first.stderr
    second = cli.run("tune", str(one), "--trials", "12", "--session", "dst", "--json",
                     "--variants", "nchw", "--batch", "8")
    assert second.returncode == 0, second.stderr
    events = cli.json_lines(second.stdout)
    trials = [e for e in events if e["event"] == "trial"]
    reused = [e for e in trials if e.get("reused_from")]
    assert reused and {e["reused_from"] for e in reused} == {"src"}
    assert all(e["run_s"] and e["error_kind"] is None for e in reused)  # measured here
    assert trials[:len(reused)] == reused  # the warm start comes first
    assert any("reuse:" in e["message"] and "'src'" in e["message"]
               for e in events if e["event"] == "notice")
    assert len(trials) == 12 and [e["trial"] for e in trials] == list(range(1, 13))
    # The source's own schedules: its records, replayed as the warm start replays them (a
    # replay re-runs RewriteLayout's recorded steps, whose module hashes apart from the
    # search's own candidate with the same schedule).
    from tvmtui.sessions.msdb import load_database
    from tvmtui.tuning.schedules import module_hash
    from tvmtui.tuning.warmstart import record_candidate

    src = cli.session("src")
    db, _, _ = load_database(src.file(WORKLOAD_DB), src.file(RECORD_DB))
    replayed = {module_hash(record_candidate(r.workload.mod, r.trace).sch.mod)
                for r in db.get_all_tuning_records()}
    assert {e["shash"] for e in reused} <= replayed
    # Its fastest records of the task (`BestRecords` replays no other), the least unrolled of
    # them measured alone first: the session's first trial waits for one build only.
    tops = [{module_hash(record_candidate(w.mod, r.trace).sch.mod)
             for r in db.get_top_k(w, len(reused))}
            for w in {module_hash(r.workload.mod): r.workload
                      for r in db.get_all_tuning_records()}.values()]
    assert {e["shash"] for e in reused} in tops
    rounds = [e for e in events if e["event"] == "round_done"]
    assert rounds[0]["batch"] == 1 and rounds[1]["batch"] == len(reused) - 1
    # Sessions with no task in common are passed over by the hashes their workload file
    # lists, without loading them: those are the hashes of the workloads loaded.
    from tvmtui.sessions.msdb import workload_hashes

    loaded = {module_hash(r.workload.mod) for r in db.get_all_tuning_records()}
    assert loaded and loaded <= workload_hashes(src.file(WORKLOAD_DB))
    # A record whose trace no longer replays (ResNet-18 sessions have some) is passed
    # over for the next fastest.
    from tvmtui.sessions.msdb import BestRecords

    lines = src.file(RECORD_DB).read_text().splitlines()
    runs = [sum(json.loads(line)[1][1]) for line in lines]
    fastest = min(range(len(lines)), key=runs.__getitem__)
    index, record = json.loads(lines[fastest])
    record[0][0][0][3].append("extra_output")  # its first instruction: one output too many
    lines[fastest] = json.dumps([index, record])
    broken = tmp_path / "broken_records.json"
    broken.write_text("\n".join(lines) + "\n")
    hashes = workload_hashes(src.file(WORKLOAD_DB))
    whole = BestRecords(src.file(WORKLOAD_DB), src.file(RECORD_DB), hashes)
    kept = BestRecords(src.file(WORKLOAD_DB), broken, hashes)
    for key in hashes:
        times = [sum(float(x) for x in r.run_secs) for r in kept.top(key, 3)]
        assert len(times) == len(whole.top(key, 3)) and times == sorted(times)
        assert runs[fastest] not in [pytest.approx(t) for t in times]
    assert BestRecords(src.file(WORKLOAD_DB), broken, {"0" * 16}).top("0" * 16, 3) == []
    cold = cli.run("tune", str(one), "--trials", "4", "--session", "cold", "--json",
                   "--variants", "nchw", "--no-reuse")
    assert not any(e.get("reused_from") for e in cli.json_lines(cold.stdout)
                   if e["event"] == "trial")


def test_fast_math_matches_onnxruntime():
    """From revision 6, sigmoid, tanh, exp and erf are TOPI's polynomials (no libm call per
    value); the LSTM and a net of each operator still match ONNX Runtime."""
    from tvmtui.workloads import load_workload

    wl = load_workload("lstm")
    shape = wl.input_shapes["input"]
    _, target = _target()
    base = load_relax("onnx", wl.model_bytes, {"input": list(shape)})
    for revision, exact in ((5, True), (6, False)):
        mod, _ = gv.prepare(base, target, "nchw", revision=revision)
        text = mod.script()
        assert ("T.sigmoid(" in text and "T.tanh(" in text) == exact, revision
        err, _ = _run_variant(wl.model_bytes, shape, "nchw", revision=revision)
        assert err < 1e-5, (revision, err)
    # Each operator, and a float64 tanh, which keeps the exact form.
    nodes = [helper.make_node(op, ["input"], [f"{op}_out"])
             for op in ("Sigmoid", "Tanh", "Exp", "Erf")]
    nodes += [helper.make_node("Cast", ["input"], ["wide"], to=TensorProto.DOUBLE),
              helper.make_node("Tanh", ["wide"], ["wide_tanh"]),
              helper.make_node("Cast", ["wide_tanh"], ["narrow"], to=TensorProto.FLOAT)]
    nodes.append(helper.make_node("Sum", [n.output[0] for n in nodes[:4]] + ["narrow"],
                                  ["output"]))
    graph = helper.make_graph(
        nodes, "fast", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4, 33])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 33])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    err, _ = _run_variant(model.SerializeToString(), (1, 4, 33), "nchw")
    assert err < 1e-5, err
    base = load_relax("onnx", model.SerializeToString(), {"input": [1, 4, 33]})
    text = gv.prepare(base, target, "nchw")[0].script()
    assert text.count("T.tanh(") == 1 and "float64" in text  # the float64 one only


def _transform_writes(mod) -> list[bool]:
    """For each layout transform of a prepared module: does its block write its output at
    its own loop indices, in order (walking the output)?"""
    import re

    found = []
    for gvar, func in mod.functions.items():
        if gvar.name_hint.startswith("te_layout_transform"):
            text = func.script()
            loops = re.search(r"(v_\w+(?:, v_\w+)*) = T\.axis\.remap", text).group(1)
            written = re.search(r"T\.writes\(\w+\[([^\]]*)\]\)", text).group(1)
            found.append(written == loops)
    return found


def test_layout_transforms_walk_their_output():
    """From revision 7 an activation's layout transform loops over its output (threads
    write whole cache lines of their own) and still matches ONNX Runtime; a transform that
    pads keeps TVM's form, and is exact."""
    from tvm import relax

    layers, shape = NETS["4ch-8x8s4"]  # NCHW to NCHW4c in, NCHW[x]c to NCHW out
    model = conv_net(layers, shape)
    _, target = _target()
    base = load_relax("onnx", model, {"input": list(shape)})
    errors = []
    for revision, walks_output in ((6, False), (7, True)):
        mod, _ = gv.prepare(base, target, "nchwc", revision=revision)
        writes = _transform_writes(mod)
        assert len(writes) == 2 and all(w == walks_output for w in writes), (revision, writes)
        errors.append(_run_variant(model, shape, "nchwc", revision=revision)[0])
    assert errors[0] == errors[1] < 1e-4, errors  # the same copies: the same output
    # 12 channels in blocks of 8: padded, so the stock transform, and still exact.
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 12, 5, 3), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(relax.op.layout_transform(x, lambda n, c, h, w: (n, c // 8, h, w, c % 8),
                                              pad_value=0.0))
        bb.emit_func_output(y)
    with target:
        mod = relax.transform.LegalizeOps(
            customize_legalize_map={"relax.layout_transform": gv._legalize_layout_transform}
        )(bb.get())
    assert [g.name_hint for g in mod.functions if g.name_hint.startswith("te_")] == [
        "te_layout_transform_with_pad"]  # TVM's, which walks the output when it pads
    tvm = _target()[0]
    data = np.random.default_rng(0).standard_normal((1, 12, 5, 3)).astype(np.float32)
    got = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())["main"](
        tvm.runtime.tensor(data)).numpy()
    want = np.zeros((1, 16, 5, 3), np.float32)
    want[:, :12] = data
    np.testing.assert_array_equal(got, want.reshape(1, 2, 8, 5, 3).transpose(0, 1, 3, 4, 2))


def test_layout_transforms_that_move_nothing_are_views():
    """From revision 8 a layout transform that keeps every element at its flat offset (an
    RGB input to NCHW1c) is a zero-copy view, not a kernel to tune and run; the tuned build
    (the export's and bench's path) still matches ONNX Runtime."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    tvm, target = _target()
    layers, shape = NETS["rgb-15x15"]
    model = conv_net(layers, shape)
    base = load_relax("onnx", model, {"input": list(shape)})
    tasks = {}
    for revision in (7, 8):
        mod, _ = gv.prepare(base, target, "nchwc", revision=revision)
        tasks[revision] = [t.task_name for t in lowering.extract_tasks(mod, target)]
    assert "R.memory.view(input" in mod["main"].script()
    assert len(tasks[7]) == len(tasks[8]) + 1  # the input's transform, gone
    assert sum(n.startswith("te_layout_transform") for n in tasks[8]) == 1  # the output's stays
    vm = relax.VirtualMachine(lowering.compile_tuned(ms.database.MemoryDatabase(), mod, target),
                              tvm.cpu())
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(model).run(None, {"input": x})[0]
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)) < 1e-4


@pytest.mark.parametrize("pattern,shape,keeps", [
    (lambda n, c, h, w: (n, c, h, w, 0 * c), (1, 3, 15, 15), True),  # NCHW1c
    (lambda n, c, h, w: (n, c // 8, h, w, c % 8), (1, 16, 1, 1), True),  # a 1x1 map
    (lambda n, c, h, w: (n, c // 4, h, w, c % 4), (1, 4, 21, 21), False),  # DQN's NCHW4c
    (lambda n, c, h, w: (n, h, w, c), (1, 8, 2, 2), False),  # NHWC
])
def test_a_view_only_where_no_element_moves(pattern, shape, keeps):
    from tvm import tirx

    _target()
    index_map = tirx.IndexMap.from_func(pattern, index_dtype="int64")
    assert gv._keeps_order(index_map, list(shape)) is keeps


def bn_net(shape=(1, 16, 9, 11), seed=0) -> bytes:
    """Conv -> BatchNorm -> Clip, a depthwise Conv -> BatchNorm -> Relu, a 1x1 Conv scaled
    and subtracted from a per-channel constant (`c - 0.5 y`), and a Conv whose output has a
    second user besides its BatchNorm (which must stay as it is)."""
    rng = np.random.default_rng(seed)
    c, inits, nodes = shape[1], [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def bn(x, out, channels):
        names = [const(f"{out}_{p}", v) for p, v in (
            ("g", rng.uniform(0.5, 2.0, channels)), ("b", rng.standard_normal(channels)),
            ("m", rng.standard_normal(channels)), ("v", rng.uniform(0.1, 3.0, channels)))]
        nodes.append(helper.make_node("BatchNormalization", [x, *names], [out], epsilon=1e-3))

    def conv(x, out, cin, cout, k, group=1, bias=True):
        w = const(f"{out}_w", rng.standard_normal((cout, cin // group, k, k)) * 0.3)
        ins = [x, w] + ([const(f"{out}_bias", rng.standard_normal(cout))] if bias else [])
        nodes.append(helper.make_node("Conv", ins, [out], kernel_shape=[k, k], group=group,
                                      pads=[(k - 1) // 2] * 4))

    conv("input", "c0", c, c, 3)
    bn("c0", "n0", c)
    nodes.append(helper.make_node("Clip", ["n0", const("lo", 0.0), const("hi", 6.0)], ["a0"]))
    conv("a0", "c1", c, c, 3, group=c, bias=False)
    bn("c1", "n1", c)
    nodes.append(helper.make_node("Relu", ["n1"], ["a1"]))
    conv("a1", "c2", c, 24, 1)
    nodes.append(helper.make_node("Mul", ["c2", const("half", 0.5)], ["m2"]))
    nodes.append(helper.make_node("Sub", [const("k2", rng.standard_normal((24, 1, 1))), "m2"],
                                  ["s2"]))
    conv("s2", "c3", 24, 24, 3, bias=False)
    bn("c3", "n3", 24)
    nodes.append(helper.make_node("Add", ["c3", "n3"], ["output"]))
    return _onnx(nodes, "bn", shape, [1, 24, *shape[2:]], inits)


def _relax_ops(mod) -> dict:
    import collections
    import re

    return collections.Counter(re.findall(r"= R\.([a-z_.0-9]+)\(", mod.script(show_meta=False)))


@pytest.mark.parametrize("variant", ["nchw", "nchwc", "winograd"])
def test_batchnorm_folded_into_the_convolution_matches_onnxruntime(variant):
    """From revision 9 a convolution's per-channel affine chain (a BatchNorm, a scale, a
    constant minus it) becomes its weights and one bias add; a convolution whose output has
    another user keeps its chain. Either way the result matches ONNX Runtime."""
    from tvmtui.graph.affine import fold_channel_affine

    shape = (1, 16, 9, 11)
    model = bn_net(shape)
    base = load_relax("onnx", model, {"input": list(shape)})
    before, after = _relax_ops(base), _relax_ops(fold_channel_affine(base))
    assert before["divide"] == 3 and after["divide"] == 1  # c3's BatchNorm stays
    assert after["subtract"] == 1 and after["multiply"] == 1
    assert after["nn.conv2d"] == before["nn.conv2d"] == 4
    for revision in (8, 9):
        err, _ = _run_variant(model, shape, variant, revision=revision)
        assert err < 1e-4, (revision, err)


def test_batchnorm_after_a_transposed_convolution_is_folded():
    rng = np.random.default_rng(3)
    cin, cout = 8, 16
    model = onnx_load(deconv_net(cin, cout, 4, 2, 1, (5, 7)))
    stats = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in (
        ("g", rng.uniform(0.5, 2.0, cout)), ("b", rng.standard_normal(cout)),
        ("m", rng.standard_normal(cout)), ("v", rng.uniform(0.1, 3.0, cout)))]
    model.graph.initializer.extend(stats)
    model.graph.node[0].output[0] = "d"
    model.graph.node.append(helper.make_node("BatchNormalization", ["d", "g", "b", "m", "v"],
                                             ["output"]))
    data = model.SerializeToString()
    from tvmtui.graph.affine import fold_channel_affine

    base = load_relax("onnx", data, {"input": [1, cin, 5, 7]})
    assert _relax_ops(base)["divide"] == 1 and _relax_ops(fold_channel_affine(base))["divide"] == 0
    for variant in ("nchw", "subpixel"):
        err, _ = _run_variant(data, (1, cin, 5, 7), variant)
        assert err < 1e-5, (variant, err)


def test_revision_10_marks_each_kernels_weights_layout_free():
    """From revision 10 a fused kernel's constant operands are layout-free (its schedule
    may repack them); sessions from before keep the tasks they were tuned with."""
    layers, shape = NETS["7x7-16-32"]
    _, target = _target()
    base = load_relax("onnx", conv_net(layers, shape), {"input": list(shape)})
    for revision in (9, 10):
        mod, _ = gv.prepare(base, target, "nchwc", revision=revision)
        tasks = lowering.extract_tasks(mod, target, revision)
        conv = next(t for t in tasks if "conv2d" in t.task_name)
        attrs = conv.dispatched[0]["main"].attrs
        free = [int(i) for i in attrs.get("layout_free_buffers", [])] if attrs else []
        assert free == ([1, 2] if revision >= 10 else []), (revision, free)  # weight, bias


@pytest.mark.parametrize("shape,fn", [
    ((16, 24, 3, 3), lambda o, i, h, w: (o // 8, i // 8, h, w, i % 8, o % 8)),  # OIHW8i8o
    ((1, 12, 5, 7), lambda n, c, h, w: (n, c // 4, h, w, c % 4)),  # NCHW4c
    ((2, 3, 4, 5), lambda a, b, c, d: (d, b, a, c)),  # a plain transpose
    ((4, 6), lambda i, j: (i * 6 + j,)),  # no transpose: element by element
])
def test_folded_layout_transforms_move_every_weight_where_the_index_map_says(shape, fn):
    from tvm.tirx import IndexMap

    from tvmtui.graph.fold import _apply_index_map, _as_transpose, _scatter

    index_map = IndexMap.from_func(fn)
    value = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out_shape = [int(d) for d in index_map.map_shape(list(shape))]
    want = _scatter(index_map, value, out_shape)
    got = _apply_index_map(index_map, value, out_shape)
    assert got.shape == want.shape and np.array_equal(got, want)
    assert (_as_transpose(index_map, shape) is None) == (len(shape) == 2)


def test_a_layer_two_variants_share_is_one_task_whatever_its_names():
    """ResNet-18's strided and 1x1 convs are the same function in NCHW8c and Winograd but
    numbered apart; as two tasks the second's candidates were all measured already, so it
    never got a trial and Winograd never an estimate (revision 11 kept them apart)."""
    from tvm_ffi import structural_hash

    from tvmtui.graph.tasks import extract_variant_tasks
    from tvmtui.workloads.loader import load_workload

    _, target = _target()
    w = load_workload("resnet18")
    base = load_relax(w.format, w.model_bytes, w.input_shapes)

    def shapes(revision):
        found = extract_variant_tasks(base, target, ["nchwc", "winograd"], revision=revision)
        return found, [int(structural_hash(t.dispatched[0])) for t in found.tasks]

    old, old_shapes = shapes(11)
    assert len(set(old_shapes)) < len(old_shapes)  # what the fix is for
    found, new_shapes = shapes(gv.REWRITE_REVISION)
    assert len(set(new_shapes)) == len(new_shapes) == len(set(old_shapes))
    shared = [w for w in found.weights if {"nchwc", "winograd"} <= set(w)]
    assert len(shared) >= len([w for w in old.weights if {"nchwc", "winograd"} <= set(w)]) + 6
    for variant in ("nchwc", "winograd"):  # each variant's layers all have a task
        assert sum(w.get(variant, 0) for w in found.weights) == \
            sum(w.get(variant, 0) for w in old.weights)
