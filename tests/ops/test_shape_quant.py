"""RESHAPE, FLATTEN, TRANSPOSE, CONCAT, SQUEEZE, UNSQUEEZE with QUANT_INT8_SYMM_PER_LAYER operands.

The runtime dequantizes the input, moves the values and requantizes them to the output's scale
(docs/quantization.md).  With equal input and output scales that is the identity on the int8
values, so those cases must match exactly (0 LSB); where the output scale differs, a value on a
rounding boundary may land on either neighbour, so they allow 1 LSB, as check_quantized says.
"""

import numpy as np
import pytest
from oputil import UNKNOWN, Out, P, check_quantized, i32, q8_const, q8_input, quantize, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
SCALE = 0.02


def q8(shape, seed, scale=SCALE):
    return q8_input(rand(*shape, seed=seed), scale)


# -- RESHAPE ------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,target",
    [((6,), [2, 3]), ((2, 3, 4), [0, -1]), ((2, 3, 4), [4, 0, -1]), ((1, 2, 3, 2, 2), [0, 0, -1, 1, 1])],
    ids=str,
)
def test_reshape_q8(shape, target):
    q, real = q8(shape, 1)
    dims = [real.shape[i] if d == 0 else d for i, d in enumerate(target)]
    check_quantized(OP.RESHAPE, [q, i32(target)], real.reshape(dims), SCALE, lsb=0)


@pytest.mark.parametrize("out_scale", [0.05, 0.01], ids=["coarser", "finer_saturating"])
def test_reshape_q8_requantized(out_scale):
    """A different output scale requantizes: coarser rounds, finer saturates values beyond 127 * 0.01."""
    q, real = q8((2, 3, 4), 2)
    check_quantized(OP.RESHAPE, [q, i32([6, 4])], real.reshape(6, 4), out_scale)


# -- FLATTEN ------------------------------------------------------------------


@pytest.mark.parametrize("shape,start,end", [((2, 3), 0, 1), ((2, 3, 4), 1, -1), ((2, 3, 2, 2), -3, 2)], ids=str)
def test_flatten_q8(shape, start, end):
    q, real = q8(shape, 3)
    s, e = start % len(shape), end % len(shape)
    check_quantized(
        OP.FLATTEN, [q, i32([start]), i32([end])], real.reshape(*shape[:s], -1, *shape[e + 1 :]), SCALE, lsb=0
    )


# -- TRANSPOSE ----------------------------------------------------------------


@pytest.mark.parametrize("perm", [(1, 0), (2, 0, 1), (0, 3, 1, 2), (4, 2, 0, 1, 3)], ids=str)
def test_transpose_q8(perm):
    q, real = q8([2 + i for i in range(len(perm))], 4)
    check_quantized(OP.TRANSPOSE, [q, i32(perm)], np.transpose(real, perm), SCALE, lsb=0)


# -- CONCAT -------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes,axis", [([(3,), (4,)], 0), ([(2, 3), (2, 1), (2, 2)], 1), ([(1, 2, 3, 2), (2, 2, 3, 2)], -4)], ids=str
)
def test_concat_q8(shapes, axis):
    pairs = [q8(s, 10 + i) for i, s in enumerate(shapes)]
    ins = [q for q, _ in pairs]
    check_quantized(OP.CONCAT, [*ins, i32([axis])], np.concatenate([r for _, r in pairs], axis=axis), SCALE, lsb=0)


def test_concat_q8_constant_input():
    (a, ra), (b, rb) = q8((2, 3), 5), q8_const(rand(2, 2, seed=6), SCALE)
    check_quantized(OP.CONCAT, [a, b, i32([1])], np.concatenate([ra, rb], axis=1), SCALE, lsb=0)


def test_concat_q8_different_input_scales():
    """Each input is dequantized with its own scale, the result requantized to the output's."""
    (a, ra), (b, rb) = q8((2, 3), 7, 0.01), q8((2, 2), 8, 0.03)
    check_quantized(OP.CONCAT, [a, b, i32([-1])], np.concatenate([ra, rb], axis=1), 0.02)


def test_concat_q8_unknown_batch():
    (a, ra), (b, rb) = q8((2, 3), 9), q8((2, 1), 10)
    a.dims, b.dims = [UNKNOWN, 3], [UNKNOWN, 1]
    expected = quantize(np.concatenate([ra, rb], axis=1), SCALE)
    out = Out(P.QUANT_INT8_SYMM_PER_LAYER, dims=[UNKNOWN, 4], scale=SCALE)
    (got,) = run_op(OP.CONCAT, [a, b, i32([1])], [out], [expected.shape])
    np.testing.assert_array_equal(got, expected)


# -- SQUEEZE ------------------------------------------------------------------


@pytest.mark.parametrize("shape,axes", [((3, 1), [1]), ((1, 3, 1), [-3, -1]), ((1, 2, 1, 3, 1), [4, 2])], ids=str)
def test_squeeze_q8(shape, axes):
    q, real = q8(shape, 11)
    check_quantized(OP.SQUEEZE, [q, i32(axes)], np.squeeze(real, axis=tuple(axes)), SCALE, lsb=0)


def test_squeeze_q8_axes_omitted():
    q, real = q8((1, 3, 1, 2), 12)
    check_quantized(OP.SQUEEZE, [q], np.squeeze(real), SCALE, lsb=0)


# -- UNSQUEEZE ----------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,axes", [((3,), [0]), ((2, 3), [-1, 0]), ((2, 3, 4), [0, 4]), ((2, 3), [0, 1, 2])], ids=str
)
def test_unsqueeze_q8(shape, axes):
    q, real = q8(shape, 13)
    check_quantized(OP.UNSQUEEZE, [q, i32(axes)], np.expand_dims(real, tuple(axes)), SCALE, lsb=0)
