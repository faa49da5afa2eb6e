"""Loop-level steps the schedule rules share: reading extents and iterator kinds, vectorizing an inner
loop (whole vectors and a tail when its extent is symbolic), and fusing outer loops into one parallel
loop when the work is worth the threads."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from nnadapter_tvm.targets.cpu.simd import first_divisor

#: The class of a TIR buffer load (``tirx.BufferLoad`` builds one; this is what ``isinstance`` needs).
BUFFER_LOAD = type(tirx.BufferLoad(tirx.decl_buffer((1,)), [0]))

#: Below this many output elements a kernel stays on one thread (a parallel launch costs microseconds).
PARALLEL_MIN_ELEMENTS = 4096

#: At most this many symbolic loops are fused into one parallel loop (the ones after stay serial inside
#: it): fusing three (batch, height, width) made TVM's region analysis fail on padded copies.
MAX_SYMBOLIC_FUSED = 2

#: What a symbolic extent is taken to be when deciding whether a loop nest is worth the threads: an
#: outermost one (a batch) 1, since inference usually runs one sample; others (rows, columns, sequence
#: length) this many.
SYMBOLIC_GUESS = 64

#: The least work (elements, symbolic extents guessed) each iteration of a fused symbolic loop must do.
MIN_FUSED_WORK = 64

#: Static iterations before a symbolic loop that make a parallel loop of their own (see ``parallel``):
#: 16 threads, each within 1/32 of the others' share.
MIN_STATIC_PARALLEL = 32


def child_blocks(sch: s_tir.Schedule) -> list:
    """The blocks directly under the function's root block, in order."""
    return sch.get_child_blocks(sch.get_sblock(sch.mod["main"].body.block.name_hint))


def loop_extent(sch: s_tir.Schedule, loop) -> int | None:
    """``loop``'s extent, None when it is symbolic."""
    value = sch.get(loop).extent
    return int(value.value) if isinstance(value, tirx.IntImm) else None


def static_product(extents: list[int | None]) -> int | None:
    """The product of ``extents``, None when one is symbolic (None)."""
    return None if any(e is None for e in extents) else math.prod(extents)


def iter_kinds(sch: s_tir.Schedule, block) -> list[str] | None:
    """'S'/'R' per loop of ``block`` when each of its loops binds exactly one block iterator, in order."""
    loops = sch.get_loops(block)
    realize = sch.get(loops[-1]).body if loops else None
    if not isinstance(realize, s_tir.SBlockRealize):
        return None
    stmt = realize.block
    if len(stmt.iter_vars) != len(loops):
        return None
    kinds = []
    for loop, iv, value in zip(loops, stmt.iter_vars, realize.iter_values):
        if not (isinstance(value, tirx.Var) and value.same_as(sch.get(loop).loop_var)):
            return None
        if iv.iter_type == tirx.IterVar.DataPar:
            kinds.append("S")
        elif iv.iter_type == tirx.IterVar.CommReduce:
            kinds.append("R")
        else:
            return None
    return kinds


def _bounds(cond) -> list:
    """The comparisons a condition is made of (``a and b`` -> both, ``not a`` -> a)."""
    if isinstance(cond, (tirx.And, tirx.Or)):
        return _bounds(cond.a) + _bounds(cond.b)
    if isinstance(cond, tirx.Not):
        return _bounds(cond.a)
    if isinstance(cond, (tirx.EQ, tirx.NE)):
        return [cond, cond]  # an interval of one point: a bound on each side
    return [cond]


def _indexes(expr, variables: list) -> bool:
    """Whether ``expr`` uses one of ``variables`` outside buffer loads: a comparison TVM can solve for
    the variable (a load's value is unknown to it, so ``x[i] > 0`` bounds nothing)."""
    found = []

    def on_load(_node):
        return tvm_ffi.WalkResult.SKIP

    def on_var(node):
        if any(node.same_as(v) for v in variables):
            found.append(node)

    tvm_ffi.structural_walk(expr, [(BUFFER_LOAD, on_load), (tirx.Var, on_var)], order="pre")
    return bool(found)


def index_bounds(sch: s_tir.Schedule, loop) -> int:
    """How many comparisons of ``loop``'s index (directly or through the block iterators bound to it)
    the conditions under it hold: block predicates, ``if`` statements, ``if_then_else`` and ``Select``
    (a concatenation's switch between inputs, a pad's two edges, a pool's padded window)."""
    variables, conditions = _index_conditions(sch, loop)
    return sum(_indexes(bound, variables) for cond in conditions for bound in _bounds(cond))


def _index_conditions(sch: s_tir.Schedule, loop) -> tuple[list, list]:
    """``loop``'s index with the block iterators bound to it, and the conditions under the loop."""
    variables = [sch.get(loop).loop_var]
    conditions: list = []

    def on_realize(node):
        for iv, value in zip(node.block.iter_vars, node.iter_values):
            if _indexes(value, variables):
                variables.append(iv.var)
        conditions.append(node.predicate)

    def on_call(node):
        if isinstance(node.op, tvm.ir.Op) and node.op.name.endswith("if_then_else"):
            conditions.append(node.args[0])

    def on_select(node):
        conditions.append(node.condition)

    tvm_ffi.structural_walk(
        sch.get(loop).body,
        [(s_tir.SBlockRealize, on_realize), (tvm.ir.expr.Call, on_call), ((tirx.Select, tirx.IfThenElse), on_select)],
        order="pre",
    )
    return variables, conditions


def _clamped(expr) -> bool:
    """Whether ``expr`` holds a ``max`` or a select: an extent clamped at 0 (``max(E, 0)``, the length of
    a slice that may come out empty) whose bound TVM's simplifier may replace by ``E`` itself."""
    found = []

    def on_call(node):
        if isinstance(node.op, tvm.ir.Op) and node.op.name.endswith("if_then_else"):
            found.append(node)

    tvm_ffi.structural_walk(expr, [((tirx.Max, tirx.Select), found.append), (tvm.ir.expr.Call, on_call)], order="pre")
    return bool(found)


def partition_safe(sch: s_tir.Schedule, loop, guard: bool) -> bool:
    """Whether ``loop`` may carry ``pragma_loop_partition_hint``: its conditions bound its index once at
    most, counting the guard of a split by a factor that need not divide it (``guard``).

    With two bounds or more, TVM's LoopPartition (0.27) splits the loop into a part before the interval
    where every condition is known, that interval and a part after it, and starts the part after at the
    interval's end even where the interval is empty: then that part re-runs iterations of the part
    before, simplified as if every condition held.  A concatenation of ``[N]`` and ``[3]`` split by 16
    lanes (the switch ``v >= N`` and the guard ``v < N + 3``) rewrote the first input's elements of the
    last vector with the second input read at negative indices.

    Nor where the loop's extent or a bound of its index is clamped (``_clamped``): for ``i < max(E, 0)``
    TVM (0.27) simplifies the condition to ``i < E`` (right for ``i >= 0``), and LoopPartition then ends
    the interval where it holds at ``E``, or ``floor(E / lanes)`` whole vectors, without clamping that at
    the loop's start: where ``E`` is negative at execution (an empty slice, x[-1:3] of 5 elements: E = -1)
    the part after the interval starts before 0 and runs once, writing a vector before the zero-size
    output (heap corruption: "munmap_chunk(): invalid pointer")."""
    variables, conditions = _index_conditions(sch, loop)
    if _clamped(sch.get(loop).extent) or any(_clamped(c) for c in conditions if _indexes(c, variables)):
        return False
    bounds = sum(_indexes(bound, variables) for cond in conditions for bound in _bounds(cond))
    return bounds + (1 if guard else 0) <= 1


def vectorize_inner(sch: s_tir.Schedule, loop, lanes: int) -> bool:
    """Vectorize ``loop`` (split by a vector-sized divisor when longer); False when it cannot pay, or
    when its extent is symbolic and its body compares the index with a bound of its own (a vector
    loop over a symbolic extent is only fast partitioned, which such a body makes unsafe:
    ``partition_safe``)."""
    extent = loop_extent(sch, loop)
    if extent is None and lanes >= 2:
        if not partition_safe(sch, loop, guard=True):
            # Not split: a vector if_then_else with a varying condition is scalarized anyway.  With
            # one bound (a concatenation of two inputs) the loop is still partitioned, unsplit, into
            # one plain copy per input, which LLVM vectorizes (4x faster than the old split loop on
            # [N] ++ [3]; [64, N] ++ [64, N] on axis 1 at N = 1000: 36 us, was 23 us, 255 us unpartitioned).
            if partition_safe(sch, loop, guard=False):
                sch.annotate(loop, "pragma_loop_partition_hint", 1)
            return False
        # A symbolic extent: whole vectors, then a scalar tail.  The partition hint makes TVM's
        # LoopPartition emit the two as separate loops; without it the vectorized loop carries the
        # split's guard and is scalarized element by element (20-50x slower than the static loop).
        outer, inner = sch.split(loop, [None, lanes])
        sch.vectorize(inner)
        sch.annotate(outer, "pragma_loop_partition_hint", 1)
        return True
    if extent is None or extent < 2 or lanes < 2:
        return False
    if extent <= 2 * lanes:
        sch.vectorize(loop)
        return True
    factor = first_divisor(extent, [lanes, 2 * lanes, lanes // 2, lanes // 4]) if extent % lanes else lanes
    if factor < 2:
        return False
    _, inner = sch.split(loop, [None, factor])
    sch.vectorize(inner)
    return True


def _guess_extent(sch: s_tir.Schedule, loop) -> int:
    extent = loop_extent(sch, loop)
    if extent is not None:
        return extent
    parent = sch.get_sref(loop).parent
    outermost = parent is None or not isinstance(parent.stmt, tirx.For)
    return 1 if outermost else SYMBOLIC_GUESS


def _inner_work(sch: s_tir.Schedule, loop) -> int:
    """Iterations of the loops nested singly inside ``loop`` (1 when its body is not a loop)."""
    work, body = 1, sch.get(loop).body
    while isinstance(body, tirx.For):
        extent = body.extent
        work *= int(extent.value) if isinstance(extent, tirx.IntImm) else SYMBOLIC_GUESS
        body = body.body
    return work


def _guess_work(sch: s_tir.Schedule, loops: list) -> int:
    """The iterations of ``loops`` and of the loops nested singly inside the last one, symbolic extents
    guessed (``_guess_extent``)."""
    return math.prod(_guess_extent(sch, lp) for lp in loops) * _inner_work(sch, loops[-1])


def _provably_nonnegative(sch: s_tir.Schedule, extent) -> bool:
    """Whether TVM's lowering can prove ``extent`` >= 0, knowing what its passes know: that a buffer
    parameter's dim that is a plain variable is non-negative (``MarkBufferParamShapes``)."""
    analyzer = tvm.sym.Analyzer()
    for param in sch.mod["main"].params:
        for dim in getattr(param.ty, "shape", None) or ():
            if isinstance(dim, tirx.Var):
                analyzer.update(dim, tvm.sym.ConstIntBound(0, tvm.sym.ConstIntBound.POS_INF), override=True)
    return bool(analyzer.can_prove(extent >= 0))


def parallel(sch: s_tir.Schedule, loops: list, min_elements: int = PARALLEL_MIN_ELEMENTS, work: int | None = None):
    """Fuse ``loops`` and run them in parallel when the work is worth the threads; returns the fused loop
    (None when they stay serial)."""
    if not loops:
        return None
    extents = [loop_extent(sch, lp) for lp in loops]
    symbolic = [i for i, e in enumerate(extents) if e is None]
    if len(symbolic) > 1:
        # Fusing symbolic loops makes each iteration divide by a symbolic extent to recover its
        # indices: worth it over a loop of work (batch x rows), not over single elements.
        second = symbolic[1]
        keep = second + 1 if _inner_work(sch, loops[second]) >= MIN_FUSED_WORK else second
        keep = min(keep, symbolic[MAX_SYMBOLIC_FUSED - 1] + 1 if len(symbolic) > MAX_SYMBOLIC_FUSED else keep)
        loops, extents = loops[:keep], extents[:keep]
    middle = [i for i, e in enumerate(extents) if e is None and i + 1 < len(loops) and any(x != 1 for x in extents[:i])]
    if middle:
        # A symbolic loop between fused loops ends the fused loop: recovering [18, w + 2, 4] from one
        # index of extent 72 * w + 144 failed to lower in TVM 0.27 (IterMapRewriter could not prove
        # (4 * w + 8) * 4 divisible by 4 * w + 8), and the kernel was left to naive loops (90x slower
        # with the width alone unknown).  Outermost ([n, 18, 4]) or innermost ([18, w]) it lowers.
        loops, extents = loops[: middle[0] + 1], extents[: middle[0] + 1]
    unsigned = [
        i
        for i, e in enumerate(extents)
        if e is None
        and (static_product(extents[:i]) or 0) >= MIN_STATIC_PARALLEL
        and not _provably_nonnegative(sch, sch.get(loops[i]).extent)
    ]
    if unsigned:
        # Fused after another loop, a symbolic loop's extent divides the fused index.  Where TVM cannot
        # prove that extent non-negative (rows (w - 1) // 8 + 1 of a width w it knows nothing of: it
        # marks only plain variables among the buffers' dims), the floor division stays a truncated
        # division with sign fixes, and the buffer compaction may keep max(0, ...) in every offset of
        # the register tile: the accumulators were indexed at run time, so LLVM kept them in memory
        # (a [(w - 1) // 8 + 1, 1024] x [1024, 8210] product 2.4x its kernel with plain rows m).  Only
        # where the static loops before it are parallel enough alone: a convolution's [n, h] stays
        # fused (its tile is indexed by the loops inside; PP-OCR's ran 1.5x slower on one thread).
        loops, extents = loops[: unsigned[0]], extents[: unsigned[0]]
    total = work if work is not None else static_product(extents)
    if total is None and min_elements > 1:
        total = _guess_work(sch, loops)
    if total is not None and total < min_elements:
        return None
    outer = static_product([_guess_extent(sch, lp) for lp in loops])
    if outer < 2:
        return None
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.parallel(fused)
    return fused
