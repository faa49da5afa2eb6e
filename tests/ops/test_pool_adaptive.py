"""ADAPTIVE_AVERAGE_POOL_2D and ADAPTIVE_MAX_POOL_2D (with and without indices) against numpy
references written from the spec and Paddle's adaptive pooling: bin i of an axis of size n covers
[floor(i * n / out), ceil((i + 1) * n / out)); the max takes the first maximum in row-major order and
its index h * W_in + w (Paddle's max_pool2d_with_index).  In float32 and QUANT_INT8_SYMM_PER_LAYER,
output_shape INT32 or INT64, an UNKNOWN batch and sizes known only at execution, NaN, and bad
operands."""

import numpy as np
import pytest
from dynutil import check_sizes, compile_op
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    b8,
    check_op,
    check_quantized,
    expect_error,
    i32,
    q8_input,
    rand,
    run_op,
)
from pool_refs import (
    ATOL,
    DYNAMIC_SIZES,
    NAN_X,
    OP,
    RTOL,
    P,
    expect_invalid,
    max_with_index,
    nan_pool_ref,
)

import nnadapter_tvm as nna


def adaptive_avg_pool2d_ref(x, out_hw):
    """Bin i of an axis of size n covers [floor(i * n / out), ceil((i + 1) * n / out))."""
    n, c, h, w = x.shape
    ho, wo = out_hw
    y = np.empty((n, c, ho, wo))
    for i in range(ho):
        h0, h1 = (i * h) // ho, -(-((i + 1) * h) // ho)
        for j in range(wo):
            w0, w1 = (j * w) // wo, -(-((j + 1) * w) // wo)
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].astype("float64").mean(axis=(2, 3))
    return y.astype("float32")


@pytest.mark.parametrize(
    "hw, out_hw",
    [((8, 6), (4, 3)), ((8, 6), (1, 1)), ((7, 9), (3, 4)), ((5, 5), (5, 5)), ((5, 7), (6, 2))],
    ids=["divides", "global", "uneven", "identity", "upsample_h"],
)
@pytest.mark.parametrize("precision", [nna.Precision.INT32, nna.Precision.INT64], ids=["i32", "i64"])
def test_adaptive_average_pool2d(hw, out_hw, precision):
    x = rand(2, 3, *hw, seed=4)
    output_shape = Const(np.asarray(out_hw, "int32" if precision == nna.Precision.INT32 else "int64"), precision)
    check_op(
        OP.ADAPTIVE_AVERAGE_POOL_2D, [In(x), output_shape], adaptive_avg_pool2d_ref(x, out_hw), rtol=RTOL, atol=ATOL
    )


def test_adaptive_average_pool2d_unknown_batch():
    x = rand(2, 3, 7, 5, seed=6)
    expected = adaptive_avg_pool2d_ref(x, (3, 2))
    check_op(
        OP.ADAPTIVE_AVERAGE_POOL_2D,
        [In(x, dims=[UNKNOWN, 3, 7, 5]), i32([3, 2])],
        expected,
        outputs=[Out(dims=[UNKNOWN, 3, 3, 2])],
        rtol=RTOL,
        atol=ATOL,
    )


def test_adaptive_average_pool2d_bad_output_shape():
    x = rand(1, 2, 4, 4)
    expect_invalid(OP.ADAPTIVE_AVERAGE_POOL_2D, [In(x), i32([2, 2, 2])], (1, 2, 2, 2), "output_shape")


def adaptive_windows(size, out):
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


def adaptive_max_case(hw, out_hw, return_indices, dtype=P.INT32, shape_dtype="int32", x=None):
    x = rand(2, 3, *hw, seed=15) if x is None else x
    values, indices = max_with_index(x, adaptive_windows(hw[0], out_hw[0]), adaptive_windows(hw[1], out_hw[1]))
    shape = Const(np.asarray(out_hw, shape_dtype), P.INT32 if shape_dtype == "int32" else P.INT64)
    if return_indices:
        inputs = [In(x), shape, b8([True]), i32([int(dtype)])]
        return inputs, [values, indices.astype("int32" if dtype == P.INT32 else "int64")]
    return [In(x), shape, b8([False]), Const(None, P.INT32)], [values]


ADAPTIVE = [((8, 6), (4, 3)), ((8, 6), (1, 1)), ((7, 9), (3, 4)), ((5, 5), (5, 5)), ((5, 7), (6, 2))]
ADAPTIVE_IDS = ["divides", "global", "uneven", "identity", "upsample_h"]


@pytest.mark.parametrize("hw, out_hw", ADAPTIVE, ids=ADAPTIVE_IDS)
@pytest.mark.parametrize("return_indices", [False, True], ids=["values", "indices"])
def test_adaptive_max_pool2d(hw, out_hw, return_indices):
    # Alternate the dtypes of output_shape and of the indices across the grid.
    shape_dtype = "int64" if return_indices else "int32"
    dtype = P.INT64 if hw[0] % 2 else P.INT32
    inputs, expected = adaptive_max_case(hw, out_hw, return_indices, dtype, shape_dtype)
    check_op(OP.ADAPTIVE_MAX_POOL_2D, inputs, expected, rtol=0, atol=0)


def test_adaptive_max_pool2d_first_of_ties():
    x = np.random.default_rng(16).integers(-1, 2, (2, 3, 7, 9)).astype("float32")
    inputs, expected = adaptive_max_case((7, 9), (3, 4), True, P.INT64, x=x)
    check_op(OP.ADAPTIVE_MAX_POOL_2D, inputs, expected, rtol=0, atol=0)


def test_adaptive_max_pool2d_unknown_batch():
    inputs, expected = adaptive_max_case((7, 5), (3, 2), True)
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN, 3, 7, 5])
    outs = [Out(dims=[UNKNOWN, 3, 3, 2]), Out(P.INT32, dims=[UNKNOWN, 3, 3, 2])]
    check_op(OP.ADAPTIVE_MAX_POOL_2D, inputs, expected, outputs=outs, rtol=0, atol=0)


@pytest.mark.parametrize(
    "index, value, operand",
    [(1, i32([2, 2, 2]), "output_shape"), (1, i32([2, 0]), "output_shape"), (3, i32([1]), "return_indices_dtype")],
    ids=["three_values", "zero", "bad_dtype"],
)
def test_adaptive_max_pool2d_invalid(index, value, operand):
    inputs, expected = adaptive_max_case((4, 4), (2, 2), True)
    inputs[index] = value
    run = lambda: run_op(OP.ADAPTIVE_MAX_POOL_2D, inputs, [Out(), Out(P.INT32)], [e.shape for e in expected])  # noqa: E731
    expect_error(run, "ADAPTIVE_MAX_POOL_2D", f"'{operand}'")


@pytest.mark.parametrize("op", [OP.ADAPTIVE_AVERAGE_POOL_2D, OP.ADAPTIVE_MAX_POOL_2D], ids=lambda o: o.name)
def test_adaptive_pool2d_quantized(op):
    x, x_real = q8_input(rand(2, 3, 7, 9, seed=18), 0.02)
    if op == OP.ADAPTIVE_AVERAGE_POOL_2D:
        inputs, expected = [x, i32([3, 4])], adaptive_avg_pool2d_ref(x_real, (3, 4))
    else:
        inputs, (expected,) = adaptive_max_case((7, 9), (3, 4), False, x=x_real)
        inputs[0] = x
    check_quantized(op, inputs, expected, out_scale=0.015)


@pytest.mark.parametrize("op", [OP.ADAPTIVE_AVERAGE_POOL_2D, OP.ADAPTIVE_MAX_POOL_2D], ids=lambda o: o.name)
@pytest.mark.parametrize("out_hw", [(3, 2), (1, 1)], ids=["3x2", "global"])
def test_adaptive_pool2d_unknown_sizes(op, out_hw):
    """The bins [floor(i * n / out), ceil((i + 1) * n / out)) computed from the symbolic sizes; the
    max pool also returns its indices (h * W_in + w, the first maximum in row-major order)."""
    dims = [UNKNOWN, 3, UNKNOWN, UNKNOWN]
    out_dims = [UNKNOWN, 3, *out_hw]
    if op == OP.ADAPTIVE_MAX_POOL_2D:
        inputs = [In(rand(1, 3, 7, 8), dims=dims), i32(out_hw), b8([True]), i32([int(P.INT64)])]
        outs = [Out(dims=out_dims), Out(P.INT64, dims=out_dims)]
    else:
        inputs, outs = [In(rand(1, 3, 7, 8), dims=dims), i32(out_hw)], [Out(dims=out_dims)]
    compilation = compile_op(op, inputs, outs)
    cases = []
    for k, (n, h, w) in enumerate(DYNAMIC_SIZES):
        x = rand(n, 3, h, w, seed=30 + k)
        if op == OP.ADAPTIVE_MAX_POOL_2D:
            values, indices = max_with_index(x, adaptive_windows(h, out_hw[0]), adaptive_windows(w, out_hw[1]))
            cases.append(([x], [values, indices]))
        else:
            cases.append(([x], [adaptive_avg_pool2d_ref(x, out_hw)]))
    check_sizes(compilation, cases, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dims", [None, [UNKNOWN, 1, UNKNOWN, UNKNOWN]], ids=["static", "unknown"])
def test_adaptive_max_pool2d_nan_anywhere_in_bin(dims):
    """ADAPTIVE_MAX_POOL_2D reduces NaN-aware too: the [1, 1, 4, 6] input in 2x3 bins of 2x2."""
    x = NAN_X
    expected = nan_pool_ref(x)
    inputs = [In(x, dims=dims), i32([2, 3]), b8([False]), Const(None, P.INT32)]
    if dims is None:
        check_op(OP.ADAPTIVE_MAX_POOL_2D, inputs, expected, rtol=0, atol=0)
    else:
        compilation = compile_op(OP.ADAPTIVE_MAX_POOL_2D, inputs, [Out(dims=[UNKNOWN, 1, 2, 3])])
        check_sizes(compilation, [([x], [expected])], rtol=0, atol=0)
