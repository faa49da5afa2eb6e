"""ADD, SUB, MUL, DIV, MAX, MIN, POW, FLOOR_DIV and SUM against numpy references written from the
spec, with broadcasting, every fuse_code and quantized inputs."""

import enum

import numpy as np
import pytest
from dynutil import check_sizes, compile_op, execute
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    build_model,
    check_op,
    check_quantized,
    expect_error,
    fuse,
    fuse_ref,
    q8_const,
    q8_input,
    rand,
    run_model,
    run_op,
)

import nnadapter_tvm as nna

OP = nna.OperationType


def _id(value) -> str:
    return value.name if isinstance(value, enum.Enum) else str(value)


REFS = {
    OP.ADD: np.add,
    OP.SUB: np.subtract,
    OP.MUL: np.multiply,
    OP.DIV: np.divide,
    OP.MAX: np.maximum,
    OP.MIN: np.minimum,
}
SHAPES = [((5,), (5,)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((1, 3, 4, 5), (2, 3, 1, 1)), ((2, 1, 3, 1, 2), (3, 4, 1))]


@pytest.mark.parametrize("op", list(REFS), ids=lambda o: o.name)
@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_binary_fuse_codes(op, code):
    a, b = rand(2, 3, 4, seed=1), rand(2, 3, 4, seed=2, low=0.5, high=3.0)
    # float32 arithmetic is exact-rounded on both sides; the tolerance only covers DIV's last ulp.
    check_op(op, [In(a), In(b), fuse(code)], fuse_ref(REFS[op](a, b), code), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", list(REFS), ids=lambda o: o.name)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_broadcasting(op, shapes):
    a, b = rand(*shapes[0], seed=3), rand(*shapes[1], seed=4, low=0.5, high=3.0)
    # as test_binary_fuse_codes: exact-rounded float32 on both sides, DIV's last ulp.
    check_op(op, [In(a), In(b), fuse(0)], REFS[op](a, b), rtol=1e-6, atol=1e-6)


def test_binary_unknown_dims():
    a, b = rand(2, 3, 4, seed=5), rand(3, 1, seed=6)
    dims = [UNKNOWN, 3, UNKNOWN]
    # float32 addition is correctly rounded on both sides.
    check_op(OP.ADD, [In(a, dims=dims), In(b), fuse(0)], a + b, [Out(dims=dims)], rtol=0, atol=0)


def test_binary_two_unknown_dims_compile_once_and_must_match():
    """Two inputs whose sizes are both unknown (as an upsampled feature map and a skip connection): the
    output takes the first's sizes, one compilation serves several sizes, and sizes that differ at
    execution fail with INVALID_DIMENSIONS naming the operation and operand."""
    dims = [UNKNOWN, 3, UNKNOWN]
    inputs = [In(rand(2, 3, 4), dims=dims), In(rand(2, 3, 4), dims=dims), fuse(int(nna.FuseCode.RELU))]
    compilation = compile_op(OP.ADD, inputs, [Out(dims=dims)])
    cases = []
    for k, (n, w) in enumerate([(1, 5), (3, 2)]):
        a, b = rand(n, 3, w, seed=10 + k), rand(n, 3, w, seed=20 + k)
        cases.append(([a, b], [np.maximum(a + b, 0)]))
    check_sizes(compilation, cases, rtol=0, atol=0)
    expect_error(
        lambda: execute(compilation, [rand(2, 3, 5), rand(2, 3, 4)]),
        "ADD",
        "input 1",
        "unknown until execution",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


@pytest.mark.parametrize("op", [OP.ADD, OP.POW, OP.FLOOR_DIV], ids=lambda o: o.name)
def test_binary_shapes_do_not_broadcast(op):
    a, b = rand(2, 3), rand(4)
    expect_error(
        lambda: run_op(op, [In(a), In(b), fuse(0)], [Out()], [(2, 3)]),
        op.name,
        "input 1 'input1'",
        "does not broadcast",
    )


def test_binary_invalid_fuse_code():
    a = rand(2, 3)
    expect_error(lambda: run_op(OP.MUL, [In(a), In(a), fuse(7)], [Out()], [(2, 3)]), "MUL", "input 2 'fuse_code'")


# -- quantized ADD, SUB, MUL, DIV, MAX, MIN, POW, FLOOR_DIV --------------------------

# input0 in [-2, 2] (scale 0.02), input1 in [0.5, 3] (scale 0.03); 127 output steps of 0.05 cover
# [-6.35, 6.35], every unfused result's range (MUL's [-6, 6] the widest).


@pytest.mark.parametrize("op", [*REFS, OP.FLOOR_DIV], ids=lambda o: o.name)
@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_binary_quantized(op, code):
    a, a_real = q8_input(rand(2, 3, 4, seed=7), 0.02)
    b, b_real = q8_input(rand(3, 4, seed=8, low=0.5, high=3.0), 0.03)
    ref = np.floor(a_real / b_real) if op == OP.FLOOR_DIV else REFS[op](a_real, b_real)
    check_quantized(op, [a, b, fuse(code)], fuse_ref(ref, code), out_scale=0.05)


@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_pow_quantized(code):
    """Bases in [0.1, 2] (scale 0.02), exponents in [-1, 3] (scale 0.03): results in [0.1, 8];
    127 steps of 0.07 cover [0, 8.89]."""
    a, a_real = q8_input(rand(2, 3, 4, seed=9, low=0.1, high=2.0), 0.02)
    b, b_real = q8_input(rand(4, seed=10, low=-1.0, high=3.0), 0.03)
    check_quantized(OP.POW, [a, b, fuse(code)], fuse_ref(np.power(a_real, b_real), code), out_scale=0.07)


def test_binary_quantized_constant():
    """A quantized constant input1 with its own scale, saturating where the sum leaves the output's range."""
    a, a_real = q8_input(rand(2, 3, seed=11), 0.02)
    b, b_real = q8_const(np.array([1.0, -1.5, 2.5], "float32"), 0.025)
    got = check_quantized(OP.ADD, [a, b, fuse(0)], a_real + b_real, out_scale=0.025)
    assert got.max() == 127  # 2.5 + x > 3.175 somewhere: saturated


# -- POW -----------------------------------------------------------------------


# Every broadcasting pair without activation, then each other fuse_code on one pair.
SHAPES_CODES = [(s, nna.FuseCode.NONE) for s in SHAPES] + [(SHAPES[2], c) for c in list(nna.FuseCode)[1:]]


@pytest.mark.parametrize("shapes,code", SHAPES_CODES, ids=_id)
def test_pow(shapes, code):
    """Positive bases, any real exponent."""
    a, b = rand(*shapes[0], seed=12, low=0.1, high=3.0), rand(*shapes[1], seed=13, low=-2.0, high=3.0)
    # TVM's llvm powf and numpy's may differ by a few ulp.
    check_op(OP.POW, [In(a), In(b), fuse(code)], fuse_ref(np.power(a, b), code), rtol=1e-5, atol=1e-6)


def test_pow_special_cases():
    """Negative bases with integer exponents, x^0 = 1 (also 0^0), 0^-1 = inf, and NaN for a
    negative base with a fractional exponent (C's powf)."""
    a = np.array([-2.0, -2.0, -3.0, 0.0, 0.0, 5.0, 4.0, -8.0], "float32")
    b = np.array([2.0, 3.0, -1.0, 0.0, -1.0, 0.0, 0.5, 1.0 / 3.0], "float32")
    expected = np.array([4.0, -8.0, -1.0 / 3.0, 1.0, np.inf, 1.0, 2.0, np.nan], "float32")
    # Results are exact except -1/3 (a few ulp of libm's pow).
    check_op(OP.POW, [In(a), In(b), fuse(0)], expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("exponent_shape", [(), (1,), (1, 1)], ids=lambda s: f"exponent{list(s)}")
@pytest.mark.parametrize("exponent", [2.0, 3.0, 4.0, 2.5])
def test_pow_by_a_constant_small_integer(exponent, exponent_shape):
    """A constant exponent of 2, 3 or 4 (computed as products) against numpy's power in float64: signs,
    -0, infinities and NaN kept; an exponent of higher rank than the base broadcasts it; 2.5 stays pow."""
    a = np.array([[-2.5, -1.0, -0.0, 0.0, 0.3, 1.7, 11.0, -np.inf, np.inf, np.nan]], "float32")
    if len(exponent_shape) > 1:
        a = a.reshape(-1)  # rank 1 against a [1, 1] exponent: the output is [1, 10]
    b = np.full(exponent_shape, exponent, "float32")
    with np.errstate(invalid="ignore"):
        expected = np.power(a.astype("float64"), b.astype("float64")).astype("float32")
    check_op(OP.POW, [In(a), Const(b), fuse(0)], expected, rtol=1e-6, atol=0)


# -- FLOOR_DIV -----------------------------------------------------------------


@pytest.mark.parametrize("shapes,code", SHAPES_CODES, ids=_id)
def test_floor_div(shapes, code):
    a, b = rand(*shapes[0], seed=14, low=-10.0, high=10.0), rand(*shapes[1], seed=15, low=0.3, high=3.0)
    b = np.where(np.arange(b.size).reshape(b.shape) % 2 == 0, b, -b)  # divisors of both signs
    # floor of a correctly rounded float32 quotient: exact.
    check_op(OP.FLOOR_DIV, [In(a), In(b), fuse(code)], fuse_ref(np.floor(a / b), code), rtol=0, atol=0)


def test_floor_div_special_cases():
    """floor(input0 / input1) of the float32 quotient: rounds toward -inf for either sign, 1 / 0.1
    is 10 (numpy's floor_divide says 9), division by zero gives +-inf, 0 / 0 NaN."""
    a = np.array([7.0, -7.0, 7.0, -7.0, 6.0, 1.0, 1.0, -1.0, 0.0, 0.5], "float32")
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 0.1, 0.0, 0.0, 0.0, 1.0], "float32")
    expected = np.array([3.0, -4.0, -4.0, 3.0, 2.0, 10.0, np.inf, -np.inf, np.nan, 0.0], "float32")
    check_op(OP.FLOOR_DIV, [In(a), In(b), fuse(0)], expected, rtol=0, atol=0)


INT_TYPES = {
    "int8": nna.Precision.INT8,
    "uint8": nna.Precision.UINT8,
    "int16": nna.Precision.INT16,
    "uint16": nna.Precision.UINT16,
    "int32": nna.Precision.INT32,
    "uint32": nna.Precision.UINT32,
    "int64": nna.Precision.INT64,
    "uint64": nna.Precision.UINT64,
}


@pytest.mark.parametrize("dtype", list(INT_TYPES))
def test_floor_div_integers(dtype):
    """Integer FLOOR_DIV (widened beyond the spec for ONNX's integer Div and Mod) is numpy's
    floor_divide: rounds toward -inf for either sign; a zero divisor gives 0 (no trap) and the
    most negative value // -1 wraps to itself."""
    info = np.iinfo(dtype)
    if dtype.startswith("u"):
        a = np.array([7, 7, 0, 5, info.max, info.max, 9], dtype)
        b = np.array([2, 7, 3, 0, 1, 2, 10], dtype)
    else:
        a = np.array([7, -7, 7, -7, 6, 0, 5, -5, info.min, info.min, info.max, -1], dtype)
        b = np.array([2, 2, -2, -2, 3, 3, 0, 0, -1, 1, -1, 2], dtype)
    with np.errstate(divide="ignore", over="ignore"):
        expected = np.floor_divide(a, b)
    p = INT_TYPES[dtype]
    check_op(OP.FLOOR_DIV, [In(a, p), In(b, p), fuse(0)], expected, [Out(p)])


def test_floor_div_integer_broadcasting():
    a = np.arange(-12, 12, dtype="int32").reshape(2, 3, 4)
    b = np.array([[3], [-5], [0]], "int32")
    with np.errstate(divide="ignore"):
        expected = np.floor_divide(a, b)
    check_op(
        OP.FLOOR_DIV,
        [In(a, nna.Precision.INT32), In(b, nna.Precision.INT32), fuse(0)],
        expected,
        [Out(nna.Precision.INT32)],
    )


# -- SUM -----------------------------------------------------------------------

SUM_SHAPES = [
    [(5,)],
    [(2, 3), (2, 3)],
    [(3,), (2, 3), (2, 1)],
    [(2, 1, 4), (3, 1), (1,), (2, 3, 4)],
    [(1, 3, 1, 2), (2, 1, 4, 1), (2, 3, 4, 2)],
    [(2, 1, 3, 1, 2), (3, 4, 1), (1, 1, 1, 1, 1), (2, 1, 1, 4, 2), (2,)],
]


@pytest.mark.parametrize("shapes", SUM_SHAPES, ids=str)
def test_sum(shapes):
    xs = [rand(*s, seed=20 + i) for i, s in enumerate(shapes)]
    expected = xs[0].copy()
    for x in xs[1:]:
        expected = expected + x  # left to right, as the spec writes it
    # Same float32 additions in the same order on both sides; slack for a reassociating compiler.
    check_op(OP.SUM, [In(x) for x in xs], expected, rtol=1e-6, atol=1e-6)


def test_sum_constant_operand():
    x, c = rand(2, 3, seed=30), rand(3, seed=31)
    # as test_sum: the same float32 additions; slack for a reassociating compiler.
    check_op(OP.SUM, [In(x), Const(c), In(x)], x + c + x, rtol=1e-6, atol=1e-6)


def test_sum_quantized():
    """Three inputs of different scales summed by their real values, requantized to the output's scale;
    [-6, 6] fits 127 steps of 0.05."""
    ins = [q8_input(rand(2, 3, 4, seed=32 + i), s) for i, s in enumerate([0.02, 0.03, 0.016])]
    ins.append(q8_const(rand(4, seed=35), 0.02))
    expected = ins[0][1] + ins[1][1] + ins[2][1] + ins[3][1]
    check_quantized(OP.SUM, [q for q, _ in ins], expected, out_scale=0.07)


def test_sum_shapes_do_not_broadcast():
    xs = [rand(2, 3), rand(3), rand(4)]
    expect_error(
        lambda: run_op(OP.SUM, [In(x) for x in xs], [Out()], [(2, 3)]), "SUM", "input 2 'inputs'", "does not broadcast"
    )


@pytest.mark.parametrize("dtype", list(INT_TYPES))
def test_pow_integers(dtype):
    """Integer POW (widened beyond the spec for ONNX's integer Pow) is numpy's power: exact, and
    wrapping around on overflow (two's complement)."""
    info = np.iinfo(dtype)
    signed = not dtype.startswith("u")
    base = np.array([0, 1, 2, 3, 7, 2, 3, 5, 0, info.max, 2] + ([-2, -3, -1, -1, info.min] if signed else []), dtype)
    exponent = np.array([0, 9, 5, 4, 2, info.bits - 1, 41, 100, 3, 2, info.bits] + ([3, 4, 7, 8, 2] if signed else []))
    exponent = exponent.astype(dtype)
    with np.errstate(over="ignore"):
        expected = np.power(base, exponent)
    p = INT_TYPES[dtype]
    check_op(OP.POW, [In(base, p), In(exponent, p), fuse(0)], expected, [Out(p)])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_pow_integers_negative_exponent(dtype):
    """numpy refuses integers to negative powers; POW gives the truncated real result: 0, except
    1 ** -n = 1 and (-1) ** -n = +-1 (and 0 for 0 ** -n, which has none)."""
    base = np.array([1, -1, -1, 2, -3, 0, 5], dtype)
    exponent = np.array([-3, -3, -4, -1, -2, -1, -7], dtype)
    expected = np.array([1, -1, 1, 0, 0, 0, 0], dtype)
    p = INT_TYPES[dtype]
    check_op(OP.POW, [In(base, p), In(exponent, p), fuse(0)], expected, [Out(p)])


def test_pow_integer_broadcasting():
    base = np.arange(-3, 3, dtype="int64").reshape(2, 1, 3)
    exponent = np.array([[0], [1], [5], [31]], "int64")
    expected = np.power(base, exponent)
    p = INT_TYPES["int64"]
    check_op(OP.POW, [In(base, p), In(exponent, p), fuse(0)], expected, [Out(p)])


@pytest.mark.parametrize("op", [OP.MAX, OP.MIN, OP.ADD], ids=lambda o: o.name)
@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_nan_in_either_input_gives_nan(op, code):
    """numpy's maximum/minimum (and the fused activations' max(0, x)) propagate NaN from either side;
    [3, 4099] against a broadcast row, so the vectorized, parallel kernels are the ones checked."""
    rng = np.random.default_rng(13)
    a, b = rand(3, 4099, seed=13, low=-8.0, high=8.0), rand(4099, seed=14, low=-8.0, high=8.0)
    a.reshape(-1)[rng.choice(a.size, 200, replace=False)] = np.nan
    b[rng.choice(b.size, 80, replace=False)] = np.nan
    b[:3] = [np.inf, -np.inf, np.nan]
    want = fuse_ref(REFS[op](a, b), code)
    got = check_op(op, [In(a), In(b), fuse(code)], want, rtol=0, atol=0)[0]
    assert np.array_equal(np.isnan(got), np.isnan(want))


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3e38, -1e-40, 7.0, -0.5, 2.0], "float32")


@pytest.mark.parametrize("schedules", ["1", "0"], ids=["cpu_schedules", "no_schedules"])
@pytest.mark.parametrize("zero_dims", [[], [1]], ids=["rank0", "rank1"])
@pytest.mark.parametrize("zero_first", [False, True], ids=["x_op_0", "0_op_x"])
@pytest.mark.parametrize("op", [OP.MUL, OP.DIV, OP.ADD, OP.SUB], ids=lambda o: o.name)
def test_constant_zero_operand_follows_ieee(op, zero_first, zero_dims, schedules):
    """A constant 0 operand is computed, not folded: x * 0 and 0 / x are NaN for NaN and +-inf
    (numpy's IEEE results), 0 / 0 is NaN, x / 0 is +-inf and compiles, -0 + 0 is +0. TVM's constant
    folding would turn a 0 the kernel sees as an immediate into 0 (x * 0, 0 / x), x (x + 0) or a build
    error (x / 0); both the CPU schedules and TVM's own loops (CPU_SCHEDULES=0) are checked."""
    x = SPECIAL.reshape(2, 6)
    zero = np.zeros(zero_dims, "float32")
    operands = [Const(zero), In(x)] if zero_first else [In(x), Const(zero)]
    with np.errstate(all="ignore"):
        want = REFS[op](zero, x) if zero_first else REFS[op](x, zero)
    model = build_model(op, [*operands, fuse(0)], [Out()], [want.shape])
    got = run_model(model, [x], properties=f"CPU_SCHEDULES={schedules};")[0]
    np.testing.assert_array_equal(got, want)  # NaN where numpy has NaN, infinities equal
    assert np.array_equal(np.signbit(got), np.signbit(want)), (got, want)  # the sign of zeros too


@pytest.mark.parametrize("c_fed", [False, True], ids=["C_constant", "C_fed"])
@pytest.mark.parametrize("alpha,beta", [(0.0, 1.0), (1.0, 0.0), (0.0, 0.0), (2.0, 0.5)], ids=str)
def test_onnx_gemm_alpha_beta_zero(alpha, beta, c_fed):
    """ONNX Gemm's alpha 0 multiplies (NaN and inf rows of A @ B stay NaN: the zero constant is not
    folded), and beta 0 leaves C out (its NaN and inf do not reach Y), as onnxruntime and onnx's
    reference evaluator; numpy in float64 is the reference."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    a = np.array([[np.nan, 1, 2], [np.inf, 0, 1], [1, 2, 3]], "float32")
    b = np.array([[1, 2], [3, 4], [-1, 0.5]], "float32")
    c = np.array([[np.nan, np.inf]], "float32")
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 3])]
    initializers = [numpy_helper.from_array(b, "b")]
    if c_fed:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 2]))
    else:
        initializers.append(numpy_helper.from_array(c, "c"))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=alpha, beta=beta)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])
    model = helper.make_model(
        helper.make_graph([node], "g", inputs, [out], initializers), opset_imports=[helper.make_opsetid("", 13)]
    )
    feeds = {"a": a, "c": c} if c_fed else {"a": a}
    with np.errstate(all="ignore"):
        want = alpha * (a.astype("float64") @ b.astype("float64"))
        if beta != 0:
            want = want + beta * c.astype("float64")
    got = nna.Predictor(model).run(feeds)[0]
    np.testing.assert_allclose(got, want.astype("float32"), rtol=1e-6, atol=0)  # NaN and inf in place
    np.testing.assert_array_equal(got, ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0])


BROADCAST_UNKNOWN_OPS = {
    OP.ADD: lambda x, b: x + b,
    OP.MUL: lambda x, b: x * b,
    OP.MAX: np.maximum,
    OP.FLOOR_DIV: lambda x, b: np.floor(x / b),
    OP.GREATER: np.greater,
    OP.WHERE: lambda c, b: np.where(c, b, -b),
    OP.SUM: lambda x, b: x + b,
}


@pytest.mark.parametrize("op", list(BROADCAST_UNKNOWN_OPS), ids=lambda o: o.name)
def test_unknown_dimension_broadcasts_against_a_static_one(op):
    """An input dimension unknown until execution against another operand's static c > 1 (an input of
    [N, 3] with a [3, 3] constant): Relax cannot tell whether it broadcasts (1) or matches (c), so the
    converter decides at execution. One compilation serves N = 3 and N = 1, and any other N fails with
    INVALID_DIMENSIONS naming the operation."""
    b = rand(3, 3, seed=31, low=0.5, high=2.0)
    if op == OP.WHERE:
        inputs = [In(rand(3, 3) > 0, dims=[UNKNOWN, 3], precision=nna.Precision.BOOL8), Const(b), Const(-b)]
    else:
        inputs = [In(rand(3, 3), dims=[UNKNOWN, 3]), Const(b)]
        inputs += [fuse(0)] if op in REFS or op == OP.FLOOR_DIV else []
    out = Out(nna.Precision.BOOL8, dims=[3, 3]) if op == OP.GREATER else Out(dims=[3, 3])
    compilation = compile_op(op, inputs, [out])
    cases = []
    for n in (3, 1):
        x = rand(n, 3, seed=50 + n)
        x = x > 0 if op == OP.WHERE else x
        want = BROADCAST_UNKNOWN_OPS[op](x, b)
        cases.append(([x], [want if want.dtype == bool else want.astype("float32")]))
    check_sizes(compilation, cases, rtol=1e-6, atol=1e-6)
    bad = rand(2, 3) > 0 if op == OP.WHERE else rand(2, 3)
    expect_error(
        lambda: execute(compilation, [bad]), op.name, "must each be 1 or match", code=nna.ResultCode.INVALID_DIMENSIONS
    )


SELF_OPS = {
    OP.SUB: lambda d: d - d,
    OP.DIV: lambda d: d / d,
    OP.EQUAL: lambda d: d == d,
    OP.NOT_EQUAL: lambda d: d != d,
    OP.GREATER_EQUAL: lambda d: d >= d,
    OP.LESS_EQUAL: lambda d: d <= d,
}


@pytest.mark.parametrize("op", list(SELF_OPS), ids=lambda o: o.name)
def test_an_operand_with_itself_follows_ieee(op):
    """SUB/DIV/comparisons of one operand with itself, that operand computed in the same kernel (EXP of
    x): TVM's simplifier folds e - e to 0, e / e to 1, e == e to true once the producer is inlined, which
    is wrong where e is inf or NaN (a fuzz finding: Sub(Div(x, Relu(x)), itself)). Against numpy."""
    P = nna.Precision
    x = np.array([0.5, -1.0, 100.0, np.inf, -np.inf, np.nan, 0.0, -800.0], "float32")
    model = nna.Model()
    xi = model.add_operand(nna.OperandType(P.FLOAT32, [8]))
    d = model.add_operand(nna.OperandType(P.FLOAT32, [8]))
    model.add_operation(OP.EXP, [xi], [d])
    boolean = op not in (OP.SUB, OP.DIV)
    y = model.add_operand(nna.OperandType(P.BOOL8 if boolean else P.FLOAT32, [8]))
    extra = [] if boolean else [model.add_operand(nna.OperandType(P.INT32, []))]
    for operand in extra:
        model.set_operand_value(operand, np.array(0, "int32"))
    model.add_operation(op, [d, d, *extra], [y])
    model.identify_inputs_and_outputs([xi], [y])
    model.finish()
    (got,) = run_model(model, [x])
    with np.errstate(all="ignore"):
        want = SELF_OPS[op](np.exp(x))
    np.testing.assert_array_equal(got, want)


def test_two_nodes_computing_one_value_subtracted_follow_ieee():
    """SUB of two operands computed by separate but identical operations (EXP of x, twice): should TVM's
    simplifier ever see e - e there (both inlined into the subtraction), the result must still be NaN
    where e is inf or NaN. (Today each EXP writes its own buffer and nothing folds.)"""
    P = nna.Precision
    x = np.array([0.5, -1.0, 100.0, np.inf, np.nan, 0.0], "float32")
    model = nna.Model()
    xi = model.add_operand(nna.OperandType(P.FLOAT32, [6]))
    d1, d2 = (model.add_operand(nna.OperandType(P.FLOAT32, [6])) for _ in range(2))
    model.add_operation(OP.EXP, [xi], [d1])
    model.add_operation(OP.EXP, [xi], [d2])
    code = model.add_operand(nna.OperandType(P.INT32, []))
    model.set_operand_value(code, np.array(0, "int32"))
    y = model.add_operand(nna.OperandType(P.FLOAT32, [6]))
    model.add_operation(OP.SUB, [d1, d2, code], [y])
    model.identify_inputs_and_outputs([xi], [y])
    model.finish()
    (got,) = run_model(model, [x])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got, np.exp(x) - np.exp(x))
