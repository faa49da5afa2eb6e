"""Extensions whose output size depends on the data: NONZERO, COMPRESS, UNIQUE and ONNX's
NonMaxSuppression (ALL_CLASS_NON_MAX_SUPPRESSION), codes 2300-2399.

Each counts its output rows inside the graph (a reduction, or a small kernel), binds the count as a
symbolic size (``relax.op.tensor_to_shape`` + ``match_cast``, as ``OpArgs.runtime_shape`` does), and
only then fills outputs of exactly that size, so no padded buffer is ever cut.  The filling kernels are
sequential TIR (a running position is the prefix sum of the mask); TVM 0.27's ``relax.op.nonzero`` and
``relax.op.unique`` are not legalized for llvm (they lower to host callbacks), and
``relax.op.vision.all_class_non_max_suppression`` takes the per-class cap as a compile-time constant,
knows only the corner box format and pads its result, so none of them is used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.indexing import _as_i64
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision as P

I64 = "int64"
INT64 = (P.INT64,)


def _ir():
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    return IRBuilder, T


def _local(T, dtype: str):
    return T.buffer_proxy(T.alloc_buffer((1,), dtype, scope="local"))


def _bind_count(args: OpArgs, count: relax.Expr, name: str, at_most: object) -> tirx.Var:
    """``count`` (an int64 tensor of one element, computed in the graph) as a new symbolic size, checked
    at execution to lie in [0, ``at_most``] (the elements it counts): a count out of that range (a
    kernel that left it unset) fails naming the operation, where an allocation of that size would
    have thrown std::bad_alloc or written past a buffer."""
    n = tirx.Var(name, I64)
    shape = args.emit(relax.op.tensor_to_shape(relax.op.reshape(count, [1])))
    args.match_cast(shape, [n])
    in_range = tirx.And(n >= tirx.const(0, I64), n <= _as_i64(at_most))
    args.require_dims(in_range, n, f"counted {name} outside [0, {at_most}] (the elements counted)")
    return n


def _set_mask(x: te.Tensor) -> te.Tensor:
    """1 where x is nonzero (NaN included, as numpy's nonzero), else 0, as int64.  NaN is tested
    explicitly: TVM's != compiles to LLVM's ordered compare, false for NaN."""
    dtype = str(x.dtype)

    def is_set(*i):
        value = x(*i)
        if dtype == "bool":
            return value
        differs = value != tirx.const(0, dtype)
        return tirx.any(differs, tirx.isnan(value)) if dtype.startswith("float") else differs

    return te.compute(x.shape, lambda *i: tirx.Select(is_set(*i), tirx.const(1, I64), tirx.const(0, I64)), name="set")


def _nonzero_kernel(mask: te.Tensor, n: tirx.Var) -> te.Tensor:
    """The coordinates [rank, n] of the mask's ones in row-major order (n: their count, bound before
    from the same mask, so the writes stay inside; the guard keeps them there regardless)."""
    rank = len(mask.shape)

    def body(ins, outs):
        IRBuilder, T = _ir()
        with IRBuilder() as ib, T.serial(0, 1):
            data, out = T.buffer_proxy(ins[0]), T.buffer_proxy(outs[0])
            pos = _local(T, I64)
            pos[0] = tirx.const(0, I64)
            with contextlib.ExitStack() as loops:
                index = [loops.enter_context(T.serial(0, d)) for d in ins[0].shape]
                with T.If(tirx.all(data[tuple(index)] == 1, pos[0] < n)), T.Then():
                    for d in range(rank):
                        out[d, pos[0]] = index[d].astype(I64)
                    pos[0] = pos[0] + 1
        return ib.get()

    return te.extern([(rank, n)], [mask], body, dtype=[I64], name="nonzero")


def _nonzero(args: OpArgs, x: relax.Expr, name: str) -> relax.Expr:
    """NONZERO's [rank, n] coordinates: the mask is computed once, its sum bound as n, then read by the
    kernel that writes the coordinates at the mask's running prefix count."""
    mask = args.emit_te(_set_mask, x)
    n = _bind_count(args, args.emit(relax.op.sum(mask)), name, math.prod(args.shape(mask)))
    return args.emit_te(_nonzero_kernel, mask, n)


@converter(O.NONZERO)
def nonzero(args: OpArgs) -> relax.Expr:
    """input (any type, rank >= 1) -> output [rank, n] (INT64): the indices of the nonzero elements (NaN
    and true count), one column per element in row-major order; n is known only at execution.

    The count is a reduction in the graph bound as a symbolic size before a sequential kernel writes
    the coordinates at the running prefix count.

    Reference: ONNX NonZero (numpy.nonzero).
    """
    x = args.raw_tensor("input")
    if not args.shape(x):
        args.fail("must have rank >= 1 (ONNX NonZero of a scalar is not defined by numpy.nonzero)", "input")
    return _nonzero(args, x, "nonzero_count")


@converter(O.COMPRESS)
def compress(args: OpArgs) -> relax.Expr:
    """input, condition (1-D BOOL8), axis (optional: absent flattens the input) -> output: the slices of
    input along axis whose condition is true, in order; a condition shorter than the axis selects none
    of the rest.  The output's size along axis is known only at execution.

    Reference: ONNX Compress (numpy.compress).
    """
    x, cond = args.raw_tensor("input"), args.raw_tensor("condition")
    shape = args.shape(x)
    if not args.has("axis"):
        x = args.emit(relax.op.reshape(x, [-1]))
        shape = args.shape(x)
    axis = args.axis("axis", len(shape), 0) if args.has("axis") else 0
    if len(args.shape(cond)) != 1:
        args.fail(f"must be 1-D, got shape {args.shape(cond)}", "condition")
    length, dim = args.shape(cond)[0], shape[axis]
    if isinstance(length, int) and isinstance(dim, int):
        if length > dim:
            # numpy.compress reads past the axis only to fail: a true there is out of range.
            rest = relax.op.strided_slice(cond, [0], [dim], [length])
            past = args.emit(relax.op.reshape(relax.op.sum(relax.op.astype(rest, I64)), [1]))
            message = f"selects {{value}} slices past the input's axis {axis} of size {dim} (length {length})"
            args.check_value(past, lambda v: v == 0, message, "condition")
            cond = args.emit(relax.op.strided_slice(cond, [0], [0], [dim]))
    else:
        message = f"length {length} exceeds the input's axis {axis} of size {dim}"
        args.require_dims(
            tirx.const(length, "int64") <= dim if isinstance(length, int) else length <= dim,
            length,
            message,
            "condition",
        )
    indices = _nonzero(args, cond, "compress_count")
    indices = args.emit(relax.op.squeeze(indices, [0]))
    return relax.op.take(x, indices, axis=axis, mode="clip")


# -- UNIQUE ---------------------------------------------------------------------------


def _differ(a: tirx.PrimExpr, b: tirx.PrimExpr, dtype: str) -> tirx.PrimExpr:
    """a differs from b, NaN equal to NaN (numpy.unique's equal_nan, its default, without axis).  Not
    written as not(a == b): TVM simplifies that to a != b, which LLVM compiles ordered (false for NaN)."""
    if dtype.startswith("float"):
        # (isnan(a) != isnan(b) compiles to a float compare of the two booleans: LLVM rejects it.)
        nan_a, nan_b = tirx.isnan(a), tirx.isnan(b)
        return tirx.any(a < b, a > b, tirx.all(nan_a, tirx.Not(nan_b)), tirx.all(tirx.Not(nan_a), nan_b))
    return a != b


def _less(a: tirx.PrimExpr, b: tirx.PrimExpr, dtype: str) -> tirx.PrimExpr:
    """a < b with NaN above every number (numpy's sort order)."""
    if dtype.startswith("float"):
        return tirx.any(a < b, tirx.all(tirx.Not(tirx.isnan(a)), tirx.isnan(b)))
    return a < b


def _first_kernel(x: te.Tensor) -> te.Tensor:
    """first[i]: the smallest j with row j equal to row i, for x [N, K] (O(N^2 K)).  Elements compare
    with == (NaN never equal), as numpy.unique with an axis compares its rows."""

    def body(ins, outs):
        IRBuilder, T = _ir()
        rows, width = ins[0].shape
        with IRBuilder() as ib, T.serial(0, 1):
            data, first = T.buffer_proxy(ins[0]), T.buffer_proxy(outs[0])
            same = _local(T, I64)
            with T.serial(0, rows) as i:
                first[i] = i
                with T.serial(0, i) as jr:
                    j = i - 1 - jr  # backwards, so the last equal row met is the first one
                    same[0] = tirx.const(1, I64)
                    with T.serial(0, width) as k:
                        same[0] = tirx.Select(data[j, k] == data[i, k], same[0], tirx.const(0, I64))
                    with T.If(same[0] == 1), T.Then():
                        first[i] = j
        return ib.get()

    return te.extern([(x.shape[0],)], [x], body, dtype=[I64], name="unique_first")


def _unique_rows_kernel(x: te.Tensor, first: te.Tensor, u: tirx.Var, *, ordered: bool) -> list[te.Tensor]:
    """From first[N]: idx[u] (first occurrence of each unique row, in sorted or first-seen order),
    inverse[N], counts[u]; slot[N] is scratch."""

    def body(ins, outs):
        IRBuilder, T = _ir()
        rows, width = ins[0].shape
        with IRBuilder() as ib, T.serial(0, 1):
            data, first_ = T.buffer_proxy(ins[0]), T.buffer_proxy(ins[1])
            idx, inverse, counts, slot = (T.buffer_proxy(b) for b in outs)
            seen, rank, state = _local(T, I64), _local(T, I64), _local(T, I64)
            seen[0] = tirx.const(0, I64)
            with T.serial(0, rows) as i, T.If(first_[i] == i), T.Then():
                if ordered:
                    # Rank among the unique rows: how many are lexicographically smaller.
                    rank[0] = tirx.const(0, I64)
                    with T.serial(0, rows) as j, T.If(first_[j] == j), T.Then():
                        state[0] = tirx.const(0, I64)  # 0 equal so far, -1 row j smaller, 1 larger
                        with T.serial(0, width) as k, T.If(state[0] == 0), T.Then():
                            a, b = data[j, k], data[i, k]
                            larger = tirx.Select(_less(b, a, str(ins[0].dtype)), 1, 0).astype(I64)
                            state[0] = tirx.Select(_less(a, b, str(ins[0].dtype)), tirx.const(-1, I64), larger)
                        # Rows equal in this order but not ==-equal (NaNs) rank by index, as distinct values.
                        before = tirx.any(state[0] == -1, tirx.all(state[0] == 0, j < i))
                        rank[0] = rank[0] + before.astype(I64)
                else:
                    rank[0] = seen[0]
                idx[rank[0]] = i
                counts[rank[0]] = tirx.const(0, I64)
                slot[i] = rank[0]
                seen[0] = seen[0] + 1
            with T.serial(0, rows) as i:
                r = slot[first_[i]]
                inverse[i] = r
                counts[r] = counts[r] + 1
        return ib.get()

    rows = x.shape[0]
    shapes = [(u,), (rows,), (u,), (rows,)]
    return te.extern(shapes, [x, first], body, dtype=[I64] * 4, name="unique_rows")


def _run_starts(v: te.Tensor) -> te.Tensor:
    """1 where sorted v[i] starts a run of equal values (NaNs one run), else 0."""
    return te.compute(
        v.shape,
        lambda i: tirx.Select(
            tirx.any(i == 0, _differ(v[i], v[tirx.max(i, 1) - 1], str(v.dtype))),
            tirx.const(1, I64),
            tirx.const(0, I64),
        ),
        name="unique_run_starts",
    )


def _unique_sorted_kernel(order: te.Tensor, starts: te.Tensor, u: tirx.Var, *, ordered: bool) -> list[te.Tensor]:
    """From a stable ascending order [N] and its run starts: idx[u], inverse[N], counts[u] (O(N)).
    Scratch: the runs' first indices and counts in sorted order, each run's place, each element's run."""

    def body(ins, outs):
        IRBuilder, T = _ir()
        n = ins[0].shape[0]
        with IRBuilder() as ib, T.serial(0, 1):
            order_, starts_ = T.buffer_proxy(ins[0]), T.buffer_proxy(ins[1])
            idx, inverse, counts, first, runs, place, run_of = (T.buffer_proxy(b) for b in outs)
            run, seen = _local(T, I64), _local(T, I64)
            run[0] = tirx.const(-1, I64)
            with T.serial(0, n) as p:
                with T.If(starts_[p] == 1), T.Then():
                    run[0] = run[0] + 1
                    first[run[0]] = order_[p]  # stable: the run's smallest index
                    runs[run[0]] = tirx.const(0, I64)
                run_of[order_[p]] = run[0]
                runs[run[0]] = runs[run[0]] + 1
            seen[0] = tirx.const(0, I64)
            with T.serial(0, n) as i:
                r = run_of[i]
                with T.If(first[r] == i), T.Then():  # the first time this value is met
                    place[r] = r if ordered else seen[0]
                    seen[0] = seen[0] + 1
                inverse[i] = place[r]
            with T.serial(0, u) as r:
                idx[place[r]] = first[r]
                counts[place[r]] = runs[r]
        return ib.get()

    n = order.shape[0]
    shapes = [(u,), (n,), (u,), (u,), (u,), (u,), (n,)]
    return te.extern(shapes, [order, starts], body, dtype=[I64] * 7, name="unique_sorted")


@converter(O.UNIQUE)
def unique(args: OpArgs) -> list[relax.Expr]:
    """input, sorted (default true), axis (optional: absent flattens the input) -> output (the unique
    elements, or slices along axis), indices (INT64: each one's first occurrence), inverse_indices
    (INT64: for each element or slice, its place in output), counts (INT64).  With sorted the unique
    values are in ascending (lexicographic for slices) order, else in the order first met.  The unique
    count is known only at execution.  NaNs sort last; they are equal to one another without axis and
    never equal with one, as in numpy.unique.

    Without axis the elements are sorted (a stable argsort) and runs of equal values counted: O(N log N).
    With axis, slices are compared pairwise: O(N^2 K) for N slices of K elements.

    Reference: ONNX Unique (onnx.reference's numpy.unique with return_index/inverse/counts).
    """
    x = args.raw_tensor("input")
    shape = args.shape(x)
    ordered = args.bool("sorted", True)
    if not args.has("axis"):
        return _unique_flat(args, args.emit(relax.op.reshape(x, [-1])), ordered)
    if not shape:
        args.fail("is given but the input is a scalar", "axis")
    axis = args.axis("axis", len(shape))
    perm = [axis] + [d for d in range(len(shape)) if d != axis]
    rows = args.emit(relax.op.permute_dims(x, perm)) if axis else x
    rows = args.emit(relax.op.reshape(rows, [shape[axis], -1]))
    first = args.emit_te(_first_kernel, rows)
    arange = relax.op.arange(relax.prim_value(0), relax.prim_value(args.shape(first)[0]), dtype=I64)
    count = args.emit(relax.op.sum(relax.op.astype(relax.op.equal(first, arange), I64)))
    u = _bind_count(args, count, "unique_count", args.shape(first)[0])

    def unique_rows(x: te.Tensor, first: te.Tensor) -> list[te.Tensor]:
        return _unique_rows_kernel(x, first, u, ordered=ordered)

    result = args.emit_te(unique_rows, rows, first)
    idx, inverse, counts = (args.emit(relax.TupleGetItem(result, k)) for k in range(3))
    output = relax.op.take(x, idx, axis=axis, mode="clip")
    return [output, idx, inverse, counts][: max(args.output_count, 1)]


def _unique_flat(args: OpArgs, x: relax.Expr, ordered: bool) -> list[relax.Expr]:
    if str(x.ty.dtype).startswith("float"):
        # TVM's sort compares with <, which NaN breaks: sort by value with NaN read as +inf, then
        # (stably) move the NaNs after everything else.
        nan = relax.op.isnan(x)
        key = relax.op.where(nan, relax.const(float("inf"), x.ty.dtype), x)
        order = args.emit(relax.op.argsort(key, axis=0, descending=False, dtype=I64))
        flags = relax.op.take(relax.op.astype(nan, "int32"), order, axis=0, mode="clip")
        order = args.emit(relax.op.take(order, relax.op.argsort(flags, axis=0, dtype=I64), axis=0, mode="clip"))
    else:
        order = args.emit(relax.op.argsort(x, axis=0, descending=False, dtype=I64))
    values = args.emit(relax.op.take(x, order, axis=0, mode="clip"))
    starts = args.emit_te(_run_starts, values)
    u = _bind_count(args, args.emit(relax.op.sum(starts)), "unique_count", math.prod(args.shape(starts)))

    def unique_sorted(order: te.Tensor, starts: te.Tensor) -> list[te.Tensor]:
        return _unique_sorted_kernel(order, starts, u, ordered=ordered)

    result = args.emit_te(unique_sorted, order, starts)
    idx, inverse, counts = (args.emit(relax.TupleGetItem(result, k)) for k in range(3))
    output = relax.op.take(x, idx, axis=0, mode="clip")
    return [output, idx, inverse, counts][: max(args.output_count, 1)]


# -- ONNX NonMaxSuppression -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Runtime:
    """A parameter read at execution: the position of its one-element tensor among a kernel's inputs."""

    position: int


def _corners(box, i, center: bool):
    """(ymin, xmin, ymax, xmax) of box i: corners in either order, or [x_center, y_center, w, h]."""
    if center:
        xc, yc, w, h = (box(i, k) for k in range(4))
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = (box(i, k) for k in range(4))
    return tirx.min(y1, y2), tirx.min(x1, x2), tirx.max(y1, y2), tirx.max(x1, x2)


def _overlap(a, b) -> tuple:
    """The intersection's (ymin, xmin, ymax, xmax) of two boxes (ymin, xmin, ymax, xmax, area), and whether it
    is non-empty."""
    ix0, ix1 = tirx.max(a[1], b[1]), tirx.min(a[3], b[3])
    iy0, iy1 = tirx.max(a[0], b[0]), tirx.min(a[2], b[2])
    return (iy0, ix0, iy1, ix1), tirx.all(ix1 > ix0, iy1 > iy0)


def _suppresses(a, b, intersection: tuple, iou_threshold) -> tirx.PrimExpr:
    """onnx.reference's suppress_by_iou for boxes that intersect: IoU > threshold, false for empty boxes.
    ``a`` and ``b`` are (ymin, xmin, ymax, xmax, area), ``intersection`` their ``_overlap``."""
    iy0, ix0, iy1, ix1 = intersection
    area_a, area_b = a[4], b[4]
    inter = (ix1 - ix0) * (iy1 - iy0)
    union = area_a + area_b - inter
    zero = tirx.const(0.0, "float32")
    valid = tirx.all(inter > zero, area_a > zero, area_b > zero, union > zero)
    return tirx.all(valid, inter / tirx.Select(valid, union, tirx.const(1.0, "float32")) > iou_threshold)


def _nms_select_ir(ins, outs, *, params, center):
    """Per (batch, class): candidates by descending score (ties: lower index first) taken while not
    suppressed by a selected box, at most ``limit``; sel[b, c, :cnt[b, c]] holds them.  ``params``
    gives limit, iou_threshold and score_threshold (None: no threshold) each as a constant, or as
    the position in ``ins`` of a one-element tensor read at execution.

    A candidate is compared with the selected boxes in selection order until one suppresses it (most
    fall to one of the first few); one that survives is compared with all of them, which makes the
    kernel O(candidates x selected): a detector's class-offset NMS keeps thousands.  So the candidate's
    corners and area are computed once, and the selected boxes' are kept contiguous in a scratch buffer
    in selection order, not gathered through the score order from the boxes on every comparison."""
    IRBuilder, T = _ir()
    boxes, scores, order = ins[:3]
    batches, num_boxes, _ = boxes.shape
    classes = scores.shape[1]
    with IRBuilder() as ib, T.serial(0, 1):
        boxes_, scores_, order_ = (T.buffer_proxy(b) for b in (boxes, scores, order))

        def param(value):
            return T.buffer_proxy(ins[value.position])[0] if isinstance(value, _Runtime) else value

        limit, iou_threshold, score_threshold = (param(v) for v in params)
        sel, cnt = T.buffer_proxy(outs[0]), T.buffer_proxy(outs[1])
        kept = T.buffer_proxy(outs[2])  # scratch: an output, so that a GPU build allocates it outside the kernel
        cand = T.buffer_proxy(T.alloc_buffer((5,), "float32", scope="local"))
        keep, t = _local(T, I64), _local(T, I64)
        with T.serial(0, batches) as n, T.serial(0, classes) as c:
            cnt[n, c] = tirx.const(0, I64)

            def box(i, k, n=n):
                return boxes_[n, i, k]

            with T.serial(0, num_boxes) as k:
                idx = order_[n, c, k]
                take = cnt[n, c] < limit
                if score_threshold is not None:
                    take = tirx.all(take, scores_[n, c, idx] > score_threshold)
                with T.If(take), T.Then():
                    y0, x0, y1, x1 = _corners(box, idx, center)
                    for j, v in enumerate((y0, x0, y1, x1)):
                        cand[j] = v
                    cand[4] = (cand[3] - cand[1]) * (cand[2] - cand[0])
                    keep[0] = tirx.const(1, I64)
                    t[0] = tirx.const(0, I64)
                    with T.While(tirx.all(keep[0] == 1, t[0] < cnt[n, c])):
                        selected = [kept[t[0], j] for j in range(5)]
                        candidate = [cand[j] for j in range(5)]
                        # Most pairs are disjoint (a detector's classes are offset apart): a predictable
                        # branch skips the division for them, as onnxruntime's early return does.
                        intersection, overlaps = _overlap(selected, candidate)
                        with T.If(overlaps), T.Then():
                            hit = _suppresses(selected, candidate, intersection, iou_threshold)
                            keep[0] = tirx.Select(hit, tirx.const(0, I64), keep[0])
                        t[0] = t[0] + 1
                    with T.If(keep[0] == 1), T.Then():
                        sel[n, c, cnt[n, c]] = idx
                        for j in range(5):
                            kept[cnt[n, c], j] = cand[j]
                        cnt[n, c] = cnt[n, c] + 1
    return ib.get()


def _nms_rows_ir(ins, outs):
    """The selected (batch, class, box) rows, by batch, class, then selection order."""
    IRBuilder, T = _ir()
    sel, cnt = ins
    batches, classes, _ = sel.shape
    with IRBuilder() as ib, T.serial(0, 1):
        sel_, cnt_, out = T.buffer_proxy(sel), T.buffer_proxy(cnt), T.buffer_proxy(outs[0])
        row = _local(T, I64)
        row[0] = tirx.const(0, I64)
        with T.serial(0, batches) as n, T.serial(0, classes) as c, T.serial(0, cnt_[n, c]) as t:
            out[row[0], 0] = n.astype(I64)
            out[row[0], 1] = c.astype(I64)
            out[row[0], 2] = sel_[n, c, t]
            row[0] = row[0] + 1
    return ib.get()


@converter(O.ALL_CLASS_NON_MAX_SUPPRESSION)
def all_class_non_max_suppression(args: OpArgs) -> relax.Expr:
    """boxes [B, M, 4], scores [B, C, M], max_output_boxes_per_class (INT64, default 0; negative reads
    as 0), iou_threshold (default 0), score_threshold (optional: absent keeps every score),
    center_point_box (INT32, default 0) -> selected_indices [S, 3] (INT64 rows batch, class, box).
    The cap and thresholds may be model inputs (one element each, read at execution).

    Per batch and class, boxes scoring above score_threshold are taken by descending score (ties by
    lower index) and kept unless their IoU with a kept box exceeds iou_threshold, at most
    max_output_boxes_per_class of them; rows are ordered by batch, class, then selection.  Boxes are
    [y1, x1, y2, x2] with the corners in either order (center_point_box 0) or [x_center, y_center,
    width, height] (1).  S is known only at execution.  (NON_MAX_SUPPRESSION is Paddle's multiclass
    NMS, whose caps and output differ.)

    Reference: ONNX NonMaxSuppression (onnx.reference's op_non_max_suppression).
    """
    boxes, scores = args.tensor("boxes"), args.tensor("scores")
    box_shape, score_shape = args.shape(boxes), args.shape(scores)
    if len(box_shape) != 3 or (isinstance(box_shape[2], int) and box_shape[2] != 4):
        args.fail(f"must have shape [B, M, 4], got {box_shape}", "boxes")
    if not isinstance(box_shape[2], int):
        # Known only at execution (a subgraph's input after a host step): 4, checked then.
        boxes = args.require(boxes, box_shape[2] == 4, f"must have shape [B, M, 4], got {box_shape}", "boxes")
        boxes = args.match_cast(boxes, [*box_shape[:2], 4])
        box_shape = [*box_shape[:2], 4]
    if len(score_shape) != 3:
        args.fail(f"must have shape [B, C, M], got {score_shape}", "scores")
    for a, b, what in ((box_shape[0], score_shape[0], "batch"), (box_shape[1], score_shape[2], "box count M")):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            args.fail(f"{what} {b} differs from the boxes' {a} (boxes {box_shape}, scores {score_shape})", "scores")
    center = args.int("center_point_box", 0)
    if center not in (0, 1):
        args.fail(f"must be 0 (corners) or 1 (center, size), got {center}", "center_point_box")
    runtime: list[relax.Expr] = []

    def param(name: str, dtype: str, default):
        """A constant operand's value, else its one element read at execution (a kernel input)."""
        if not args.has(name):
            return default if default is None else tirx.const(default, dtype)
        if args.operand(name).is_constant:
            value = args.value(name)
            if np.size(value) != 1:
                args.fail(f"must hold one value, got {np.size(value)}", name)
            return tirx.const(np.reshape(value, -1)[0].item(), dtype)
        tensor = args.raw_tensor(name)
        size = 1
        for d in args.shape(tensor):
            size *= d
        if isinstance(size, int) and size != 1:
            args.fail(f"must hold one value, got {size}", name)
        runtime.append(args.emit(relax.op.astype(relax.op.reshape(tensor, [1]), dtype)))
        return _Runtime(3 + len(runtime) - 1)

    params = (
        param("max_output_boxes_per_class", I64, 0),
        param("iou_threshold", "float32", 0.0),
        param("score_threshold", "float32", None),
    )
    order = args.emit(relax.op.argsort(scores, axis=2, descending=True, dtype=I64))
    kernel = functools.partial(_nms_select_ir, params=params, center=bool(center))

    def select(b: te.Tensor, s: te.Tensor, o: te.Tensor, *p: te.Tensor) -> list[te.Tensor]:
        shapes = [(b.shape[0], s.shape[1], b.shape[1]), (b.shape[0], s.shape[1]), (b.shape[1], 5)]
        return te.extern(shapes, [b, s, o, *p], kernel, dtype=[I64, I64, "float32"], name="nms_select")

    selected = args.emit_te(select, boxes, scores, order, *runtime)
    sel, cnt = (args.emit(relax.TupleGetItem(selected, k)) for k in range(2))
    rows = _bind_count(args, args.emit(relax.op.sum(cnt)), "nms_selected", math.prod(args.shape(sel)))

    def gather(s: te.Tensor, c: te.Tensor) -> te.Tensor:
        return te.extern([(rows, 3)], [s, c], _nms_rows_ir, dtype=[I64], name="nms_rows")

    return args.emit_te(gather, sel, cnt)
