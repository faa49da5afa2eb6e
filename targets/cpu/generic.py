"""The schedule rule for kernels without a convolution or matrix product: element-wise, broadcast and
injective kernels (transposes, concatenations, pads) and reductions (pools, means, softmax's max/sum).

Producers are inlined where TVM allows; spatial blocks get their outer loops fused and parallel and the
innermost loop vectorized (a transpose is tiled on both axes); a reduction moves its contiguous output
axis inside the reduction loops and vectorizes it (NHWC pools vectorize over channels).
"""

from __future__ import annotations

import contextlib

import tvm
from tvm import s_tir, tirx

from nnadapter_tvm.targets.cpu.compute import PACK
from nnadapter_tvm.targets.cpu.loops import (
    BUFFER_LOAD,
    child_blocks,
    iter_kinds,
    loop_extent,
    parallel,
    partition_safe,
    static_product,
    vectorize_inner,
)
from nnadapter_tvm.targets.cpu.simd import first_divisor, vector_lanes


def schedule_generic(sch: s_tir.Schedule, target: tvm.target.Target, vectorize: bool = True) -> None:
    """Every block of a function without a conv/dense main block.

    Pure copies (pads, transposes, concatenations, broadcasts) are inlined into their consumers, which
    changes no arithmetic.  Other element-wise producers are not inlined (TVM's simplifier would then
    see through stages that an operator keeps apart on purpose, e.g. log1p's ``(1 + e) - 1``): each is
    computed per vector inside its consumer's loop (``compute_at``), so it stays in registers.
    """
    lanes = vector_lanes(target) if vectorize else 1
    for blk in child_blocks(sch)[:-1]:
        kinds = iter_kinds(sch, blk)
        if kinds is not None and "R" not in kinds and _single_load(sch, blk) is not None:
            with contextlib.suppress(Exception):  # a producer TVM cannot inline stays a block of its own
                sch.compute_inline(blk)
    anchors: dict[str, object] = {}
    for blk in reversed(child_blocks(sch)):
        kinds = iter_kinds(sch, blk)
        if kinds is None:
            continue
        name = sch.get(blk).name_hint
        if "R" in kinds:
            schedule_reduction(sch, blk, lanes)
            continue
        consumers = sch.get_consumers(blk)
        anchor = anchors.get(sch.get(consumers[0]).name_hint) if len(consumers) == 1 else None
        if anchor is not None:
            try:
                sch.compute_at(blk, anchor, preserve_unit_loops=True)
                vectorize_inner(sch, sch.get_loops(blk)[-1], lanes)
                anchors[name] = anchor
                continue
            except Exception:  # computed on its own instead
                pass
        anchors[name] = schedule_spatial(sch, blk, lanes)


def schedule_spatial(sch: s_tir.Schedule, block, lanes: int):
    """Element-wise / injective block: outer loops parallel, innermost vectorized.  Returns the loop
    just outside the vectorized one (where a producer can be computed per vector), or None."""
    loops = sch.get_loops(block)
    kinds = iter_kinds(sch, block)
    if not loops or kinds is None or "R" in kinds:
        return None
    total = static_product([loop_extent(sch, lp) for lp in loops])
    if sch.get(block).name_hint.startswith(PACK + "batch_matmul") and loop_extent(sch, loops[-3]) is None:
        # [..., N / nb, K, nb] blocks of a run-time operand with a symbolic N: only the last block is
        # zero-padded; partitioned apart, the others copy whole vectors.
        sch.vectorize(loops[-1])
        if partition_safe(sch, loops[-3], guard=False):  # the zero padding past N: one bound
            sch.annotate(loops[-3], "pragma_loop_partition_hint", 1)
        parallel(sch, list(loops[:-3]), work=total)
        return None
    if _transpose_tile(sch, block, lanes, total):
        return None
    symbolic_inner = loop_extent(sch, loops[-1]) is None
    vectorized = vectorize_inner(sch, loops[-1], lanes)
    loops = sch.get_loops(block)
    if vectorized and symbolic_inner:
        # The vector loop's outer part (whole vectors + tail, partitioned) stays out of the parallel
        # loop.  No producer is computed in it: its buffer would be a whole row of symbolic size (a
        # heap allocation per row), so producers run as their own loop nests.
        parallel(sch, list(loops[:-2]), work=total)
        return None
    if symbolic_inner and lanes >= 2 and not vectorized:
        # Left scalar by ``vectorize_inner`` (it bounds its index: a concatenation's switch), maybe
        # with a partition hint: it stays a loop of its own, so that it is partitioned (per row) into
        # plain copies LLVM vectorizes.
        parallel(sch, list(loops[:-1]), work=total)
        return None
    if not vectorized and _peel_tail(sch, loops, lanes, total):
        return None
    outer = list(loops[:-1] if vectorized else loops)
    fused = parallel(sch, outer, work=total)
    if not vectorized:
        return None
    if fused is not None:
        return fused
    return sch.get_loops(block)[-2] if len(sch.get_loops(block)) >= 2 else None


def _peel_tail(sch: s_tir.Schedule, loops: list, lanes: int, total: int | None) -> bool:
    """An innermost static extent with no divisor among the vector sizes ``vectorize_inner`` tries (6625
    classes; 8210 characters with AVX-512, where 2 is not among them): the innermost loop partitioned
    into whole vectors (vectorized) and the few elements left (scalar), the outer loops parallel, or the
    whole vectors' loop where the outer ones are too few; False where that does not apply.

    The partition is the schedule's ``loop_partition``, not TVM's LoopPartition pass behind a
    ``pragma_loop_partition_hint`` (as for a symbolic extent, ``loops.vectorize_inner``): on a static
    loop NarrowDataType narrows the loop's variable to int32 before LoopPartition runs and leaves the
    hint naming the old variable, so the hint is ignored and every vector carries the split's guard
    (scalarized: a softmax over 6625 classes 3x slower)."""
    extent = loop_extent(sch, loops[-1])
    if lanes < 2 or extent is None or extent <= 2 * lanes or extent % lanes == 0:
        return False
    try:
        whole, _tail = sch.loop_partition(loops[-1], [extent - extent % lanes, None])
    except s_tir.ScheduleError:  # left unchanged: the loop stays scalar
        return False
    vectors, inner = sch.split(whole, [None, lanes])
    sch.vectorize(inner)
    if parallel(sch, list(loops[:-1]), work=total) is None:
        parallel(sch, [vectors], work=total)  # [1, 100003]: the vectors' loop, the tail after it
    return True


def _single_load(sch: s_tir.Schedule, block):
    """The one buffer load a block's value is (a pure copy: transpose, reshape, slice, ...), or None."""
    stmt = sch.get(block)
    body = stmt.body
    if not isinstance(body, tirx.BufferStore) or len(stmt.reads) != 1:
        return None
    value = body.value
    return value if isinstance(value, BUFFER_LOAD) else None


def _transpose_tile(sch: s_tir.Schedule, block, lanes: int, total: int | None) -> bool:
    """A copy whose innermost output axis is not the input's innermost axis (a transpose, such as the
    NCHW <-> NHWC conversions at a network's edges): both axes tiled so that reads and writes stay in
    cache lines, tiles in parallel."""
    load = _single_load(sch, block)
    stmt = sch.get(block)
    if load is None or not load.indices or not stmt.iter_vars:
        return False  # a copy of a scalar (a rank-0 read) or into one: nothing to tile
    loops = sch.get_loops(block)
    iter_vars = [iv.var for iv in stmt.iter_vars]
    last_read = load.indices[-1]
    if not isinstance(last_read, tirx.Var) or last_read.same_as(iter_vars[-1]):
        return False
    position = next((i for i, v in enumerate(iter_vars) if v.same_as(last_read)), None)
    if position is None:
        return False
    a, b = loops[position], loops[-1]
    ea, eb = loop_extent(sch, a), loop_extent(sch, b)
    if ea is None and eb is None:
        return False
    symbolic = a if ea is None else b
    if (ea is None or eb is None) and not partition_safe(sch, symbolic, guard=True):
        return False
    if (ea is not None and ea < lanes) or (eb is not None and eb < lanes):
        return False
    # A symbolic axis is split by a whole vector; its outer loop stays serial, with a partition hint
    # (whole tiles, then the guarded tail: see ``loops.vectorize_inner``).
    ta = lanes if ea is None else first_divisor(ea, [lanes, lanes // 2])
    tb = lanes if eb is None else first_divisor(eb, [lanes, lanes // 2])
    if ta < 4 or tb < 4:
        return False
    others = [lp for i, lp in enumerate(loops) if i not in (position, len(loops) - 1)]
    ao, ai = sch.split(a, [None, ta])
    bo, bi = sch.split(b, [None, tb])
    sch.reorder(*others, ao, bo, ai, bi)
    sch.unroll(ai)
    sch.vectorize(bi)
    if ea is None or eb is None:
        symbolic_outer = ao if ea is None else bo
        sch.annotate(symbolic_outer, "pragma_loop_partition_hint", 1)
        parallel(sch, [*others, ao] if eb is None else others, work=total)
    else:
        parallel(sch, [*others, ao, bo], work=total)
    return True


def schedule_reduction(sch: s_tir.Schedule, block, lanes: int) -> None:
    """Reduction block: the innermost spatial axis moves inside the reduction and is vectorized when it
    is the last (contiguous) output axis; the outer spatial loops run in parallel."""
    kinds = iter_kinds(sch, block)
    if kinds is None:
        return
    loops = sch.get_loops(block)
    spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
    reduce = [lp for lp, k in zip(loops, kinds) if k == "R"]
    total = static_product([loop_extent(sch, lp) for lp in spatial])
    work = static_product([loop_extent(sch, lp) for lp in loops])
    last_spatial_is_last_axis = kinds and kinds.index("R") == len(spatial) if "R" in kinds else True
    inner_extent = loop_extent(sch, spatial[-1]) if spatial else None
    if spatial and last_spatial_is_last_axis and inner_extent is not None and inner_extent >= 4:
        inner = spatial[-1]
        sch.reorder(*spatial[:-1], *reduce, inner)
        vectorize_inner(sch, inner, lanes)
        parallel(sch, spatial[:-1], work=work if total else None)
        sch.decompose_reduction(block, reduce[0])
    elif (
        spatial
        and reduce
        and last_spatial_is_last_axis
        and inner_extent is None
        and lanes >= 2
        and partition_safe(sch, spatial[-1], guard=True)  # e.g. not a window padded along the width
    ):
        # A symbolic contiguous axis (a width): whole vectors of it run inside the reduction, the
        # tail apart (partition hint, see ``loops.vectorize_inner``).
        outer, inner = sch.split(spatial[-1], [None, lanes])
        sch.reorder(*spatial[:-1], outer, *reduce, inner)
        sch.vectorize(inner)
        sch.annotate(outer, "pragma_loop_partition_hint", 1)
        parallel(sch, spatial[:-1], work=work)
        sch.decompose_reduction(block, reduce[0])
    elif reduce and kinds[-1] == "R" and kinds.index("R") == len(spatial) and lanes >= 2:
        _reduce_in_lanes(sch, block, spatial, reduce, lanes, work)
    else:
        parallel(sch, spatial, work=work)


#: A reduction of every element (no output axis) of at least this many elements is split into this many
#: chunks reduced in parallel (a parallel launch costs ~20 us on 2 threads: below it one thread is faster).
CHUNKED_MIN_ELEMENTS, CHUNKS = 1 << 16, 16


def _reduce_in_lanes(sch: s_tir.Schedule, block, spatial: list, reduce: list, lanes: int, work: int | None) -> None:
    """A reduction along the contiguous axis (the output's axes outermost, the reduced ones after: a row
    sum, or the max of a whole tensor as DynamicQuantizeLinear takes it): the reduced loops fused and
    reduced per lane (``rfactor``: partial results of one vector, updated a vector of input at a time),
    then over the lanes.  Left to itself TVM reduced one scalar at a time: 144 us for the max of
    [128, 768] (1.5 ns an element), 15 us per lane.  A symbolic length runs whole vectors and the tail
    apart (partition hint, as ``loops.vectorize_inner``); a large static reduction of every element runs
    in ``CHUNKS`` parallel chunks first."""
    # The static reduced loops inside the symbolic ones, fused: fusing a symbolic loop too would index
    # each element by divisions by a symbolic extent (a gather per vector: [B, S, 768] took 570 us).
    extents = [loop_extent(sch, lp) for lp in reduce]
    suffix = len(reduce)
    while suffix > 0 and extents[suffix - 1] is not None:
        suffix -= 1
    static = static_product(extents[suffix:]) if suffix < len(reduce) else None
    kept = suffix if static is not None and static >= 2 * lanes else 0
    fused = reduce[kept:]
    r = sch.fuse(*fused) if len(fused) > 1 else fused[0]
    extent = loop_extent(sch, r)
    if extent is not None and extent < 2 * lanes:
        parallel(sch, spatial, work=work)
        return
    if not spatial and extent is not None and extent >= CHUNKED_MIN_ELEMENTS and extent % (CHUNKS * lanes) == 0:
        chunk, r = sch.split(r, [CHUNKS, None])
        block = _rfactor(sch, chunk, 0)  # the chunks' partial results: an output axis of their own
        if block is None:
            return
        spatial, (r,) = sch.get_loops(block)[:1], sch.get_loops(block)[1:]
        sch.parallel(spatial[0])
    else:
        parallel(sch, spatial, work=work)
    _, lane = sch.split(r, [None, lanes])
    rf = _rfactor(sch, lane, len(spatial))
    if rf is None:
        return
    loops = sch.get_loops(rf)
    outer, lane = loops[-2:]
    sch.vectorize(lane)
    if extent is None:
        sch.annotate(outer, "pragma_loop_partition_hint", 1)
    sch.decompose_reduction(rf, loops[-2 - kept])  # above the symbolic reduced loops kept apart


def _rfactor(sch: s_tir.Schedule, loop, axis: int):
    """``sch.rfactor(loop, axis)``, or None where the block's reducer is not one TVM can factor (a max that
    keeps NaN, ``reduce.py``'s ``_float_max``, is a select TVM does not recognise): the reduction then
    stays one scalar at a time, its loops as they are (a failed primitive leaves the schedule unchanged)."""
    try:
        return sch.rfactor(loop, axis)
    except s_tir.ScheduleError:
        return None
