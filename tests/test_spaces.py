"""Design spaces per task: a tiny task is also searched on one thread."""

from __future__ import annotations


def _lstm_tasks():
    from tvmtui.devices.local import local_cpu_target
    from tvmtui.graph import lowering
    from tvmtui.graph import variants as gv
    from tvmtui.graph.relax_import import load_relax
    from tvmtui.kernels.tvm_env import import_tvm
    from tvmtui.workloads import load_workload

    tvm = import_tvm(local_cpu_target())
    target = tvm.target.Target(local_cpu_target())
    wl = load_workload("lstm")
    base = load_relax("onnx", wl.model_bytes, {k: list(v) for k, v in wl.input_shapes.items()})
    mod, _ = gv.prepare(base, target, "nchw")
    return target, {t.task_name: t.dispatched[0] for t in lowering.extract_tasks(mod, target)}


def _designs(mod, target, space):
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=mod, target=target, space_generator=space, task_name="t",
                         rand_state=1)
    return [str(d.trace) for d in ctx.generate_design_space()]


def test_a_tiny_task_also_gets_a_one_thread_design():
    from tvm.s_tir import analysis

    from tvmtui.tuning.spaces import is_tiny, space_generator

    target, tasks = _lstm_tasks()
    gates = next(m for name, m in tasks.items() if "sigmoid" in name)
    matmul = tasks["fused_matmul_add"]  # a (1, 256) x (256, 512) matmul: 262 kFLOP
    assert is_tiny(gates, float(analysis.estimate_tir_flops(gates)))
    assert not is_tiny(matmul, float(analysis.estimate_tir_flops(matmul)))
    assert space_generator(target, None, tiny=False) == "post-order-apply"
    traces = _designs(gates, target, space_generator(target, None, tiny=True))
    assert len(traces) == 2
    assert ["meta_schedule.parallel" in t for t in traces] == [True, False]
    assert all("compute_inline" in t for t in traces)
    # A rule left out (a task whose space needed it) is left out of both.
    without = _designs(gates, target, space_generator(target, "rule:AutoInline", tiny=True))
    assert len(without) == 2 and not any("compute_inline" in t for t in without)
