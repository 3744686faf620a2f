"""Register-blocked seeds of channel-blocked and NCHW depthwise convolutions: well-formed
tilings, schedules that compute the convolution, and a cold batch that measures them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.test_variants import conv_net
from tvmtui.tuning import search as sd_search
from tvmtui.tuning import seeds as sd
from tvmtui.tuning.schedules import module_hash

SHAPES = [  # (n, chunks, oh, ow, lanes, ic, kh, kw): C12, C2, an odd 3x3 map, an RGB input,
    # MobileNet's 1x1 layers (14x14, 56x56, 7x7) and a 1x1 whose chunks and map are odd
    [1, 64, 7, 7, 8, 512, 3, 3], [1, 8, 56, 56, 8, 64, 3, 3], [1, 4, 3, 3, 8, 32, 3, 3],
    [1, 2, 15, 15, 8, 3, 3, 3], [1, 2, 9, 9, 8, 16, 3, 3],
    [1, 64, 14, 14, 8, 512, 1, 1], [1, 16, 56, 56, 8, 64, 1, 1], [1, 128, 7, 7, 8, 1024, 1, 1],
    [1, 3, 9, 7, 8, 24, 1, 1],
    # on AVX-512: ResNet-18's 56x56 and 7x7, DQN's 9x9 stride-2 4x4 conv
    [1, 4, 56, 56, 16, 64, 3, 3], [1, 32, 7, 7, 16, 512, 3, 3], [1, 4, 9, 9, 16, 32, 4, 4],
]


def vregs(block: int) -> int:
    """Vector registers of the x86 targets these blocks are for: AVX-512's 32, AVX2's 16."""
    return 32 if block == 16 else 16


@pytest.mark.parametrize("extents", SHAPES)
def test_tilings_split_every_loop_exactly(extents):
    plans = sd.tilings(extents, vregs(extents[4]))
    assert plans
    for plan in plans:
        assert [math.prod(t) for t in plan.tiles] == extents
        chunk_reg, rows_reg, row_reg = plan.tiles[1][-1], plan.tiles[2][-1], plan.tiles[3][-1]
        assert chunk_reg * rows_reg * row_reg <= sd.registers(vregs(extents[4]))
        assert plan.tiles[4] == (1, 1, 1, extents[4])  # the channel block: the vector lanes
    assert len(set(plans)) == len(plans)


def test_avx512_tiles_use_its_registers_and_keep_short_rows_whole():
    # DQN's 9x9 stride-2 conv: a whole row, a column of 3 rows x 4 blocks, 27 accumulators.
    plans = sd.tilings([1, 4, 9, 9, 16, 32, 4, 4], 32)
    regs = [(p.tiles[1][-1], p.tiles[2][-1], p.tiles[3][-1]) for p in plans]
    assert (1, 1, 9) in regs and (4, 3, 1) in regs and max(c * r * q for c, r, q in regs) > 14
    assert all(q != 3 for _, _, q in regs)
    # On AVX2 the same layer's row is cut in threes across the blocks that fit 14.
    avx2 = sd.tilings([1, 8, 9, 9, 8, 32, 4, 4], 16)
    assert {(p.tiles[1][-1], p.tiles[3][-1]) for p in avx2} == {(4, 3)}


@pytest.mark.parametrize("target,registers", [
    ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}, 32),
    ({"kind": "llvm", "mtriple": "armv7l-linux-gnueabihf", "mattr": ["+neon"]}, 16),
    ({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4"}, 32),
    ({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver3"}, 16),
    ({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "core2"}, 16),  # SSE: 4 lanes
])
def test_four_lane_targets_with_16_registers_keep_14_accumulators(target, registers):
    import tvm

    from tvmtui.graph.blocking import vector_block, vector_registers

    target = tvm.target.Target(target)
    assert vector_registers(target) == registers
    lanes = vector_block(target)
    plans = sd.tilings([1, 16, 14, 14, lanes, 64, 3, 3], vector_registers(target))
    most = max(p.tiles[1][-1] * p.tiles[2][-1] * p.tiles[3][-1] for p in plans)
    assert most == (14 if registers == 16 else 28), (lanes, most)


@pytest.mark.parametrize("extents,first", [
    ([1, 64, 14, 14, 8, 512, 1, 1], [(2, 2, 2), (4, 1, 2), (4, 2, 1)]),
    ([1, 16, 56, 56, 8, 64, 1, 1], [(2, 2, 2), (4, 1, 2), (2, 1, 4)]),
    ([1, 128, 7, 7, 8, 1024, 1, 1], []),  # no eight-accumulator tile divides a 7x7 map
    ([1, 64, 14, 14, 8, 512, 3, 3], []),  # a 3x3 conv keeps the row tiles
])
def test_pointwise_convs_lead_with_eight_accumulator_tiles(extents, first):
    plans = sd.tilings(extents, 16)
    regs = [(p.tiles[1][-1], p.tiles[2][-1], p.tiles[3][-1]) for p in plans]
    assert regs[:len(first)] == first
    assert all(c * r * q == 8 for c, r, q in regs[:len(first)])
    rows = sd.tilings([*extents[:6], 3, 3], 16)  # the same layer as a 3x3: rows only
    assert plans[len(first):] == [t for t in (sd.Tiling((*p.tiles[:6], *plans[0].tiles[6:]), p.unroll)
                                              for p in rows) if t not in plans[:len(first)]]


@pytest.mark.parametrize("k,h,w,stride,block", [
    (3, 7, 7, 1, 8), (1, 6, 10, 1, 8),  # a 1x1 takes the 2x2x2 tile
    (4, 9, 9, 2, 16),  # DQN's second conv on AVX-512: whole rows, a column, three rows
    (3, 7, 7, 1, 16),  # padding inlined, then at the root
])
def test_seeds_compute_the_convolution(k, h, w, stride, block):
    import tvm
    from tvm import te, topi
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    import_tvm(local_cpu_target())
    target = tvm.target.Target(local_cpu_target())
    pad = (k - 1) // 2
    ih, iw = (h - 1) * stride + k - 2 * pad, (w - 1) * stride + k - 2 * pad
    data = te.placeholder((1, 3, ih, iw, block), name="data")
    kernel = te.placeholder((4, 3, k, k, block, block), name="kernel")
    with target:
        out = topi.nn.conv2d_NCHWc(data, kernel, (stride, stride), (pad, pad), (1, 1),
                                   f"NCHW{block}c", f"NCHW{block}c", "float32")
    mod = tvm.IRModule({"main": te.create_prim_func([data, kernel, out])})
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         task_name="conv", num_threads=2)
    scheds = sd.seeds(mod, ctx.generate_design_space(), list(ctx.space_generator.postprocs),
                      lanes=block, vregs=vregs(block))
    places = sd.pad_places(block) if pad else (-1,)
    assert 0 < len(scheds) <= sd.MAX_SEEDS * len(places)
    # With 32 registers, the designs that write each tile out (a write cache) come first.
    per_tile = [any(i.kind.name == "CacheWrite" for i in sch.trace.insts) for sch in scheds]
    if sd.registers(vregs(block)) >= 28:
        assert per_tile[0] and per_tile == sorted(per_tile, reverse=True)
    # The padding is placed as PAD_PLACES says: on AVX-512 each tile inlined, then at the
    # root; on AVX2 at the root.
    pad_at = [int(sch.trace.decisions[inst]) for sch in scheds
              if (inst := sd._pad_location(sch.trace)) is not None]
    assert len(pad_at) == (len(scheds) if pad else 0)
    if pad:
        assert pad_at[0] == places[0] and set(pad_at) == set(places)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, ih, iw, block)).astype(np.float32)
    wt = rng.standard_normal((4, 3, k, k, block, block)).astype(np.float32)
    # Reference: unblock to NCHW / OIHW and convolve in float64.
    xn = x.transpose(0, 1, 4, 2, 3).reshape(1, 3 * block, ih, iw).astype(np.float64)
    wn = wt.transpose(0, 5, 1, 4, 2, 3).reshape(4 * block, 3 * block, k, k).astype(np.float64)
    xp = np.pad(xn, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    want = np.zeros((1, 4 * block, h, w))
    span_h, span_w = (h - 1) * stride + 1, (w - 1) * stride + 1
    for i in range(k):
        for j in range(k):
            window = xp[:, :, i:i + span_h:stride, j:j + span_w:stride]
            want += np.einsum("nchw,oc->nohw", window, wn[:, :, i, j])
    want = want.reshape(1, 4, block, h, w).transpose(0, 1, 3, 4, 2)
    # Evolution replays a seed's trace without its postprocessing, with decisions mutated
    # (here every compute location moved): the trace must say where postprocessing starts.
    from tvm import s_tir

    for sch in scheds:
        trace = sch.trace
        assert "EnterPostproc" in [i.kind.name for i in trace.insts]
        moved = {i: (0 if i.kind.name == "SampleComputeLocation" else d)
                 for i, d in trace.decisions.items()}
        replay = s_tir.Schedule(mod, debug_mask=0)
        s_tir.schedule.Trace(trace.insts, moved).apply_to_schedule(replay, remove_postproc=True)
    if k == 1:  # the first seeds hold 2 channel blocks x 2 rows x 2 columns
        first = sd.tilings([1, 4, h, w, 8, 24, 1, 1], 16)[0].tiles
        assert (first[1][-1], first[2][-1], first[3][-1]) == (2, 2, 2)
    for sch in scheds:
        lib = tvm.driver.build(sch.mod, target=target)
        got = tvm.runtime.tensor(np.zeros((1, 4, h, w, block), np.float32))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(wt), got)
        assert np.max(np.abs(got.numpy() - want)) < 1e-3


@pytest.mark.parametrize("extents,lanes,tiled", [
    ([1, 32, 112, 112, 1, 3, 3], 8, True),  # D1
    ([1, 5, 9, 16, 1, 3, 3], 8, True),  # odd channels and rows: one row a tile
    ([1, 64, 28, 28, 1, 3, 3], 4, True),  # NEON's lanes divide a 28-wide row
    ([1, 64, 28, 28, 1, 3, 3], 8, False),  # AVX2's do not
    ([1, 16, 16, 16, 2, 3, 3], 8, False),  # two input channels a group: not depthwise
])
def test_depthwise_tilings_hold_whole_vectors_of_a_row(extents, lanes, tiled):
    plans = sd.depthwise_tilings(extents, lanes)
    assert bool(plans) == tiled
    for plan in plans:
        assert [math.prod(t) for t in plan.tiles] == extents
        assert plan.tiles[3][-1] == lanes  # the row's vectors
        rows, vectors = plan.tiles[2][-2] * plan.tiles[2][-1], plan.tiles[3][-2]
        assert rows * vectors <= sd.REGISTERS
        assert plan.tiles[1] == (extents[1], 1, 1, 1)  # a channel per parallel job
        assert plan.pad_at == 3
    assert len(set(plans)) == len(plans)


@pytest.mark.parametrize("extents,lanes,per", [
    ([1, 1024, 7, 7, 1, 3, 3], 8, 16),  # D9 on AVX2
    ([1, 512, 14, 14, 1, 3, 3], 16, 16),  # D7 on AVX-512: 14 rows, 14 registers
    ([1, 24, 5, 7, 1, 3, 3], 8, 12),  # a channel count 16 does not divide
    ([1, 7, 7, 7, 1, 3, 3], 16, 7),  # a prime one: every channel in one job
])
def test_small_map_depthwise_tilings_keep_a_row_a_vector(extents, lanes, per):
    plans = sd.depthwise_tilings(extents, lanes)
    assert len(plans) == len(sd.UNROLL)
    for plan in plans:
        assert [math.prod(t) for t in plan.tiles] == extents
        assert plan.tiles[1] == (extents[1] // per, per, 1, 1)  # channels per parallel job
        assert plan.tiles[2] == (1, 1, 1, extents[2])  # every row in registers
        assert plan.tiles[3] == (1, 1, 1, extents[3])  # a whole row a vector
        assert plan.pad_at == 3


def test_no_small_map_tiling_with_more_rows_than_registers():
    assert sd.depthwise_tilings([1, 64, 15, 7, 1, 3, 3], 8) == []


@pytest.mark.parametrize("c,h,w,stride", [(5, 9, 16, 1), (24, 7, 7, 1), (12, 13, 11, 2)])
def test_depthwise_seeds_compute_the_convolution(c, h, w, stride):
    """Row-vector seeds (16 wide) and small-map ones (7x7; 13x11 at stride 2 gives 7x6)."""
    import tvm
    from tvm import te, topi
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    import_tvm(local_cpu_target())
    target = tvm.target.Target(local_cpu_target())
    data = te.placeholder((1, c, h, w), name="data")
    kernel = te.placeholder((c, 1, 3, 3), name="kernel")
    # What Relax legalizes a depthwise conv2d to: a group conv, one channel a group.
    out = topi.nn.group_conv2d_nchw(data, kernel, stride, 1, 1, c, "float32")
    oh, ow = (int(d) for d in out.shape[2:])
    mod = tvm.IRModule({"main": te.create_prim_func([data, kernel, out])})
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         task_name="dw", num_threads=2)
    designs = ctx.generate_design_space()
    scheds = sd.seeds(mod, designs, list(ctx.space_generator.postprocs), lanes=8,
                      vregs=16)
    # Every plan in every design (with and without a write cache).
    plans = sd.depthwise_tilings([1, c, oh, ow, 1, 3, 3], 8)
    assert plans and len(scheds) == len(plans) * len(designs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    span = lambda i, n: slice(i, i + stride * (n - 1) + 1, stride)  # noqa: E731
    want = sum(xp[:, :, span(i, oh), span(j, ow)] * wt[None, :, 0, i, j, None, None]
               for i in range(3) for j in range(3))
    for sch in scheds:
        assert f"xx_3_fused in T.vectorized({min(ow, 8)})" in sch.mod.script()  # a row's vector
        lib = tvm.driver.build(sch.mod, target=target)
        got = tvm.runtime.tensor(np.zeros((1, c, oh, ow), np.float32))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(wt), got)
        assert np.max(np.abs(got.numpy() - want)) < 1e-4


@pytest.mark.parametrize("h,w,stride,reg", [
    (9, 9, 1, 3),  # no row divisor from 4 to 8: 3 pixels
    (7, 15, 2, 4),  # 4x8 out: 8 and 4 pixels
    (13, 13, 1, 1),  # a prime row: a pixel at a time
])
def test_blocked_depthwise_seeds_compute_the_convolution(h, w, stride, reg):
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.graph.variants import _depthwise_nchwc
    from tvmtui.kernels.tvm_env import import_tvm

    import_tvm(local_cpu_target())
    target = tvm.target.Target(local_cpu_target())
    data = te.placeholder((1, 3, h, w, 8), name="data")
    kernel = te.placeholder((3, 1, 3, 3, 1, 8), name="kernel")
    out = _depthwise_nchwc(data, kernel, (stride, stride), (1, 1), (1, 1), "float32")
    oh, ow = (int(d) for d in out.shape[2:4])
    plans = sd.blocked_depthwise_tilings([1, 3, oh, ow, 8, 3, 3])
    assert plans[-1].tiles[3] == (ow // reg, 1, 1, reg)
    for plan in plans:
        assert plan.tiles[2] == (oh, 1, 1, 1) and plan.pad_at == -2  # rows in parallel
    mod = tvm.IRModule({"main": te.create_prim_func([data, kernel, out])})
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         task_name="dw", num_threads=2)
    designs = ctx.generate_design_space()
    scheds = sd.seeds(mod, designs, list(ctx.space_generator.postprocs), lanes=8,
                      vregs=16)
    assert len(scheds) == len(plans) * len(designs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, h, w, 8)).astype(np.float32)
    wt = rng.standard_normal((3, 1, 3, 3, 1, 8)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)))
    span = lambda i, n: slice(i, i + stride * (n - 1) + 1, stride)  # noqa: E731
    want = sum(xp[:, :, span(i, oh), span(j, ow), :] * wt[None, :, 0, i, j, 0, None, None, :]
               for i in range(3) for j in range(3))
    for sch in scheds:
        assert "PadInput" not in sch.mod.script()  # inlined into the loads
        lib = tvm.driver.build(sch.mod, target=target)
        got = tvm.runtime.tensor(np.zeros((1, 3, oh, ow, 8), np.float32))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(wt), got)
        assert np.max(np.abs(got.numpy() - want)) < 1e-4


def test_no_seeds_for_other_tasks():
    import tvm
    from tvm import te

    a = te.placeholder((16, 16), name="a")
    b = te.compute((16, 16), lambda i, j: a[i, j] * 2.0, name="double")
    assert sd.seeds(tvm.IRModule({"main": te.create_prim_func([a, b])}), [], [], lanes=8, vregs=16) == []


def test_a_blocked_conv_cold_batch_measures_its_seeds(cli, tmp_path):
    model = tmp_path / "conv.onnx"
    model.write_bytes(conv_net([(16, 3, 1)], (1, 16, 9, 9)))
    run = cli.run("tune", str(model), "--trials", "32", "--session", "s", "--json",
                  "--variants", "nchwc", "--batch", "8", "--warmup-samples", "8")
    assert run.returncode == 0, run.stderr
    events = cli.json_lines(run.stdout)
    done = [e for e in events if e["event"] == "round_done"][-1]
    assert done["seeds_measured"] > 0
    convs = [e for e in events if e["event"] == "trial" and "NCHWc" in e["task_name"]]
    # The seeds are the first of the conv's trials, and say so.
    assert [e["seed"] for e in convs[:done["seeds_measured"]]] == [True] * done["seeds_measured"]
    assert not any(e["seed"] for e in convs[done["seeds_measured"]:])
    assert all(e["error_kind"] is None for e in convs if e["seed"])
    # Its evolved rounds search a population sized to its 2 s batches, not the 256 cap
    # (whose search took 17-38 s a round here).
    rounds = [e for e in events if e["event"] == "round_done"]
    evolved = [e["population"] for e in rounds[2:]]  # after the two cold batches
    assert evolved and all(sd_search.MIN_POPULATION <= p < sd_search.MAX_POPULATION
                           for p in evolved), evolved

    # The app's Trials tab says which trials were seeds.
    import asyncio

    from tests.test_app import wait_until
    from tvmtui import fmt
    from tvmtui.tui.app import TvmTuiApp
    from tvmtui.tui.widgets import SummaryBar, TaskTable, TrialStream

    confirmed = {e["task"]: e["confirmed_ms"] for e in events if e["event"] == "confirmed"}
    final = events[-1]
    assert final["event"] == "state" and final["confirmed_ms"] > 0 and confirmed
    measured = sum(1 for e in events if e["event"] == "trial")  # a used-up space ends it early
    seed_trial = str(next(e["trial"] for e in convs if e["seed"]))
    plain_trial = str(next(e["trial"] for e in convs if not e["seed"] and not e["error_kind"]))

    async def scenario():
        app = TvmTuiApp(cli.root, start="live", session="s")
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: bool(app.screen.query(TrialStream))
                             and app.screen.query_one(TrialStream).row_count >= measured, 60, "trials")
            table = app.screen.query_one(TrialStream)
            assert str(table.get_cell(seed_trial, "status")) == "ok, seed"
            assert str(table.get_cell(plain_trial, "status")) == "ok"
            # The Tasks tab shows each confirmed task's median, measured again at the end.
            tasks = app.screen.query_one(TaskTable)
            for task in range(tasks.row_count):
                shown = str(tasks.get_cell(str(task), "confirmed"))
                assert shown == (fmt.ms(confirmed[task]) if task in confirmed else "-")
            assert f"confirmed {fmt.ms(final['confirmed_ms'])} ms" in str(
                app.screen.query_one(SummaryBar).render())

    asyncio.run(scenario())


def depthwise_net(channels: int, size: int) -> bytes:
    """One 3x3 depthwise Conv, 'same' padding, as an ONNX model."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((channels, 1, 3, 3)).astype(np.float32)
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["output"], kernel_shape=[3, 3],
                          pads=[1, 1, 1, 1], group=channels)],
        "dw", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_seeds_a_quick_first_batch_has_no_room_for_come_next(cli, tmp_path):
    model = tmp_path / "dw.onnx"
    model.write_bytes(depthwise_net(8, 16))
    run = cli.run("tune", str(model), "--trials", "16", "--session", "s", "--json",
                  "--variants", "nchw")
    assert run.returncode == 0, run.stderr
    events = cli.json_lines(run.stdout)
    rounds = [e for e in events if e["event"] == "round_done"]
    trials = [e for e in events if e["event"] == "trial"]
    assert rounds[0]["batch"] < 8  # the session's quick first batch
    # Every seed is measured: those the first batch cut lead the next one.
    seeds = [e["trial"] for e in trials if e["seed"]]
    assert len(seeds) >= 8, seeds
    assert seeds == [e["trial"] for e in trials[:len(seeds)]]
    assert rounds[-1]["seeds_measured"] == len(seeds)
    assert all(e["error_kind"] is None for e in trials if e["seed"])


def test_the_population_is_sized_so_the_search_takes_as_long_as_measuring():
    memory = sd_search.SearchMemory()
    # Nothing known of the task yet: the cap.
    assert sd_search.population_for(memory, "k", 3, 32) == sd_search.MAX_POPULATION
    # 10 ms a schedule, 4 schedules per population member, 0.25 s to measure a candidate
    # of this task, 32 to come: 200.
    memory.unit_s["k"], memory.pace_s["k"] = 0.010, 0.25
    assert sd_search.population_for(memory, "k", 3, 32) == 200
    # The search is for the batch to come: 24 candidates at that pace take 6 s.
    assert sd_search.population_for(memory, "k", 3, 24) == 150
    # Another task's slow builds are not this one's.
    memory.pace_s["slow"] = 2.0
    assert sd_search.population_for(memory, "k", 3, 24) == 150
    # A long measurement is capped; a short one searches at least MIN_SEARCH_S.
    memory.pace_s["k"] = 60.0 / 32
    assert sd_search.population_for(memory, "k", 3, 32) == sd_search.MAX_POPULATION
    memory.pace_s["k"] = 0.5 / 32
    assert sd_search.population_for(memory, "k", 3, 32) == int(sd_search.MIN_SEARCH_S / 0.040)
    # Never below twice the batch, whatever a schedule costs.
    memory.unit_s["k"] = 1.0
    assert sd_search.population_for(memory, "k", 3, 48) == 96
    assert sd_search.population_for(memory, "other", 3, 32) == sd_search.MAX_POPULATION


def test_an_evolved_batch_keeps_its_spare_candidates_for_a_short_remainder():
    """An evolved batch asks SPARE more than it sends; when the turn's remainder is no more
    than those, the next call sends them without searching again (C12's last trial of 64
    had cost a whole evolution: 8.5 s), and never one measured since."""
    import tvm
    from tvm import te, topi
    from tvm.s_tir import meta_schedule as ms

    from tvmtui.devices.local import local_cpu_target
    from tvmtui.kernels.tvm_env import import_tvm

    import_tvm(local_cpu_target())
    target = tvm.target.Target(local_cpu_target())
    data = te.placeholder((1, 8, 14, 14), name="data")
    kernel = te.placeholder((16, 8, 3, 3), name="kernel")
    with target:
        out = topi.nn.conv2d_nchw(data, kernel, 1, 1, 1, "float32")
    mod = tvm.IRModule({"main": te.create_prim_func([data, kernel, out])})
    memory = sd_search.SearchMemory(cold_batches=0)
    strategy = sd_search.DedupSearch(population_size=64, genetic_num_iters=1, memory=memory)
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         search_strategy=strategy, task_name="c", num_threads=2, rand_state=3)
    ctx.pre_tuning(max_trials=64, num_trials_per_iter=8, design_spaces=ctx.generate_design_space(),
                   database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    first = strategy.generate_measure_candidates()
    assert len(first) == 8 and len(strategy.spare) == sd_search.SPARE
    spare = [module_hash(c.sch.mod) for c in strategy.spare]
    memory.known.update(module_hash(c.sch.mod) for c in first)
    memory.known.add(spare[0])  # measured meanwhile (a record reused from elsewhere)
    memory.allowance = 2
    second = strategy.generate_measure_candidates()
    assert [module_hash(c.sch.mod) for c in second] == spare[1:3]
    assert memory.allowance == 0
    # A remainder larger than what is left searches afresh, unmeasured schedules only.
    memory.known.update(spare[1:3])
    memory.allowance = 8
    third = strategy.generate_measure_candidates()
    assert len(third) == 8
    assert not {module_hash(c.sch.mod) for c in third} & memory.known
