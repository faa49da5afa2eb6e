"""FILL, FILL_LIKE, RANGE and SHAPE against numpy references written from the spec: ranks 1-5,
every value precision, constant and run-time operands, quantized inputs, UNKNOWN dimensions, and
bad operands.  Apart from RANGE's float32 values, every comparison is exact."""

import numpy as np
import pytest
from oputil import UNKNOWN, Const, In, Out, P, b8, check_op, expect_error, f32, i32, i64, q8_input, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
EXACT = {"rtol": 0, "atol": 0}
SHAPES = [(4,), (2, 3), (2, 3, 4), (1, 2, 3, 2), (2, 1, 2, 3, 2)]
# One-element value operands of each precision FILL / FILL_LIKE accept.
VALUES = {
    "float32": Const(np.array([-1.25], "float32"), P.FLOAT32),
    "int32": Const(np.array([7], "int32"), P.INT32),
    "int64": Const(np.array([-(2**40)], "int64"), P.INT64),
    "bool": Const(np.array([True]), P.BOOL8),
}


def invalid(op, inputs, outputs, shapes, *words):
    """Compiling fails with INVALID_PARAMETER, naming the operation and ``words``."""
    expect_error(lambda: run_op(op, inputs, outputs, shapes), op.name, *words)


# -- FILL -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", list(VALUES))
def test_fill(shape, dtype):
    value = VALUES[dtype]
    shape_op = i64 if len(shape) % 2 else i32  # shape given as INT32 and as INT64
    check_op(OP.FILL, [shape_op(shape), value], np.full(shape, value.value[0], dtype), **EXACT)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_fill_value_fed_at_run_time(dtype):
    value = np.array([3], dtype)
    precision = P.FLOAT32 if dtype == "float32" else P.INT32
    check_op(OP.FILL, [i32([2, 3]), In(value, precision)], np.full((2, 3), 3, dtype), **EXACT)


def test_fill_scalar_shaped_value():
    # A value of shape [1, 1] still holds one element.
    check_op(OP.FILL, [i32([3, 2]), f32([[0.5]])], np.full((3, 2), 0.5, "float32"), **EXACT)


def test_fill_shape_fed_at_run_time():
    """A non-constant shape (e.g. SHAPE's output) is read at run time: the output dims are UNKNOWN."""
    shape = np.array([2, 1, 3], "int64")
    out = [Out(P.INT64, dims=[UNKNOWN] * 3)]
    check_op(OP.FILL, [In(shape, P.INT64), i64([5])], np.full((2, 1, 3), 5, "int64"), out, **EXACT)


def test_fill_negative_dimension():
    invalid(OP.FILL, [i32([2, -1]), f32([1])], [Out()], [(2, 1)], "'shape'", "non-negative")


@pytest.mark.parametrize("dims", [[-2, 3], [-2, -3], [-1, 0]], ids=str)
def test_fill_negative_dimension_fed_at_run_time(dims):
    """Found by tests/e2e/test_fuzz_models.py: a negative dimension read at run time made TVM allocate a negative
    size (std::bad_alloc, reported as OUT_OF_MEMORY) or, with an even count of them, return an output
    of negative dimensions (numpy's ValueError). Now checked before anything is allocated."""
    ins = [In(np.array(dims, "int32"), P.INT32), f32([1.5])]
    expect_error(
        lambda: run_op(OP.FILL, ins, [Out(dims=[UNKNOWN, UNKNOWN])], [None]),
        "FILL",
        "'shape'",
        "dimensions must be non-negative at execution",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_fill_value_with_two_elements():
    invalid(OP.FILL, [i32([2, 3]), f32([1, 2])], [Out()], [(2, 3)], "'value'", "one value")


# -- FILL_LIKE --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", list(VALUES))
def test_fill_like(shape, dtype):
    value = VALUES[dtype]
    check_op(OP.FILL_LIKE, [In(rand(*shape)), value], np.full(shape, value.value[0], dtype), **EXACT)


def test_fill_like_q8_input():
    # Only the input's shape matters; its quantization does not reach the output.
    q, _ = q8_input(rand(2, 3, seed=1), 0.1)
    check_op(OP.FILL_LIKE, [q, VALUES["int32"]], np.full((2, 3), 7, "int32"), **EXACT)


def test_fill_like_unknown_batch():
    x = rand(3, 2, 4, seed=2)
    out = [Out(P.BOOL8, dims=[UNKNOWN, 2, 4])]
    check_op(OP.FILL_LIKE, [In(x, dims=[UNKNOWN, 2, 4]), b8([False])], np.zeros((3, 2, 4), bool), out, **EXACT)


def test_fill_like_value_fed_at_run_time():
    x = rand(2, 2, seed=3)
    check_op(OP.FILL_LIKE, [In(x), In(np.array([-4], "int64"), P.INT64)], np.full((2, 2), -4, "int64"), **EXACT)


def test_fill_like_value_with_two_elements():
    invalid(OP.FILL_LIKE, [In(rand(2, 3)), i32([1, 2])], [Out(P.INT32)], [(2, 3)], "'value'", "one value")


# -- RANGE ------------------------------------------------------------------------------------


def range_ref(start, end, step, dtype):
    """numpy.arange: ceil((end - start) / step) elements start + i * step (in float64, rounded once)."""
    count = int(np.ceil((float(end) - float(start)) / float(step)))
    values = float(start) + np.arange(count, dtype="float64") * float(step)
    return values.astype(dtype)


RANGES = [
    (0, 5, 1),
    (2, 11, 3),  # the last step overshoots end
    (-4, 4, 2),
    (5, -3, -3),  # negative step
    (10, 9, -1),  # one element
    (7, 8, 5),  # one element, step beyond end
]
FLOAT_RANGES = [
    (0.5, 2.0, 0.3),  # (2.0 - 0.5) / float32(0.3) is just below 5: 5 elements
    (0.0, 1.0, 0.1),
    (-1.5, 1.5, 0.75),
    (3.0, -1.0, -0.7),
    (1e-3, 2e-3, 2.5e-4),
]


@pytest.mark.parametrize("start,end,step", RANGES, ids=str)
def test_range_int32(start, end, step):
    check_op(OP.RANGE, [i32([start]), i32([end]), i32([step])], range_ref(start, end, step, "int32"), **EXACT)


@pytest.mark.parametrize("start,end,step", FLOAT_RANGES, ids=str)
def test_range_float32(start, end, step):
    start, end, step = (np.float32(v) for v in (start, end, step))
    # Computed in float64 and rounded once to float32, as the reference: equal up to the last ulp.
    check_op(OP.RANGE, [f32([start]), f32([end]), f32([step])], range_ref(start, end, step, "float32"), rtol=1e-7)


def test_range_float32_from_integers():
    check_op(OP.RANGE, [f32([0]), f32([4]), f32([1])], np.arange(4, dtype="float32"), **EXACT)


def test_range_zero_step():
    invalid(OP.RANGE, [i32([0]), i32([4]), i32([0])], [Out(P.INT32)], [(4,)], "'step'", "zero")


@pytest.mark.parametrize("start,end,step", [(0, 4, -1), (4, 0, 1), (3, 3, 1)], ids=str)
def test_range_empty(start, end, step):
    invalid(OP.RANGE, [i32([start]), i32([end]), i32([step])], [Out(P.INT32)], [(1,)], "'step'", "empty")


def test_range_start_with_two_values():
    invalid(OP.RANGE, [f32([0, 1]), f32([4]), f32([1])], [Out()], [(4,)], "'start'", "one value")


# -- SHAPE ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("code,dtype", [(5, "int32"), (7, "int64")], ids=["int32", "int64"])
def test_shape(shape, code, dtype):
    check_op(OP.SHAPE, [In(rand(*shape)), i32([code])], np.array(shape, dtype), **EXACT)


@pytest.mark.parametrize("code,dtype", [(5, "int32"), (7, "int64")], ids=["int32", "int64"])
def test_shape_unknown_dims(code, dtype):
    """UNKNOWN dimensions are read from the tensor fed at run time."""
    x = rand(3, 2, 5, seed=4)
    check_op(OP.SHAPE, [In(x, dims=[UNKNOWN, 2, UNKNOWN]), i32([code])], np.array([3, 2, 5], dtype), **EXACT)


def test_shape_q8_input():
    q, _ = q8_input(rand(2, 3, 4, seed=5), 0.1)
    check_op(OP.SHAPE, [q, i32([5])], np.array([2, 3, 4], "int32"), **EXACT)


def test_shape_bad_dtype():
    invalid(OP.SHAPE, [In(rand(2, 3)), i32([int(P.FLOAT32)])], [Out(P.INT32)], [(2,)], "'dtype'", "INT32 (5)")
