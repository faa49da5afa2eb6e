"""The register-tiled schedule rules, for kernels whose main block is a packed convolution or product.

- ``conv2d`` / ``dense``: a register tile of ``wt`` output pixels (rows) x ``ob`` output channels
  (columns, one or two SIMD vectors) accumulates in a local buffer while the reduction loops (kernel
  rows, columns, input channels) run outside it; the tile's channel loop is vectorized and its pixel loop
  unrolled; batch x channel blocks x output rows run in parallel; the epilogue is computed on the tile
  right after its reduction (``reverse_compute_at``), before it leaves registers.
- ``depthwise``: the same with the channel block as the only reduction-free vector axis.

A register tile along a symbolic axis runs whole tiles past the end (the compute padded the axis, see
``compute.padded``).  A rule that does not apply raises ``NotThisRule``.
"""

from __future__ import annotations

import contextlib
import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from nnadapter_tvm.targets.cpu.compute import CROP, PAD, row_axis
from nnadapter_tvm.targets.cpu.generic import schedule_spatial
from nnadapter_tvm.targets.cpu.loops import (
    BUFFER_LOAD,
    child_blocks,
    loop_extent,
    parallel,
    static_product,
    vectorize_inner,
)
from nnadapter_tvm.targets.cpu.simd import (
    channel_block,
    row_tile,
    symbolic_tile,
    tile_budget,
    vector_lanes,
    vector_registers,
)

#: The name TOPI gives a strided slice's block (Relax's legalization of ``strided_slice``).
SLICE = "T_strided_slice"
#: A convolution with symbolic rows parallelizes over its channel blocks (not its rows) from this many.
SYMBOLIC_CHANNEL_TASKS = 8


class NotThisRule(Exception):
    """The function is not the kind a rule schedules: the next rule is tried, nothing is logged."""


def schedule_conv(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    """A convolution (``compute.conv_nhwc``): output columns x a channel block per register tile, the
    kernel rows, columns and input channels reduced outside it; batch x channel blocks x rows parallel
    (batch x rows when one of them is symbolic)."""
    lanes, regs, epilogue = _start(sch, block, target)
    b, y, x, o, rh, rw, ri = sch.get_loops(block)
    ob = _packed_block(sch, block, 5)
    oo, oi, xo, xi = _split_tile(sch, o, ob, x, regs, lanes)
    symbolic = loop_extent(sch, b) is None or loop_extent(sch, y) is None
    blocks = loop_extent(sch, oo) or 1
    if symbolic and blocks < SYMBOLIC_CHANNEL_TASKS:
        # The channel block stays out of a parallel loop fused from symbolic extents: recovered from
        # it, its index could not be proved in range, and the register tile lost its constant offsets
        # (kept in memory: 3x slower).
        sch.reorder(b, y, oo, xo, rh, rw, ri, xi, oi)
        tasks = [b, y]
    else:
        # Each channel block's weights read once for all rows. With symbolic rows, batch x channel
        # blocks are the parallel loop and the rows stay serial inside it: the block's index is the
        # fused index modulo a constant, provable; over the rows (the order above) 512 channels at 7x7
        # reread 9 MB of weights per row and ran 1.7x the static kernel.
        sch.reorder(b, oo, y, xo, rh, rw, ri, xi, oi)
        tasks = [b, oo] if symbolic else [b, oo, y]
    sch.unroll(xi)
    sch.vectorize(oi)
    tile_epilogue(sch, block, epilogue, xo, lanes)
    parallel(sch, tasks, min_elements=1, work=None)
    sch.decompose_reduction(block, rh)


def schedule_depthwise(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    """A depthwise convolution (``compute.depthwise_nhwc``): output columns x a channel block per register
    tile, the kernel rows and columns reduced outside it; batch x rows parallel."""
    lanes, regs, epilogue = _start(sch, block, target, pad_per_row=True)
    b, y, x, o, rh, rw = sch.get_loops(block)
    oc = loop_extent(sch, o)
    ob = channel_block(oc, lanes) if oc else 1
    oo, oi, xo, xi = _split_tile(sch, o, ob, x, regs, lanes)
    rows = _rows_per_pad(sch, block, y)
    if rows > 1:
        y, yi = sch.split(y, [None, rows])
        sch.reorder(b, y, yi, xo, oo, rh, rw, xi, oi)
    else:
        sch.reorder(b, y, xo, oo, rh, rw, xi, oi)
    sch.unroll(xi)
    sch.vectorize(oi)
    tile_epilogue(sch, block, epilogue, oo, lanes)
    tasks = parallel(sch, [b, y], min_elements=1)
    if tasks is None:
        tasks = y
    _pad_at(sch, block, tasks if rows else None, lanes)
    sch.decompose_reduction(block, rh)


def schedule_dense(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    """A packed product (``compute.dense_packed``, ``compute.batch_matmul_packed``): rows x a column block
    per register tile, K reduced outside it; column blocks x rows parallel."""
    lanes, regs = vector_lanes(target), vector_registers(target)
    inline_side_inputs(sch, block)
    epilogue = epilogue_blocks(sch, block)
    loops = sch.get_loops(block)
    *rows, j, k = loops
    nb = _packed_block(sch, block)
    vectors = max(nb // lanes, 1)
    extents = [loop_extent(sch, lp) for lp in rows]
    fused_tile = row_tile(static_product(extents), tile_budget(regs, vectors), lo=2) if None not in extents else 0
    if len(rows) == 1 or (fused_tile and _tiles_whole_batches(fused_tile, extents)):
        outer, m = [], sch.fuse(*rows) if len(rows) > 1 else rows[0]
    else:
        # Rows are fused only when no tile straddles two batches ([2, 77] rows in tiles of 14 computed
        # wrong results: TVM compacts such a tile's buffer wrongly), nor when an extent is symbolic (the
        # fused index would divide by it): then the last row axis is tiled (a symbolic one was padded to
        # whole tiles by the compute) and the others stay outside.  For a product with one weight that
        # axis is the one its compute padded (``compute.row_axis``): [T, 1] rows are tiled along T, not
        # along the 1.  A product packed per batch keeps its matrix's rows: each batch reads its own
        # packed operand, so a tile across batches would share nothing.
        axis = row_axis(extents) if _shared_weight(sch, block) else len(rows) - 1
        outer, m = rows[:axis] + rows[axis + 1 :], rows[axis]
    jo, ji = sch.split(j, [None, nb])
    mt = tile_rows(sch, m, regs, vectors, lo=2)
    mo, mi = sch.split(m, [None, mt])
    # A shared weight's column block outermost, read by every row tile while it is in cache; an operand
    # packed per batch after its batch axes, so that a symbolic batch is the outermost loop and the
    # parallel loop fuses every axis (behind a static column block, a symbolic batch ends the fused loop:
    # attention with a [B, 6] batch ran 2 x B tasks).
    order = [jo, *outer] if not outer or _shared_weight(sch, block) else [*outer, jo]
    sch.reorder(*order, mo, k, mi, ji)
    sch.unroll(mi)
    sch.vectorize(ji)
    if loop_extent(sch, jo) is None and epilogue:
        # Columns padded to whole blocks (a symbolic N): on the tile, the crop's guard varies inside
        # the vector and scalarizes every store.  The tile is written whole to the padded product and
        # the crop and epilogue run after it, as element-wise loops (partitioned vector tails).
        tile_epilogue(sch, block, [], mo, lanes)
        for stage in epilogue:
            schedule_spatial(sch, stage, lanes)
    else:
        tile_epilogue(sch, block, epilogue, mo, lanes)
    parallel(sch, [*order, mo], min_elements=1, work=None)
    sch.decompose_reduction(block, k)


def _start(sch: s_tir.Schedule, block, target: tvm.target.Target, pad_per_row: bool = False) -> tuple[int, int, list]:
    """A convolution's lanes, registers and epilogue blocks; its padding stage scheduled as a copy (left
    for ``_pad_at`` with ``pad_per_row``)."""
    lanes, regs = vector_lanes(target), vector_registers(target)
    inline_side_inputs(sch, block)
    epilogue = epilogue_blocks(sch, block)
    if not pad_per_row:
        for pad in _pads(sch, block):
            schedule_spatial(sch, pad, lanes)
    return lanes, regs, epilogue


def _pads(sch: s_tir.Schedule, block) -> list:
    return [b for b in sch.get_producers(block) if sch.get(b).name_hint.startswith(PAD)]


def _pad_at(sch: s_tir.Schedule, block, loop, lanes: int) -> None:
    """A depthwise convolution's padding computed inside ``loop`` (a task of output rows): the input rows
    those rows read, padded while they are in cache, instead of a padded copy of the whole input written
    and read back (mobilenet_v3's stride-2 3x3 at 112x112x64: 3.3 MB each way); with ``loop`` None, the
    whole copy."""
    for pad in _pads(sch, block):
        if loop is not None:
            try:
                sch.compute_at(pad, loop, preserve_unit_loops=True)
            except s_tir.ScheduleError:
                pass
            else:
                vectorize_inner(sch, sch.get_loops(pad)[-1], lanes)
                continue
        schedule_spatial(sch, pad, lanes)


def _rows_per_pad(sch: s_tir.Schedule, block, y) -> int:
    """Output rows per task of a depthwise convolution whose padding is computed per task (``_pad_at``),
    0 for one padded copy of the whole input. A task pads the (rows - 1) x stride + kernel input rows it
    reads, so neighbouring tasks pad the overlap twice: rows are grouped until that is at most half again
    the input (a 3x3 stride-2 kernel: 1 row; 3x3 stride 1: 4; 5x5 stride 1: 8) while 8 tasks a batch
    remain; where no grouping does (small maps, whose whole copy stays in cache anyway), or a symbolic
    height whose overlap is over 2x, the whole copy."""
    pads = _pads(sch, block)
    if not pads:
        return 0
    window = _row_window(sch, block, sch.get(pads[0]).name_hint)
    if window is None:
        return 0
    stride, span = window
    height = loop_extent(sch, y)
    if height is None:
        return 1 if span <= 2 * stride else 0
    choices = [r for r in range(1, max(1, height // 8) + 1) if height % r == 0]
    return next((r for r in choices if (r - 1) * stride + span <= 1.5 * r * stride), 0)


def _row_window(sch: s_tir.Schedule, block, pad_name: str) -> tuple[int, int] | None:
    """(stride, rows spanned by the kernel) of ``block``'s read of the padded input: the row index's
    step per output row, and its range over the kernel rows (dilation included)."""
    stmt = sch.get(block)
    region = next((r for r in stmt.reads if r.source.name == pad_name), None)
    if region is None or len(stmt.iter_vars) < 5:
        return None
    row = region.region[1].min
    out_row, kernel_row = stmt.iter_vars[1], stmt.iter_vars[4]
    dtype = str(row.ty)

    def at(y: int, r: int) -> int | None:
        analyzer = tvm.sym.Analyzer()
        for iv in stmt.iter_vars:
            value = y if iv.var.same_as(out_row.var) else r if iv.var.same_as(kernel_row.var) else 0
            analyzer.bind(iv.var, tirx.const(value, dtype))
        value = analyzer.simplify(row)
        return int(value) if isinstance(value, tirx.IntImm) else None

    kh = kernel_row.dom.extent
    first, step, last = at(0, 0), at(1, 0), at(0, int(kh) - 1) if isinstance(kh, tirx.IntImm) else None
    if None in (first, step, last) or step - first < 1:
        return None
    return step - first, last - first + 1


def _split_tile(sch: s_tir.Schedule, channels, ob: int, columns, regs: int, lanes: int) -> tuple:
    """A convolution's register tile: output ``channels`` split into blocks of ``ob`` (the vector axis),
    output ``columns`` into rows of the tile; returns (channel blocks, block, column tiles, tile)."""
    oo, oi = sch.split(channels, [None, ob])
    wt = tile_rows(sch, columns, regs, max(ob // lanes, 1))
    xo, xi = sch.split(columns, [None, wt])
    return oo, oi, xo, xi


def tile_rows(sch: s_tir.Schedule, loop, registers: int, vectors: int, lo: int = 4) -> int:
    """The register tile's rows along ``loop``: a divisor of a static extent, ``symbolic_tile`` (which the
    compute padded the loop to, see ``compute.padded``) for a symbolic one."""
    extent = loop_extent(sch, loop)
    budget = tile_budget(registers, vectors)
    if extent is not None:
        return row_tile(extent, budget, lo)
    # The tile the compute padded to (whatever vector count it assumed): the largest one that provably
    # divides the extent.  Otherwise the split gets a guarded tail (correct, slower).
    value, analyzer = sch.get(loop).extent, tvm.sym.Analyzer()
    for tile in range(budget, 1, -1):
        if analyzer.can_prove_equal(tirx.floormod(value, tile), 0):
            return tile
    return symbolic_tile(registers, vectors)


def _shared_weight(sch: s_tir.Schedule, block) -> bool:
    """Whether a packed product reads one packed operand for all its rows (``compute.dense_packed``'s
    [N / nb, K, nb]) rather than one per batch (``compute.batch_matmul_packed``)."""
    return len(sch.get(block).reads[-1].source.shape) == 3


def _packed_block(sch: s_tir.Schedule, block, ndim: int | None = None) -> int:
    """The innermost extent of the packed operand of ``block``: the buffer its compute reads last
    (``compute.conv_nhwc``, ``dense_packed``, ``batch_matmul_packed`` all end with it).

    ``ndim`` is its rank (a convolution's packed weight: 5); None for a product, whose packed operand is a
    weight ``[N / nb, K, nb]`` or a run-time operand packed per batch, ``[*batch, N / nb, K, nb]`` with
    any number of batch axes. Matching by rank alone took, for attention's P V with batch axes [B, 6],
    the left operand [B, 6, 1500, 1500] (read earlier, and 4-D like a one-batch packed operand) for the
    packed one: a "block" of 1500 columns where the output has 64, 0.3 GFLOP/s."""
    reads = list(sch.get(block).reads)
    if not reads:
        raise NotThisRule
    shape = reads[-1].source.shape
    rank_ok = len(shape) == ndim if ndim is not None else len(shape) >= 3
    if not rank_ok or not isinstance(shape[-1], tirx.IntImm):
        raise NotThisRule
    return int(shape[-1])


def _tiles_whole_batches(tile: int, extents: list[int]) -> bool:
    """Whether tiles of ``tile`` fused rows never straddle a batch boundary of any row axis: for every
    inner block of rows (the product of the trailing extents), the tile divides it or it divides the
    tile.  Checking the last extent alone let a tile of 12 over [5, 2, 4] rows straddle the batches of
    8 rows, and TVM then computed rows 16-19 from rows 0-3."""
    block = 1
    for extent in reversed(extents[1:]):
        block *= extent
        if tile % block and block % tile:
            return False
    return True


def inline_side_inputs(sch: s_tir.Schedule, main) -> None:
    """Inline the element-wise blocks before ``main`` that it does not read: an input of the epilogue computed
    in the same kernel (a QDQ ResNet's skip connection, dequantized; a dynamically quantized product's
    scale, x_scale * w_scale).  Computed whole at the root, it kept the epilogue off the register tile
    (``reverse_compute_at`` needs every producer under the tile's loop): the rule failed and the kernel ran
    unscheduled (a MiniLM's products 5x slower than float32).  Likewise after it, where TVM allows: a
    block that does not read the product (MatMulInteger's x_zero_point * colsum) is inlined into the
    epilogue that reads it."""
    feeding = {sch.get(b).name_hint for b in sch.get_producers(main)}
    for b in reversed(_blocks_around(sch, main)[0]):
        if sch.get(b).name_hint not in feeding:
            sch.compute_inline(b)
    consumers = _consumers(sch, main)
    for b in _blocks_around(sch, main)[1]:
        if sch.get(b).name_hint not in consumers:
            with contextlib.suppress(s_tir.ScheduleError):
                sch.compute_inline(b)


def _blocks_around(sch: s_tir.Schedule, block) -> tuple[list, list]:
    """The function's blocks before ``block`` and after it, in order."""
    root = child_blocks(sch)
    index = [sch.get(b).name_hint for b in root].index(sch.get(block).name_hint)
    return root[:index], root[index + 1 :]


def _consumers(sch: s_tir.Schedule, block) -> set[str]:
    """The names of the blocks that read ``block``'s output, directly or through other blocks."""
    consumers, frontier = set(), [block]
    while frontier:
        for c in sch.get_consumers(frontier.pop()):
            name = sch.get(c).name_hint
            if name not in consumers:
                consumers.add(name)
                frontier.append(c)
    return consumers


def _slice_vector(sch: s_tir.Schedule, block, inner, lanes: int) -> int | None:
    """Where ``block`` writes fewer channels than its innermost loop ``inner`` (the tile's channel block)
    runs over (the epilogue of a product or convolution whose padded channels a slice dropped: 72 of 80),
    the widest vector that divides both counts and ``lanes`` (8 there), else None (also where that is 1)."""
    extent = loop_extent(sch, inner)
    shape = sch.get(block).writes[0].source.shape if sch.get(block).writes else []
    valid = shape[-1] if shape else None
    if extent is None or not isinstance(valid, tirx.IntImm) or int(valid) % extent == 0:
        return None
    width = math.gcd(int(valid), extent, lanes)
    return width if width >= 2 else None


def epilogue_blocks(sch: s_tir.Schedule, block) -> list:
    """The blocks that follow ``block`` in its function (its fused epilogue), in order."""
    after = _blocks_around(sch, block)[1]
    # Only consumers of the main block can run on its tile: a block after it that computes something
    # else (Gemm's beta * C) would be computed per tile and read whole. Leave such functions to the
    # next rule.
    consumers = _consumers(sch, block)
    if any(sch.get(b).name_hint not in consumers for b in after):
        raise NotThisRule("a block after the main one does not consume it")
    return after


def reads(sch: s_tir.Schedule, stage) -> int:
    """How many times the blocks that consume ``stage`` read its output (loads in their bodies): a stage
    read twice, inlined, is computed twice."""
    buffer = sch.get(stage).writes[0].source
    loads = []

    def visit(node: object) -> None:
        if node.source.same_as(buffer):
            loads.append(node)

    for consumer in sch.get_consumers(stage):
        tvm_ffi.structural_walk(sch.get(consumer).body, [(BUFFER_LOAD, visit)], order="pre")
    return len(loads)


def inline_epilogue(sch: s_tir.Schedule, epilogue: list) -> list:
    """The epilogue's stages inlined into its last one, where TVM allows (the integer kernels', and any
    epilogue that requantizes): a requantization, its dequantization for the next operation (a residual
    addition) and the next requantization are some twenty element-wise stages; each a buffer of the whole
    tile, they cost more than the products of a 1x1 convolution over 64 channels.  A stage read twice
    stays one of its own: inlined, it is computed twice (a QDQ SiLU reads its dequantized input in the
    sigmoid and in the product: the requantization of the convolution's output, and everything before
    it, ran twice).  Casts and roundings stay as written (inlining changes no arithmetic: TVM folds no
    float operation across them)."""
    kept = []
    for stage in epilogue[:-1]:
        try:
            if reads(sch, stage) > 1:
                kept.append(stage)
                continue
            sch.compute_inline(stage)
        except Exception:  # a stage TVM cannot inline stays one of its own
            kept.append(stage)
    return [*kept, epilogue[-1]] if epilogue else epilogue


def _requantizes(sch: s_tir.Schedule, epilogue: list) -> bool:
    """Whether an epilogue stage rounds to integers (a requantization: ``nearbyint``)."""
    found = []

    def visit(node: object) -> None:
        if getattr(node.op, "name", "") == "tirx.nearbyint":
            found.append(node)

    for stage in epilogue:
        tvm_ffi.structural_walk(sch.get(stage).body, [(tvm.ir.expr.Call, visit)], order="pre")
        if found:
            return True
    return False


def tile_epilogue(sch: s_tir.Schedule, main, epilogue: list, tile_loop, lanes: int) -> None:
    """Compute the epilogue on the tile right after its reduction, while the tile is in registers.

    Each epilogue block keeps its own stage (not inlined: see ``generic.schedule_generic``), on the tile,
    except after a padded symbolic tile (below)."""
    if len(epilogue) > 2 and _requantizes(sch, epilogue):
        # A quantized model's epilogue (the float route of an 8-bit depthwise convolution): twenty stages,
        # each a tile-sized buffer the registers cannot hold (efficientnet_b0 int8's 3x3 depthwise at
        # 56x56x144: 0.9 ms against the float kernel's 0.3).
        epilogue = inline_epilogue(sch, epilogue)
    sliced = any(sch.get(b).name_hint.startswith(SLICE) for b in epilogue[:-1])
    if sliced or any(sch.get(b).name_hint.startswith(CROP) for b in epilogue[:-1]):
        # A padded symbolic tile (see ``compute.padded``): the crop and the epilogue stages before the
        # last are inlined into it.  As stages of their own on the tile, their buffers were a whole row of
        # symbolic size (the crop's), or min(tile, width) elements: a run-time sized array, kept in
        # memory, not registers (1.2-1.35x slower on a relu6 epilogue).  Likewise after a slice of the
        # padded channels (72 of 80): each stage after it is guarded per lane, which scalarizes its loop,
        # and three such stages (slice, bias, ReLU) made a 1x1 convolution 2.5x slower than one.
        epilogue = inline_epilogue(sch, epilogue)
    if not epilogue:
        epilogue = [sch.cache_write(main, 0, "local")]
    else:
        sch.set_scope(main, 0, "local")
    for consumer in epilogue:
        sch.reverse_compute_at(consumer, tile_loop, preserve_unit_loops=True)
        inner = sch.get_loops(consumer)[-1]
        # (The integer kernels inline their slice before this: ``inline_epilogue``.)
        width = _slice_vector(sch, consumer, inner, lanes)
        if width:
            # The tile's last channel block is partly past the slice (72 of 80 channels): in vectors of
            # gcd(72, 16) = 8 lanes the slice's guard is the same for every lane of a vector, a branch
            # around a whole vector store; per lane it scalarized every store of every block.
            _, inner = sch.split(inner, [None, width])
            sch.vectorize(inner)
            continue
        # Vectors as wide as the tile's (a 32-wide tile stored by 16-wide vectors stayed an array in
        # memory instead of becoming vector registers: 2x slower).
        vectorize_inner(sch, inner, lanes)
    for consumer in epilogue[:-1]:
        sch.set_scope(consumer, 0, "local")
