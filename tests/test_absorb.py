"""Layout transforms absorbed into the kernels next to them (rewrite revision 11)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tests.test_variants import _target
from tvmtui.graph import lowering
from tvmtui.graph import variants as gv
from tvmtui.graph.relax_import import load_relax


def flatten_net(shape=(1, 4, 21, 21), seed=0) -> bytes:
    """DQN in small: an 8x8 stride-4 conv of a 4-channel input, ReLU, flatten, dense.
    Blocked, it has a transform at its input and one before the flatten."""
    rng = np.random.default_rng(seed)
    cout, k, stride = 16, 8, 4
    side = (shape[2] - k) // stride + 1
    w = (rng.standard_normal((cout, shape[1], k, k)) * 0.1).astype(np.float32)
    d = (rng.standard_normal((cout * side * side, 10)) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(d, "d"),
             numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], kernel_shape=[k, k],
                              strides=[stride, stride]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "d"], ["output"])]
    graph = helper.make_graph(
        nodes, "flat", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _depthwise_net(shape=(1, 16, 7, 5)) -> bytes:
    """A 3x3 depthwise conv: blocked, a transform at its input and one at its output."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((shape[1], 1, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["input", "w"], ["output"], kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1], group=shape[1])
    graph = helper.make_graph(
        [node], "dw", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_layout_transforms_run_inside_the_kernels_next_to_them():
    """Revision 11 leaves no layout transform a kernel of its own: the input's and the
    flatten's run in the kernels that read them, a graph output's in the kernel that makes
    it. Revision 10 sessions keep their tasks; the tuned build still matches ONNX Runtime."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    tvm, target = _target()
    for model, shape in ((flatten_net(), (1, 4, 21, 21)), (_depthwise_net(), (1, 16, 7, 5))):
        base = load_relax("onnx", model, {"input": list(shape)})
        names = {}
        for revision in (10, 11):
            mod, _ = gv.prepare(base, target, "nchwc", revision=revision)
            names[revision] = [t.task_name for t in lowering.extract_tasks(mod, target, revision)]
        transforms = [n for n in names[10] if "layout_transform" in n and "conv2d" not in n]
        assert len(transforms) == 2, names[10]
        assert len(names[11]) == len(names[10]) - 2, names
        assert all("conv2d" in n or "matmul" in n for n in names[11]), names[11]
        assert all(n.startswith("fused_te_layout_transform") for n in names[11][:1]), names[11]
        vm = relax.VirtualMachine(
            lowering.compile_tuned(ms.database.MemoryDatabase(), mod, target, 11), tvm.cpu())
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        want = ort.InferenceSession(model).run(None, {"input": x})[0]
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)) < 1e-4


def test_a_transform_with_two_readers_stays_a_kernel():
    """A transform whose output two kernels read is not copied into both."""
    from tvm import relax

    from tvmtui.graph.absorb import absorb_layout_transforms

    _, target = _target()
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 6, 6), "float32"))
    w = relax.const(np.ones((2, 2, 3, 3, 8, 8), np.float32))
    with bb.function("main", [x]):
        with bb.dataflow():
            blocked = bb.emit(relax.op.layout_transform(
                x, lambda n, c, h, w_: (n, c // 8, h, w_, c % 8)))
            convs = [bb.emit(relax.op.nn.conv2d(blocked, w, data_layout="NCHW8c",
                                                kernel_layout="OIHW8i8o")) for _ in range(2)]
            out = bb.emit_output(relax.op.add(*convs))
        bb.emit_func_output(out)
    with target:
        fused = relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(
            relax.transform.LegalizeOps()(bb.get())))
    absorbed = absorb_layout_transforms(fused)
    assert "R.call_tir(te_layout_transform" in absorbed["main"].script()


def test_the_search_decides_where_an_absorbed_transform_runs():
    """Inside the convolution's kernel the input's transform is placed as MetaSchedule
    places any block it does not inline by rule: sampled designs inline it into the
    convolution's loads, and others keep it a stage of its own."""
    from tvm.s_tir import meta_schedule as ms

    _, target = _target()
    base = load_relax("onnx", flatten_net(), {"input": [1, 4, 21, 21]})
    mod, _ = gv.prepare(base, target, "nchwc", revision=11)
    task = next(t for t in lowering.extract_tasks(mod, target, 11) if "conv2d" in t.task_name)
    kept = set()
    for seed in range(1, 9):
        ctx = ms.TuneContext(mod=task.dispatched[0], target=target,
                             space_generator="post-order-apply", task_name="t", rand_state=seed)
        kept |= {'T.sblock("te_layout_transform")' in d.mod.script()
                 for d in ctx.generate_design_space()}
    assert kept == {True, False}
