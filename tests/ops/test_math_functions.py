"""The math extensions ACOS, ACOSH, ASIN, ASINH, ATAN, ATANH, SINH, ERF, MOD and CUM_PROD
(op_converters/math_functions.py) against numpy / math references (ONNX's definitions of the operators).

Tolerances: the functions are held to 4 units in the last place of the result's type, measured against the
float64 (math.erf for ERF) value of the same input. TVM's intrinsics measure at most 1.3 ulp and our SINH and
ATANH kernels 2.3 ulp over wide samples; a cancelling composition (such as log((1 + x) / (1 - x)) / 2 near 0)
is millions of ulps off, so the bound tells exact from composed. MOD is exact (C's fmod): compared bit for
bit, signed zeros included. CUM_PROD multiplies in the same order as the reference, so float results agree to
rounding and integers exactly.
"""

import math

import numpy as np
import pytest
from oputil import UNKNOWN, In, Out, b8, expect_error, i32, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations.math_functions import (
    ACOS,
    ACOSH,
    ASIN,
    ASINH,
    ATAN,
    ATANH,
    CUM_PROD,
    ERF,
    MOD,
    SINH,
)

P = nna.Precision
FLOATS = {"float16": P.FLOAT16, "float32": P.FLOAT32, "float64": P.FLOAT64}

# Reference function and the sampled domain of each operation.
FUNCTIONS = {
    ACOS: (np.arccos, -1.0, 1.0),
    ACOSH: (np.arccosh, 1.0, 30.0),
    ASIN: (np.arcsin, -1.0, 1.0),
    ASINH: (np.arcsinh, -50.0, 50.0),
    ATAN: (np.arctan, -50.0, 50.0),
    ATANH: (np.arctanh, -1.0, 1.0),
    SINH: (np.sinh, -20.0, 20.0),
    ERF: (np.vectorize(math.erf, otypes=["float64"]), -5.0, 5.0),
}


def _samples(lo: float, hi: float, seed: int) -> np.ndarray:
    """Uniform values over [lo, hi] and values near the small end of the domain (where compositions cancel)."""
    uniform = np.random.default_rng(seed).uniform(lo, hi, 60)
    small = np.geomspace(1e-7, 0.5, 20)
    near = 1.0 + small if lo >= 1.0 else np.concatenate([small, -small]) if lo < 0 else small
    return np.concatenate([uniform, near, [lo, hi]])


def _ulps(got: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    return np.abs(got.astype("float64") - expected) / np.spacing(np.abs(expected).astype(dtype)).astype("float64")


@pytest.mark.parametrize("op", list(FUNCTIONS), ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_function(op, dtype):
    ref, lo, hi = FUNCTIONS[op]
    x = _samples(lo, hi, int(op)).astype(dtype).reshape(2, -1)
    got = run_op(op, [In(x, FLOATS[dtype])], [Out(FLOATS[dtype])], [x.shape])[0]
    assert got.dtype == np.dtype(dtype)
    expected = ref(x.astype("float64"))
    finite = np.isfinite(expected)
    assert np.nanmax(_ulps(got, expected, dtype)[finite]) <= 4
    np.testing.assert_array_equal(got[~finite], expected[~finite].astype(dtype))


@pytest.mark.parametrize("op", list(FUNCTIONS), ids=lambda o: o.name)
def test_function_float16(op):
    """FLOAT16: within one float16 ulp of the float64 value (TVM computes in float32 and rounds)."""
    ref, lo, hi = FUNCTIONS[op]
    hi = min(hi, 10.0)  # sinh(20) and acosh's larger values overflow or lose all float16 resolution
    x = _samples(lo, hi, int(op)).astype("float16")
    got = run_op(op, [In(x, P.FLOAT16)], [Out(P.FLOAT16)], [x.shape])[0]
    expected = ref(x.astype("float64"))
    finite = np.isfinite(expected)
    assert np.nanmax(_ulps(got, expected, "float16")[finite]) <= 1


# Special values: outside the domain NaN, at its ends infinities, -0 kept by the odd functions, NaN passed on.
SPECIAL = {
    ACOS: ([-1.0, 1.0, 1.5, -2.0, np.nan], [np.pi, 0.0, np.nan, np.nan, np.nan]),
    ACOSH: ([1.0, 0.5, np.inf, np.nan], [0.0, np.nan, np.inf, np.nan]),
    ASIN: ([-0.0, 1.0, -1.0, 1.5, np.nan], [-0.0, np.pi / 2, -np.pi / 2, np.nan, np.nan]),
    ASINH: ([-0.0, np.inf, -np.inf, np.nan], [-0.0, np.inf, -np.inf, np.nan]),
    ATAN: ([-0.0, np.inf, -np.inf, np.nan], [-0.0, np.pi / 2, -np.pi / 2, np.nan]),
    ATANH: ([-0.0, 1.0, -1.0, 1.5, -2.0, np.nan], [-0.0, np.inf, -np.inf, np.nan, np.nan, np.nan]),
    SINH: ([-0.0, np.inf, -np.inf, 100.0, np.nan], [-0.0, np.inf, -np.inf, np.sinh(100.0), np.nan]),
    ERF: ([-0.0, np.inf, -np.inf, 10.0, np.nan], [-0.0, 1.0, -1.0, 1.0, np.nan]),
}


@pytest.mark.parametrize("op", list(SPECIAL), ids=lambda o: o.name)
def test_function_special_values(op):
    x, expected = (np.array(v, "float64") for v in SPECIAL[op])
    got = run_op(op, [In(x, P.FLOAT64)], [Out(P.FLOAT64)], [x.shape])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-15)
    np.testing.assert_array_equal(np.signbit(got[expected == 0]), np.signbit(expected[expected == 0]))


def test_function_symbolic_shape():
    x = np.linspace(-0.9, 0.9, 12).astype("float32").reshape(3, 4)
    got = run_op(ATANH, [In(x, dims=[UNKNOWN, 4])], [Out(dims=[UNKNOWN, 4])], [x.shape])[0]
    assert np.max(_ulps(got, np.arctanh(x.astype("float64")), "float32")) <= 4


def test_function_rejects_integers():
    x = np.array([1, 2], "int32")
    expect_error(lambda: run_op(SINH, [In(x, P.INT32)], [Out(P.INT32)], [x.shape]), "SINH", "input")


# -- MOD -------------------------------------------------------------------------------------
MOD_A = [5.0, -5.0, 5.0, -5.0, 0.0, -0.0, np.inf, 3.0, np.nan, 6.0, -6.0, 7.5, -7.5, 1e-3, 5.3]
MOD_B = [np.inf, np.inf, -np.inf, -np.inf, -2.0, 2.0, 2.0, 0.0, 1.0, 3.0, 3.0, -2.0, 2.0, -0.3, 0.1]


@pytest.mark.parametrize("fmod", [False, True], ids=["floored", "fmod"])
@pytest.mark.parametrize("dtype", list(FLOATS))
def test_mod(fmod, dtype):
    a, b = np.array(MOD_A, dtype), np.array(MOD_B, dtype)
    p = FLOATS[dtype]
    with np.errstate(invalid="ignore"):
        expected = np.fmod(a, b) if fmod else np.mod(a, b)
    got = run_op(MOD, [In(a, p), In(b, p), b8([fmod])], [Out(p)], [a.shape])[0]
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


def test_mod_default_and_broadcast():
    """fmod omitted is false (the floored remainder); a symbolic batch broadcasts against a row."""
    a = np.random.default_rng(3).uniform(-10, 10, (3, 4)).astype("float32")
    b = np.array([3.0, -3.0, 0.7, -0.7], "float32")
    got = run_op(MOD, [In(a, dims=[UNKNOWN, 4]), In(b)], [Out(dims=[UNKNOWN, 4])], [a.shape])[0]
    np.testing.assert_array_equal(got, np.mod(a, b))


def test_mod_rejects_mixed_precisions():
    a, b = np.array([1.0], "float32"), np.array([1.0], "float64")
    expect_error(lambda: run_op(MOD, [In(a), In(b, P.FLOAT64)], [Out()], [a.shape]), "MOD", "input1")


# -- CUM_PROD --------------------------------------------------------------------------------
def _cum_prod_reference(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """ONNX CumProd, element by element: the product of x[j] for j before i (or after i with reverse), i
    itself included unless exclusive; an empty product is 1."""
    moved = np.moveaxis(x, axis, -1)
    out = np.empty_like(moved)
    n = moved.shape[-1]
    for i in range(n):
        js = range(i, n) if reverse else range(i + 1)
        js = [j for j in js if not (exclusive and j == i)]
        product = np.ones(moved.shape[:-1], x.dtype)
        for j in js:
            product = product * moved[..., j]
        out[..., i] = product
    return np.moveaxis(out, -1, axis)


CUM_PRECISIONS = {"float32": P.FLOAT32, "float64": P.FLOAT64, "int32": P.INT32, "int64": P.INT64}


@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", list(CUM_PRECISIONS))
def test_cum_prod(exclusive, reverse, axis, dtype):
    rng = np.random.default_rng(abs(axis) + 3 * exclusive + 7 * reverse)
    x = rng.uniform(-2, 2, (2, 3, 4)) if dtype.startswith("float") else rng.integers(-3, 4, (2, 3, 4))
    x = x.astype(dtype)
    p = CUM_PRECISIONS[dtype]
    got = run_op(CUM_PROD, [In(x, p), i32([axis]), b8([exclusive]), b8([reverse])], [Out(p)], [x.shape])[0]
    expected = _cum_prod_reference(x, axis, exclusive, reverse)
    if dtype.startswith("float"):
        np.testing.assert_allclose(got, expected, rtol=1e-6 if dtype == "float32" else 1e-14)
    else:
        np.testing.assert_array_equal(got, expected)


def test_cum_prod_defaults_symbolic():
    """axis, exclusive and reverse omitted: the last axis, inclusive, forward; a symbolic batch."""
    x = np.random.default_rng(5).uniform(0.5, 1.5, (3, 5)).astype("float32")
    got = run_op(CUM_PROD, [In(x, dims=[UNKNOWN, 5])], [Out(dims=[UNKNOWN, 5])], [x.shape])[0]
    np.testing.assert_allclose(got, _cum_prod_reference(x, -1, False, False), rtol=1e-6)


def test_cum_prod_integer_wraps():
    x = np.array([65536, 65536, 3], "int32")
    got = run_op(CUM_PROD, [In(x, P.INT32), i32([0])], [Out(P.INT32)], [x.shape])[0]
    np.testing.assert_array_equal(got, np.array([65536, 0, 0], "int32"))  # 2^32 wraps to 0


def test_cum_prod_bad_axis():
    x = np.ones((2, 3), "float32")
    expect_error(lambda: run_op(CUM_PROD, [In(x), i32([2])], [Out()], [x.shape]), "CUM_PROD", "axis", "2")


def test_operation_codes():
    """The operations are reached by their codes, as a model file names them."""
    codes = {2010: ACOS, 2011: ACOSH, 2012: ASIN, 2013: ASINH, 2014: ATAN, 2015: ATANH, 2016: SINH, 2017: ERF}
    codes.update({2020: MOD, 2030: CUM_PROD})
    assert {c: nna.OperationType(c) for c in codes} == codes
