"""EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL, AND, OR, XOR, NOT and WHERE
against numpy references written from the spec.

Comparisons and logical operations give BOOL8, and WHERE only selects values, so every
comparison is exact.
"""

import numpy as np
import pytest
from oputil import UNKNOWN, In, Out, b8, check_op, check_quantized, expect_error, q8_const, q8_input, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType


P = nna.Precision

COMPARE = {
    OP.EQUAL: np.equal,
    OP.NOT_EQUAL: np.not_equal,
    OP.GREATER: np.greater,
    OP.GREATER_EQUAL: np.greater_equal,
    OP.LESS: np.less,
    OP.LESS_EQUAL: np.less_equal,
}
LOGICAL = {OP.AND: np.logical_and, OP.OR: np.logical_or, OP.XOR: np.logical_xor}
# One broadcasting pair per output rank 1 to 5 (rank 1 against a scalar-like [1]).
BROADCAST = [
    ((5,), (1,)),
    ((2, 3), (3,)),
    ((2, 1, 4), (3, 1)),
    ((1, 3, 4, 1), (2, 3, 1, 2)),
    ((2, 1, 3, 1, 2), (3, 4, 1)),
]


def _rank_id(shapes) -> str:
    return f"rank{max(len(s) for s in shapes)}"


PRECISION = {"float32": P.FLOAT32, "int32": P.INT32, "int64": P.INT64, "bool": P.BOOL8}


def _values(shape, dtype, seed):
    """Small integers (as ``dtype``) so that equal pairs occur often."""
    v = np.random.default_rng(seed).integers(-2, 3, shape)
    if dtype == "bool":
        return v > 0
    if dtype == "float32":
        return (v / 2).astype("float32")  # halves: exact in float32
    return v.astype(dtype)


def _bools(shape, seed):
    return np.random.default_rng(seed).integers(0, 2, shape).astype(bool)


@pytest.mark.parametrize("op", list(COMPARE), ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", list(PRECISION))
def test_compare_precisions(op, dtype):
    a, b = _values((3, 4), dtype, 1), _values((3, 4), dtype, 2)
    check_op(op, [In(a, PRECISION[dtype]), In(b, PRECISION[dtype])], COMPARE[op](a, b))


@pytest.mark.parametrize("shapes", BROADCAST, ids=_rank_id)
@pytest.mark.parametrize("op", list(COMPARE), ids=lambda o: o.name)
def test_compare_broadcasting(op, shapes):
    """Each comparison on every output rank 1 to 5, with broadcasting."""
    a, b = _values(shapes[0], "float32", 3), _values(shapes[1], "float32", 4)
    check_op(op, [In(a), In(b)], COMPARE[op](a, b))


@pytest.mark.parametrize("op", list(COMPARE), ids=lambda o: o.name)
def test_compare_special_values(op):
    """NaN compares unequal to everything (also itself); infinities and signed zeros order as IEEE."""
    a = np.array([np.nan, np.nan, 1.0, np.inf, -np.inf, 0.0, -0.0], "float32")
    b = np.array([np.nan, 1.0, np.nan, np.inf, 3.0, -0.0, 0.0], "float32")
    check_op(op, [In(a), In(b)], COMPARE[op](a, b))


@pytest.mark.parametrize("op", list(COMPARE), ids=lambda o: o.name)
def test_compare_int64_beyond_float(op):
    """int64 values that float32 (or float64) could not tell apart are compared exactly."""
    base = np.int64(2**62)
    a = np.array([base, base + 1, base - 1, -base], "int64")
    b = np.array([base + 1, base + 1, base, -base - 1], "int64")
    check_op(op, [In(a, P.INT64), In(b, P.INT64)], COMPARE[op](a, b))


@pytest.mark.parametrize("op", list(COMPARE), ids=lambda o: o.name)
@pytest.mark.parametrize("scales", [(0.1, 0.1), (0.1, 0.05)], ids=["same_scale", "other_scale"])
def test_compare_quantized(op, scales):
    """Quantized inputs compare by their real values, also when their scales differ.

    With scales 0.1 and 0.05, q1 = 2 * q0 represents the same real value (0.05f is exactly
    0.1f / 2), so equal pairs occur.
    """
    q0 = np.random.default_rng(5).integers(-6, 7, (2, 3, 4))
    ratio = round(scales[0] / scales[1])
    q1 = np.where(np.random.default_rng(6).random((2, 3, 4)) < 0.5, q0 * ratio, q0 * ratio + 1)
    a, a_real = q8_input((q0 * scales[0]).astype("float32"), scales[0])
    b, b_real = q8_input((q1 * scales[1]).astype("float32"), scales[1])
    check_op(op, [a, b], COMPARE[op](a_real, b_real))


@pytest.mark.parametrize("op", [OP.GREATER, OP.EQUAL], ids=lambda o: o.name)
def test_compare_quantized_constant_broadcast(op):
    """A quantized constant input1 of another scale, broadcast along the first axis."""
    a, a_real = q8_input(rand(2, 3, seed=7), 0.02)
    b, b_real = q8_const(np.array([0.5, -0.04, 1.0], "float32"), 0.04)
    check_op(op, [a, b], COMPARE[op](a_real, b_real))


def test_compare_unknown_dims():
    a, b = _values((2, 3), "int32", 8), _values((3,), "int32", 9)
    check_op(OP.LESS, [In(a, P.INT32, dims=[UNKNOWN, 3]), In(b, P.INT32)], a < b, [Out(P.BOOL8, dims=[UNKNOWN, 3])])


@pytest.mark.parametrize("op", [OP.EQUAL, OP.AND], ids=lambda o: o.name)
def test_binary_shapes_do_not_broadcast(op):
    a, b = _bools((2, 3), 10), _bools((4,), 11)
    expect_error(
        lambda: run_op(op, [In(a, P.BOOL8), In(b, P.BOOL8)], [Out(P.BOOL8)], [(2, 3)]),
        op.name,
        "input 1 'input1'",
        "does not broadcast",
    )


# -- AND, OR, XOR, NOT --------------------------------------------------------


@pytest.mark.parametrize("shapes", BROADCAST, ids=_rank_id)
@pytest.mark.parametrize("op", list(LOGICAL), ids=lambda o: o.name)
def test_logical(op, shapes):
    a, b = _bools(shapes[0], 12), _bools(shapes[1], 13)
    check_op(op, [In(a, P.BOOL8), In(b, P.BOOL8)], LOGICAL[op](a, b))


@pytest.mark.parametrize("op", list(LOGICAL), ids=lambda o: o.name)
def test_logical_truth_table(op):
    """All four input pairs, input1 a constant."""
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    check_op(op, [In(a, P.BOOL8), b8(b)], LOGICAL[op](a, b))


@pytest.mark.parametrize(
    "shape", [(2,), (2, 3), (2, 3, 4), (1, 2, 3, 2), (2, 1, 2, 3, 2)], ids=lambda s: f"rank{len(s)}"
)
def test_not(shape):
    a = _bools(shape, 14)
    check_op(OP.NOT, [In(a, P.BOOL8)], ~a)


# -- WHERE ---------------------------------------------------------------------

WHERE_SHAPES = [
    ((5,), (5,), (5,)),
    ((2, 3), (3,), (2, 1)),
    ((3, 1), (1, 4), (4,)),
    ((2, 1, 3, 1), (4, 1, 1), (1, 3, 2)),
    ((1,), (2, 1, 3, 2, 2), (3, 1, 1)),
    ((2, 3, 1, 1, 2), (1,), (1, 4, 1)),
]


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=str)
def test_where(shapes):
    cond, x, y = _bools(shapes[0], 15), rand(*shapes[1], seed=16), rand(*shapes[2], seed=17)
    check_op(OP.WHERE, [In(cond, P.BOOL8), In(x), In(y)], np.where(cond, x, y), rtol=0, atol=0)


def test_where_int32():
    cond = _bools((2, 3, 4), 18)
    x = np.random.default_rng(19).integers(-(2**31), 2**31, (2, 3, 4)).astype("int32")
    y = np.arange(4, dtype="int32")
    check_op(OP.WHERE, [In(cond, P.BOOL8), In(x, P.INT32), In(y, P.INT32)], np.where(cond, x, y))


def test_where_constant_condition():
    cond, x, y = np.array([True, False, True]), rand(2, 3, seed=20), rand(2, 3, seed=21)
    check_op(OP.WHERE, [b8(cond), In(x), In(y)], np.where(cond, x, y), rtol=0, atol=0)


@pytest.mark.parametrize("scales", [(0.02, 0.02, 0.02), (0.02, 0.05, 0.03)], ids=["same_scale", "other_scales"])
def test_where_quantized(scales):
    """Same scales: the chosen int8 values are copied (lsb=0); otherwise requantized from the real values."""
    cond = _bools((2, 3, 4), 22)
    x, x_real = q8_input(rand(2, 3, 4, seed=23), scales[0])
    y, y_real = q8_input(rand(3, 4, seed=24), scales[1])
    lsb = 0 if len(set(scales)) == 1 else 1
    check_quantized(OP.WHERE, [In(cond, P.BOOL8), x, y], np.where(cond, x_real, y_real), scales[2], lsb=lsb)


@pytest.mark.parametrize("bad", [1, 2])
def test_where_shapes_do_not_broadcast(bad):
    shapes = [(2, 3), (2, 3), (2, 3)]
    shapes[bad] = (4,)
    cond, x, y = _bools(shapes[0], 25), rand(*shapes[1]), rand(*shapes[2])
    name = ["condition", "input0", "input1"][bad]
    expect_error(
        lambda: run_op(OP.WHERE, [In(cond, P.BOOL8), In(x), In(y)], [Out()], [(2, 3)]),
        "WHERE",
        f"input {bad} '{name}'",
        "does not broadcast",
    )


def test_where_condition_must_broadcast():
    cond, x, y = _bools((4,), 26), rand(2, 3), rand(2, 3)
    expect_error(
        lambda: run_op(OP.WHERE, [In(cond, P.BOOL8), In(x), In(y)], [Out()], [(2, 3)]),
        "WHERE",
        "input 1 'input0'",
        "does not broadcast",
    )
