"""Scatters (nnadapter-tvm's built-in extensions, codes 2100-2102): SCATTER_ELEMENTS, SCATTER_ND and
TENSOR_SCATTER, the ONNX operators of the same names (the old Scatter is SCATTER_ELEMENTS).

NNAdapter's standard set has no scatter. The two index-driven ones are one TIR kernel each (a copy of
the input, then a loop over the indices that reduces each update into its place: TVM's
topi.scatter_elements assumes indices of the input's own shape and writes past the buffer on an index
out of range); TENSOR_SCATTER is a gather written as a TE compute. Indices fed at execution are checked
by one reduction over them before the result is used (``indexing._check_indices``, as GATHER): an index
out of range fails the execution naming operand ``indices``, the value and the range. The kernels never
trust that check to have run first (FuseOps may order it after them, see ``OpArgs.check_value``): an
out-of-range index writes nothing.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.indexing import _as_i64, _check_indices, _static
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.scatter import REDUCTIONS
from nnadapter_tvm.runtime.runtime_check import VALUE, data_checks_enabled
from nnadapter_tvm.types import OperationType as O

# The element types a scatter moves (no quantized types: the update would need the input's scale).
# The ``reduction`` operand's codes, in ONNX's names.
# TENSOR_SCATTER's ``mode`` codes.


def _input_rank(args: OpArgs, shape: list) -> int:
    """The rank of a scatter's ``input``, refused where 0 (SCATTER_ELEMENTS, SCATTER_ND)."""
    if not shape:
        args.fail("must have rank >= 1", "input")
    return len(shape)


def _reduction(args: OpArgs, x: relax.Expr, updates: relax.Expr) -> str:
    """The ``reduction`` operand's name, once ``updates`` is checked to hold the input's element type
    (SCATTER_ELEMENTS, SCATTER_ND)."""
    dtype = str(x.ty.dtype)
    if str(updates.ty.dtype) != dtype:
        args.fail(f"must have the input's element type {dtype}, got {updates.ty.dtype}", "updates")
    code = args.int("reduction", 0)
    if not 0 <= code < len(REDUCTIONS):
        args.fail(f"must be one of 0..4 ({', '.join(REDUCTIONS)}), got {code}", "reduction")
    name = REDUCTIONS[code]
    if dtype == "bool" and name in ("add", "mul"):
        args.fail(f"reduction '{name}' is not defined for BOOL8 elements (use max or min)", "reduction")
    return name


def _combine(reduction: str, old: tirx.PrimExpr, new: tirx.PrimExpr, dtype: str) -> tirx.PrimExpr:
    if reduction == "add":
        return old + new
    if reduction == "mul":
        return old * new
    boolean = dtype == "bool"  # LLVM's max/min take numbers only: on booleans they are or/and
    if reduction == "max":
        return tirx.Or(old, new) if boolean else tirx.max(old, new)
    if reduction == "min":
        return tirx.And(old, new) if boolean else tirx.min(old, new)
    return new


def _normalized(index: tirx.PrimExpr, dim: tirx.PrimExpr) -> tuple[tirx.PrimExpr, tirx.PrimExpr]:
    """(index counted from the start, whether it lies in [-dim, dim)), both in int64."""
    index = index.astype("int64")
    dim = tirx.const(dim, "int64") if isinstance(dim, int) else dim.astype("int64")
    k = tirx.Select(index < 0, index + dim, index)
    return k, tirx.And(k >= 0, k < dim)


@contextlib.contextmanager
def _loops(shape, T):
    """Nested serial loops over ``shape``; yields their variables (outermost first)."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(T.serial(0, d)) for d in shape]


def _copy(T, data, out, shape) -> None:
    with _loops(shape, T) as at:
        out[tuple(at)] = data[tuple(at)]


def _scatter_elements_ir(ins, outs, *, axis: int, reduction: str):
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    data, indices, updates = ins
    (out,) = outs
    data_shape, index_shape, dtype = list(data.shape), list(indices.shape), str(data.dtype)
    with IRBuilder() as ib, T.serial(0, 1):
        data, indices, updates, out = (T.buffer_proxy(b) for b in (data, indices, updates, out))
        _copy(T, data, out, data_shape)
        # One update after another: duplicate indices reduce in the order ONNX's reference takes them.
        with _loops(index_shape, T) as at:
            k, valid = _normalized(indices[tuple(at)], data_shape[axis])
            place = (*at[:axis], k, *at[axis + 1 :])
            with T.If(valid), T.Then():
                out[place] = _combine(reduction, out[place], updates[tuple(at)], dtype)
    return ib.get()


def _scatter_nd_ir(ins, outs, *, reduction: str):
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    data, indices, updates = ins
    (out,) = outs
    data_shape, index_shape, dtype = list(data.shape), list(indices.shape), str(data.dtype)
    depth = int(index_shape[-1])
    with IRBuilder() as ib, T.serial(0, 1):
        data, indices, updates, out = (T.buffer_proxy(b) for b in (data, indices, updates, out))
        _copy(T, data, out, data_shape)
        with _loops(index_shape[:-1], T) as at, _loops(data_shape[depth:], T) as tail:
            place, valid = [], tirx.const(True, "bool")
            for j in range(depth):
                k, ok = _normalized(indices[(*at, j)], data_shape[j])
                place.append(k)
                valid = tirx.And(valid, ok)
            target = (*place, *tail)
            with T.If(valid), T.Then():
                out[target] = _combine(reduction, out[target], updates[(*at, *tail)], dtype)
    return ib.get()


def _dims_match(args: OpArgs, a, b, message: str, name: str) -> None:
    """``a == b`` for two sizes: now where both are static, else at execution."""
    if _static(a) and _static(b):
        if a != b:
            args.fail(message, name)
    else:  # a Python int would become an int32 constant beside the int64 dimension
        args.require_dims(tirx.EQ(_as_i64(a), _as_i64(b)), a if not _static(a) else b, message, name)


def _dims_at_most(args: OpArgs, a, b, message: str, name: str) -> None:
    if _static(a) and _static(b):
        if a > b:
            args.fail(message, name)
    else:
        args.require_dims(a <= b, a if not _static(a) else b, message, name)


def _check_constant_indices(args: OpArgs, values: np.ndarray, dim, what: str) -> None:
    if values.size and _static(dim) and (values.min() < -dim or values.max() >= dim):
        bad = values[(values < -dim) | (values >= dim)][0]
        args.fail(f"index {int(bad)} is out of range [-{dim}, {dim}) for {what}", "indices")


def _count(shape) -> object:
    count = 1
    for d in shape:
        count = count * d
    return count


@converter(O.SCATTER_ELEMENTS)
def scatter_elements(args: OpArgs) -> relax.Expr:
    """input, indices (INT32/INT64, the input's rank), updates (the shape of indices), axis (default 0),
    reduction (0 none, 1 add, 2 mul, 3 max, 4 min; default 0) -> output (the input's shape and type).

    ``output = input`` then, for every position p of ``indices``, ``output[p with p[axis] replaced by
    indices[p]] = f(output[...], updates[p])`` (f: the reduction; none replaces), one update after
    another in row-major order. Negative indices count from the end; an index outside [-dim, dim) of the
    axis fails (at compile time for constant indices, at execution otherwise) naming ``indices``, the
    value and the range. ``indices`` may be smaller than ``input`` on every axis but ``axis``.

    Reference: ONNX ScatterElements-18 (onnx.reference's scatter_elements); Scatter-9 is the same with
    reduction none.
    """
    x, indices, updates = args.tensor("input"), args.tensor("indices"), args.tensor("updates")
    shape, index_shape, update_shape = args.shape(x), args.shape(indices), args.shape(updates)
    rank = _input_rank(args, shape)
    axis = args.axis("axis", rank, 0)
    if len(index_shape) != rank:
        args.fail(f"must have the input's rank {rank}, got rank {len(index_shape)}", "indices")
    if len(update_shape) != rank:
        args.fail(f"must have the shape of indices (rank {rank}), got rank {len(update_shape)}", "updates")
    reduction = _reduction(args, x, updates)
    for a in range(rank):
        _dims_match(args, update_shape[a], index_shape[a], f"must have the shape of indices {index_shape}", "updates")
        if a != axis:
            _dims_at_most(
                args, index_shape[a], shape[a], f"axis {a} must not exceed the input's ({shape[a]})", "indices"
            )
    dim = shape[axis]
    if args.operand("indices").is_constant:
        _check_constant_indices(args, args.value("indices"), dim, f"axis {axis} of size {dim}")
    elif data_checks_enabled():
        count = _count(index_shape)
        if not (_static(count) and count == 0):
            _check_indices(args, indices, dim, count, f"axis {axis}")
    kernel = functools.partial(_scatter_elements_ir, axis=axis, reduction=reduction)

    def compute(data: te.Tensor, index: te.Tensor, update: te.Tensor) -> te.Tensor:
        return te.extern([data.shape], [data, index, update], kernel, dtype=str(data.dtype), name="scatter_elements")

    return args.emit_te(compute, x, indices, updates)


@converter(O.SCATTER_ND)
def scatter_nd(args: OpArgs) -> relax.Expr:
    """input (rank r), indices (INT32/INT64, rank q >= 1, its last size k <= r static), updates
    (shape indices.shape[:-1] + input.shape[k:]), reduction (0 none, 1 add, 2 mul, 3 max, 4 min;
    default 0) -> output (the input's shape and type).

    ``output = input`` then, for every index tuple t = indices[i0, ..., iq-2, :],
    ``output[t] = f(output[t], updates[i0, ..., iq-2])`` (a slice of rank r - k when k < r), one after
    another in row-major order. Negative components count from the end; a component j outside
    [-input.shape[j], input.shape[j]) fails naming ``indices``, the value and the range.

    Reference: ONNX ScatterND-18 (onnx.reference's scatter_nd_impl).
    """
    x, indices, updates = args.tensor("input"), args.tensor("indices"), args.tensor("updates")
    shape, index_shape, update_shape = args.shape(x), args.shape(indices), args.shape(updates)
    rank = _input_rank(args, shape)
    if not index_shape:
        args.fail("must have rank >= 1 (its last axis holds the index tuples)", "indices")
    depth = index_shape[-1]
    if not _static(depth) or not 1 <= depth <= rank:
        args.fail(f"its last size must be static and in [1, {rank}] (the input's rank), got {depth}", "indices")
    reduction = _reduction(args, x, updates)
    expected = [*index_shape[:-1], *shape[depth:]]
    if len(update_shape) != len(expected):
        args.fail(f"must have shape indices.shape[:-1] + input.shape[{depth}:] = {expected}", "updates")
    for got, want in zip(update_shape, expected):
        _dims_match(
            args, got, want, f"must have shape indices.shape[:-1] + input.shape[{depth}:] = {expected}", "updates"
        )
    if args.operand("indices").is_constant:
        values = args.value("indices")
        for j in range(depth):
            _check_constant_indices(args, values[..., j], shape[j], f"axis {j} of size {shape[j]}")
    elif data_checks_enabled():
        count = _count(index_shape[:-1])
        if not (_static(count) and count == 0):
            last = len(index_shape) - 1
            for j in range(depth):
                component = args.emit(relax.op.strided_slice(indices, [last], [j], [j + 1]))
                _check_indices(args, component, shape[j], count, f"axis {j}")
    kernel = functools.partial(_scatter_nd_ir, reduction=reduction)

    def compute(data: te.Tensor, index: te.Tensor, update: te.Tensor) -> te.Tensor:
        return te.extern([data.shape], [data, index, update], kernel, dtype=str(data.dtype), name="scatter_nd")

    return args.emit_te(compute, x, indices, updates)


@converter(O.TENSOR_SCATTER)
def tensor_scatter(args: OpArgs) -> relax.Expr:
    """past_cache (rank >= 2: batch, ..., max_sequence_length at ``axis``, ...), update (past_cache's
    shape but sequence_length <= max_sequence_length at ``axis``), write_indices (INT32/INT64 [batch],
    optional: zeros), axis (default -2, never 0), mode (0 linear, 1 circular; default 0) -> present_cache.

    ``present = past`` except ``present[b, ..., (write_indices[b] + s) at axis, ...] = update[b, ..., s,
    ...]`` for s < sequence_length; circular mode takes the position modulo max_sequence_length. Linear
    mode requires 0 <= write_indices[b] <= max_sequence_length - sequence_length: a write index outside
    fails the execution naming ``write_indices``, its value and the range (the kernel reads only the
    update's own positions whatever the index).

    Reference: ONNX TensorScatter-24 (its pseudocode and onnx.reference's implementation).
    """
    past = args.tensor("past_cache")
    update = args.tensor("update")
    shape, update_shape = args.shape(past), args.shape(update)
    rank = len(shape)
    if rank < 2:
        args.fail(f"must have rank >= 2 (batch, ..., sequence, ...), got rank {rank}", "past_cache")
    axis = args.axis("axis", rank, -2)
    if axis == 0:
        args.fail("must not be the batch axis 0", "axis")
    mode = args.int("mode", 0)
    if mode not in (0, 1):
        args.fail(f"must be 0 (linear) or 1 (circular), got {mode}", "mode")
    if str(update.ty.dtype) != str(past.ty.dtype):
        args.fail(f"must have past_cache's element type {past.ty.dtype}, got {update.ty.dtype}", "update")
    if len(update_shape) != rank:
        args.fail(f"must have past_cache's rank {rank}, got rank {len(update_shape)}", "update")
    for a in range(rank):
        if a == axis:
            _dims_at_most(
                args,
                update_shape[a],
                shape[a],
                f"its sequence length must not exceed past_cache's {shape[a]}",
                "update",
            )
        else:
            _dims_match(args, update_shape[a], shape[a], f"must match past_cache {shape} but at axis {axis}", "update")
    length, size = shape[axis], update_shape[axis]
    writes = args.tensor("write_indices") if args.has("write_indices") else None
    if writes is not None:
        if len(args.shape(writes)) != 1:
            args.fail(f"must be 1-D [batch], got shape {args.shape(writes)}", "write_indices")
        _dims_match(
            args, args.shape(writes)[0], shape[0], f"must have one index per batch ({shape[0]})", "write_indices"
        )
        if mode == 0:
            _check_write_indices(args, writes, length, size)

    def compute(past: te.Tensor, update: te.Tensor, *rest: te.Tensor) -> te.Tensor:
        def at(*idx):
            w = rest[0][idx[0]].astype("int64") if rest else tirx.const(0, "int64")
            s = idx[axis].astype("int64")
            # The sizes as the kernel's own buffers see them (a symbolic one is bound by its inputs).
            n, m = past.shape[axis].astype("int64"), update.shape[axis].astype("int64")
            rel = tirx.floormod(s - w, n) if mode == 1 else s - w
            inside = tirx.And(rel >= 0, rel < m)
            safe = tirx.Select(inside, rel, tirx.const(0, "int64"))
            src = update[(*idx[:axis], safe, *idx[axis + 1 :])]
            return tirx.Select(inside, src, past[idx])

        return te.compute(past.shape, at, name="tensor_scatter")

    return args.emit_te(compute, past, update, *([writes] if writes is not None else []))


def _check_write_indices(args: OpArgs, writes: relax.Expr, length, size) -> None:
    """Linear mode: every write index in [0, length - size] (the update fits), one reduction at execution."""
    if args.operand("write_indices").is_constant:
        values = args.value("write_indices")
        if _static(length) and _static(size) and values.size:
            bad = values[(values < 0) | (values > length - size)]
            if bad.size:
                args.fail(
                    f"write index {int(bad[0])} is out of range [0, {length - size}] (linear mode: write index + "
                    f"sequence length {size} must not exceed max_sequence_length {length})",
                    "write_indices",
                )
        return
    if not data_checks_enabled():
        return

    def worst(w: te.Tensor) -> te.Tensor:
        r1, r2 = te.reduce_axis((0, w.shape[0]), "l"), te.reduce_axis((0, w.shape[0]), "h")
        low = te.compute((1,), lambda _: te.min(w[r1].astype("int64"), axis=[r1]), name="write_min")
        high = te.compute((1,), lambda _: te.max(w[r2].astype("int64"), axis=[r2]), name="write_max")
        return te.compute((1,), lambda i: tirx.Select(low[0] < 0, low[0], high[0]), name="worst_write")

    limit = length - size
    text = str(limit) if _static(limit) else "max_sequence_length - sequence_length"

    def in_range(v: tirx.Var) -> tirx.PrimExpr:
        return tirx.And(v >= 0, v <= limit)

    args.check_value(
        args.emit_te(worst, writes),
        in_range,
        f"write index {VALUE} is out of range [0, {text}] (linear mode: the update must fit in the cache)",
        "write_indices",
    )
