"""tvmtui's XGBoost cost model: what an update reports, and that it extracts each batch's
features once."""

from __future__ import annotations

import numpy as np

from tests.test_variants import _target


class _Counting:
    """A feature extractor that counts the candidates it extracts features of."""

    def __init__(self, inner) -> None:
        self.inner, self.extracted = inner, 0

    def extract_from(self, context, candidates):
        self.extracted += len(candidates)
        return self.inner.extract_from(context, candidates)


def _batches(count: int, size: int):
    """A matmul task's context and `count` batches of `size` sampled schedules."""
    from tvm import s_tir, te
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    tvm, target = _target()
    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         task_name="mm", rand_state=1)
    design = ctx.generate_design_space()[0]
    postprocs = list(ctx.space_generator.postprocs)
    args = ArgInfo.from_prim_func(mod["main"])
    out, seed = [], 0
    while len(out) < count * size:
        seed += 1
        sch = s_tir.Schedule(mod, seed=seed, debug_mask=0)
        s_tir.schedule.Trace(design.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        if all(p.apply(sch) for p in postprocs):
            out.append(ms.MeasureCandidate(sch, args))
    return ctx, [out[i * size:(i + 1) * size] for i in range(count)]


def test_an_update_extracts_the_batch_features_once_and_checks_the_model_with_them():
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.tuning.cost_model import TrackedXGBModel

    ctx, batches = _batches(3, 8)
    metrics: list[dict] = []
    model = TrackedXGBModel(num_tuning_cores=2, num_warmup_samples=8, on_update=metrics.append)
    counting = _Counting(model.extractor.inner)
    model.extractor.inner = counting
    rng = np.random.default_rng(0)
    for batch in batches:
        results = [ms.runner.RunnerResult(run_secs=[float(t)] * 3, error_msg=None)
                   for t in rng.uniform(1e-4, 1e-3, len(batch))]
        before = counting.extracted
        model.update(ctx, batch, results)
        assert counting.extracted - before == len(batch)  # checked and trained on one extraction
    assert [m["samples"] for m in metrics] == [8, 16, 24]
    assert metrics[0]["retrained"] and "batch_spearman" not in metrics[0]
    # From the second batch, the trained model ranks each batch before it learns from it.
    assert all(-1.0 <= m["batch_spearman"] <= 1.0 for m in metrics[1:])
    scores = model.score(ctx, batches[0])  # outside an update: extracted as usual
    assert scores is not None and len(scores) == 8 and counting.extracted == 32
