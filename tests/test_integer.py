"""Integer lowering of quantized TFLite models (`graph/integer.py`): every lowered layer
checked against LiteRT's reference kernels, in quantization steps, on small odd shapes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tvmtui.graph import variants as gv
from tvmtui.graph.fixedpoint import mbqm_reference, quantize_multiplier
from tvmtui.graph.integer import IntegerPlan
from tvmtui.graph.relax_import import load_relax
from tvmtui.workloads import nets
from tvmtui.workloads.quantize import quantize_tflite
from tvmtui.workloads.tflite_writer import TfliteNet


def _target():
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(local_cpu_target())
    return tvm, tvm.target.Target(local_cpu_target())


def _int8(layers, shape, per_channel=True) -> bytes:
    """A float TfliteNet built by `layers(net, rng)` on an NCHW `shape`, quantized."""
    n, c, h, w = shape
    net = TfliteNet("t", list(shape))
    out = layers(net, np.random.default_rng(0))
    frames = [np.random.default_rng(i).standard_normal((n, h, w, c)).astype(np.float32)
              for i in range(8)]
    return quantize_tflite(net.finish(out), frames, per_channel=per_channel)


def _reference(model: bytes):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        it = Interpreter(model_content=model,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    return it


def _steps(model: bytes, variant: str = "nchw", frames: int = 12,
           seeds: list[int] | None = None) -> tuple[int, IntegerPlan]:
    """The largest difference, in output quantization steps, between tuned-graph TVM
    (untuned build of the same graph) and LiteRT's reference kernels."""
    tvm, target = _target()
    from tvm import relax

    it = _reference(model)
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    base = load_relax("tflite", model, {inp["name"]: [int(d) for d in inp["shape"]]})
    plan = IntegerPlan.of(base)
    mod, _ = gv.prepare(base, target, variant)
    vm = relax.VirtualMachine(relax.build(mod, target=target), tvm.cpu())
    step = _output_step(it)
    worst = 0
    for seed in seeds if seeds is not None else range(100, 100 + frames):
        x = np.random.default_rng(seed).standard_normal(inp["shape"]).astype(np.float32)
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        it.set_tensor(inp["index"], x)
        it.invoke()
        want = it.get_tensor(out["index"])
        worst = max(worst, int(np.rint(np.abs(got - want).max() / step)))
    return worst, plan


def _output_step(it) -> float:
    """The scale of the int8 tensor the final DEQUANTIZE reads."""
    out = it.get_output_details()[0]
    ints = [d for d in it.get_tensor_details() if d["dtype"] == np.int8 and
            d["shape"].tolist() == out["shape"].tolist()]
    return float(ints[-1]["quantization"][0])


def _conv(cin, cout, k, stride, pad, act=None, bn=False, groups=1):
    def layers(net, rng):
        w = nets._he(rng, (cout, cin // groups, k, k), (cin // groups) * k * k)
        b = None if bn else (0.1 * rng.standard_normal(cout)).astype(np.float32)
        y = net.conv("input", w, b, stride, pad, groups=groups)
        y = nets._bn(net, y, rng, cout) if bn else y
        return getattr(net, act)(y) if act else y
    return layers


def _residual(net, rng):
    x = nets._conv_bn_relu(net, "input", rng, 6, 12, 3, 1, 1)
    y = nets._conv_bn_relu(net, x, rng, 12, 12, 3, 1, 1, relu=False)
    return net.relu(net.add(y, x))


def _head(net, rng):
    x = nets._conv_bn_relu(net, "input", rng, 6, 20, 1, 1, 0)
    return net.dense(net.global_avg_pool(x), nets._he(rng, (7, 20), 20),
                     (0.1 * rng.standard_normal(7)).astype(np.float32))


# Channel counts that are no multiple of 4 or 16, odd maps, strides, paddings, fused and
# folded activations; every activation has its own zero point (calibrated, asymmetric).
CASES = {
    "conv3x3-5to7-relu6": (_conv(5, 7, 3, 1, 1, "relu6"), (1, 5, 9, 11)),
    "conv3x3s2-3to13-bn-relu": (_conv(3, 13, 3, 2, 1, "relu", bn=True), (1, 3, 15, 13)),
    "conv1x1-12to20": (_conv(12, 20, 1, 1, 0), (1, 12, 7, 5)),
    "depthwise3x3-7": (_conv(7, 7, 3, 1, 1, "relu6", bn=True, groups=7), (1, 7, 9, 9)),
    "depthwise3x3s2-12": (_conv(12, 12, 3, 2, 1, groups=12), (1, 12, 11, 10)),
    "residual-add-relu": (_residual, (1, 6, 9, 7)),
    "mean-fully-connected": (_head, (1, 6, 5, 9)),
}


@pytest.mark.parametrize("case", CASES)
def test_lowered_layers_match_litert_reference_kernels(case):
    layers, shape = CASES[case]
    steps, plan = _steps(_int8(layers, shape))
    assert plan is not None and not plan.left, plan.summary()
    assert steps == 0


def test_per_tensor_weights_and_blocked_layout_match_too():
    model = _int8(_residual, (1, 6, 9, 7), per_channel=False)
    steps, plan = _steps(model, variant="nchwc")
    assert plan.lowered["conv2d"] == 2 and plan.lowered["add"] == 1
    assert steps == 0


def _depthwise_after_pointwise(stride):
    def layers(net, rng):  # a pointwise layer, then the depthwise one reads it blocked
        x = nets._conv_bn_relu(net, "input", rng, 5, 16, 1, 1, 0)
        w = nets._he(rng, (16, 1, 3, 3), 9)
        return net.relu6(net.conv(x, w, (0.1 * rng.standard_normal(16)).astype(np.float32),
                                  stride, 1, groups=16))
    return layers


def _max_pool_between(net, rng):
    x = nets._conv_bn_relu(net, "input", rng, 5, 16, 1, 1, 0)
    x = net.max_pool(x, 3, 2, 1)  # an int8 PAD with the lowest value, then MAX_POOL_2D
    return nets._conv_bn_relu(net, x, rng, 16, 16, 1, 1, 0)


BLOCKED_PADS = {  # layers, layout transforms at revision 17 and at 18
    "depthwise": (_depthwise_after_pointwise(1), 4, 2),
    "depthwise-stride-2": (_depthwise_after_pointwise(2), 4, 2),
    "max-pool": (_max_pool_between, 4, 2),
}


@pytest.mark.parametrize("case", BLOCKED_PADS)
def test_pads_and_max_pools_run_on_the_blocked_tensor(case):
    """The zero-point pad before an int8 depthwise layer, and the pad and max pool after a
    blocked layer, apply to the blocked tensor (revision 18): only the graph's input and
    output layout transforms are left, and the layers stay exact."""
    tvm, target = _target()
    from tvm import relax

    from tvmtui.graph.affine import fold_channel_affine

    layers, before, after = BLOCKED_PADS[case]
    model = _int8(layers, (1, 5, 9, 11))
    steps, _ = _steps(model, variant="nchwc")
    assert steps == 0
    base = fold_channel_affine(load_relax("tflite", model, {"input": [1, 9, 11, 5]}))

    def ops(revision):
        with target:
            mod = gv._blocked(base, 16, gv.Plan("nchwc", ""), revision)
        calls = [b.value for b in mod["main"].body.blocks[0].bindings
                 if isinstance(b.value, relax.Call)]
        return [getattr(c.op, "name", "") for c in calls]

    assert ops(17).count("relax.layout_transform") == before
    assert ops(18).count("relax.layout_transform") == after


@pytest.mark.parametrize("stride", [1, 2])
def test_a_blocked_depthwise_layer_pads_its_own_input(stride):
    """From revision 20 an int8 depthwise layer pads its input with the zero point inside
    its own kernel: the pad task is gone, and the layer stays exact in both blocked
    variants (the pad value is the input's zero point, -128 after a ReLU, not zero)."""
    tvm, target = _target()

    from tvmtui.graph import lowering

    model = _int8(_depthwise_after_pointwise(stride), (1, 5, 9, 11))
    for variant in ("nchwc", "winograd"):
        assert _steps(model, variant=variant, frames=6)[0] == 0
    base = load_relax("tflite", model, {"input": [1, 9, 11, 5]})

    def tasks(revision):
        mod, _ = gv.prepare(base, target, "nchwc", revision=revision)
        with target:
            return [t.task_name for t in lowering.extract_tasks(mod, target, revision)]

    before, after = tasks(19), tasks(20)
    assert any(name.startswith("pad") for name in before)
    assert not any("pad" in name for name in after)
    assert len(after) == len(before) - 1


def test_an_operator_it_does_not_lower_stays_float_and_is_named():
    def layers(net, rng):  # a BatchNorm after the pooling: its MUL folds into nothing
        x = net.global_avg_pool(nets._conv_bn_relu(net, "input", rng, 4, 8, 3, 1, 1))
        return nets._bn(net, x, rng, 8)

    model = _int8(layers, (1, 4, 6, 6))
    tvm, target = _target()
    it = _reference(model)
    inp = it.get_input_details()[0]
    plan = IntegerPlan.of(load_relax("tflite", model, {inp["name"]: list(inp["shape"])}))
    assert plan.left == {"relax.multiply": 1}
    assert plan.lowered["conv2d"] == 1 and plan.lowered["add"] == 1
    assert "left in float: 1 multiply" in plan.summary()


def test_float_models_are_untouched():
    net = TfliteNet("t", [1, 4, 6, 6])
    model = net.finish(_conv(4, 8, 3, 1, 1, "relu")(net, np.random.default_rng(0)))
    base = load_relax("tflite", model, {"input": [1, 6, 6, 4]})
    assert IntegerPlan.of(base) is None
    again = load_relax("tflite", model, {"input": [1, 6, 6, 4]}, revision=13)
    assert base.script() == again.script()


def test_zoo_int8_twin_is_exact_against_the_reference_kernels():
    from tvmtui.workloads.int8 import twin_file

    steps, plan = _steps(twin_file("dqn-int8").read_bytes(), frames=10)
    assert plan.lowered == {"conv2d": 3, "fully_connected": 2, "quantize": 1}
    assert steps == 0


def test_the_classifier_head_rounds_as_litert_does():
    """Bench frame 84 puts one of mobilenet-int8's 1000 logits 1.5e-6 above a half step:
    the fully connected layer's multiplier must come from the scales in double, as LiteRT
    computes it (a float32 product of the two scales rounded it the other way)."""
    from tvmtui.workloads.int8 import twin_file

    steps, plan = _steps(twin_file("mobilenet-int8").read_bytes(), seeds=[84, 0])
    assert plan.lowered["fully_connected"] == 1 and not plan.left
    assert steps == 0


def test_requantize_in_relax_computes_tflite_arithmetic_at_the_edges():
    tvm, target = _target()
    from tvm import relax

    from tvmtui.graph.fixedpoint import Emitter

    rng = np.random.default_rng(3)
    x = np.concatenate([
        np.array([0, 1, -1, 2**31 - 1, -2**31 + 1, 2**20, -2**20, 12345, -12345]),
        rng.integers(-2**24, 2**24, 300)]).astype(np.int32)
    # per-channel multipliers from real scales, shifts right and left
    real = np.array([0.0003, 0.7, 0.49999, 1.5, 3.9e-6, 0.25])
    multiplier, shift = quantize_multiplier(real)
    cols = len(real)
    data = np.resize(x, (len(x) // cols + 1) * cols).reshape(-1, cols)
    for single in (False, True):
        bb = relax.BlockBuilder()
        arg = relax.Var("x", relax.TensorType(list(data.shape), "int32"))
        with bb.function("main", [arg]):
            with bb.dataflow():
                out = Emitter(bb).requantize(arg, multiplier, shift, 3, -2**31, 2**31 - 1,
                                              "int32", single=single)
                gv_ = bb.emit_output(out)
            bb.emit_func_output(gv_)
        vm = relax.VirtualMachine(relax.build(bb.get(), target=target), tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(data)).numpy()
        exact = mbqm_reference(data, multiplier, shift, single=single) + 3
        # TFLite's arithmetic is defined where x * 2^left and the result fit in int32
        defined = (np.abs(data.astype(np.int64) << np.maximum(shift, 0)) < 2**31) & \
            (np.abs(exact) < 2**31)
        assert defined.mean() > 0.9
        assert np.array_equal(got[defined], exact[defined])


def test_quantize_multiplier_is_tflites():
    m, s = quantize_multiplier([0.5, 0.75, 1.0, 2.0**-40, 0.0, 1 - 2**-40])
    assert m.tolist()[:3] == [2**30, 3 * 2**29, 2**30]
    assert s.tolist()[:3] == [0, 0, 1]
    assert (m[3], s[3]) == (0, 0) and (m[4], s[4]) == (0, 0)
    assert (m[5], s[5]) == (2**30, 1)  # rounds up to 2^31: halved, one more shift


# ---- the dot-product instruction ------------------------------------------------------------
def _has_vnni() -> bool:
    from tvmtui.graph.dotprod import instruction

    _, target = _target()
    return instruction(target) is not None


def test_the_instruction_comes_from_the_target():
    import tvm

    from tvmtui.graph.dotprod import instruction

    def cpu(mcpu, triple="x86_64-linux-gnu"):
        return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "mtriple": triple})

    assert instruction(cpu("cascadelake")) == "avx512-vnni"
    assert instruction(cpu("znver4")) == "avx512-vnni"
    assert instruction(cpu("skylake-avx512")) is None  # AVX-512, no VNNI
    assert instruction(cpu("haswell")) is None

    def arm(*mattr):
        return tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu",
                                  "mattr": ["+neon", *mattr]})

    assert instruction(arm("+dotprod")) == "sdot"
    assert instruction(arm("+dotprod", "+i8mm")) == "sdot"
    assert instruction(arm()) is None  # NEON without the dot-product extension


ARM_DOTPROD = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon", "+dotprod"],
               "num-cores": 4}


@pytest.mark.parametrize("channels", [4, 3])
def test_an_arm_target_with_dotprod_compiles_int8_convolutions_to_sdot(channels):
    """On Arm with +dotprod the blocked int8 convolutions (NCHW4c) are written for `sdot`
    and every design of their tasks cross-compiles to it (the emulated board runs them:
    `tests/test_arm_board.py`)."""
    from tvmtui.kernels.tvm_env import import_tvm

    tvm = import_tvm(ARM_DOTPROD)  # with TVM's Arm intrinsics, which its ARM rules name
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.graph import lowering
    from tvmtui.graph.dotprod import task_instruction

    target = tvm.target.Target(ARM_DOTPROD)
    model = _int8(_few_channels(channels), (1, channels, 15, 13))
    base = load_relax("tflite", model, {"input": [1, 15, 13, channels]})
    mod, plan = gv.prepare(base, target, "nchwc")
    assert plan.dot == 3 and plan.label == "NCHW4c + sdot"
    tasks = [t for t in lowering.extract_tasks(mod, target, gv.REWRITE_REVISION)
             if task_instruction(t.dispatched[0], target)]
    assert len(tasks) == 3
    for task in tasks:
        func = task.dispatched[0]
        ctx = ms.TuneContext(mod=func, target=target, space_generator="post-order-apply",
                             task_name="dot", rand_state=1)
        postprocs = list(ctx.space_generator.postprocs)
        for design in ctx.generate_design_space():
            sch = s_tir.Schedule(func, seed=1, debug_mask=0)
            s_tir.schedule.Trace(design.trace.simplified(remove_postproc=True).insts, {}) \
                .apply_to_schedule(sch, remove_postproc=True)
            assert all(p.apply(sch) for p in postprocs)
            asm = tvm.tirx.build(sch.mod, target=target).inspect_source("asm")
            assert "sdot\t" in asm


def _dot_net(net, rng, channels=4):
    # 4 input channels: NCHW4c; 3 or 1 (RGB, grayscale): padded to 4 from revision 16
    x = nets._conv_bn_relu(net, "input", rng, channels, 16, 3, 2, 0)
    x = nets._conv_bn_relu(net, x, rng, 16, 32, 3, 1, 1)  # padded: the zero point padded in
    return nets._conv_bn_relu(net, x, rng, 32, 16, 1, 1, 0, relu=False)


def _few_channels(channels):
    return lambda net, rng: _dot_net(net, rng, channels)


@pytest.mark.skipif(not _has_vnni(), reason="this CPU has no AVX512-VNNI")
@pytest.mark.parametrize("channels", [4, 3, 1])
def test_dot_product_convolutions_match_the_reference_kernels(channels):
    model = _int8(_few_channels(channels), (1, channels, 15, 13))
    steps, plan = _steps(model, variant="nchwc")
    assert steps == 0
    tvm, target = _target()
    it = _reference(model)
    base = load_relax("tflite", model, {"input": [int(d) for d in it.get_input_details()[0]["shape"]]})
    _, blocked = gv.prepare(base, target, "nchwc")
    assert blocked.dot == 3 and blocked.label.endswith("+ avx512-vnni")
    if channels != 4:  # revision 15 left the first layer on TOPI's int32 code
        _, before = gv.prepare(base, target, "nchwc", revision=15)
        assert before.dot == 2


def _fc_net(net, rng):
    """A conv, flattened into two fully connected layers: 4 x 3 x 16 = 192 -> 32 (on the
    dot-product instruction from revision 17), then 32 -> 7 (7 outputs: no block of 16)."""
    x = net.flatten(nets._conv_bn_relu(net, "input", rng, 4, 16, 3, 2, 0))
    x = net.relu(net.dense(x, nets._he(rng, (32, 192), 192),
                           (0.1 * rng.standard_normal(32)).astype(np.float32)))
    return net.dense(x, nets._he(rng, (7, 32), 32), np.zeros(7, np.float32))


@pytest.mark.skipif(not _has_vnni(), reason="this CPU has no AVX512-VNNI")
def test_fully_connected_layers_run_on_the_dot_product_instruction():
    model = _int8(_fc_net, (1, 4, 9, 7))
    steps, plan = _steps(model, variant="nchwc", frames=20)
    assert plan.lowered == {"conv2d": 1, "fully_connected": 2, "quantize": 1}
    assert steps == 0
    tvm, target = _target()
    base = load_relax("tflite", model, {"input": [1, 9, 7, 4]})
    _, blocked = gv.prepare(base, target, "nchwc")
    assert blocked.dot == 2  # the conv and the 192 -> 32 layer
    old = load_relax("tflite", model, {"input": [1, 9, 7, 4]}, revision=16)
    _, before = gv.prepare(old, target, "nchwc", revision=16)
    assert before.dot == 1  # a matmul on TOPI's int32 code


def test_a_chip_without_vnni_gets_plain_integer_code():
    import tvm

    model = _int8(_dot_net, (1, 4, 15, 13))
    it = _reference(model)
    base = load_relax("tflite", model, {"input": [int(d) for d in it.get_input_details()[0]["shape"]]})
    _, plan = gv.prepare(base, tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"}),
                         "nchwc")
    assert plan.dot == 0 and plan.rewritten == 3 and plan.instruction is None


def _flat_net(net, rng):
    """A conv of 32 channels flattened into a fully connected layer of 16 (both on the
    dot-product instruction), as DQN's last conv is: the flatten joins the conv's
    epilogue."""
    x = net.flatten(nets._conv_bn_relu(net, "input", rng, 4, 32, 3, 2, 0))
    return net.dense(x, nets._he(rng, (16, 384), 384), np.zeros(16, np.float32))


DOT_TASKS = {  # model, its input shape (NHWC), its dot-product tasks, those that flatten
    "4 channels": (_few_channels(4), [1, 15, 13, 4], 3, 0),
    "3 channels": (_few_channels(3), [1, 15, 13, 3], 3, 0),
    "fully connected": (_fc_net, [1, 9, 7, 4], 2, 0),
    "flattened": (_flat_net, [1, 9, 7, 4], 2, 1),  # the conv's epilogue flattens its output
}


@pytest.mark.skipif(not _has_vnni(), reason="this CPU has no AVX512-VNNI")
@pytest.mark.parametrize("case", DOT_TASKS)
def test_every_design_of_a_dot_product_task_computes_its_kernel(case):
    """Every register tile computes the kernel exactly, and runs its epilogue (the
    requantization, a graph of a few dozen operations) on all cores: in the tile, under
    the kernel's own parallel loop, where the output is elementwise, else in a parallel
    loop of its own."""
    tvm, target = _target()
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.tirx import ForKind

    from tvmtui.graph import lowering
    from tvmtui.graph.dotprod import task_instruction
    from tvmtui.kernels import rules

    layers, shape, count, flattening = DOT_TASKS[case]
    n, h, w, c = shape
    model = _int8(layers, (n, c, h, w))
    base = load_relax("tflite", model, {"input": shape})
    mod, _ = gv.prepare(base, target, "nchwc")
    tasks = [t for t in lowering.extract_tasks(mod, target, gv.REWRITE_REVISION)
             if task_instruction(t.dispatched[0], target)]
    assert len(tasks) == count
    rng = np.random.default_rng(0)
    left = 0  # tasks whose epilogue runs in a parallel loop of its own
    for task in tasks:
        func = task.dispatched[0]
        in_tile: set[bool] = set()
        ctx = ms.TuneContext(mod=func, target=target, space_generator="post-order-apply",
                             task_name="dot", rand_state=1)
        designs = ctx.generate_design_space()
        args = ArgInfo.from_entry_func(func, remove_preproc=True)
        inputs = [rng.integers(-100, 100, [int(d) for d in a.shape]).astype(str(a.dtype))
                  for a in args[:-1]]
        out_shape, out_dtype = [int(d) for d in args[-1].shape], str(args[-1].dtype)

        def run(m, inputs=inputs, out_shape=out_shape, out_dtype=out_dtype):
            out = tvm.runtime.tensor(np.zeros(out_shape, out_dtype))
            tvm.compile(m, target=target)(*[tvm.runtime.tensor(x) for x in inputs], out)
            return out.numpy()

        want = run(func)
        plain = s_tir.Schedule(func)
        _, chunks, _, out_w, _ = (int(v.dom.extent) for v in
                                  plain.get(plain.get_sblock("dot_conv2d_NCHWc")).iter_vars[:5])
        assert len(designs) == len(rules.dot_tiles(chunks, out_w))
        postprocs = list(ctx.space_generator.postprocs)
        for design in designs:
            sch = s_tir.Schedule(func, seed=1, debug_mask=0)
            s_tir.schedule.Trace(design.trace.simplified(remove_postproc=True).insts, {}) \
                .apply_to_schedule(sch, remove_postproc=True)
            assert all(p.apply(sch) for p in postprocs)
            assert "vpdpbusd" in sch.mod.script()
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
            kernel = next(b for b in blocks if sch.get(b).name_hint.startswith("dot_conv2d"))
            outer = sch.get(sch.get_loops(blocks[-1])[0])
            assert outer.kind == ForKind.PARALLEL
            in_tile.add(outer.same_as(sch.get(sch.get_loops(kernel)[0])))
            assert np.array_equal(run(sch.mod), want)
        assert len(in_tile) == 1  # every design alike
        left += not in_tile.pop()
    assert left == flattening


def test_dot_tiles_fit_the_registers_and_divide_the_row():
    from tvmtui.kernels.rules import MAX_DOT_ACC, dot_tiles

    for chunks, width in ((4, 7), (2, 9), (32, 14), (1, 1), (3, 20)):
        tiles = dot_tiles(chunks, width)
        assert tiles
        for blocks, pixels in tiles:
            assert chunks % blocks == 0 and width % pixels == 0
            assert blocks * pixels <= MAX_DOT_ACC


def test_twins_are_written_as_the_converter_writes_them():
    """BatchNorm's MUL + ADD folded into the convolution and the activation fused: the
    float model means the same before and after, and the int8 model has one operator per
    layer."""
    from ai_edge_litert import schema_py_generated as S
    from ai_edge_litert.interpreter import Interpreter

    from tvmtui.workloads.quantize import fuse_like_converter

    net = TfliteNet("t", [1, 5, 9, 11])
    model = net.finish(_conv(5, 7, 3, 1, 1, "relu6", bn=True)(net, np.random.default_rng(0)))
    fused = fuse_like_converter(model)

    def ops(data):
        m = S.ModelT.InitFromPackedBuf(data, 0)
        names = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
        return [names[m.operatorCodes[o.opcodeIndex].builtinCode] for o in m.subgraphs[0].operators]

    assert ops(model) == ["PAD", "CONV_2D", "MUL", "ADD", "RELU6"]
    assert ops(fused) == ["PAD", "CONV_2D"]
    x = np.random.default_rng(1).standard_normal((1, 9, 11, 5)).astype(np.float32)
    outs = []
    for data in (model, fused):
        it = Interpreter(model_content=data)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    assert ops(_int8(_conv(5, 7, 3, 1, 1, "relu6", bn=True), (1, 5, 9, 11))) == \
        ["QUANTIZE", "PAD", "CONV_2D", "DEQUANTIZE"]


@pytest.mark.parametrize("revision", [15, 16, 17])
def test_quantize_rounds_half_away_from_zero_at_every_edge(revision):
    """QUANTIZE as LiteRT's reference computes it (`round(x / scale) + zero point`, clamped),
    for halves, the floats next to them, and values past the int8 range, in a 4-D tensor;
    revision 16's `t + trunc(2 * (v - t))`, on a flat view from 17, and revision 14's select
    on the fraction alike."""
    tvm, target = _target()
    from tvm import relax

    from tvmtui.graph.fixedpoint import Emitter

    scale, zero_point = np.float32(0.5), -3
    halves = np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)
    v = np.concatenate([halves, np.nextafter(halves, 0), np.nextafter(halves, 1e9),
                        np.nextafter(halves, -1e9), [0.0, -0.0, 1e9, -1e9, 2.0 ** 23 + 1]])
    x = (v.astype(np.float32) * scale).astype(np.float32).reshape(1, 5, 13, 37)
    bb = relax.BlockBuilder()
    var = relax.Var("x", relax.TensorType(list(x.shape), "float32"))
    with bb.function("main", [var]):
        with bb.dataflow():
            out = bb.emit_output(Emitter(bb).quantize(var, float(scale), zero_point, "int8",
                                                      revision=revision))
        bb.emit_func_output(out)
    vm = relax.VirtualMachine(relax.build(bb.get(), target=target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    q = x / scale  # float32, as TFLite divides
    want = np.clip(np.trunc(q + np.copysign(np.float64(0.5), q)).astype(np.int64) + zero_point,
                   -128, 127)
    # np.trunc(q + 0.5) in float64 is std::round's half away from zero for these q
    assert got.dtype == np.int8 and np.array_equal(got.astype(np.int64), want)
