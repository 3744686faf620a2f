"""TVM 0.27's RewriteLayout packs a weight that a block reads transposed (a ConvTranspose's
`kernel_transform`) by the wrong axis: such tasks are tuned without it, and records made
with it are left out wherever a session's database is read."""

from __future__ import annotations

import json

import numpy as np

from tvmtui.kernels.tvm_env import import_tvm


def _target():
    from tvmtui.devices.local import local_cpu_target

    tvm = import_tvm(local_cpu_target())
    return tvm, tvm.target.Target(dict(local_cpu_target(), **{"num-cores": 1}))


def _kernel(tvm, kind: str, cin: int = 5, cout: int = 1):
    """A TE kernel as Relax's legalization makes it, its weight layout-free."""
    from tvm import te, topi

    x = te.placeholder((1, cin, 6, 6), name="x")
    if kind == "transpose":  # 2x2 stride 2, as PP-OCR's detector's last layer
        w = te.placeholder((cin, cout, 2, 2), name="w")
        y = topi.nn.conv2d_transpose_nchw(x, w, (2, 2), (0, 0), "float32", (0, 0))
        args = [x, w, y]
    else:
        w = te.placeholder((cout, cin, 3, 3), name="w")
        b = te.placeholder((1, cout, 1, 1), name="b")
        y = topi.add(topi.nn.conv2d_nchw(x, w, 1, 1, 1), b)
        args = [x, w, b, y]
    func = te.create_prim_func(args).with_attr("layout_free_buffers", [1]) \
        .with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func})


def _run(tvm, target, mod, inputs):
    lib = tvm.tirx.build(mod, target=target)
    func = mod["main"]
    out = np.zeros([int(d) for d in func.params[-1].shape], "float32")
    args = [tvm.runtime.tensor(a) for a in inputs] + [tvm.runtime.tensor(out)]
    lib["main"](*args)
    return args[-1].numpy()


def _schedules(mod, target, space):
    """Schedules of every design of `space`, sampled as the search samples them (seeds
    1-4), each through the space's postprocessors."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=mod, target=target, space_generator=space, task_name="t",
                         rand_state=1)
    out = []
    for design in ctx.generate_design_space():
        insts = design.trace.simplified(remove_postproc=True).insts
        for seed in range(1, 5):
            sch = s_tir.Schedule(mod, seed=seed, debug_mask=0)
            s_tir.schedule.Trace(insts, {}).apply_to_schedule(sch, remove_postproc=True)
            sch.enter_postproc()
            if all(p.apply(sch) for p in ctx.space_generator.postprocs):
                out.append(sch)
    return out


def _rewrites(sch) -> bool:
    names = [inst.kind.name for inst in sch.trace.insts]
    return "TransformLayout" in names[names.index("EnterPostproc"):]


def test_a_transposed_weight_is_packed_wrong_by_rewrite_layout_and_tuned_without_it():
    from tvmtui.kernels.hazards import layout_rewrite_hazard
    from tvmtui.tuning.spaces import space_generator

    tvm, target = _target()
    mod = _kernel(tvm, "transpose")
    assert "kernel_transform" in layout_rewrite_hazard(mod)
    assert layout_rewrite_hazard(_kernel(tvm, "conv")) is None  # weight and bias as read
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal([int(d) for d in p.shape]).astype("float32")
              for p in list(mod["main"].params)[:-1]]
    want = _run(tvm, target, mod, inputs)
    # MetaSchedule's own space: every schedule whose RewriteLayout packed the weight is
    # wrong (the bug this works around), any other right.
    stock = _schedules(mod, target, "post-order-apply")
    assert any(_rewrites(s) for s in stock)
    for sch in stock:
        err = float(np.abs(_run(tvm, target, sch.mod, inputs) - want).max())
        assert (err > 0.1) == _rewrites(sch), err
    # The space tvmtui tunes it in: RewriteLayout left out, every schedule right.
    ours = _schedules(mod, target, space_generator(target, "postproc:RewriteLayout"))
    assert ours and not any(_rewrites(s) for s in ours)
    for sch in ours:
        np.testing.assert_allclose(_run(tvm, target, sch.mod, inputs), want, rtol=1e-5,
                                   atol=1e-5)


def test_records_made_with_the_wrong_packing_are_left_out_of_every_read(tmp_path):
    """A database with one wrong and one right record of a ConvTranspose task (and one of
    an ordinary conv that rewrote its layout): export's load leaves the wrong one out, the
    worker sets it aside in `.wrong` (kept), a warm start never hands it out."""
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.sessions import msdb
    from tvmtui.tuning.schedules import module_hash
    from tvmtui.tuning.spaces import space_generator

    tvm, target = _target()
    transpose, conv = _kernel(tvm, "transpose"), _kernel(tvm, "conv")
    bad = next(s for s in _schedules(transpose, target, "post-order-apply") if _rewrites(s))
    good = _schedules(transpose, target, space_generator(target, "postproc:RewriteLayout"))[0]
    packed = next(s for s in _schedules(conv, target, "post-order-apply") if _rewrites(s))
    workloads, records = tmp_path / "database_workload.json", tmp_path / "records.json"
    db = ms.database.JSONDatabase(path_workload=str(workloads),
                                  path_tuning_record=str(records),
                                  module_equality="structural", allow_missing=True)
    for mod, sch, secs in ((transpose, bad, 1e-6), (transpose, good, 2e-6),
                           (conv, packed, 3e-6)):
        db.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, db.commit_workload(mod), [secs], target,
            ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    lines = records.read_bytes().splitlines()
    assert msdb.wrong_lines(workloads, records) == {lines[0]}

    loaded, unreplayable, wrong = msdb.load_database(workloads, records)
    assert (unreplayable, wrong, len(loaded)) == (0, 1, 2)
    best = loaded.query_tuning_record(transpose, target, "main")
    assert [float(x) for x in best.run_secs] == [2e-6]  # the right one, though slower
    assert records.read_bytes().splitlines() == lines  # a reader leaves the files alone

    hashes = msdb.workload_hashes(workloads)
    top = msdb.BestRecords(workloads, records, hashes).top(module_hash(transpose), 4)
    assert [float(r.run_secs[0]) for r in top] == [2e-6]

    own, unreplayable, wrong = msdb.open_own_database(workloads, records)
    assert (unreplayable, wrong, len(own)) == (0, 1, 2)
    assert records.read_bytes().splitlines() == lines[1:]
    aside = records.with_name(records.name + ".wrong").read_bytes().splitlines()
    assert aside == [lines[0]] and json.loads(aside[0])[1][1] == [1e-6]


def _transpose_conv_onnx(path) -> None:
    """Conv 3 -> 24, ReLU, then a ConvTranspose 24 -> 1 (2x2, stride 2) and a Sigmoid: the
    end of PP-OCR's detector, small."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((0.3 * rng.standard_normal((24, 3, 3, 3))).astype(
                 np.float32), "w0"),
             numpy_helper.from_array((0.3 * rng.standard_normal((24, 1, 2, 2))).astype(
                 np.float32), "w1"),
             numpy_helper.from_array(np.float32([0.1]), "b1")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w0"], ["c"], kernel_shape=[3, 3],
                          pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("ConvTranspose", ["r", "w1", "b1"], ["t"], kernel_shape=[2, 2],
                          strides=[2, 2]),
         helper.make_node("Sigmoid", ["t"], ["output"])],
        "head", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, 32, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_conv_transpose_task_tunes_without_rewrite_layout_and_passes_parity(cli, tmp_path):
    path = tmp_path / "head.onnx"
    _transpose_conv_onnx(path)
    tune = cli.run("tune", str(path), "--trials", "12", "--variants", "nchw", "--session",
                   "head", "--json")
    assert tune.returncode == 0, tune.stderr[-600:]
    shown = json.loads(cli.run("sessions", "show", "head", "--json").stdout)
    task = next(t for t in shown["tasks"] if "conv2d_transpose" in t["name"])
    assert task["without"] == "postproc:RewriteLayout" and task["trials"] > 0, task
    events = [json.loads(line) for line in tune.stdout.splitlines() if line.startswith("{")]
    assert any("tuned without RewriteLayout" in e.get("message", "") for e in events)
    from tvmtui.kernels.hazards import rewrites_layout
    from tvmtui.sessions import msdb

    session = cli.session("head")
    workloads, records = (session.file("database_workload.json"),
                          session.file("database_tuning_record.json"))
    lines = records.read_bytes().splitlines()
    assert any(rewrites_layout(json.loads(line)[1]) for line in lines)  # the Conv's weight
    assert not msdb.wrong_lines(workloads, records)  # but none of the ConvTranspose's
    bench = cli.run("bench", "head", "--json", "--frames", "4", "--repeats", "2",
                    "--baselines", "onnxruntime")
    assert bench.returncode == 0, bench.stderr[-600:]
    row = next(b for b in json.loads(bench.stdout)["baselines"] if b["name"] == "onnxruntime")
    assert row["parity"]["passed"], row["parity"]
