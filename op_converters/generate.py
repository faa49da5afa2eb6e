"""Tensors made from values and shapes: FILL, FILL_LIKE, RANGE, SHAPE."""

from __future__ import annotations

import math

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import Key, OpArgs
from nnadapter_tvm.op_converters.reduce import index_dtype
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode


def _fill_value(args: OpArgs, i: Key) -> relax.Expr:
    """Operand ``i`` (one element, constant or not) as a rank-0 tensor of its own dtype."""
    dtype = args.input_type(i).dtype
    if args.operand(i).is_constant:
        value = args.value(i)
        if np.size(value) != 1:
            args.fail(f"must hold one value, got shape {list(np.shape(value))}", i)
        # relax.const needs the dtype spelled out: by default it narrows int64 to int32.
        return relax.const(np.reshape(value, []), dtype)
    value = args.raw_tensor(i)
    dims = args.shape(value)
    if all(isinstance(d, int) for d in dims) and math.prod(dims) != 1:
        args.fail(f"must hold one value, got shape {dims}", i)
    return relax.op.reshape(value, [])


@converter(O.FILL)
def fill(args: OpArgs) -> relax.Expr:
    """shape (1-D INT32/INT64), value (one FLOAT32/INT32/INT64/BOOL8 element) -> a tensor of ``shape``
    whose every element is ``value``, of ``value``'s precision.

    A constant ``shape`` gives static dimensions; a non-constant one (e.g. SHAPE's output) is read at
    run time and gives UNKNOWN dimensions.  ``value`` may be constant or not.
    Reference: the spec (Paddle's fill_constant).
    """
    value = _fill_value(args, "value")
    dtype = args.input_type("value").dtype
    if args.operand("shape").is_constant:
        shape = args.ints("shape")
        if any(d < 0 for d in shape):
            args.fail(f"dimensions must be non-negative, got {shape}", "shape")
        return relax.op.full(shape, value, dtype)
    computed = args.shape_values("shape")
    if computed is not None:  # computed from symbolic dimensions: the output's dims are those expressions
        negative = [d for d in computed if isinstance(d, int) and d < 0]
        if negative:
            args.fail(f"dimensions must be non-negative, got {computed}", "shape")
        symbolic = [d >= 0 for d in computed if not isinstance(d, int)]
        if symbolic:
            condition = tirx.all(*symbolic) if len(symbolic) > 1 else symbolic[0]
            value = args.require(args.emit(value), condition, "dimensions must be non-negative at execution", "shape")
        return relax.op.full(computed, value, dtype)
    shape_tensor = args.raw_tensor("shape")
    dims = args.shape(shape_tensor)
    if len(dims) != 1 or not isinstance(dims[0], int):
        args.fail(f"must be 1-D with a known length, got shape {dims}", "shape")
    out_dims = [tirx.Var(f"fill_d{a}", "int64") for a in range(dims[0])]
    # Bind the dimensions read at run time, check them, and only then allocate: a negative one made
    # TVM allocate a negative size (std::bad_alloc) or return an output of negative dimensions.
    args.match_cast(args.emit(relax.op.tensor_to_shape(relax.op.astype(shape_tensor, "int64"))), out_dims)
    nonnegative = tirx.all(*[d >= 0 for d in out_dims]) if len(out_dims) > 1 else out_dims[0] >= 0
    checked = args.require(shape_tensor, nonnegative, "dimensions must be non-negative at execution", "shape")
    shape = args.emit(relax.op.tensor_to_shape(relax.op.astype(checked, "int64")))
    y = args.emit(relax.op.full(shape, value, dtype))
    return args.match_cast(y, out_dims)


@converter(O.FILL_LIKE)
def fill_like(args: OpArgs) -> relax.Expr:
    """input, value (one FLOAT32/INT32/INT64/BOOL8 element) -> a tensor of ``input``'s shape whose every
    element is ``value``, of ``value``'s precision (``input``'s values and precision do not matter).

    Reference: the spec (Paddle's fill_any_like / full_like).
    """
    x = args.raw_tensor("input")
    value = _fill_value(args, "value")
    return relax.op.full_like(x, value, args.input_type("value").dtype)


_RANGE_OPERANDS = ("start", "end", "step")


@converter(O.RANGE)
def range_(args: OpArgs) -> relax.Expr:
    """start, end, step (constant FLOAT32 or INT32 scalars of one precision) -> the 1-D tensor
    [start, start + step, ...] of the values below ``end`` (above it for a negative step), of
    ``start``'s precision.

    As numpy.arange: the length is ceil((end - start) / step) (computed in float64), element i is
    start + i * step (float32 results are computed in float64 and rounded once).  A zero step or an
    empty range is invalid, as in Paddle's range.
    Reference: the spec; numpy.arange; Paddle's range for the checks.
    """
    if not all(args.operand(name).is_constant for name in _RANGE_OPERANDS):
        return _range_computed(args)
    start, end, step = (args.value(name) for name in _RANGE_OPERANDS)
    for name, v in zip(_RANGE_OPERANDS, (start, end, step)):
        if np.size(v) != 1:
            args.fail(f"must hold one value, got {np.size(v)}", name)
    dtype = str(args.input_type("start").dtype)
    start, end, step = (np.reshape(v, -1)[0].item() for v in (start, end, step))
    if step == 0:
        args.fail("must not be zero", "step")
    if dtype.startswith("int"):
        count = -((start - end) // step)  # exact integer ceil((end - start) / step)
    else:
        count = math.ceil((float(end) - float(start)) / float(step))
    if count <= 0:
        args.fail(f"the range [{start}, {end}) with step {step} is empty", "step")
    # Built from 0 .. count-1 (Relax's arange miscounts integer ranges with a negative step).
    work = "int64" if dtype.startswith("int") else "float64"
    positions = relax.op.astype(relax.op.arange(0, count, 1, "int64"), work)
    values = relax.op.add(relax.op.multiply(positions, relax.const(step, work)), relax.const(start, work))
    return relax.op.astype(values, dtype)


def _range_computed(args: OpArgs) -> relax.Expr:
    """RANGE over integers computed from symbolic dimensions (a sequence length, say): the length
    ceil((end - start) / step) is an expression over them, checked positive at execution."""
    values = [args.shape_values(name) for name in _RANGE_OPERANDS]
    for name, v in zip(_RANGE_OPERANDS, values):
        if v is None:
            args.fail(
                "must be a constant or computed from dimensions (it depends on data)",
                name,
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        if len(v) != 1:
            args.fail(f"must hold one value, got {len(v)}", name)
    start, end, step = (v[0] for v in values)
    dtype = str(args.input_type("start").dtype)
    if not dtype.startswith("int"):
        args.fail("a FLOAT32 range must be constant", "start", ResultCode.FEATURE_NOT_SUPPORTED)
    if not isinstance(step, int):
        args.fail("the step must be a constant", "step", ResultCode.FEATURE_NOT_SUPPORTED)
    if step == 0:
        args.fail("must not be zero", "step")
    start_e = tirx.const(start, "int64") if isinstance(start, int) else start
    end_e = tirx.const(end, "int64") if isinstance(end, int) else end
    span = end_e - start_e if step > 0 else start_e - end_e
    count = tirx.floordiv(span + (abs(step) - 1), abs(step))
    values = args.emit_te(lambda: te.compute([count], lambda k: (start_e + k * step).astype(dtype), name="range"))
    return args.require(values, count > 0, "the range is empty at execution", "step")


@converter(O.SHAPE)
def shape(args: OpArgs) -> relax.Expr:
    """input, dtype (INT32 = 5 or INT64 = 7) -> the 1-D tensor of ``input``'s dimensions, as ``dtype``.

    UNKNOWN dimensions are read at run time from the tensor actually fed.
    Reference: the spec.
    """
    x = args.raw_tensor("input")
    dtype = index_dtype(args, "dtype")
    y = relax.op.shape_to_tensor(relax.op.shape_of(x))
    return relax.op.astype(y, dtype) if dtype != "int64" else y
