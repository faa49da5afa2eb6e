"""ABS, COS, SIN, EXP, LOG, FLOOR, RSQRT, SQUARE, ASSIGN and CAST against numpy references
written from the spec."""

import enum
import itertools

import numpy as np
import pytest
from oputil import PRECISION, UNKNOWN, In, Out, check_op, check_quantized, expect_error, i32, q8_input, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType


def _id(value) -> str:
    return value.name if isinstance(value, enum.Enum) else str(value)


P = nna.Precision
EXACT = {"rtol": 0, "atol": 0}
# TVM's llvm math (cos, sin, exp, log, 1/sqrt) may differ from numpy's libm by a few ulp.
LIBM = {"rtol": 1e-5, "atol": 1e-6}

# op -> (numpy reference, input range)
UNARY = {
    OP.ABS: (np.abs, (-3.0, 3.0)),
    OP.COS: (np.cos, (-4.0, 4.0)),
    OP.SIN: (np.sin, (-4.0, 4.0)),
    OP.EXP: (np.exp, (-3.0, 3.0)),
    OP.LOG: (np.log, (0.05, 5.0)),
    OP.FLOOR: (np.floor, (-3.0, 3.0)),
    OP.RSQRT: (lambda x: np.float32(1) / np.sqrt(x), (0.05, 5.0)),
    OP.SQUARE: (np.square, (-3.0, 3.0)),
}
SHAPES = [(7,), (3, 4), (2, 3, 4), (2, 1, 3, 4), (1, 2, 3, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"rank{len(s)}")
@pytest.mark.parametrize("op", list(UNARY), ids=_id)
def test_unary(op, shape):
    ref, (low, high) = UNARY[op]
    x = rand(*shape, seed=len(shape), low=low, high=high)
    check_op(op, [In(x)], ref(x), **LIBM)


@pytest.mark.parametrize(
    "op,x,expected",
    [
        (OP.LOG, [0.0, -1.0, 1.0, np.inf], [-np.inf, np.nan, 0.0, np.inf]),
        (OP.RSQRT, [0.0, -1.0, 4.0, np.inf], [np.inf, np.nan, 0.5, 0.0]),
        (OP.FLOOR, [-0.5, -2.0, 2.0, 2.999, -0.0, 1e8], [-1.0, -2.0, 2.0, 2.0, -0.0, 1e8]),
        (OP.EXP, [-np.inf, 0.0, 100.0, -200.0], [0.0, 1.0, np.inf, 0.0]),
        (OP.ABS, [-0.0, -np.inf, np.nan, -1.5], [0.0, np.inf, np.nan, 1.5]),
    ],
    ids=lambda v: v.name if isinstance(v, OP) else None,
)
def test_unary_special_values(op, x, expected):
    """IEEE edge cases, spelled out from the math (not computed by numpy)."""
    x, expected = np.asarray(x, "float32"), np.asarray(expected, "float32")
    # Every expected value is exact (0, +-1, 0.5, +-inf, NaN, integers).
    check_op(op, [In(x)], expected, **EXACT)


@pytest.mark.parametrize("op", [OP.EXP, OP.FLOOR], ids=lambda o: o.name)
def test_unary_unknown_dims(op):
    """Dimensions declared UNKNOWN when the model is built, fed 2 x 3 x 4."""
    ref, (low, high) = UNARY[op]
    x = rand(2, 3, 4, seed=5, low=low, high=high)
    dims = [UNKNOWN, 3, UNKNOWN]
    check_op(op, [In(x, dims=dims)], ref(x), [Out(dims=dims)], **LIBM)


# Output scales chosen so that 127 steps cover each operation's range on the input range.
Q_OUT_SCALE = {
    OP.ABS: 0.025,
    OP.COS: 0.01,
    OP.SIN: 0.01,
    OP.EXP: 0.2,
    OP.LOG: 0.03,
    OP.FLOOR: 0.025,
    OP.RSQRT: 0.04,
    OP.SQUARE: 0.075,
}


@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
def test_unary_quantized(op):
    ref, (low, high) = UNARY[op]
    x, x_real = q8_input(rand(2, 3, 4, seed=6, low=low, high=high), 0.04)
    check_quantized(op, [x], ref(x_real), Q_OUT_SCALE[op])


def test_unary_quantized_saturates():
    """EXP's result beyond the output's range saturates to 127."""
    x, x_real = q8_input(np.array([3.0, 3.5, 4.0], "float32"), 0.04)
    got = check_quantized(OP.EXP, [x], np.exp(x_real), 0.1)
    assert (got == 127).all()


# -- ASSIGN --------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_assign(shape):
    x = rand(*shape, seed=7)
    check_op(OP.ASSIGN, [In(x)], x.copy(), **EXACT)


@pytest.mark.parametrize("out_scale", [0.02, 0.05], ids=["same_scale", "other_scale"])
def test_assign_quantized(out_scale):
    """Same scale: the int8 values are copied (lsb=0); another scale: requantized."""
    x, x_real = q8_input(rand(3, 4, seed=8), 0.02)
    got = check_quantized(OP.ASSIGN, [x], x_real, out_scale, lsb=0 if out_scale == 0.02 else 1)
    if out_scale == 0.02:
        np.testing.assert_array_equal(got, x.value)


# -- CAST ----------------------------------------------------------------------

# uint16/32/64 are not in the spec; op_schema.py widens CAST to them for ONNX models.
NUMERIC = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
DTYPES = ["bool", *NUMERIC]


def _cast_source(src: str, dst: str) -> np.ndarray:
    """Values of ``src`` whose conversion to ``dst`` numpy defines (no out-of-range float -> int).

    Integer sources include values that wrap in narrower integer targets (numpy's modular
    conversion); float sources include fractions of both signs (truncation toward zero) and
    zeros of both signs.
    """
    if src == "bool":
        return np.array([True, False, True, True, False, False])
    if src.startswith("float"):
        values = [-99.75, -2.5, -1.5, -0.75, -0.0, 0.0, 0.25, 0.5, 1.0, 1.999, 2.5, 99.9]
        if dst in ("int8", "uint8"):
            values = [v for v in values if -100 < v < 100]
        if dst.startswith("u"):
            values = [abs(v) for v in values]
        return np.array(values, src)
    info = np.iinfo(src)
    values = [info.min, -300, -129, -128, -3, -1, 0, 1, 2, 127, 128, 255, 256, 300, 70000, info.max]
    return np.array([v for v in values if info.min <= v <= info.max], src)


@pytest.mark.parametrize("src,dst", list(itertools.product(DTYPES, DTYPES)), ids=lambda d: d)
def test_cast(src, dst):
    x = _cast_source(src, dst)
    x = x.reshape([(x.size,), (1, x.size), (x.size, 1, 1)][len(src + dst) % 3])
    with np.errstate(over="ignore"):  # int32/int64 extremes overflow float16 to inf, as IEEE rounds
        expected = (x != 0) if dst == "bool" else x.astype(dst)
    # Conversions between these types are exact or correctly rounded (float16 targets) on both sides.
    check_op(OP.CAST, [In(x, PRECISION[src]), i32([PRECISION[dst]])], expected, [Out(PRECISION[dst])], **EXACT)


@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
def test_cast_nan_inf_to_bool(src):
    """NaN and infinities are nonzero, so they cast to true (numpy: x != 0)."""
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], src)
    expected = np.array([True, True, True, False, False])
    check_op(OP.CAST, [In(x, PRECISION[src]), i32([P.BOOL8])], expected, [Out(P.BOOL8)])


@pytest.mark.parametrize("dst", ["int32", "int64"])
@pytest.mark.parametrize("src", ["float32", "float64"])
def test_cast_out_of_range_float_to_int32_int64_gives_the_minimum(src, dst):
    """A float outside the target's range, +-inf or NaN gives the type's minimum (x86's "integer
    indefinite", what numpy and onnxruntime give; ONNX leaves it undefined), in range it truncates; and
    a cast back to float keeps that (TVM folded the round trip into trunc(x): 3e9 -> 3e9, a fuzz finding)."""
    info = np.iinfo(dst)
    big = float(2 ** (info.bits - 1))
    x = np.array([2.5, -2.5, big * 1.5, -big * 1.5, np.inf, -np.inf, np.nan, -7.9, 0.0], src)
    inside = (x >= -big) & (x < big)
    with np.errstate(invalid="ignore"):
        expected = np.where(inside, np.trunc(np.where(inside, x, 0)), info.min).astype(dst)
    check_op(OP.CAST, [In(x, PRECISION[src]), i32([PRECISION[dst]])], expected, [Out(PRECISION[dst])], **EXACT)


@pytest.mark.parametrize("rank", [4, 5])
def test_cast_high_rank(rank):
    x = rand(*([2] * rank), seed=9, low=-5, high=5)
    check_op(OP.CAST, [In(x), i32([P.INT32])], x.astype("int32"), [Out(P.INT32)])


@pytest.mark.parametrize("code", [P.QUANT_INT8_SYMM_PER_LAYER, 12, 99], ids=str)
def test_cast_invalid_dtype(code):
    x = rand(2, 3, seed=10)
    expect_error(lambda: run_op(OP.CAST, [In(x), i32([int(code)])], [Out()], [x.shape]), "CAST", "input 1 'dtype'")
