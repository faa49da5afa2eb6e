"""Tensor operations outside NNAdapter's standard set (nnadapter-tvm's built-in extensions, codes
2103-2106): EINSUM, COL2IM, DET and REVERSE_SEQUENCE, the ONNX operators of the same names.

EINSUM is Relax's einsum; the others are TE computes (Relax has nothing for them): COL2IM a gather
of the patches that cover each output pixel (a reduction over the block, no scatter), DET an LU
elimination with partial pivoting in one TIR kernel, REVERSE_SEQUENCE a gather.
"""

from __future__ import annotations

import functools
import re

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.indexing import _static
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.tensor_ops import equation_text
from nnadapter_tvm.runtime.runtime_check import VALUE, data_checks_enabled
from nnadapter_tvm.types import OperationType as O

_TERM = re.compile(r"^(?:[A-Za-z]|\.\.\.)*$")


# -- EINSUM ----------------------------------------------------------------------------------------
def _einsum_terms(equation: str) -> tuple[list[str], str | None]:
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    return terms, (rhs if arrow else None)


@converter(O.EINSUM)
def einsum(args: OpArgs) -> relax.Expr:
    """inputs (1 or more tensors of one type), equation (UINT8: the equation's ASCII text, e.g.
    ``bij,bjk->bik``; spaces ignored) -> output.

    Einstein summation: each input's axes are labelled by a letter of its term ('...' for the
    leading broadcast axes); labels repeated within a term take the diagonal, labels missing from the
    output (given after '->', else the labels met once, in alphabetical order) are summed over.

    Reference: ONNX Einsum-12 (numpy.einsum's convention, as onnx.reference's implementation).
    """
    if not args.operand("equation").is_constant:
        args.fail("must be a constant (the equation's ASCII bytes)", "equation")
    try:
        equation = equation_text(args.value("equation"))
    except UnicodeDecodeError:
        args.fail("must hold ASCII text", "equation")
    xs = args.tensors(0, args.index("equation"))
    terms, output = _einsum_terms(equation)
    if len(terms) != len(xs):
        args.fail(f"equation {equation!r} names {len(terms)} operands, {len(xs)} given", "equation")
    for k, (term, x) in enumerate(zip(terms, xs)):
        rank = len(args.shape(x))
        letters = len(term.replace("...", ""))
        if not _TERM.match(term) or ("..." not in term and letters != rank) or letters > rank:
            args.fail(f"term {term!r} of equation {equation!r} does not fit a tensor of rank {rank}", k)
        if str(x.ty.dtype) != str(xs[0].ty.dtype):
            args.fail(f"must have the element type of input 0 ({xs[0].ty.dtype}), got {x.ty.dtype}", k)
    if output is not None and not _TERM.match(output):
        args.fail(f"the output term {output!r} of equation {equation!r} is not letters and '...'", "equation")
    return relax.op.einsum(xs, equation)


# -- COL2IM ----------------------------------------------------------------------------------------
def _ints(args: OpArgs, name: str, count: int, default: int) -> list[int]:
    if not args.has(name):
        return [default] * count
    values = args.ints(name)
    if len(values) != count:
        args.fail(f"must hold {count} values (one per spatial axis), got {values}", name)
    return values


@converter(O.COL2IM)
def col2im(args: OpArgs) -> relax.Expr:
    """input [N, C * prod(block_shape), L], image_shape (INT32/INT64 [R], constant), block_shape
    ([R], constant), dilations ([R], optional: ones), pads ([2R]: begins then ends, optional: zeros),
    strides ([R], optional: ones) -> output [N, C, *image_shape].

    The inverse of im2col: every column l of the input holds one block of C x prod(block_shape) values
    taken from the padded image at block position l (L = prod of the block positions along each axis,
    ``(image + pad_begin + pad_end - dilation * (block - 1) - 1) // stride + 1``); each value is added
    back into its pixel, overlapping blocks summing, the padding dropped.

    Reference: ONNX Col2Im-18 (onnx.reference's col2im_naive_implementation).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    if len(shape) != 3:
        args.fail(f"must have rank 3 [N, C * prod(block_shape), L], got {shape}", "input")
    image, block = args.ints("image_shape"), args.ints("block_shape")
    rank = len(image)
    if rank == 0 or len(block) != rank:
        args.fail(f"must hold one size per axis of image_shape {image}, got {block}", "block_shape")
    if min(block) < 1 or min(image) < 1:
        args.fail(f"image_shape {image} and block_shape {block} must be positive", "block_shape")
    dilations, strides = _ints(args, "dilations", rank, 1), _ints(args, "strides", rank, 1)
    pads = _ints(args, "pads", 2 * rank, 0)
    if min(dilations) < 1 or min(strides) < 1 or min(pads) < 0:
        args.fail(f"dilations {dilations} and strides {strides} must be positive, pads {pads} >= 0")
    positions = [
        (image[d] + pads[d] + pads[d + rank] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(rank)
    ]
    if min(positions) < 1:
        args.fail(f"blocks {block} (dilations {dilations}) do not fit the padded image {image} (pads {pads})", "input")
    kernel, count = int(np.prod(block)), int(np.prod(positions))
    channels = shape[1]
    if _static(channels):
        if channels % kernel:
            args.fail(f"axis 1 ({channels}) must be a multiple of prod(block_shape) = {kernel}", "input")
    else:
        args.require_dims(
            tirx.EQ(tirx.floormod(channels, kernel), 0), channels, f"axis 1 must be a multiple of {kernel}", "input"
        )
    if _static(shape[2]):
        if shape[2] != count:
            args.fail(f"axis 2 must be the number of block positions {positions} = {count}, got {shape[2]}", "input")
    else:
        args.require_dims(
            tirx.EQ(shape[2], count), shape[2], f"axis 2 must be {count} (block positions {positions})", "input"
        )

    def compute(cols: te.Tensor) -> te.Tensor:
        ks = [te.reduce_axis((0, b), f"k{d}") for d, b in enumerate(block)]

        def at(n, c, *y):
            ok = tirx.const(True, "bool")
            flat_k, flat_l = tirx.const(0, "int64"), tirx.const(0, "int64")
            for d in range(rank):
                t = y[d].astype("int64") + pads[d] - ks[d].var.astype("int64") * dilations[d]
                pos = tirx.floordiv(t, strides[d])
                ok = tirx.And(ok, tirx.And(tirx.And(t >= 0, tirx.floormod(t, strides[d]) == 0), pos < positions[d]))
                flat_k = flat_k * block[d] + ks[d].var.astype("int64")
                flat_l = flat_l * positions[d] + tirx.Select(
                    tirx.And(t >= 0, pos < positions[d]), pos, tirx.const(0, "int64")
                )
            value = cols[n, c.astype("int64") * kernel + flat_k, flat_l]
            return te.sum(tirx.Select(ok, value, tirx.const(0, cols.dtype)), axis=ks)

        out_shape = [cols.shape[0], tirx.indexdiv(cols.shape[1], kernel), *image]
        return te.compute(out_shape, at, name="col2im")

    return args.emit_te(compute, x)


# -- DET -------------------------------------------------------------------------------------------
def _det_ir(ins, outs, *, n: int | tirx.PrimExpr):
    """Per matrix: Gaussian elimination with partial pivoting on a float64 copy (``work``); the
    determinant is the product of the pivots, negated per row swap, 0 at the first zero pivot."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    (x,) = ins
    out, work = outs
    f64 = "float64"
    with IRBuilder() as ib, T.serial(0, 1):
        x, out, work = T.buffer_proxy(x), T.buffer_proxy(out), T.buffer_proxy(work)

        def local(dtype):
            return T.buffer_proxy(T.alloc_buffer((1,), dtype, scope="local"))

        det, best, pivot = local(f64), local(f64), local("int64")
        with T.serial(0, out.shape[0]) as b:
            with T.serial(0, n) as i, T.serial(0, n) as j:
                work[b, i, j] = x[b, i, j].astype(f64)
            det[0] = tirx.const(1.0, f64)
            with T.serial(0, n) as k:
                pivot[0] = k.astype("int64")
                best[0] = tirx.abs(work[b, k, k])
                with T.serial(k + 1, n) as i, T.If(tirx.abs(work[b, i, k]) > best[0]), T.Then():
                    best[0] = tirx.abs(work[b, i, k])
                    pivot[0] = i.astype("int64")
                with T.If(pivot[0] != k.astype("int64")), T.Then():
                    det[0] = -det[0]
                    with T.serial(0, n) as j:
                        best[0] = work[b, k, j]
                        work[b, k, j] = work[b, pivot[0], j]
                        work[b, pivot[0], j] = best[0]
                det[0] = det[0] * work[b, k, k]
                with T.If(work[b, k, k] != tirx.const(0.0, f64)), T.Then(), T.serial(k + 1, n) as i:
                    best[0] = work[b, i, k] / work[b, k, k]
                    with T.serial(k + 1, n) as j:
                        work[b, i, j] = work[b, i, j] - best[0] * work[b, k, j]
            out[b] = det[0].astype(out.dtype)
    return ib.get()


@converter(O.DET)
def det(args: OpArgs) -> relax.Expr:
    """input (float, [*, M, M]) -> output ([*]): the determinant of each square matrix of the last
    two axes, computed in float64 (LU elimination with partial pivoting) and rounded to the type.

    Reference: ONNX Det-11 (numpy.linalg.det, onnx.reference's implementation).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    if len(shape) < 2:
        args.fail(f"must have rank >= 2 ([*, M, M]), got {shape}", "input")
    rows, cols = shape[-2], shape[-1]
    if _static(rows) and _static(cols):
        if rows != cols:
            args.fail(f"its last two axes must be equal (square matrices), got {shape}", "input")
    else:
        args.require_dims(tirx.EQ(rows, cols), rows if not _static(rows) else cols, "matrices must be square", "input")
    batch = shape[:-2]
    flat = args.emit(relax.op.reshape(x, [-1, rows, rows]))

    def compute(m: te.Tensor) -> list[te.Tensor]:
        kernel = functools.partial(_det_ir, n=m.shape[1])
        return te.extern([[m.shape[0]], list(m.shape)], [m], kernel, dtype=[str(m.dtype), "float64"], name="det")

    result = args.emit_te(compute, flat)
    return relax.op.reshape(relax.TupleGetItem(result, 0), batch)


# -- REVERSE_SEQUENCE ------------------------------------------------------------------------------
@converter(O.REVERSE_SEQUENCE)
def reverse_sequence(args: OpArgs) -> relax.Expr:
    """input (rank >= 2), sequence_lens (INT32/INT64 [batch]), batch_axis (default 1), time_axis
    (default 0, another axis) -> output (the input's shape).

    For each batch b, the first sequence_lens[b] elements along time_axis are reversed, the rest are
    copied. A length outside [0, the time axis' size] fails the execution naming ``sequence_lens``,
    its value and the range (the kernel never reads past the time axis whatever the length).

    Reference: ONNX ReverseSequence-10 (onnx.reference's implementation).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    if rank < 2:
        args.fail(f"must have rank >= 2, got {shape}", "input")
    batch_axis, time_axis = args.axis("batch_axis", rank, 1), args.axis("time_axis", rank, 0)
    if batch_axis == time_axis:
        args.fail(f"batch_axis and time_axis must differ, both are {batch_axis}", "time_axis")
    lens = args.tensor("sequence_lens")
    lens_shape = args.shape(lens)
    if len(lens_shape) != 1:
        args.fail(f"must be 1-D [batch], got {lens_shape}", "sequence_lens")
    steps = shape[time_axis]
    if _static(lens_shape[0]) and _static(shape[batch_axis]):
        if lens_shape[0] != shape[batch_axis]:
            args.fail(f"must hold one length per batch ({shape[batch_axis]}), got {lens_shape[0]}", "sequence_lens")
    else:
        dim = lens_shape[0] if not _static(lens_shape[0]) else shape[batch_axis]
        args.require_dims(
            tirx.EQ(lens_shape[0], shape[batch_axis]), dim, "must hold one length per batch", "sequence_lens"
        )
    if args.operand("sequence_lens").is_constant:
        values = args.value("sequence_lens")
        if _static(steps) and values.size and (values.min() < 0 or values.max() > steps):
            bad = values[(values < 0) | (values > steps)][0]
            args.fail(f"length {int(bad)} is out of range [0, {steps}] (the time axis)", "sequence_lens")
    elif data_checks_enabled():
        _check_lengths(args, lens, steps)

    def compute(data: te.Tensor, lengths: te.Tensor) -> te.Tensor:
        size = data.shape[time_axis].astype("int64")

        def at(*idx):
            t = idx[time_axis].astype("int64")
            n = tirx.max(tirx.min(lengths[idx[batch_axis]].astype("int64"), size), tirx.const(0, "int64"))
            src = tirx.Select(t < n, n - 1 - t, t)
            return data[(*idx[:time_axis], src, *idx[time_axis + 1 :])]

        return te.compute(data.shape, at, name="reverse_sequence")

    return args.emit_te(compute, x, lens)


def _check_lengths(args: OpArgs, lens: relax.Expr, steps) -> None:
    def worst(w: te.Tensor) -> te.Tensor:
        r1, r2 = te.reduce_axis((0, w.shape[0]), "l"), te.reduce_axis((0, w.shape[0]), "h")
        low = te.compute((1,), lambda _: te.min(w[r1].astype("int64"), axis=[r1]), name="len_min")
        high = te.compute((1,), lambda _: te.max(w[r2].astype("int64"), axis=[r2]), name="len_max")
        return te.compute((1,), lambda i: tirx.Select(low[0] < 0, low[0], high[0]), name="worst_len")

    text = f"[0, {steps}]" if _static(steps) else "[0, n] (n: the time axis' size at execution)"
    args.check_value(
        args.emit_te(worst, lens),
        lambda v: tirx.And(v >= 0, v <= steps),
        f"length {VALUE} is out of range {text}",
        "sequence_lens",
    )
