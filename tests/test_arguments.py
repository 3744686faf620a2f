"""The local runner's arguments: filled once per argument list, handed out again after."""

from __future__ import annotations

import numpy as np

from tvmtui.tuning import arguments


def _info(*shapes):
    return tuple(["TENSOR", "float32", list(s)] for s in shapes)


def test_same_arguments_are_the_same_random_tensors_and_the_kept_lists_are_bounded():
    import tvm

    dev = tvm.cpu()
    arguments._kept.clear()
    first = arguments.alloc_reused(dev, _info((64, 64), (64,)), 1)
    again = arguments.alloc_reused(dev, _info((64, 64), (64,)), 1)
    assert again is first
    weights = first[0][0].numpy()
    assert weights.shape == (64, 64) and np.unique(weights).size > 1000  # filled, not zeros
    other = arguments.alloc_reused(dev, _info((64, 64), (32,)), 1)
    assert other is not first and other[0][1].shape == (32,)
    for n in range(2 * arguments.KEPT):
        arguments.alloc_reused(dev, _info((n + 1,)), 1)
    assert len(arguments._kept) == arguments.KEPT
    assert arguments.alloc_reused(dev, _info((64, 64), (64,)), 1) is not first  # dropped


def test_kept_arguments_stay_under_the_byte_bound_but_the_last_list_is_kept(monkeypatch):
    import tvm

    dev = tvm.cpu()
    arguments._kept.clear()
    monkeypatch.setattr(arguments, "KEPT_BYTES", 3 * 4096 * 4)  # three 4096-float lists
    lists = [arguments.alloc_reused(dev, _info((4096 + n,)), 1) for n in range(3)]
    assert len(arguments._kept) == 2  # the first went: three would be over the bound
    assert arguments.alloc_reused(dev, _info((4096 + 2,)), 1) is lists[2]
    big = arguments.alloc_reused(dev, _info((8 * 4096,)), 1)  # alone over the bound
    assert len(arguments._kept) == 1
    assert arguments.alloc_reused(dev, _info((8 * 4096,)), 1) is big


def test_the_local_runner_times_two_candidates_on_the_kept_arguments(tmp_path):
    """Two schedules of one kernel, measured by MetaSchedule's LocalRunner in its own process
    with `alloc_reused`: both measure, and each writes what the kernel computes."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    a = te.placeholder((256, 256), name="a")
    b = te.placeholder((256,), name="b")
    out = te.compute((256, 256), lambda i, j: a[i, j] * 2.0 + b[j], name="out")
    func = te.create_prim_func([a, b, out])
    target = tvm.target.Target({"kind": "llvm"})
    paths = []
    for parallel in (False, True):
        sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
        if parallel:
            sch.parallel(sch.get_loops(sch.get_sblock("out"))[0])
        lib = tvm.tirx.build(sch.mod, target=target)
        path = tmp_path / f"cand{int(parallel)}.so"
        lib.export_library(str(path))
        paths.append(path)
        x = np.random.rand(256, 256).astype("float32")
        y = np.random.rand(256).astype("float32")
        z = tvm.runtime.tensor(np.zeros((256, 256), "float32"))
        tvm.runtime.load_module(str(path))["main"](
            tvm.runtime.tensor(x), tvm.runtime.tensor(y), z)
        np.testing.assert_allclose(z.numpy(), x * 2 + y, rtol=1e-6)
    runner = ms.runner.LocalRunner(
        timeout_sec=60, f_alloc_argument=arguments.alloc_reused,
        evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=3, min_repeat_ms=5))
    args_info = ms.arg_info.ArgInfo.from_prim_func(func)
    results = [f.result() for f in runner.run(
        [ms.runner.RunnerInput(str(p), "cpu", args_info) for p in paths])]
    for res in results:
        assert res.error_msg is None, res.error_msg
        assert len(res.run_secs) == 3 and all(float(s) > 0 for s in res.run_secs)
