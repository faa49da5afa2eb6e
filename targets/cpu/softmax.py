"""softmax and log_softmax of float32 whose reductions and exponentials vectorize on the CPU.

TOPI's softmax reduces along the contiguous axis one element at a time (a reduction loop TVM does not
vectorize) and takes ``exp`` from libm, one call per element (``vmath``'s docstring): PP-OCR's
recognizer ends in a softmax over [1, 40, 6625] that took 0.72 ms where onnxruntime takes 0.03 ms
(now 0.11 ms).

Along the last axis the row of ``n`` elements is read as ``n // lanes`` whole vectors: the max and the
sum of exponentials are first reduced per lane (``[rows, lanes]`` partial results, the reduction over
the row's vectors with the lane axis inside it, which the ``generic`` rule vectorizes), then over the
lanes, and the tail of fewer than ``lanes`` elements apart.  ``n`` may be known only at execution
(attention's sequence length): the same stages, each partial result read only where it had an element.
Each exponential (``vmath.exp_f32``) is computed once, kept for the sum and the output. Along another
axis one reduction runs over the whole axis (the ``generic`` rule vectorizes it where the contiguous axis
is a spatial one): only the exponentials change.

log_softmax is x - max - log(sum(exp(x - max))), the logarithm once a row.

Along the last axis every stage is computed row by row (``schedule_rows``): the rows run in parallel,
and each row's max, exponentials, sum and output are computed while the row is in the L1 cache. As stages
of their own over the whole tensor, attention's [6, 1500, 1500] scores (54 MB) went through memory five
times: 26 ms a softmax in Whisper's encoder.
"""

from __future__ import annotations

import tvm
from tvm import relax, s_tir, te, tirx

from nnadapter_tvm.targets.cpu.loops import child_blocks, iter_kinds, loop_extent, vectorize_inner
from nnadapter_tvm.targets.cpu.tiled import NotThisRule
from nnadapter_tvm.targets.cpu.vmath import exp_f32

_F32 = "float32"


def _row_reduce(x: te.Tensor, outer: list, n: object, lanes: int, combine: str, name: str) -> te.Tensor:
    """Per row of ``x`` ([*outer, n]), the max or sum (``combine``) of its elements: whole vectors reduced
    per lane (contiguous loads, the lane axis vectorized by the ``generic`` rule), then the lanes and the
    tail of fewer than ``lanes`` elements.  A reduction over no element leaves its result unwritten in
    TIR (its init sits inside the empty loop): for a static ``n`` only stages with something to reduce
    are built; for one known only at execution (attention's sequence) each result is read only where its
    reduction had an element.  Not a tail of ``lanes`` elements guarded by ``< n``:
    ``te.create_prim_func`` (TVM 0.27) drops a reduction's ``where``."""
    reducer = te.max if combine == "max" else te.sum
    static = isinstance(n, int)
    full = n // lanes if static else tirx.floordiv(n, lanes)
    start = full * lanes

    def over_lanes() -> te.Tensor:
        rv = te.reduce_axis((0, full), f"{name}_v")
        partial = te.compute(
            (*outer, lanes), lambda *i: reducer(x[(*i[:-1], rv * lanes + i[-1])], axis=[rv]), name=f"{name}_lanes"
        )
        rl = te.reduce_axis((0, lanes), f"{name}_l")
        return te.compute(outer, lambda *r: reducer(partial[(*r, rl)], axis=[rl]), name=f"{name}_over_lanes")

    def tail() -> te.Tensor:
        rt = te.reduce_axis((0, n - start), f"{name}_t")
        return te.compute(outer, lambda *r: reducer(x[(*r, start + rt)], axis=[rt]), name=f"{name}_tail")

    if static:
        parts = ([over_lanes()] if full else []) + ([tail()] if n > start else [])
        return parts[0] if len(parts) == 1 else _combine(parts[0], parts[1], outer, combine, name)
    over, rest = over_lanes(), tail()
    both = _combine(over, rest, outer, combine, f"{name}_both")

    def pick(*r):
        return tirx.Select(full > 0, tirx.Select(n > start, both[r], over[r]), rest[r])

    return te.compute(outer, pick, name=name)


def _combine(a: te.Tensor, b: te.Tensor, outer: list, combine: str, name: str) -> te.Tensor:
    if combine == "max":
        return te.compute(outer, lambda *r: tirx.max(a[r], b[r]), name=name)
    return te.compute(outer, lambda *r: a[r] + b[r], name=name)


def _last_axis(x: te.Tensor, lanes: int, log: bool) -> te.Tensor:
    *outer, n = x.shape
    n = int(n) if isinstance(n, tirx.IntImm) else n
    row_max = _row_reduce(x, outer, n, lanes, "max", "softmax_max")
    # Each exponential computed once, kept for the sum and the output (a second exp_f32 per element
    # cost more than reading 4 bytes back from cache).
    shifted = te.compute(x.shape, lambda *i: exp_f32(x[i] - row_max[i[:-1]]), name="softmax_exp")
    row_sum = _row_reduce(shifted, outer, n, lanes, "sum", "softmax_sum")
    if log:
        row_log = te.compute(outer, lambda *r: tirx.log(row_sum[r]), name="softmax_log_sum")
        return te.compute(x.shape, lambda *i: x[i] - row_max[i[:-1]] - row_log[i[:-1]], name="log_softmax_norm")
    inverse = te.compute(outer, lambda *r: tirx.const(1.0, _F32) / row_sum[r], name="softmax_inverse")
    return te.compute(x.shape, lambda *i: shifted[i] * inverse[i[:-1]], name="softmax_norm")


def _other_axis(x: te.Tensor, axis: int, log: bool) -> te.Tensor:
    def reduced(*i):
        return i[:axis] + i[axis + 1 :]

    def full(r, k):
        return (*r[:axis], k, *r[axis:])

    shape = [d for a, d in enumerate(x.shape) if a != axis]
    k1 = te.reduce_axis((0, x.shape[axis]), "k1")
    row_max = te.compute(shape, lambda *r: te.max(x[full(r, k1)], axis=[k1]), name="softmax_max")
    k2 = te.reduce_axis((0, x.shape[axis]), "k2")
    row_sum = te.compute(shape, lambda *r: te.sum(exp_f32(x[full(r, k2)] - row_max[r]), axis=[k2]), name="softmax_sum")
    if log:
        return te.compute(
            x.shape, lambda *i: x[i] - row_max[reduced(*i)] - tirx.log(row_sum[reduced(*i)]), name="log_softmax_norm"
        )
    return te.compute(
        x.shape, lambda *i: exp_f32(x[i] - row_max[reduced(*i)]) / row_sum[reduced(*i)], name="softmax_norm"
    )


def softmax_te(x: te.Tensor, axis: int, lanes: int, log: bool = False) -> te.Tensor:
    """softmax (``log``: log_softmax) of a float32 ``x`` along ``axis`` (see the module docstring)."""
    axis = axis % len(x.shape)
    if axis == len(x.shape) - 1 and not (isinstance(x.shape[axis], tirx.IntImm) and int(x.shape[axis]) == 0):
        return _last_axis(x, max(1, lanes), log)
    # Another axis: one reduction over the whole axis (zero elements only where the output has none),
    # its exponentials vectorized where the contiguous axis is a spatial one.
    return _other_axis(x, axis, log)


#: The stage ``_last_axis`` computes the exponentials in: only a softmax along the last axis has it.
ROW_STAGE = "softmax_exp"
#: The rule's name in a build's schedule report.
RULE = "softmax-rows"


def schedule_rows(sch: s_tir.Schedule, lanes: int) -> None:
    """A function ending in a softmax or log_softmax along the last axis (``_last_axis``), with any
    element-wise producers fused before it: the rows (all axes but the last, fused) in parallel, and under
    each row every stage, producers included, for that row only; the row's loops vectorized (the
    reductions per lane, as the ``generic`` rule does them). Raises ``NotThisRule`` for any other function."""
    blocks = child_blocks(sch)
    if not any(sch.get(b).name_hint == ROW_STAGE for b in blocks):
        raise NotThisRule
    last = blocks[-1]
    outer = sch.get_loops(last)[:-1]
    if not outer or "R" in (iter_kinds(sch, last) or ["R"]):
        raise NotThisRule
    row = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    for blk in reversed(blocks[:-1]):
        sch.compute_at(blk, row, preserve_unit_loops=False)
    # Before the reductions are decomposed (TVM checks them whole). A symbolic row count (batch x heads x
    # queries) is parallel too: ``loops.parallel`` guesses an outermost symbolic loop to be a batch of 1.
    extent = loop_extent(sch, row)
    if extent is None or extent > 1:
        sch.parallel(row)
    for blk in child_blocks(sch):
        below = sch.get_loops(blk)[1:]
        kinds = _kinds(sch, blk, below)
        if kinds == ["S", "R"]:  # per lane over the row's vectors: the lanes inside, vectorized
            lane, over = below
            sch.reorder(over, lane)
            if loop_extent(sch, lane) and loop_extent(sch, lane) >= 2:
                sch.vectorize(lane)
            sch.decompose_reduction(blk, over)
        elif kinds and kinds[-1] == "S":
            _vectorize_row(sch, below[-1], lanes)


def _vectorize_row(sch: s_tir.Schedule, loop, lanes: int) -> None:
    """A row's loop in whole vectors and a scalar tail (1500 = 93 vectors of 16 and 12; a divisor would
    give vectors of 4), partitioned by the schedule (see ``generic._peel_tail`` for why not by a hint)."""
    extent = loop_extent(sch, loop)
    if extent is not None and lanes >= 2 and extent > lanes and extent % lanes:
        try:
            whole, _tail = sch.loop_partition(loop, [extent - extent % lanes, None])
        except s_tir.ScheduleError:
            vectorize_inner(sch, loop, lanes)
            return
        _, inner = sch.split(whole, [None, lanes])
        sch.vectorize(inner)
        return
    vectorize_inner(sch, loop, lanes)


def _kinds(sch: s_tir.Schedule, block, loops: list) -> list[str] | None:
    """'S'/'R' for each of ``loops`` (under the row loop) by the block iterator it binds; None when one binds
    none or an expression."""
    if not loops:
        return []
    realize = sch.get(loops[-1]).body
    if not isinstance(realize, s_tir.SBlockRealize):
        return None
    kinds = []
    for loop in loops:
        var = sch.get(loop).loop_var
        match = [
            iv
            for iv, value in zip(realize.block.iter_vars, realize.iter_values)
            if isinstance(value, tirx.Var) and value.same_as(var)
        ]
        if len(match) != 1:
            return None
        kinds.append("R" if match[0].iter_type == tirx.IterVar.CommReduce else "S")
    return kinds


def legalize_map(lanes: int) -> dict:
    """``LegalizeOps`` rules: float32 softmax and log_softmax as ``softmax_te``, other dtypes TVM's."""

    def rule(op: str, log: bool):
        default = tvm.ir.Op.get(op).get_attr("FLegalize")

        def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
            (x,) = call.args
            shape = getattr(x.ty, "shape", None)
            if getattr(x.ty, "dtype", None) != _F32 or not isinstance(shape, relax.ShapeExpr) or not shape.values:
                return default(bb, call)
            name = "log_softmax" if log else "softmax"
            return bb.call_te(softmax_te, x, int(call.attrs.axis), lanes, log, primfunc_name_hint=name)

        return legalize

    return {op: rule(op, log) for op, log in (("relax.nn.softmax", False), ("relax.nn.log_softmax", True))}
