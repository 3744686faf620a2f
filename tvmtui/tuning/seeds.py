"""Register-blocked starting points for channel-blocked and NCHW depthwise convolutions.

MetaSchedule's random samples of a `conv2d_NCHWc` space rarely block registers well, and its
evolution starts from what was sampled: after 48 trials C12 in NCHW8c measured 3.2 ms here,
while the tile sizes a kernel writer would pick (the output row split so that a few output
pixels of one channel block are accumulated in vector registers, the block's lanes
vectorized, the input channels reduced a block at a time) measured 1.6 ms. `seeds` fills
the first (cold) batch of such a task with those tilings, in each of its design spaces; the
cost model and evolution take it from there, and a seed is measured like any candidate.

An NCHW depthwise conv (TOPI's `group_conv2d_nchw` with one input channel per group) gets
seeds too: a row of output vectors accumulated in registers, the padding computed per
channel. Its three design spaces (with and without a write cache) differ more than their
tiles: on D1 (112x112, 32 channels) the search kept to the one with the slowest copy-back
and stopped at 0.121 ms after 144 trials, where this tiling measured 0.079-0.091 ms in two
of the three designs and 0.097-0.112 ms in the third (same process, interleaved). A small
map (a row no longer than a vector, D9's 7x7) gets a row a vector, all rows in registers.
A channel-blocked depthwise conv (MobileNet's in NCHW16c) gets a few output pixels of a
block in registers, each (chunk, row) a parallel job, the padding inlined.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product

from tvmtui.tuning.schedules import replay

# The tiled block of each blocked convolution TOPI emits, with its loops: spatial (n,
# channel chunk, oh, ow, channel block) then reduction.
BLOCKS = {"conv2d_NCHWc": ("ic", "kh", "kw")}
DEPTHWISE = "group_conv2d_nchw"  # its loops: n, channel, oh, ow, then ic (1), kh, kw
BLOCKED_DEPTHWISE = "depthwise_conv2d_NCHWc"  # variants.py's: n, chunk, oh, ow, block, kh, kw
MAX_SEEDS = 12  # per task and padding place (a cold batch is 16; what it cuts leads the next)
REGISTERS = 14  # vector accumulators that fit beside a weight and a broadcast (16 regs)
SMALL_MAP_CHANNELS = 16  # channels a parallel job of a small-map depthwise conv pads
UNROLL = (1, 2)  # decisions of the unroll categorical: max steps 16 and 64
# A pointwise (1x1) conv's register tile, (channel blocks, output rows, output columns):
# eight accumulators, as many as keep both FMA pipes busy (4-cycle latency), spread so
# that each weight vector and each broadcast input feeds two or more of them. Replayed
# on MobileNet's 1x1 layers (this znver3 VM, medians of 2): 14x14 512->512 c2 r2 q2
# 190 GFLOPS, 28x28 256->256 c4 r1 q2 188, 56x56 64->128 c2 r1 q4 180, where the
# seven-pixel row tile below reached 158, 125 and 131 (the tuned session's best, 146 on
# the 14x14). 3x3 convs measured alike with either (28x28 128->128: 143 against 142),
# and a 7x7 map has no such tile (c8 r1 q1: 87 against 157), so those keep the rows.
POINTWISE_TILES = ((2, 2, 2), (4, 1, 2), (2, 1, 4), (4, 2, 1))
POINTWISE_SEEDED = 3  # of those that divide the layer, in this order
# Where a padded blocked conv's seeds compute the padding, per vector lanes of the target:
# on AVX-512 each tile inlined into the loads first, then the same tile padded at the
# root. Replayed in one process on this AVX-512 VM, the best inlined seed ran 2-11% faster
# than the best padded at the root on every 3x3 and 7x7 layer of ResNet-18 (7x7 256->512
# stride 2: 0.479 ms against 0.537) and 14% on MobileNet's first conv (0.102 against
# 0.118), ahead of both sessions' tuned bests too, while on DCGAN's 2x2 sub-pixel phases
# the root stayed ahead (4x4 512->256: 0.30 against 0.48). On AVX2 (znver3 code) every
# inlined seed ran 2-4x slower than the root's; NEON is unmeasured and keeps the root.
PAD_PLACES = {16: (-2, -1)}


@dataclass(frozen=True)
class Tiling:
    """One seed: how each loop of the convolution block is split, and the unroll."""

    tiles: tuple[tuple[int, ...], ...]  # per loop, outermost factor first
    unroll: int
    # Where the padding is computed: the root (a pass of its own before the conv), inlined
    # into the loads (-2), or the candidate location of this index (3: inside the
    # outermost tile level, n0 c0 h0 w0).
    pad_at: int = -1


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def registers(vregs: int) -> int:
    """Vector accumulators a register tile may hold with `vregs` vector registers: 16
    (AVX2, SSE, 32-bit NEON) leave 14 beside a weight and a broadcast, 32 (AVX-512,
    AArch64) leave 28."""
    return 28 if vregs >= 32 else REGISTERS


def tilings(extents: list[int], vregs: int) -> list[Tiling]:
    """Seeds for a blocked conv whose block loops have these extents (see BLOCKS), on a
    target with `vregs` vector registers."""
    return list(dict.fromkeys(_pointwise_tilings(extents) + _row_tilings(extents, vregs)))


def _reduction(lanes: int, red: list[int]) -> list[tuple[int, ...]]:
    """The input channels reduced a block at a time, the kernel window whole inside."""
    ic, *kernel = red
    inner = lanes if ic % lanes == 0 else ic
    return [(ic // inner, inner), *((1, k) for k in kernel)]


def _pointwise_tilings(extents: list[int]) -> list[Tiling]:
    n, chunks, oh, ow, lanes, *red = extents
    if any(k != 1 for k in red[1:]):
        return []
    fits = [(c, r, q) for c, r, q in POINTWISE_TILES
            if chunks % c == 0 and oh % r == 0 and ow % q == 0][:POINTWISE_SEEDED]
    return [_register_tiling(extents, tile) for tile in fits]


def _row_tilings(extents: list[int], vregs: int) -> list[Tiling]:
    """Register tiles of (channel blocks c, output rows r, output pixels of a row q), each
    row tile a parallel job: the most accumulators up to half the registers, then a
    column of rows across the channel blocks, then the most up to all the registers, then
    rows of one block (see `_register_tiles`). With 16 registers, the rows of
    `_avx2_row_tilings`."""
    n, chunks, oh, ow, lanes, *red = extents
    if registers(vregs) < 28:
        return _avx2_row_tilings(extents)
    return [_register_tiling(extents, tile)
            for tile in _register_tiles(chunks, oh, ow, registers(vregs))]


def _register_tiling(extents: list[int], tile: tuple[int, int, int]) -> Tiling:
    """A blocked conv's seed that accumulates a (channel blocks, rows, pixels) tile in
    registers, each tile a parallel job, unrolled 64 steps."""
    n, chunks, oh, ow, lanes, *red = extents
    c, r, q = tile
    return Tiling(((n, 1, 1, 1), (chunks // c, 1, 1, c), (oh // r, 1, 1, r),
                   (ow // q, 1, 1, q), (1, 1, 1, lanes), *_reduction(lanes, red)), UNROLL[-1])


def _avx2_row_tilings(extents: list[int]) -> list[Tiling]:
    """AVX2's row tiles: each pixel tile of `_row_pixels` with one or two channel blocks
    (a row with no tile from 4 to 8 takes as many blocks as fit), the rows all in the
    middle spatial level (weights reused from L1 across rows) or all in the parallel loop,
    unrolled 16 or 64 steps. With AVX2 code (znver3 target) on this VM, `_register_tiles`'
    tiles ran 4-17% slower than these on 7x7 to 56x56 3x3 convs, 18% faster on DQN's 9x9
    stride-2 4x4 conv."""
    n, chunks, oh, ow, lanes, *red = extents
    pixels = _row_pixels(ow)
    if pixels[0] >= 4:
        regs = [(d, c) for d in pixels for c in (1, 2)]
    else:
        regs = [(pixels[0], max(c for c in divisors(chunks)
                                if c * pixels[0] <= REGISTERS and c <= 4))]
    out = []
    for (reg, chunk_reg), rows_inner, unroll in product(regs, (True, False), UNROLL):
        if chunks % chunk_reg or reg * chunk_reg > REGISTERS:
            continue
        rows = (1, 1, oh, 1) if rows_inner else (oh, 1, 1, 1)
        spatial = [(n, 1, 1, 1), (chunks // chunk_reg, 1, 1, chunk_reg), rows,
                   (ow // reg, 1, 1, reg), (1, 1, 1, lanes)]
        out.append(Tiling(tuple(spatial + _reduction(lanes, red)), unroll))
    return out


def _register_tiles(chunks: int, oh: int, ow: int, budget: int) -> list[tuple[int, int, int]]:
    """(c, r, q) register tiles, best first. The first tile of such rows (c2 r1 q7 on
    7x7 to 56x56 maps, c1 r1 q9 on 9x9) was often the fastest already; a 9x9 map's best
    was a column (c4 r3 q1) or three whole rows (c1 r3 q9). Replayed in one process on
    this AVX-512 VM against the sessions' tuned bests, the best of these seeds ran: ResNet-18
    7x7 512->512 1.02 ms against 1.11, 14x14 256->256 1.02 against 1.08, 56x56 1.04 against
    1.09, DQN's 9x9 stride-2 4x4 conv 0.024 against 0.029 (the earlier seeds, a row cut in
    threes across four blocks, 0.029). The unroll is 64 steps: 16 measured alike."""
    cs = [c for c in divisors(chunks) if c <= 4]
    rs = [r for r in divisors(oh) if 2 <= r <= 4]
    qs = _row_pixels(ow, whole=budget // 2)

    def most(limit: int, tiles) -> list[tuple[int, int, int]]:
        fits = [t for t in tiles if t[0] * t[1] * t[2] <= limit]
        return [max(fits, key=lambda t: (t[0] * t[1] * t[2], t[2]))] if fits else []

    plans = most(budget // 2, ((c, 1, q) for c in cs for q in qs))
    if rs and cs[-1] * rs[-1] >= 8:  # a column: each broadcast input feeds c blocks
        plans += most(budget, ((cs[-1], r, 1) for r in rs))
    plans += most(budget, ((c, 1, q) for c in cs for q in qs))
    plans += most(budget, ((1, r, qs[0]) for r in rs))
    return list(dict.fromkeys(plans))


def _row_pixels(ow: int, whole: int = 0) -> list[int]:
    """Output pixels of a row per register tile: its divisors from 4 to 8, largest first
    (ow=56 -> 8, 7, 4; ow=7 -> 7), else the whole row if it is no longer than `whole`,
    else its largest divisor below 4 (ow=9 -> 3). Wider tiles (14 on a 28x28 map, with two
    channel blocks or two rows) ran 2-3x slower than these on AVX-512."""
    return [d for d in divisors(ow) if 4 <= d <= 8][::-1] or \
        [ow if ow <= whole else max(d for d in divisors(ow) if d < 4)]


def depthwise_tilings(extents: list[int], lanes: int) -> list[Tiling]:
    """Seeds for an NCHW depthwise conv with these loop extents: rows of whole vectors of
    `lanes`, or on a small map (a row no longer than a vector: 7x7) a row a vector; none
    for other rows (28 wide on AVX2)."""
    n, channels, oh, ow, ic, *kernel = extents
    if ic != 1:
        return []
    if ow < lanes and oh <= REGISTERS:
        return _small_map_tilings(extents)
    if ow % lanes:
        return []
    # Up to 7 vectors of a row, times two rows: 14 accumulators (see REGISTERS). Each
    # channel is one parallel job that pads its own map, then walks its rows.
    vectors = max(d for d in divisors(ow // lanes) if d <= REGISTERS // 2)
    rows = 2 if oh % 2 == 0 else 1
    out = []
    for row_tile, unroll in product(((1, rows), (rows, 1)), UNROLL):
        spatial = [(n, 1, 1, 1), (channels, 1, 1, 1), (1, oh // rows, *row_tile),
                   (1, ow // (vectors * lanes), vectors, lanes)]
        out.append(Tiling(tuple(spatial + [(1, ic), *((1, k) for k in kernel)]), unroll,
                          pad_at=3))
    return list(dict.fromkeys(out))


def _small_map_tilings(extents: list[int]) -> list[Tiling]:
    """A depthwise conv on a small map: each parallel job pads SMALL_MAP_CHANNELS channels,
    then per channel zeroes its rows (one vector each, accumulated in registers), adds
    the kernel's taps into them and stores them. On D9 (7x7, 1024 channels, this
    AVX-512 VM, in one process) these seeds ran 0.0135 ms where the search's best after
    192 trials, which initialized 64 channels' rows before accumulating them, ran 0.0182
    ms; by hand, one channel per job ran 0.029 ms."""
    n, channels, oh, ow, ic, *kernel = extents
    per = max(d for d in divisors(channels) if d <= SMALL_MAP_CHANNELS)
    spatial = [(n, 1, 1, 1), (channels // per, per, 1, 1), (1, 1, 1, oh), (1, 1, 1, ow)]
    return [Tiling(tuple(spatial + [(1, ic), *((1, k) for k in kernel)]), unroll, pad_at=3)
            for unroll in UNROLL[::-1]]


def blocked_depthwise_tilings(extents: list[int]) -> list[Tiling]:
    """Seeds for a channel-blocked depthwise conv: every (chunk, output row) a parallel job
    that accumulates a few output pixels of its block in registers (the two largest row
    divisors from 4 to 8, as for a blocked conv's rows), the padding inlined into the
    loads. On MobileNet's nine depthwise layers (NCHW16c, this AVX-512 VM, in one process)
    they ran 2-5x faster than the 1056-trial session's best of each: 14x14x512 0.0095 ms
    against 0.0212, 56x56x128 0.034 against 0.134; the padding at the root or per job
    ran 1.6-2.8x slower than inlined."""
    n, chunks, oh, ow, block, *kernel = extents
    return [Tiling(((n, 1, 1, 1), (chunks, 1, 1, 1), (oh, 1, 1, 1), (ow // reg, 1, 1, reg),
                    (1, 1, 1, block), *((1, k) for k in kernel)), UNROLL[-1], pad_at=-2)
            for reg in _row_pixels(ow)[:2]]


def seeds(mod, design_spaces, postprocs, *, lanes: int, vregs: int) -> list:
    """Post-processed schedules of `mod` with the tilings above, for every design space
    whose trace tiles a block of BLOCKS or a depthwise conv (NCHW or blocked); [] for any
    other task. A blocked conv's tiles come with each padding place of `pad_places`.
    `lanes`: float32 lanes of the target's vectors (a depthwise conv's rows are tiled by
    them); `vregs`: its vector registers (see `registers`)."""
    from tvmtui.tuning.schedules import module_hash

    block = _blocked_conv(mod)
    cap = MAX_SEEDS
    if block is not None:
        name, extents = block
        padded = any(_pad_location(d.trace) is not None for d in design_spaces)
        places = pad_places(lanes) if padded else (-1,)
        plans = [replace(plan, pad_at=at) for plan in tilings(extents, vregs)
                 for at in places]
        cap = MAX_SEEDS * len(places)
    elif (blocked := _block_extents(mod, BLOCKED_DEPTHWISE, 7)) is not None:
        name, plans = BLOCKED_DEPTHWISE, blocked_depthwise_tilings(blocked)
    else:
        depthwise = _block_extents(mod, DEPTHWISE, 7)
        if depthwise is None:
            return []
        name, plans = DEPTHWISE, depthwise_tilings(depthwise, lanes)
    # With 32 registers, the designs that write each register tile out as it is done
    # first: with the same tiles, the one accumulating in the output (its consumers a pass
    # of their own) ran 1.1-5x slower on ResNet-18's 3x3 convs on AVX-512. With AVX2's
    # tiles it was among the fastest on a 7x7 map: there every plan takes every design.
    if registers(vregs) >= 28:
        tiled = [d for d in design_spaces if _writes_per_tile(d)]
        others = [d for d in design_spaces if d not in tiled]
        pairs = [*product(plans, tiled), *product(plans, others)]
    else:
        pairs = list(product(plans, design_spaces))
    out: dict[str, object] = {}  # by module hash (two designs may schedule alike)
    for plan, design in pairs:
        if len(out) >= cap:
            break
        decisions = _decisions(design.trace, name, plan)
        if decisions is None:
            continue
        sch = replay(mod, design, decisions, postprocs)
        if sch is not None:
            out.setdefault(module_hash(sch.mod), sch)
    return list(out.values())


def pad_places(lanes: int) -> tuple[int, ...]:
    """Where a blocked conv's seeds compute its padding, in order (see PAD_PLACES)."""
    return PAD_PLACES.get(lanes, (-1,))


def _writes_per_tile(design) -> bool:
    """Whether the design writes the conv's result (a write cache, or its fused consumer)
    at a tile's loop rather than at the root."""
    return any(inst.kind.name in ("CacheWrite", "ReverseComputeAt")
               for inst in design.trace.insts)


def _blocked_conv(mod) -> tuple[str, list[int]] | None:
    for name, reduction in BLOCKS.items():
        extents = _block_extents(mod, name, 5 + len(reduction))
        if extents is not None:
            return name, extents
    return None


def _block_extents(mod, name: str, loops: int) -> list[int] | None:
    """The extents of block `name`'s loops in `mod`, if it has one with that many."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    try:
        block = sch.get(sch.get_sblock(name))
    except Exception:  # noqa: BLE001 - no such block in this task
        return None
    extents = [int(v.dom.extent) for v in block.iter_vars]
    return extents if len(extents) == loops else None


def _decisions(trace, block_name: str, plan: Tiling) -> dict | None:
    """The design's own decisions, with the block's tiles, the unroll and the padding's
    place replaced by the plan's."""
    decisions = dict(trace.decisions)
    blocks: dict = {}
    loops: dict = {}
    for inst in trace.insts:
        kind = inst.kind.name
        if kind == "GetSBlock":
            blocks[inst.outputs[0]] = str(inst.attrs[0])
        elif kind == "GetLoops" and blocks.get(inst.inputs[0]) == block_name and not loops:
            loops = {rv: i for i, rv in enumerate(inst.outputs)}
    if len(loops) != len(plan.tiles):
        return None
    pad = _pad_location(trace)
    if pad is not None:
        decisions[pad] = plan.pad_at
    placed = 0
    for inst in trace.insts:
        kind = inst.kind.name
        if kind == "SamplePerfectTile" and inst.inputs[0] in loops:
            tile = plan.tiles[loops[inst.inputs[0]]]
            if int(inst.attrs[0]) != len(tile):
                return None
            decisions[inst] = list(tile)
            placed += 1
        elif kind == "SampleCategorical":
            decisions[inst] = plan.unroll
    return decisions if placed == len(plan.tiles) else None


def _pad_location(trace):
    """The instruction of `trace` that samples where a padding block is computed, if any."""
    blocks = {}
    for inst in trace.insts:
        kind = inst.kind.name
        if kind == "GetSBlock":
            blocks[inst.outputs[0]] = str(inst.attrs[0])
        elif kind == "SampleComputeLocation" and "pad" in blocks.get(inst.inputs[0], "").lower():
            return inst
    return None
