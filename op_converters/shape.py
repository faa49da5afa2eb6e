"""Shape manipulation: reshape, flatten, transpose, concat, squeeze, unsqueeze."""

from __future__ import annotations

import functools

import tvm_ffi
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import Key, OpArgs
from nnadapter_tvm.op_converters.helpers import at_least_1d
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O


@converter(O.RESHAPE)
def reshape(args: OpArgs) -> relax.Expr:
    """input, shape -> output; 0 copies the input's dimension, one -1 is inferred.

    The element count must match (a -1: divide evenly); a -1 beside a 0 of a zero-element input is
    ambiguous and refused, as numpy does.  With dimensions unknown until execution the count is checked
    at execution (INVALID_DIMENSIONS naming the operation); a -1 whose other dimensions hold 0 elements
    at execution is ambiguous there too and refused, as numpy and onnxruntime refuse it.

    Reference: the spec; Paddle's reshape for 0 and -1.
    """
    x = args.tensor("input")
    in_shape = args.shape(x)
    if args.has("shape") and not args.operand("shape").is_constant:
        target = args.shape_values("shape")
        if target is None:
            return reshape_checked(args, x, _read_target(args, x), "shape", "the shape read at execution")
    else:
        target = args.ints("shape", [])  # present but empty: the scalar shape (rank 0)
    if [d for d in target if isinstance(d, int)].count(-1) > 1:
        args.fail(f"at most one -1 is allowed, got {_dims(target)}", "shape")
    dims = []
    for axis, d in enumerate(target):
        if not isinstance(d, int):
            dims.append(d)  # computed from symbolic dimensions: a size
        elif d == 0:
            if axis >= len(in_shape):
                args.fail(f"0 at position {axis} has no input dimension to copy (input rank {len(in_shape)})", "shape")
            dims.append(in_shape[axis])
        elif d < -1:
            args.fail(f"dimension {d} at position {axis} is invalid", "shape")
        else:
            dims.append(d)
    return reshape_checked(args, x, dims, "shape", f"shape {_dims(target)}")


def _read_target(args: OpArgs, x: relax.Expr) -> list:
    """RESHAPE's shape operand known only at execution (it depends on data): its 0s and -1 resolved
    there, as the spec defines them, then bound to new symbolic dimensions."""
    shape_tensor = args.raw_tensor("shape")
    lengths = args.shape(shape_tensor)
    if len(lengths) != 1 or not isinstance(lengths[0], int):
        args.fail(f"must be 1-D with a known length, got shape {_dims(lengths)}", "shape")
    n, rank = lengths[0], len(args.shape(x))
    t = relax.op.astype(shape_tensor, "int64")
    in_dims = relax.op.shape_to_tensor(relax.op.shape_of(x))
    # Where the target holds a 0, the input's dimension at that position (none past the input's rank).
    if n <= rank:
        source = relax.op.strided_slice(in_dims, [0], [0], [n])
    else:
        source = relax.op.concat([in_dims, relax.op.strided_slice(t, [0], [rank], [n])], 0)
    zero, one, minus_one = (relax.const(v, "int64") for v in (0, 1, -1))
    t = args.emit(relax.op.where(relax.op.equal(t, zero), source, t))
    known = relax.op.prod(relax.op.where(relax.op.equal(t, minus_one), one, t))
    total = relax.op.prod(in_dims)
    inferred = relax.op.floor_divide(total, relax.op.maximum(known, one))
    resolved = args.emit(relax.op.where(relax.op.equal(t, minus_one), inferred, t))
    dims = [tirx.Var(f"reshape_d{k}", "int64") for k in range(n)]
    args.match_cast(args.emit(relax.op.tensor_to_shape(resolved)), dims)
    return dims


def reshape_checked(args: OpArgs, x: relax.Expr, dims: list, i: Key, what: str) -> relax.Expr:
    """``x`` reshaped to ``dims`` (ints or TIR dims, at most one -1), the element count checked: at
    compile time where the dimensions are static, at execution where they are not.  Relax's reshape
    checks neither (it would read past the input, or divide by a zero dimension)."""
    in_shape = args.shape(x)
    known = 1
    for d in dims:
        if not (isinstance(d, int) and d == -1):
            known = known * d
    total = 1
    for d in in_shape:
        total = total * d
    if isinstance(total, int) and isinstance(known, int):
        if -1 not in dims:
            if known != total:
                args.fail(f"{what} needs {known} elements, the input {in_shape} has {total}", i)
            return _reshape(x, dims)
        if known == 0:
            if total:
                args.fail(f"{what} holds no elements besides its -1, the input {in_shape} has {total}", i)
            args.fail(f"{what}: the -1 is ambiguous, the other dimensions hold 0 elements (numpy refuses it)", i)
        if total % known:
            args.fail(f"{what}: the input's {total} elements {in_shape} do not divide by {known} for the -1", i)
        return _reshape(x, [total // known if isinstance(d, int) and d == -1 else d for d in dims])
    total = tirx.const(total, "int64") if isinstance(total, int) else total
    rest = _cancelled_rest(in_shape, dims)
    if rest is not None or any(isinstance(d, int) and d == -1 for d in dims):
        if rest is None:
            divisor = max(known, 1) if isinstance(known, int) else tirx.max(known, tirx.const(1, "int64"))
            rest = tirx.floordiv(total, divisor)
        # else: the -1 follows from the input's own dims, statically where they cancel
        nonzero = tirx.NE(tirx.const(known, "int64") if isinstance(known, int) else known, tirx.const(0, "int64"))
        condition = tirx.And(tirx.EQ(known * rest, total), nonzero)
        needs = (
            f"a multiple of {_product(dims)} elements (the dimensions besides the -1, which must not hold 0 "
            "elements: the -1 would be ambiguous)"
        )
        dims = [rest if isinstance(d, int) and d == -1 else d for d in dims]
    else:
        condition = tirx.EQ(tirx.const(known, "int64") if isinstance(known, int) else known, total)
        needs = f"{_product(dims)} elements"
    flat = args.emit(relax.op.memory.view(x, relax.ShapeExpr([total])))
    message = f"{what} needs {needs}, the input {_dims(in_shape)} has another count at execution"
    return relax.op.memory.view(args.require(flat, condition, message, i), relax.ShapeExpr(dims))


def _cancelled_rest(in_shape: list, dims: list):
    """The size a -1 stands for when the target's symbolic dims are among the input's (``[n, 3, 4]`` to
    ``[n, -1]`` gives 12, exactly and statically), else None."""
    if [d for d in dims if isinstance(d, int)].count(-1) != 1:
        return None
    remaining = [d for d in in_shape if not isinstance(d, int)]
    total = 1
    for d in in_shape:
        total *= d if isinstance(d, int) else 1
    known = 1
    for d in dims:
        if isinstance(d, int):
            known *= 1 if d == -1 else d
            continue
        match = next((k for k, r in enumerate(remaining) if tvm_ffi.structural_equal(r, d)), None)
        if match is None:
            return None
        del remaining[match]
    if known == 0 or total % known:
        return None
    rest = total // known
    for d in remaining:
        rest = rest * d
    return rest


def _reshape(x: relax.Expr, dims: list) -> relax.Expr:
    """Relax's reshape, except that a static 0 in ``dims`` is a zero-size dimension: Relax's reads it as
    "copy the input's dimension" (ONNX's convention), so those go through a (no-copy) view."""
    if any(isinstance(d, int) and d == 0 for d in dims):
        return relax.op.memory.view(x, relax.ShapeExpr(dims))
    return relax.op.reshape(x, dims)


def _product(dims: list) -> str:
    """The element count of ``dims`` for a message: a number, or a product naming unknown dimensions."""
    static = [d for d in dims if isinstance(d, int) and d != -1]
    unknown = sum(1 for d in dims if not isinstance(d, int))
    count = 1
    for d in static:
        count *= d
    return str(count) if not unknown else " * ".join([str(count)] * (count != 1) + ["?"] * unknown)


def _dims(shape: list) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in shape) + "]"


@converter(O.FLATTEN)
def flatten(args: OpArgs) -> relax.Expr:
    """input, start_axis, end_axis -> dims start..end merged into one.

    Reference: the spec; Paddle's flatten_contiguous_range.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = max(len(shape), 1)
    start, end = args.axis("start_axis", rank), args.axis("end_axis", rank)
    if start > end:
        args.fail(f"start_axis {start} is after end_axis {end}", "start_axis")
    merged = 1
    for d in shape[start : end + 1]:
        merged = merged * d
    return _reshape(x, [*shape[:start], merged, *shape[end + 1 :]])


@converter(O.TRANSPOSE)
def transpose(args: OpArgs) -> relax.Expr:
    """input, perm -> output_dims[i] = input_dims[perm[i]].

    Reference: the spec; numpy.transpose (perm omitted: the axes reversed).
    """
    x = args.tensor("input")
    rank = len(args.shape(x))
    perm = args.ints("perm", list(reversed(range(rank))))
    if sorted(p % rank if -rank <= p < rank else p for p in perm) != list(range(rank)):
        args.fail(f"{perm} is not a permutation of the {rank} axes", "perm")
    return relax.op.permute_dims(x, [p % rank for p in perm])


@converter(O.CONCAT)
def concat(args: OpArgs) -> relax.Expr:
    """input0 .. input(n-1), axis -> output.

    Where inputs disagree only symbolically on a non-axis dim (UNKNOWN dims of different model
    inputs), each is match-cast to a common dim (a static one if any): checked at run time.

    Reference: the spec; numpy.concatenate.
    """
    tensors = args.tensors(0, args.index("axis"))
    shapes = [args.shape(t) for t in tensors]
    rank = len(shapes[0])
    axis = args.axis("axis", rank)
    for i, s in enumerate(shapes):
        if len(s) != rank:
            args.fail(f"rank {len(s)} differs from input 0's rank {rank}", i)
    common = [next((s[a] for s in shapes if isinstance(s[a], int)), shapes[0][a]) for a in range(rank)]
    for i, s in enumerate(shapes):
        for a, (c, d) in enumerate(zip(common, s)):
            if a != axis and isinstance(c, int) and isinstance(d, int) and c != d:
                args.fail(f"dimension {a} is {d}, another input has {c} (only axis {axis} may differ)", i)
        dims = [d if a == axis else common[a] for a, d in enumerate(s)]
        if any(not _same_dim(d, c) for d, c in zip(s, dims)):
            tensors[i] = args.match_cast(tensors[i], dims)
    distinct: list = []
    for tensor in tensors:
        if not any(tensor.same_as(d) for d in distinct):
            distinct.append(tensor)
    if len(distinct) < len(tensors):
        order = [next(k for k, d in enumerate(distinct) if d.same_as(tensor)) for tensor in tensors]
        return args.emit_te(_concat_repeated, distinct, order, axis)
    return relax.op.concat(tensors, axis)


def _concat_repeated(distinct: list, order: list[int], axis: int) -> te.Tensor:
    """Concatenation of ``distinct[k] for k in order``, where a tensor appears several times (Concat(f, f)),
    each distinct tensor read once.

    TOPI's concatenate reads such a tensor at two indices in one block (``if v >= n: f[v - n] else
    f[v]``), and TVM records the block's read region of ``f`` as the first access alone ([v - n]); once
    ``f`` is computed inside the same fused kernel, its buffer is compacted to that region and the other
    access reads memory nothing wrote (Concat(Floor(x), Floor(x)) gave garbage for the first copy, with
    CPU schedules on and off).  Here each distinct tensor is read through one index that selects its
    segment."""
    segments: list[list[tuple]] = [[] for _ in distinct]
    offset = tirx.const(0, "int64")
    for k in order:
        size = distinct[k].shape[axis]
        segments[k].append((offset, size))
        offset = offset + size
    shape = list(distinct[0].shape)
    shape[axis] = offset

    def body(*idx):
        v = idx[axis]
        value = None
        for t, segs in reversed(list(zip(distinct, segments))):
            local = v - segs[0][0]
            for start, _ in segs[1:]:
                local = tirx.Select(v >= start, v - start, local)
            read = t(*[local if a == axis else i for a, i in enumerate(idx)])
            inside = functools.reduce(tirx.Or, [tirx.And(start <= v, v < start + n) for start, n in segs])
            value = read if value is None else tirx.if_then_else(inside, read, value)
        return value

    return te.compute(shape, body, name="concat_repeated")


def _same_dim(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    return a.same_as(b)


@converter(O.SQUEEZE)
def squeeze(args: OpArgs) -> relax.Expr:
    """input, axes (empty or omitted: every size-1 axis) -> output; an axis named twice is removed once.

    Squeezing every axis gives shape [1], not rank 0 (reduce.at_least_1d: Paddle-Lite's
    operation/squeeze.cc).

    Reference: the spec; numpy.squeeze, Paddle-Lite's NNAdapter shape inference for the [1].
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    axes = set()
    for a in args.ints("axes", []):
        if not -rank <= a < rank:
            args.fail(f"axis {a} is out of range [-{rank}, {rank})", "axes")
        if isinstance(shape[a], int) and shape[a] != 1:
            args.fail(f"axis {a} has size {shape[a]}, only size-1 axes can be squeezed", "axes")
        axes.add(a % rank)
    if not args.has("axes"):  # only dims known to be 1: an UNKNOWN dim is kept, so the rank stays known
        axes = {a for a, d in enumerate(shape) if isinstance(d, int) and d == 1}
    return at_least_1d(relax.op.squeeze(x, sorted(axes)), rank - len(axes))


@converter(O.UNSQUEEZE)
def unsqueeze(args: OpArgs) -> relax.Expr:
    """input, axes -> output with size-1 axes inserted (axes index the output).

    Reference: the spec; numpy.expand_dims with a tuple of axes.
    """
    x = args.tensor("input")
    out_rank = len(args.shape(x)) + len(args.ints("axes"))
    return relax.op.expand_dims(x, sorted(args.axes("axes", out_rank, what=" for the output")))
