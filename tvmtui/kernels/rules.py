"""tvmtui's custom MetaSchedule rules: the stages of the channel-blocked Winograd.

MetaSchedule applies a block's rule by the block's `schedule_rule` annotation
(`graph/winograd.py` sets them) and no other rule to it, as TVM's own Winograd rules do.
What a kernel writer would do, with the one choice that matters left to the search:

- input transform (`pack`): one tile and channel block per iteration, the two 1-D passes
  unrolled over the transformed positions, the channel block's lanes vectorized, each
  column of the padded input window computed just before the first pass reads it; a
  layout transform absorbed into the kernel runs at the root or inlined into the window
  (two designs, measured against each other);
- batched GEMM (`gemm`): per transformed position, a register tile of output channel
  blocks x tiles accumulated in vector registers over the input channels. Each register
  tile worth trying is a design space of its own, and the search measures them against
  each other: on C6 the layer took 0.41 ms with 2 channel blocks x 4 tiles, 0.45 with
  1 x 7, 0.71 with 2 x 7 (spills) and 1.06 with 3 x 4 (a guarded remainder in the hot
  loop), nothing else changed;
- inverse transform (`unpack`): as the input transform, per tile and output block;
- the crop into the output (`output`): the layer's elementwise epilogue folded into it.

The postprocessors then parallelize the outer loops (as for any block).
"""

from __future__ import annotations

from tvmtui.graph.dotprod import DOT_VNNI, INTRIN_KEY, RULE_DOT
from tvmtui.graph.winograd import RULE_GEMM, RULE_OUTPUT, RULE_PACK, RULE_UNPACK, WINDOW

MAX_CHANNEL_BLOCKS = 4  # output channel blocks in the register tile
MAX_TILES = 8  # Winograd tiles in the register tile
MIN_ACC, MAX_ACC = 6, 12  # vector accumulators in it
_registered = False


def register() -> None:
    """Make the rules known to MetaSchedule in this process (for every CPU target)."""
    global _registered
    if _registered:
        return
    import tvm

    from tvmtui.kernels import intrinsics

    intrinsics.register()
    for name, fn in ((RULE_PACK, _pack), (RULE_GEMM, _gemm), (RULE_UNPACK, _unpack),
                     (RULE_OUTPUT, _output), (RULE_DOT, _dot_conv)):
        tvm.register_global_func(f"s_tir.meta_schedule.cpu.{name}", fn, override=True)
    _registered = True


def _per_iteration(sch, block, iterate, unrolled, lanes, window=None):
    """A transform stage: `iterate` fused into one loop, `unrolled` unrolled, `lanes`
    vectorized; its producer (the first 1-D pass, 'None'-ruled) computed per iteration,
    unrolled and vectorized alike. With the input's padded `window` (the pack, from
    revision 13), that pass goes column by column, each column's alpha window vectors
    computed just before it: LLVM keeps them in registers (the whole alpha x alpha window
    computed first, as a copy, ran C2 1-3% slower)."""
    fused = sch.fuse(*iterate)
    for loop in unrolled:
        sch.unroll(loop)
    sch.vectorize(lanes)
    producer = sch.get_producers(block)[0]
    sch.compute_at(producer, fused, preserve_unit_loops=True)
    *positions, inner_lanes = sch.get_loops(producer)[1:]
    if window is not None:
        sch.reorder(positions[1], positions[0])  # (column, position) from (position, column)
        positions[:2] = positions[1], positions[0]
    for loop in positions:
        sch.unroll(loop)
    sch.vectorize(inner_lanes)
    if window is not None:
        sch.compute_at(window, positions[0], preserve_unit_loops=True)
        *window_positions, window_lanes = sch.get_loops(window)[2:]
        for loop in window_positions:
            sch.unroll(loop)
        sch.vectorize(window_lanes)


def _pack(sch, block):
    eps, nu, tile, chunk, lanes = sch.get_loops(block)
    sch.reorder(tile, chunk, eps, nu, lanes)
    rows = sch.get_producers(block)[0]
    # Rewrite revisions 4-12 have no window: each term of the pass checks its bounds.
    window = next((b for b in sch.get_producers(rows)
                   if sch.get(b).name_hint == WINDOW), None)
    _per_iteration(sch, block, (tile, chunk), (eps, nu), lanes, window)
    return [sch] if window is None else _window_source(sch, window)


def _window_source(sch, window):
    """Where the window's producer runs, if the kernel has one (a layout transform absorbed
    into it): at the root, or inlined into the window. Two designs; left to MetaSchedule,
    its compute location was sampled among ~100 loops."""
    producers = sch.get_producers(window)
    if not producers:
        return [sch]
    inlined = sch.copy()
    for producer in producers:
        sch.annotate(producer, "schedule_rule", "None")
    try:
        for producer in inlined.get_producers(window):
            inlined.compute_inline(producer)
    except Exception:  # noqa: BLE001 - not injective: the root only
        return [sch]
    return [sch, inlined]


def _unpack(sch, block):
    chunk, tile, hi, wi, lanes = sch.get_loops(block)
    _per_iteration(sch, block, (chunk, tile), (hi, wi), lanes)
    return [sch]


def _output(sch, block):
    """The crop into the output with the layer's elementwise epilogue (bias, batch norm,
    ReLU, a residual add) folded in: one block, placed nowhere else. Left to the default
    rules, its compute location was sampled among the epilogue's loops, which made a few
    hundred schedules that differ by nothing that matters."""
    while True:
        consumers = sch.get_consumers(block)
        if len(consumers) != 1:
            break
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # noqa: BLE001 - not elementwise (or the graph's output): stop
            break
    return [sch]


def register_tiles(chunks: int, tiles: int) -> list[tuple[int, int]]:
    """(output channel blocks, tiles) register tiles to try: 6-12 accumulators (two vector
    registers stay free for a weight and a broadcast), channel blocks dividing `chunks`;
    a tile count need not divide `tiles` (a guarded remainder) but cannot exceed it."""
    blocks = [b for b in range(1, MAX_CHANNEL_BLOCKS + 1) if chunks % b == 0]
    counts = sorted({t for t in (3, 4, 6, 8) if t <= tiles}
                    | {t for t in range(3, MAX_TILES + 1) if tiles % t == 0} | {min(tiles, 2)})
    pairs = [(b, t) for b in blocks for t in counts if MIN_ACC <= b * t <= MAX_ACC]
    if pairs:
        return pairs
    # a tiny layer: as many accumulators as it has, up to the limit
    return [max(((b, t) for b in blocks for t in counts if b * t <= MAX_ACC),
                key=lambda bt: bt[0] * bt[1])]


def _gemm(sch, block):
    """One design per register tile (`register_tiles`), measured against each other."""
    eps, nu, chunk, tile, lanes, red_chunk, red_lane = sch.get_loops(block)
    extents = [int(sch.get(loop).extent) for loop in (chunk, tile)]
    out = []
    for k_reg, t_reg in register_tiles(*extents):
        design = sch.copy()
        k_outer, k_inner = design.split(chunk, [None, k_reg])
        t_outer, t_inner = design.split(tile, [None, t_reg])
        reduction = design.fuse(red_chunk, red_lane)
        design.reorder(eps, nu, k_outer, t_outer, reduction, k_inner, t_inner, lanes)
        acc = design.cache_write(block, 0, "local")
        design.reverse_compute_at(acc, t_outer, preserve_unit_loops=True)
        design.unroll(k_inner)
        design.unroll(t_inner)
        design.vectorize(lanes)
        design.vectorize(design.get_loops(acc)[-1])
        out.append(design)
    return out


MAX_DOT_ACC = 24  # int32x16 accumulators of a dot-product register tile (of 32 registers)


def dot_tiles(chunks: int, width: int) -> list[tuple[int, int]]:
    """(output channel blocks, output pixels of a row) register tiles for a dot-product
    conv: channel blocks dividing `chunks` (1, 2 or 4), pixels dividing the row `width`
    (a remainder does not tensorize), at most MAX_DOT_ACC accumulators; the largest
    few, which the search measures against each other."""
    pairs = [(b, t) for b in (1, 2, 4) if chunks % b == 0
             for t in range(1, width + 1) if width % t == 0 and b * t <= MAX_DOT_ACC]
    pairs.sort(key=lambda bt: -bt[0] * bt[1])
    return pairs[:6]


def _dot_conv(sch, block):
    """One design per register tile (`dot_tiles`): each tile's accumulators stay in
    registers over the whole reduction, one `vpdpbusd` per (pixel, channel block, 4 input
    channels); the tiles are parallel jobs, and the kernel's elementwise epilogue (the
    unsigned input's correction, requantization) runs per tile, vectorized. The rule
    schedules the whole kernel: the root gets no rules (the postprocessors would
    vectorize the tile's pixel loop around the intrinsic)."""
    n, oc, y, x, lanes, r_chunk, r_h, r_w, r_quad, r_lane = sch.get_loops(block)
    extents = [int(sch.get(loop).extent) for loop in (oc, x)]
    intrin = str(sch.get(block).annotations.get(INTRIN_KEY, DOT_VNNI))
    out = []
    for k_reg, t_reg in dot_tiles(*extents):
        design = sch.copy()
        k_outer, k_inner = design.split(oc, [None, k_reg])
        t_outer, t_inner = design.split(x, [None, t_reg])
        design.reorder(n, k_outer, y, t_outer, r_chunk, r_h, r_w, r_quad, k_inner, t_inner,
                       lanes, r_lane)
        epilogue = _epilogue_at(design, block, t_outer)
        design.parallel(design.fuse(n, k_outer, y, t_outer))
        init = design.decompose_reduction(block, r_chunk)
        for loop in design.get_loops(init)[-3:-1]:
            design.unroll(loop)
        design.vectorize(design.get_loops(init)[-1])
        design.unroll(k_inner)
        design.unroll(t_inner)
        design.tensorize(lanes, intrin)
        if epilogue is not None:
            design.vectorize(design.get_loops(epilogue)[-1])
        design.annotate(design.get_sblock("root"), "schedule_rule", "None")
        out.append(design)
    return out


def _epilogue_at(sch, block, loop):
    """The elementwise blocks after `block` folded into the last one, computed under
    `loop`: each tile's epilogue reads its accumulators from registers, in the tile's own
    thread. The requantization is a graph, not a chain (its rounding reads the high
    product twice): folded as a chain, it stopped at the first fork, and the rest ran at
    the root, on one thread, over the whole int32 output (MobileNet int8's 32 -> 64
    pointwise layer: 0.19 ms, 0.11 folded). The folded block, or None where the epilogue
    cannot go under `loop` (it reads more than the tile): then it runs at the root over
    all cores."""
    after = _blocks_after(sch, block)
    if not after:
        return None
    *inner, last = after

    def shape(b):  # the block's spatial domain: an elementwise block's is its output's
        return [int(v.dom.extent) for v in sch.get(b).iter_vars if int(v.iter_type) == 0]

    try:
        for producer in inner:
            sch.compute_inline(producer)
        if shape(last) != shape(block):  # e.g. a flatten: a tile's outputs are not a box
            raise ValueError("not elementwise")
        sch.reverse_compute_at(last, loop, preserve_unit_loops=True)
    except Exception:  # noqa: BLE001 - not elementwise, or it reads more than the tile
        for rest in _blocks_after(sch, block):  # those left, partly inlined or not
            _parallel_at_root(sch, rest)
        return None
    return last


def _blocks_after(sch, block) -> list:
    """The root's blocks after `block`, in order."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    names = [sch.get(b).name_hint for b in blocks]
    return list(blocks[names.index(sch.get(block).name_hint) + 1:])


def _parallel_at_root(sch, block, lanes: int = 16) -> None:
    """A root block's loops fused, run on all cores in vectors of `lanes` (where they
    divide it): a DQN layer's epilogue that flattens its output is one loop of 3136."""
    fused = sch.fuse(*sch.get_loops(block))
    if int(sch.get(fused).extent) % lanes:
        sch.parallel(fused)
        return
    outer, inner = sch.split(fused, [None, lanes])
    sch.parallel(outer)
    sch.vectorize(inner)
