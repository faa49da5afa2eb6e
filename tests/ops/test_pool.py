"""AVERAGE_POOL_2D, MAX_POOL_2D and ADAPTIVE_AVERAGE_POOL_2D against numpy references written from
the spec (output sizes) and Paddle's pooling kernels (which elements a window covers and counts)."""

import math

import numpy as np
import pytest
from oputil import UNKNOWN, Const, In, Out, b8, check_op, fuse, fuse_ref, i32, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
PAD = nna.AutoPad
# Averages of at most 9 float32 values summed in a different order than the float64 reference,
# and a float32 division: a few ulps. Max pooling is exact.
RTOL, ATOL = 1e-5, 1e-5


def same_pads(in_hw, kernel, strides):
    """Paddle's SAME: total = max((ceil(in/stride) - 1) * stride + k - in, 0), smaller half first."""
    pads = []
    for size, k, s in zip(in_hw, kernel, strides):
        total = max((math.ceil(size / s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return pads


def pool2d_ref(x, kind, kernel, strides, pads, ceil_mode, count_include_pad=False):
    """Pooling in float64. Output sizes are the spec's floor/ceil formulas; window (i, j) starts at
    i * stride - pad_before and is cut at the padded input's far edge (H_in + pad_after), so a
    ceil_mode overhang past it covers nothing. Max takes the real elements; average divides by
    the real elements (count_include_pad false) or by the real and padding ones (true)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw) = kernel, strides
    top, bottom, left, right = pads
    rnd = math.ceil if ceil_mode else math.floor
    h_out = rnd((h + top + bottom - kh) / sh + 1)
    w_out = rnd((w + left + right - kw) / sw + 1)
    y = np.empty((n, c, h_out, w_out))
    for i in range(h_out):
        h0 = i * sh - top
        h1 = min(h0 + kh, h + bottom)
        for j in range(w_out):
            w0 = j * sw - left
            w1 = min(w0 + kw, w + right)
            window = x[:, :, max(h0, 0) : min(h1, h), max(w0, 0) : min(w1, w)].astype("float64")
            assert window.size, "test case has a window without real elements"
            if kind == "max":
                y[:, :, i, j] = window.max(axis=(2, 3))
            else:
                count = (h1 - h0) * (w1 - w0) if count_include_pad else window.shape[2] * window.shape[3]
                y[:, :, i, j] = window.sum(axis=(2, 3)) / count
    return y.astype("float32")


# name: (H, W, kernel, strides, auto_pad, pads [top, bottom, left, right] for NONE)
CONFIGS = {
    "k3s1_pad_asym": (7, 8, [3, 3], [1, 1], PAD.NONE, [1, 0, 2, 1]),
    "k3s2_pad_asym": (7, 8, [3, 3], [2, 2], PAD.NONE, [0, 2, 1, 1]),
    "k2x3_s2x1": (6, 7, [2, 3], [2, 1], PAD.NONE, [1, 1, 0, 2]),
    "k3s2_asym_overhang": (7, 7, [3, 3], [2, 2], PAD.NONE, [1, 0, 0, 1]),  # ceil_mode windows run past the padding
    "k2s2_nopad": (8, 9, [2, 2], [2, 2], PAD.NONE, [0, 0, 0, 0]),
    "k3s2_same": (7, 8, [3, 3], [2, 2], PAD.SAME, None),
    "k2s1_same": (5, 6, [2, 2], [1, 1], PAD.SAME, None),
    "k3s2_valid": (8, 7, [3, 3], [2, 2], PAD.VALID, None),
}


def pool_case(op, config, ceil_mode, code, count_include_pad=False, seed=0, scale=1.0):
    h, w, kernel, strides, auto_pad, pads = config
    x = rand(2, 3, h, w, seed=seed) * np.float32(scale)
    # An empty pads operand (VALID, SAME) means no explicit padding.
    ref_pads = same_pads([h, w], kernel, strides) if auto_pad == PAD.SAME else pads or [0, 0, 0, 0]
    kind = "max" if op == OP.MAX_POOL_2D else "avg"
    expected = fuse_ref(pool2d_ref(x, kind, kernel, strides, ref_pads, ceil_mode, count_include_pad), code)
    head = [In(x), i32([int(auto_pad)]), i32(pads) if pads is not None else Const(None, nna.Precision.INT32)]
    head += [i32(kernel), i32(strides), b8([ceil_mode])]
    if op == OP.MAX_POOL_2D:
        inputs = [*head, b8([False]), i32([int(nna.Precision.INT32)]), fuse(code)]
    else:
        inputs = [*head, b8([count_include_pad]), fuse(code)]
    return inputs, expected


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
@pytest.mark.parametrize("count_include_pad", [False, True], ids=["exclude_pad", "include_pad"])
def test_average_pool2d(config, ceil_mode, count_include_pad):
    inputs, expected = pool_case(OP.AVERAGE_POOL_2D, config, ceil_mode, nna.FuseCode.NONE, count_include_pad)
    check_op(OP.AVERAGE_POOL_2D, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
def test_max_pool2d(config, ceil_mode):
    inputs, expected = pool_case(OP.MAX_POOL_2D, config, ceil_mode, nna.FuseCode.NONE)
    check_op(OP.MAX_POOL_2D, inputs, expected, rtol=0, atol=0)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_pool2d_fuse_codes(op, code):
    # Inputs in [-3, 3] so that RELU1 and RELU6 both clip something.
    inputs, expected = pool_case(op, CONFIGS["k3s2_pad_asym"], True, code, True, seed=3, scale=1.5)
    check_op(op, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_empty_flags_take_defaults(op):
    # ceil_mode and count_include_pad are not trailing; given empty they take the spec's default, false.
    inputs, expected = pool_case(op, CONFIGS["k3s2_pad_asym"], False, nna.FuseCode.NONE, False)
    empty = Const(None, nna.Precision.BOOL8)
    inputs[5] = empty
    if op == OP.AVERAGE_POOL_2D:
        inputs[6] = empty
    check_op(op, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_unknown_batch(op):
    inputs, expected = pool_case(op, CONFIGS["k3s2_pad_asym"], True, nna.FuseCode.RELU, True)
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN, *inputs[0].value.shape[1:]])
    out = Out(dims=[UNKNOWN, *expected.shape[1:]])
    check_op(op, inputs, expected, outputs=[out], rtol=RTOL, atol=ATOL)


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


def expect_invalid(op, inputs, expected_shape, operand):
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(op, inputs, [Out()], [expected_shape])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert op.name in str(info.value) and f"'{operand}'" in str(info.value), str(info.value)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_bad_fuse_code(op):
    inputs, expected = pool_case(op, CONFIGS["k2s2_nopad"], False, nna.FuseCode.NONE)
    inputs[-1] = i32([9])
    expect_invalid(op, inputs, expected.shape, "fuse_code")


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_three_pads(op):
    inputs, expected = pool_case(op, CONFIGS["k2s2_nopad"], False, nna.FuseCode.NONE)
    inputs[2] = i32([0, 0, 0])
    expect_invalid(op, inputs, expected.shape, "pads")


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_bad_kernel(op):
    inputs, expected = pool_case(op, CONFIGS["k2s2_nopad"], False, nna.FuseCode.NONE)
    inputs[3] = i32([2, 0])
    expect_invalid(op, inputs, expected.shape, "kernel_shape")


def test_adaptive_average_pool2d_bad_output_shape():
    x = rand(1, 2, 4, 4)
    expect_invalid(OP.ADAPTIVE_AVERAGE_POOL_2D, [In(x), i32([2, 2, 2])], (1, 2, 2, 2), "output_shape")


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_kernel_larger_than_padded_input(op):
    inputs, _ = pool_case(op, (2, 5, [3, 3], [1, 1], PAD.NONE, [0, 0, 0, 0]), False, nna.FuseCode.NONE)
    expect_invalid(op, inputs, (2, 3, 1, 3), "kernel_shape")
