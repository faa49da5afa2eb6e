"""Splitting and stacking: SPLIT, STACK, UNSTACK, MESHGRID, and CHANNEL_SHUFFLE (channels split into
groups and interleaved).

All of these only move (or replicate) elements, so a quantized input whose output has the same
scale comes back bit-exact: dequantize, move, requantize is the identity on the moved values.
"""

from __future__ import annotations

from tvm import relax

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.indexing import _same_dim, _static
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode


def _outputs(args: OpArgs, exprs: list[relax.Expr], what: str) -> list[relax.Expr]:
    """Fail naming the operation unless it declares exactly one output per expression."""
    if args.output_count != len(exprs):
        args.fail(f"has {args.output_count} output operands, {what} gives {len(exprs)}")
    return exprs


def _tuple_items(args: OpArgs, expr: relax.Expr, count: int) -> list[relax.Expr]:
    var = args.emit(expr)
    return [relax.TupleGetItem(var, i) for i in range(count)]


@converter(O.SPLIT)
def split(args: OpArgs) -> list[relax.Expr]:
    """input, axis, split (sizes; one -1 takes the rest) -> output0 .. output(n-1).

    Output ``i`` holds ``split[i]`` consecutive slices along ``axis``; the sizes must add up to
    the input's dimension.

    Reference: the spec; Paddle's split for a -1 size.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    axis = args.axis("axis", len(shape))
    sizes = args.ints("split")
    dim = shape[axis]
    if not sizes:
        args.fail("must hold at least one size", "split")
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        args.fail(f"sizes must be non-negative (one -1 may stand for the rest), got {sizes}", "split")
    if -1 in sizes:
        if not _static(dim):
            args.fail(f"a -1 size needs a known dimension {axis}", "split", ResultCode.FEATURE_NOT_SUPPORTED)
        rest = dim - sum(s for s in sizes if s != -1)
        if rest < 0:
            args.fail(f"sizes {sizes} exceed dimension {axis} ({dim})", "split")
        sizes = [rest if s == -1 else s for s in sizes]
    if _static(dim) and sum(sizes) != dim:
        args.fail(f"sizes {sizes} add up to {sum(sizes)}, dimension {axis} of the input is {dim}", "split")
    if not _static(dim):
        x = args.match_cast(x, [sum(sizes) if a == axis else d for a, d in enumerate(shape)])
    if args.output_count != len(sizes):
        args.fail(f"has {args.output_count} output operands, split gives {len(sizes)} sizes {sizes}", "split")
    if len(sizes) == 1:
        return [x]
    # One slice per piece rather than relax.op.split, which rejects zero-size pieces.
    pieces, start = [], 0
    for s in sizes:
        pieces.append(relax.op.strided_slice(x, [axis], [start], [start + s]))
        start += s
    return pieces


def _common_shape(args: OpArgs, tensors: list[relax.Expr]) -> list[relax.Expr]:
    """All inputs must have one shape: static mismatches fail, symbolic ones are checked at run time."""
    shapes = [args.shape(t) for t in tensors]
    rank = len(shapes[0])
    for i, s in enumerate(shapes):
        if len(s) != rank:
            args.fail(f"rank {len(s)} differs from input 0's rank {rank}", i)
    common = [next((s[a] for s in shapes if _static(s[a])), shapes[0][a]) for a in range(rank)]
    for i, s in enumerate(shapes):
        if any(_static(d) and _static(c) and d != c for d, c in zip(s, common)):
            args.fail(f"shape {s} differs from another input's {common} (all inputs must have one shape)", i)
        if any(not _same_dim(d, c) for d, c in zip(s, common)):
            tensors[i] = args.match_cast(tensors[i], common)
    return tensors


@converter(O.STACK)
def stack(args: OpArgs) -> relax.Expr:
    """input0 .. input(n-1) (one shape, rank R), axis in [-(R + 1), R] -> output of rank R + 1.

    ``output = numpy.stack(inputs, axis)``; a negative axis counts from the end of the output.

    Reference: the spec; Paddle's stack for the axis range (negative axis + R + 1).
    """
    tensors = _common_shape(args, args.tensors(0, args.index("axis")))
    rank = len(args.shape(tensors[0])) + 1
    axis = args.int("axis")
    if not -rank <= axis < rank:
        args.fail(f"axis {axis} is out of range [-{rank}, {rank}) for rank-{rank - 1} inputs", "axis")
    return relax.op.stack(tensors, axis % rank)


@converter(O.UNSTACK)
def unstack(args: OpArgs) -> list[relax.Expr]:
    """input, axis, num (= the size of ``axis``) -> output0 .. output(num-1), each of rank R - 1.

    Output ``i`` is ``input`` indexed with ``i`` along ``axis`` (Paddle's unstack); a 1-D input gives
    rank-0 outputs, as Paddle-Lite's operation/unstack.cc infers (see reduce.at_least_1d).

    Reference: the header (not in the spec); Paddle's unstack.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    axis = args.axis("axis", len(shape))
    num = args.int("num")
    dim = shape[axis]
    if num <= 0 or (_static(dim) and num != dim):
        args.fail(f"num {num} must equal the size of axis {axis} ({dim})", "num")
    if not _static(dim):
        x = args.match_cast(x, [num if a == axis else d for a, d in enumerate(shape)])
    items = [relax.op.squeeze(relax.op.strided_slice(x, [axis], [i], [i + 1]), [axis]) for i in range(num)]
    return _outputs(args, items, f"num {num}")


@converter(O.MESHGRID)
def meshgrid(args: OpArgs) -> list[relax.Expr]:
    """input0 .. input(n-1) (1-D, sizes d0 .. d(n-1)) -> output0 .. output(n-1), each [d0, .., d(n-1)].

    ``output_i[j0, .., j(n-1)] = input_i[j_i]`` ('ij' indexing, numpy.meshgrid(..., indexing='ij')).

    Reference: the spec; Paddle's meshgrid.
    """
    tensors = args.tensors(0)
    for i, t in enumerate(tensors):
        if len(args.shape(t)) != 1:
            args.fail(f"must be 1-D, got shape {args.shape(t)}", i)
    if args.output_count != len(tensors):
        args.fail(f"has {args.output_count} output operands, expected one per input ({len(tensors)})")
    if len(tensors) == 1:
        return [tensors[0]]
    return _tuple_items(args, relax.op.meshgrid(tensors, "ij"), len(tensors))


@converter(O.CHANNEL_SHUFFLE)
def channel_shuffle(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], group (INT32, or FLOAT32 holding an integer; positive, divides C) -> output
    of the same shape.

    ``output[:, k * group + g] = input[:, g * (C / group) + k]``: reshape to
    [N, group, C / group, H, W], swap the two channel axes, reshape back.  The spec types ``group``
    FLOAT32 and the header INT32; both are accepted.

    Reference: the spec; Paddle's channel_shuffle (NCHW).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    if len(shape) != 4:
        args.fail(f"must be 4-D [N, C, H, W], got shape {shape}", "input")
    n, c, h, w = shape
    group = args.float("group")
    if not group.is_integer():
        args.fail(f"group {group} must be an integer", "group")
    group = int(group)
    if not _static(c):
        args.fail("needs a known channel dimension", "input", ResultCode.FEATURE_NOT_SUPPORTED)
    if group <= 0 or c % group:
        args.fail(f"group {group} must be positive and divide the {c} channels", "group")
    y = relax.op.reshape(x, [n, group, c // group, h, w])
    y = relax.op.permute_dims(y, [0, 2, 1, 3, 4])
    return relax.op.reshape(y, shape)
