"""Helpers the pooling tests share (test_pool.py, test_pool_adaptive.py): the tolerances, the float64
reference of the window pools, Paddle's max-with-index scan, the invalid-operand check, the sizes fed
to one compilation, and the NaN input of the max pools."""

import math

import numpy as np
import pytest
from oputil import Out, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
P = nna.Precision
# Averages of at most 9 float32 values summed in a different order than the float64 reference,
# and a float32 division: a few ulps. Max pooling is exact.
RTOL, ATOL = 1e-5, 1e-5
LOWEST = np.finfo("float32").min  # Paddle's MaxPool::initial(), -FLT_MAX: an empty window's maximum


def pool2d_ref(x, kind, kernel, strides, pads, ceil_mode, count_include_pad=False):
    """Pooling in float64. Output sizes are the spec's floor/ceil formulas (every window they count,
    including ceil_mode windows that start in or past the bottom/right padding); window (i, j) starts at
    i * stride - pad_before and is cut at the padded input's far edge (H_in + pad_after), so a
    ceil_mode overhang past it covers nothing. Max takes the real elements; average divides by
    the real elements (count_include_pad false) or by the real and padding ones (true). A window
    without real elements gives LOWEST (max) or 0 (average)."""
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
            rows = slice(max(h0, 0), max(min(h1, h), 0))
            cols = slice(max(w0, 0), max(min(w1, w), 0))
            window = x[:, :, rows, cols].astype("float64")
            if not window.size:
                y[:, :, i, j] = LOWEST if kind == "max" else 0
            elif kind == "max":
                y[:, :, i, j] = window.max(axis=(2, 3))
            else:
                count = (h1 - h0) * (w1 - w0) if count_include_pad else window.shape[2] * window.shape[3]
                y[:, :, i, j] = window.sum(axis=(2, 3)) / count
    return y.astype("float32")


def max_with_index(x, windows_h, windows_w):
    """Paddle's max_pool2d_with_index loop: scan each window's real elements in row-major order and keep
    the first strictly greater one; the index is h * W_in + w.  The padding is left out (ONNX): the first
    real element starts the scan, so a window of -inf gives -inf at its first element; a window with no
    real element gives -FLT_MAX and index -1 (Paddle's initial values)."""
    n, c, h, w = x.shape
    values = np.empty((n, c, len(windows_h), len(windows_w)), "float32")
    indices = np.empty(values.shape, "int64")
    for b in range(n):
        for ch in range(c):
            for i, (h0, h1) in enumerate(windows_h):
                for j, (w0, w1) in enumerate(windows_w):
                    best, where = LOWEST, -1
                    for hh in range(max(h0, 0), min(h1, h)):
                        for ww in range(max(w0, 0), min(w1, w)):
                            if where == -1 or x[b, ch, hh, ww] > best:
                                best, where = x[b, ch, hh, ww], hh * w + ww
                    values[b, ch, i, j], indices[b, ch, i, j] = best, where
    return values, indices


def expect_invalid(op, inputs, expected_shape, operand):
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(op, inputs, [Out()], [expected_shape])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert op.name in str(info.value) and f"'{operand}'" in str(info.value), str(info.value)


# (batch, H, W) fed to one compilation: odd and even sizes, so that floor and ceil sizes differ.
DYNAMIC_SIZES = [(1, 7, 8), (2, 9, 5), (3, 12, 13)]


# -- NaN through the max pools: numpy's max, whatever the NaN's place in the window -----------------------

NAN_X = np.array(
    [
        [
            [np.nan, 1.0, 2.0, 3.0, 0.0, 0.0],  # window (0, 0): NaN first in row-major order
            [4.0, 5.0, 6.0, np.nan, 0.0, 0.0],  # window (0, 1): NaN in the middle
            [7.0, 8.0, -np.inf, -np.inf, 9.0, 9.0],
            [9.0, np.nan, -np.inf, -np.inf, 9.0, 9.0],  # window (1, 0): NaN last; window (1, 1): all -inf
        ]
    ],
    "float32",
)[None]  # [1, 1, 4, 6]: 2x2 windows of stride 2


def nan_pool_ref(x):
    with np.errstate(invalid="ignore"):
        return pool2d_ref(x, "max", [2, 2], [2, 2], [0, 0, 0, 0], False)
