"""The channel-blocked Winograd (rewrite revision 4): its custom MetaSchedule rules, the
schedules they make, and a tuned build checked against ONNX Runtime on odd shapes."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from tests.test_variants import NETS, _run_variant, _target, conv_net
from tvmtui.graph import blocking, lowering
from tvmtui.graph import variants as gv
from tvmtui.graph.relax_import import load_relax
from tvmtui.graph.winograd import WINDOW
from tvmtui.kernels import rules


@pytest.mark.parametrize("chunks,tiles", [(16, 49), (32, 16), (8, 196), (64, 4), (2, 4),
                                          (2, 1), (3, 5), (1, 1)])
def test_register_tiles_fit_the_registers_and_the_layer(chunks, tiles):
    pairs = rules.register_tiles(chunks, tiles)
    assert pairs and len(set(pairs)) == len(pairs)
    for blocks, count in pairs:
        assert chunks % blocks == 0 and blocks <= rules.MAX_CHANNEL_BLOCKS
        assert 1 <= count <= min(tiles, rules.MAX_TILES)
        assert blocks * count <= rules.MAX_ACC
    if chunks >= 2 and tiles >= 4:  # room for a real register tile
        assert all(b * t >= rules.MIN_ACC for b, t in pairs)
        assert (2, 4) in pairs or chunks % 2


def _winograd_task(shape, layers, fusion: int = 1):
    """The Winograd tasks of a conv net, prepared as a new session does; `fusion`: the
    revision fused with (from 11, the layout transforms run inside the kernels)."""
    tvm, target = _target()
    base = load_relax("onnx", conv_net(layers, shape), {"input": list(shape)})
    mod, plan = gv.prepare(base, target, "winograd")
    tasks = [t for t in lowering.extract_tasks(mod, target, fusion) if "winograd" in t.task_name]
    return tvm, target, tasks, plan


def test_every_design_of_a_blocked_winograd_layer_computes_the_convolution():
    """Each register tile the GEMM rule offers (one guards a remainder: 3 of 5 tiles)
    builds after MetaSchedule's postprocessors and matches the unscheduled layer. Three
    channel blocks out (24 channels on AVX2, 48 on AVX-512)."""
    chunks, tiles = 3, 2 * 3  # 5x7 output in 4x4 tiles
    cout = chunks * blocking.vector_block(_target()[1])
    tvm, target, tasks, plan = _winograd_task((1, 16, 7, 9), [(cout, 3, 1)])
    assert plan.rewritten == 1 and len(tasks) == 1
    assert tasks[0].task_name.startswith("fused_conv2d_winograd4_NCHWc")  # + its add, relu
    designs = _every_design_computes_the_layer(tvm, target, tasks[0].dispatched[0])
    assert len(designs) == len(rules.register_tiles(chunks, tiles))


def test_an_absorbed_input_transform_runs_at_the_root_or_inside_the_window():
    """The first of two layers reads its input through the NCHW -> NCHW[x]c transform in
    its own kernel: the pack rule makes each register tile twice, the transform at the
    root and inlined into the padded window, and every one computes the layer."""
    tvm, target, tasks, plan = _winograd_task((1, 16, 9, 11), [(32, 3, 1), (16, 3, 1)],
                                              gv.REWRITE_REVISION)
    assert plan.rewritten == 2
    task = next(t for t in tasks if t.task_name.startswith("fused_te_layout_transform_conv2d"))
    designs = _every_design_computes_the_layer(tvm, target, task.dispatched[0])
    names = [_blocks(d.mod) for d in designs]
    assert all(WINDOW in n for n in names)
    inlined = [n for n in names if "te_layout_transform" not in n]
    assert len(designs) % 2 == 0 and len(inlined) == len(designs) // 2


def test_revision_12_sessions_keep_the_bounds_checked_input_transform():
    """Sessions tuned before rewrite revision 13 prepare the same functions as then (their
    database keys), with no padded window; new ones read the input through it."""
    from tvm_ffi import structural_hash

    layers, shape = [(32, 3, 1)], (1, 16, 7, 9)
    _, target = _target()
    funcs = {}
    for revision in (12, 13):
        base = load_relax("onnx", conv_net(layers, shape), {"input": list(shape)}, revision)
        mod, _ = gv.prepare(base, target, "winograd", revision=revision)
        funcs[revision] = next(t.dispatched[0] for t in lowering.extract_tasks(mod, target, revision)
                               if "winograd" in t.task_name)
    names = {r: _blocks(f) for r, f in funcs.items()}
    assert WINDOW in names[13] and WINDOW not in names[12]
    assert names[12] | {WINDOW} == names[13]
    assert structural_hash(funcs[12]) != structural_hash(funcs[13])
    # A revision-12 session still tunes: its pack rule schedules the old input transform.
    tvm = _target()[0]
    _every_design_computes_the_layer(tvm, target, funcs[12])


def _blocks(mod) -> set[str]:
    """Names of the blocks of `mod`'s function."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    return {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}


def _every_design_computes_the_layer(tvm, target, func) -> list:
    """The design spaces of `func` (an IRModule), each replayed, postprocessed, built and
    checked against the unscheduled function; returns the replayed schedules."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    ctx = ms.TuneContext(mod=func, target=target, space_generator="post-order-apply",
                         task_name="w", rand_state=1)
    designs = ctx.generate_design_space()
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in a.shape] for a in ArgInfo.from_entry_func(func, remove_preproc=True)]
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes[:-1]]

    def run(mod):
        args = [tvm.runtime.tensor(x, dev) for x in inputs]
        out = tvm.runtime.tensor(np.zeros(shapes[-1], np.float32), dev)
        tvm.compile(mod, target=target)(*args, out)
        return out.numpy()

    want = run(func)
    postprocs = list(ctx.space_generator.postprocs)
    replayed = []
    for design in designs:
        for seed in range(1, 9):  # a sampled compute location the postprocessors reject
            sch = s_tir.Schedule(func, seed=seed, debug_mask=0)
            s_tir.schedule.Trace(design.trace.simplified(remove_postproc=True).insts, {}) \
                .apply_to_schedule(sch, remove_postproc=True)
            if all(p.apply(sch) for p in postprocs):
                break
        else:
            raise AssertionError(f"no sample of design {len(replayed)} passes the postprocessors")
        np.testing.assert_allclose(run(sch.mod), want, rtol=1e-5, atol=1e-5)
        replayed.append(sch)
    return replayed


def test_revision_3_sessions_keep_the_nchw_winograd():
    layers, shape = NETS["9x11-32-16-12"]
    err, plan = _run_variant(conv_net(layers, shape), shape, "winograd", revision=3)
    assert err < 1e-4 and plan.rewritten == 1
    _, target = _target()
    base = load_relax("onnx", conv_net(layers, shape), {"input": list(shape)}, 3)
    old = {t.task_name for t in lowering.extract_tasks(gv.prepare(base, target, "winograd",
                                                            revision=3)[0], target)}
    new = {t.task_name for t in lowering.extract_tasks(gv.prepare(base, target, "winograd")[0], target)}
    assert any("winograd4" in n and "NCHWc" not in n for n in old)
    assert any("winograd4_NCHWc" in n for n in new)


def _sampled_and_enumerated(mod, target, samples: int) -> tuple[set[str], set[str]]:
    """Hashes of the distinct schedules among `samples` random ones of `mod`'s design
    spaces, and of every schedule `schedules.every_schedule` enumerates."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.tuning.schedules import every_schedule, module_hash

    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         task_name="w", rand_state=1)
    designs = ctx.generate_design_space()
    postprocs = list(ctx.space_generator.postprocs)
    seen = set()
    for seed in range(1, samples + 1):
        sch = s_tir.Schedule(mod, seed=seed, debug_mask=0)
        s_tir.schedule.Trace(designs[seed % len(designs)].trace.insts, {}).apply_to_schedule(
            sch, remove_postproc=True)
        if all(p.apply(sch) for p in postprocs):
            seen.add(module_hash(sch.mod))
    every = every_schedule(mod, designs, postprocs)
    assert every is not None
    return seen, {module_hash(sch.mod) for sch in every}


def test_a_small_space_is_measured_to_its_end(cli, tmp_path):
    """A 7x7 Winograd layer's space holds a few dozen schedules (register tiles x
    unrolls x where a stage is computed): the search enumerates them, each one that random
    sampling finds among them, and measures them all before it calls the space used up.
    (Called used up at the first evolved batch with fewer than half a batch of new ones,
    this one stopped at 14 of its 31; at two such batches in a row, at 20 in one run.)"""
    from tvmtui.sessions.msdb import load_database
    from tvmtui.sessions.store import RECORD_DB, WORKLOAD_DB

    model = tmp_path / "c.onnx"
    model.write_bytes(conv_net([(32, 3, 1)], (1, 16, 7, 7)))  # C12's 4 register tiles
    run = cli.run("tune", str(model), "--trials", "200", "--session", "w", "--json",
                  "--variants", "winograd", "--batch", "8")
    assert run.returncode == 0, run.stderr
    events = cli.json_lines(run.stdout)
    assert [e for e in events if e["event"] == "state"][-1]["reason"] == "search space exhausted"
    session = cli.session("w")
    db, _, _ = load_database(session.file(WORKLOAD_DB), session.file(RECORD_DB))
    records = [r for r in db.get_all_tuning_records() if "winograd" in r.workload.mod.script()]
    _, target = _target()
    sampled, every = _sampled_and_enumerated(records[0].workload.mod, target, 160)
    assert len(sampled) > 12  # a space worth the test
    assert sampled <= every
    assert len(records) == len(every), (len(records), len(every))


# The fused task's space (register tiles, where the absorbed transform runs, the unroll)
# holds 40 schedules, and the search measures them until it is used up (ending at 24, it had
# kept one twice as slow as the best). About 30 s (over a minute, in `-m slow`, until rewrite
# revision 13 made the candidates 2-3x cheaper to build, and that space 90 schedules).
def test_tuned_blocked_winograd_exports_what_onnxruntime_computes(cli, tmp_path):
    """A tuned build of the Winograd variant on a 9x11 input (outputs no multiple of the
    tile, channels 16 -> 32 -> 16: AVX2's block of 8 and AVX-512's of 16 both divide them)
    matches ONNX Runtime; every trial of its layers is marked with the variant. Its spaces
    are small (a few register tiles, the layout transforms' one schedule): the tune ends
    when the search finds them used up, with budget left, and says so per task."""
    model = tmp_path / "odd.onnx"
    shape = (1, 16, 9, 11)
    model.write_bytes(conv_net([(32, 3, 1), (16, 3, 1)], shape))
    run = cli.run("tune", str(model), "--trials", "400", "--session", "w", "--json",
                  "--variants", "winograd", "--batch", "8", timeout=1800)
    assert run.returncode == 0, run.stderr
    events = cli.json_lines(run.stdout)
    extracted = next(e for e in events if e["event"] == "tasks_extracted")
    names = {t["index"]: t["name"] for t in extracted["tasks"]}
    trials = [e for e in events if e["event"] == "trial"]
    measured = {names[e["task"]] for e in trials if e["run_s"] and e["error_kind"] is None}
    assert sum("winograd4_NCHWc" in n for n in measured) == 2
    assert all(e["variant"] == "winograd" for e in trials)
    final = [e for e in events if e["event"] == "state"][-1]
    assert final["state"] == "finished" and final["reason"] == "search space exhausted"
    assert len(trials) < 400
    used_up = [e["message"] for e in events
               if e["event"] == "notice" and "design space is used up" in e["message"]]
    assert sum("winograd4_NCHWc" in m for m in used_up) == 2
    out = tmp_path / "lib"
    exported = cli.run("export", "w", str(out), "--json")
    assert exported.returncode == 0, exported.stderr
    assert json.loads((out / "model.json").read_text())["variant"] == "winograd"
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(out / "model.so")), tvm.cpu())
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(model.read_bytes()).run(None, {"input": x})[0]
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)) < 1e-4
