"""FULLY_CONNECTED and MAT_MUL against numpy references written from the spec."""

import numpy as np
import pytest
from oputil import Const, In, Out, b8, check_op, expect_error, f32, fuse, fuse_ref, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
# float32 dot products of up to ~24 terms: the summation order differs from numpy's, so
# results agree to a few ulp of the largest partial sum; rtol/atol 1e-5 covers that.
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _fc_ref(x, w, b, code):
    """output = activation(input * weight' + bias), input flattened to [-1, weight.shape[1]]."""
    y = x.reshape(-1, w.shape[1]).astype("float64") @ w.T.astype("float64")
    if b is not None:
        y = y + b
    return fuse_ref(y.astype("float32"), code)


FC_SHAPES = [
    ((3, 4), 4),  # 2-D input [batch, input_size]
    ((1, 7), 7),
    ((2, 4, 3), 4),  # rank 3 whose last dim differs from input_size: [6, 4]
    ((2, 3, 2, 2), 6),  # rank 4, flattened to [num_elements / 6, 6] = [4, 6]
    ((2, 3, 2, 2), 24),  # flattened to [1, 24]
    ((2, 1, 3, 2, 2), 4),  # rank 5: [6, 4]
    ((1, 2, 1, 3, 2), 12),  # rank 5 flattened to [1, 12]
]


@pytest.mark.parametrize("x_shape,input_size", FC_SHAPES, ids=str)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_fully_connected(x_shape, input_size, with_bias):
    """Input ranks 2 to 5; the fused activation (independent of the shape) cycles through the codes."""
    code = list(nna.FuseCode)[(FC_SHAPES.index((x_shape, input_size)) + with_bias) % len(nna.FuseCode)]
    _check_fully_connected(code, x_shape, input_size, with_bias)


@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_fully_connected_fuse_codes(code):
    _check_fully_connected(code, (2, 3, 4), 4, True)


def _check_fully_connected(code, x_shape, input_size, with_bias):
    units = 3
    x = rand(*x_shape, seed=1)
    w = rand(units, input_size, seed=2)
    b = rand(units, seed=3) if with_bias else None
    bias = f32(b) if with_bias else Const(None)
    check_op(OP.FULLY_CONNECTED, [In(x), f32(w), bias, fuse(code)], _fc_ref(x, w, b, code), **TOL)


def test_fully_connected_weight_as_input():
    """A weight fed at execution time gives the same result as a constant one."""
    x, w, b = rand(2, 4, seed=4), rand(5, 4, seed=5), rand(5, seed=6)
    check_op(OP.FULLY_CONNECTED, [In(x), In(w), f32(b), fuse(0)], _fc_ref(x, w, b, 0), **TOL)


def test_fully_connected_bad_bias_shape():
    x, w = rand(2, 4), rand(3, 4)
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(OP.FULLY_CONNECTED, [In(x), f32(w), f32(rand(4)), fuse(0)], [Out()], [(2, 3)])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert "FULLY_CONNECTED" in str(info.value) and "'bias'" in str(info.value)


def _matmul_ref(x, y, tx, ty):
    """numpy.matmul after swapping the last two dims of each operand flagged (a vector is unchanged)."""
    if tx and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    if ty and y.ndim >= 2:
        y = np.swapaxes(y, -1, -2)
    z = np.asarray(np.matmul(x.astype("float64"), y.astype("float64")), "float32")
    # 1-D . 1-D: shape [1] rather than numpy's rank 0 (Paddle-Lite's operation/mat_mul.cc).
    return z.reshape(1) if z.ndim == 0 else z


# (x shape, y shape) as given to numpy.matmul, i.e. before any transposition.
MATMUL_SHAPES = [
    ((4,), (4,)),  # vector . vector -> [1] (not rank 0)
    ((4,), (4, 3)),  # vector @ matrix -> [3]
    ((2, 4), (4,)),  # matrix @ vector -> [2]
    ((2, 4), (4, 3)),
    ((2, 2, 4), (4, 3)),  # batched @ matrix
    ((4,), (2, 4, 3)),  # vector @ batched -> [2, 3]
    ((2, 1, 2, 4), (3, 4, 5)),  # batch dims broadcast: [2, 3, 2, 5]
    ((1, 3, 2, 4), (2, 1, 4, 2)),  # rank 4 against rank 4, both broadcast
    ((2, 1, 3, 2, 4), (3, 4, 5)),  # rank 5 against rank 3: [2, 1, 3, 2, 5]
    ((1, 2, 1, 3, 4), (2, 1, 2, 4, 2)),  # rank 5 against rank 5, both broadcast: [2, 2, 2, 3, 2]
    ((4,), (2, 1, 2, 4, 3)),  # vector @ rank 5 -> [2, 1, 2, 3]
]


@pytest.mark.parametrize("x_shape,y_shape", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("tx", [False, True], ids=["x", "xT"])
@pytest.mark.parametrize("ty", [False, True], ids=["y", "yT"])
def test_mat_mul(x_shape, y_shape, tx, ty):
    # Build operands whose transposed form has the listed shape.
    x = rand(*x_shape, seed=7)
    y = rand(*y_shape, seed=8)
    xin = np.ascontiguousarray(np.swapaxes(x, -1, -2)) if tx and x.ndim >= 2 else x
    yin = np.ascontiguousarray(np.swapaxes(y, -1, -2)) if ty and y.ndim >= 2 else y
    check_op(OP.MAT_MUL, [In(xin), In(yin), b8([tx]), b8([ty])], _matmul_ref(xin, yin, tx, ty), **TOL)


@pytest.mark.parametrize("x_shape,y_shape", MATMUL_SHAPES[::2], ids=str)
def test_mat_mul_transposes_omitted(x_shape, y_shape):
    """transpose_x and transpose_y both default to false."""
    x, y = rand(*x_shape, seed=9), rand(*y_shape, seed=10)
    check_op(OP.MAT_MUL, [In(x), In(y)], _matmul_ref(x, y, False, False), **TOL)


def test_mat_mul_vectors_give_shape_1():
    """The dot product of two vectors is [1], not rank 0 (as SQUEEZE / REDUCE_* of everything)."""
    x, y = rand(5, seed=20), rand(5, seed=21)
    (got,) = check_op(OP.MAT_MUL, [In(x), In(y), b8([True]), b8([True])], np.array([x @ y], "float32"), **TOL)
    assert got.shape == (1,)


def test_mat_mul_only_transpose_x_given():
    x, y = rand(4, 2, seed=11), rand(4, 3, seed=12)
    check_op(OP.MAT_MUL, [In(x), In(y), b8([True])], _matmul_ref(x, y, True, False), **TOL)


def test_mat_mul_constant_y():
    x, y = rand(2, 3, 4, seed=13), rand(4, 5, seed=14)
    check_op(OP.MAT_MUL, [In(x), f32(y), b8([False]), b8([False])], _matmul_ref(x, y, False, False), **TOL)


def test_mat_mul_mismatched_inner_dims():
    x, y = rand(2, 4), rand(3, 5)
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(OP.MAT_MUL, [In(x), In(y)], [Out()], [(2, 5)])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert "MAT_MUL" in str(info.value) and "'y'" in str(info.value)


def test_mat_mul_batch_dims_do_not_broadcast():
    x, y = rand(2, 3, 4), rand(3, 4, 5)
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(OP.MAT_MUL, [In(x), In(y)], [Out()], [(2, 3, 5)])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert "MAT_MUL" in str(info.value) and "'y'" in str(info.value)


def test_fully_connected_input_not_divisible():
    x, w = rand(2, 5), rand(3, 4)
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(OP.FULLY_CONNECTED, [In(x), f32(w), Const(None), fuse(0)], [Out()], [(2, 3)])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert "FULLY_CONNECTED" in str(info.value) and "'input'" in str(info.value)


def test_fully_connected_unknown_batch():
    x, w, b = rand(2, 3, 2, 2, seed=15), rand(4, 12, seed=16), rand(4, seed=17)
    ins = [In(x, dims=[nna.UNKNOWN, 3, 2, 2]), f32(w), f32(b), fuse(nna.FuseCode.RELU)]
    out = [Out(dims=[nna.UNKNOWN, 4])]
    check_op(OP.FULLY_CONNECTED, ins, _fc_ref(x, w, b, nna.FuseCode.RELU), out, **TOL)


def test_mat_mul_unknown_batch():
    x, y = rand(2, 3, 4, seed=18), rand(4, 5, seed=19)
    out = [Out(dims=[nna.UNKNOWN, 3, 5])]
    check_op(OP.MAT_MUL, [In(x, dims=[nna.UNKNOWN, 3, 4]), f32(y)], _matmul_ref(x, y, False, False), out, **TOL)


# -- zero sizes and sizes known only at execution ----------------------------------------------
def test_fully_connected_input_size_zero():
    """x [2, 0], weight [3, 0] (fed: an empty constant reads as absent): each output is the bias (a dot
    product of nothing is 0). Was a ZeroDivisionError at compile time."""
    b = rand(3, seed=30)
    ins = [In(np.zeros((2, 0), "float32")), In(np.zeros((3, 0), "float32")), f32(b), fuse(0)]
    check_op(OP.FULLY_CONNECTED, ins, np.tile(b, (2, 1)), **TOL)


def test_fully_connected_input_size_zero_needs_a_2d_input():
    """[2, 3, 0] has no batch size when input_size is 0 (num_elements / input_size = 0 / 0)."""
    ins = [In(np.zeros((2, 3, 0), "float32")), In(np.zeros((3, 0), "float32")), Const(None), fuse(0)]
    expect_error(
        lambda: run_op(OP.FULLY_CONNECTED, ins, [Out()], [(2, 3)]), "FULLY_CONNECTED", "'input'", "input_size is 0"
    )


def test_fully_connected_flatten_checked_at_execution():
    """[?, 5] flattened to rows of input_size 4: 2 x 5 elements do not divide."""
    ins = [In(rand(2, 5), dims=[nna.UNKNOWN, 5]), f32(rand(3, 4)), Const(None), fuse(0)]
    expect_error(
        lambda: run_op(OP.FULLY_CONNECTED, ins, [Out(dims=[nna.UNKNOWN, 3])], [None]),
        "FULLY_CONNECTED",
        "'input'",
        "a multiple of 4 elements",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_mat_mul_reduction_length_zero_at_execution():
    """x [2, ?] @ y [?, 3] fed K = 0: zeros (the product was left unwritten), the same every time."""
    ins = [
        In(np.zeros((2, 0), "float32"), dims=[2, nna.UNKNOWN]),
        In(np.zeros((0, 3), "float32"), dims=[nna.UNKNOWN, 3]),
    ]
    for _ in range(3):
        noise = [np.full(64, 7.0, "float32") for _ in range(16)]  # reuse freed memory with something else
        del noise
        check_op(OP.MAT_MUL, ins, np.zeros((2, 3), "float32"), [Out(dims=[2, 3])], **TOL)


def test_mat_mul_reduction_lengths_checked_at_execution():
    """x [2, ?] @ y [?, 3] fed K = 2 and 1: the kernel read past y; now refused naming both."""
    ins = [In(rand(2, 2), dims=[2, nna.UNKNOWN]), In(rand(1, 3), dims=[nna.UNKNOWN, 3])]
    expect_error(
        lambda: run_op(OP.MAT_MUL, ins, [Out(dims=[2, 3])], [None]),
        "MAT_MUL",
        "'y'",
        "reduction lengths of x [2, ?] and y [?, 3]",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


@pytest.mark.parametrize("transpose_y", [False, True])
def test_mat_mul_reduction_length_unknown_on_one_side(transpose_y):
    """K known only at execution in x and static in y (transposed or not): the lengths are checked at
    execution before the product runs. With transpose_y, the guard is on the transposed y, which was an
    expression not yet emitted (an AttributeError instead of a compile, found in a Scan body by the fuzzer)."""
    from dynutil import check_sizes, compile_op, execute

    y = rand(5, 4, seed=21) if transpose_y else rand(4, 5, seed=21)
    ins = [In(rand(3, 4, seed=20), dims=[3, nna.UNKNOWN]), f32(y), b8([False]), b8([transpose_y])]
    compilation = compile_op(OP.MAT_MUL, ins, [Out(dims=[3, 5])])
    x = rand(3, 4, seed=22)
    check_sizes(compilation, [([x], [_matmul_ref(x, y, False, transpose_y)])], **TOL)
    expect_error(
        lambda: execute(compilation, [rand(3, 6)]),
        "MAT_MUL",
        "differ at execution",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )
