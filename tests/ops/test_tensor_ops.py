"""EINSUM, COL2IM, DET and REVERSE_SEQUENCE (built-in extensions) against numpy references written
from the ONNX operator specs (Einsum-12: numpy.einsum; Col2Im-18: the im2col loop inverted; Det-11:
numpy.linalg.det; ReverseSequence-10: the spec's per-batch reversal)."""

import itertools

import numpy as np
import pytest
from oputil import UNKNOWN, Const, In, Out, P, check_op, expect_error, i32, i64, rand, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations.tensor_ops import COL2IM, DET, EINSUM, REVERSE_SEQUENCE, equation_operand

EXACT = {"rtol": 0, "atol": 0}


def _equation(text: str) -> Const:
    return Const(equation_operand(text), P.UINT8)


@pytest.mark.parametrize(
    "equation,shapes",
    [
        ("ij->ji", [(3, 4)]),
        ("ij->i", [(3, 4)]),
        ("...ii ->...i", [(2, 3, 3)]),
        ("i,i", [(5,), (5,)]),
        ("bij, bjk -> bik", [(2, 2, 3), (2, 3, 4)]),
        ("ij,jk,kl", [(2, 3), (3, 4), (4, 2)]),
        ("ii", [(3, 3)]),
    ],
)
def test_einsum(equation, shapes):
    xs = [rand(*s, seed=k) for k, s in enumerate(shapes)]
    # float32 sums in another order than numpy's: a few ulps.
    check_op(
        EINSUM, [*[In(x) for x in xs], _equation(equation)], np.asarray(np.einsum(equation, *xs)), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("dtype,precision", [("int64", P.INT64), ("float64", P.FLOAT64)])
def test_einsum_types(dtype, precision):
    x = np.arange(12, dtype=dtype).reshape(3, 4)
    y = np.arange(8, dtype=dtype).reshape(4, 2)
    check_op(EINSUM, [In(x, precision), In(y, precision), _equation("ij,jk->ik")], np.einsum("ij,jk->ik", x, y))


def test_einsum_symbolic_batch():
    x, y = rand(3, 2, 4, seed=1), rand(3, 4, 5, seed=2)
    ins = [In(x, dims=[UNKNOWN, 2, 4]), In(y, dims=[UNKNOWN, 4, 5]), _equation("bij,bjk->bik")]
    check_op(EINSUM, ins, np.einsum("bij,bjk->bik", x, y), [Out(dims=[UNKNOWN, 2, 5])], rtol=1e-5, atol=1e-6)


def test_einsum_bad_equation():
    ins = [In(rand(3, 4)), _equation("ijk->i")]
    expect_error(lambda: run_op(EINSUM, ins, [Out()], [(3,)]), "EINSUM", "'ijk'", "rank 2")
    ins = [In(rand(3, 4)), _equation("ij,jk->ik")]
    expect_error(lambda: run_op(EINSUM, ins, [Out()], [(3,)]), "names 2 operands, 1 given")


def _col2im_ref(cols, image, block, dilations, pads, strides):
    """Col2Im as the adjoint of im2col: each column's block values are added back into the image."""
    rank = len(image)
    n, ck, _ = cols.shape
    kernel = int(np.prod(block))
    c = ck // kernel
    padded = [image[d] + pads[d] + pads[d + rank] for d in range(rank)]
    positions = [(padded[d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(rank)]
    out = np.zeros((n, c, *padded), cols.dtype)
    for li, pos in enumerate(itertools.product(*[range(p) for p in positions])):
        for ki, off in enumerate(itertools.product(*[range(b) for b in block])):
            where = tuple(pos[d] * strides[d] + off[d] * dilations[d] for d in range(rank))
            out[(slice(None), slice(None), *where)] += cols[:, np.arange(c) * kernel + ki, li]
    crop = tuple(slice(pads[d], pads[d] + image[d]) for d in range(rank))
    return out[(slice(None), slice(None), *crop)]


@pytest.mark.parametrize(
    "image,block,dilations,pads,strides",
    [
        ([4, 5], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1]),
        ([5, 5], [2, 3], [1, 2], [1, 0, 1, 2], [2, 1]),
        ([3, 3, 4], [2, 1, 2], [1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 1, 2]),
        ([7], [3], [2], [1, 1], [2]),
    ],
)
def test_col2im(image, block, dilations, pads, strides):
    rank = len(image)
    positions = [
        (image[d] + pads[d] + pads[d + rank] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(rank)
    ]
    cols = rand(2, 2 * int(np.prod(block)), int(np.prod(positions)), seed=3)
    expected = _col2im_ref(cols, image, block, dilations, pads, strides)
    ins = [In(cols), i64(image), i64(block), i64(dilations), i64(pads), i64(strides)]
    check_op(COL2IM, ins, expected, rtol=1e-6, atol=1e-6)  # overlapping blocks sum in another order


def test_col2im_symbolic_batch():
    cols = rand(3, 4, 12, seed=4)
    expected = _col2im_ref(cols, [4, 5], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1])
    ins = [In(cols, dims=[UNKNOWN, 4, 12]), i64([4, 5]), i64([2, 2])]
    check_op(COL2IM, ins, expected, [Out(dims=[UNKNOWN, 1, 4, 5])], rtol=1e-6, atol=1e-6)


def test_col2im_bad_column_count():
    ins = [In(rand(1, 4, 11)), i64([4, 5]), i64([2, 2])]
    expect_error(lambda: run_op(COL2IM, ins, [Out()], [(1, 1, 4, 5)]), "COL2IM", "'input'", "= 12, got 11")


@pytest.mark.parametrize("shape", [(2, 2), (3, 3, 3), (2, 1, 4, 4), (1, 1)])
def test_det(shape):
    x = rand(*shape, seed=5)
    # float64 elimination rounded to float32, against LAPACK's float32 LU.
    check_op(DET, [In(x)], np.asarray(np.linalg.det(x.astype("float64")), "float32"), rtol=1e-5, atol=1e-6)


def test_det_singular_and_pivoting():
    x = np.array([[[0, 1], [1, 0]], [[1, 2], [2, 4]], [[0, 0], [0, 0]]], "float32")
    check_op(DET, [In(x)], np.linalg.det(x.astype("float64")).astype("float32"), **EXACT)


def test_det_symbolic():
    x = rand(2, 3, 3, seed=6)
    check_op(DET, [In(x, dims=[UNKNOWN, 3, 3])], np.linalg.det(x), [Out(dims=[UNKNOWN])], rtol=1e-5, atol=1e-6)


def test_det_not_square():
    expect_error(lambda: run_op(DET, [In(rand(2, 3))], [Out()], [()]), "DET", "'input'", "square")


def _reverse_sequence_ref(x, lens, batch_axis, time_axis):
    out = x.copy()
    for b, n in enumerate(lens):
        src = [slice(None)] * x.ndim
        src[batch_axis], src[time_axis] = b, slice(0, n)
        dst = list(src)
        out[tuple(dst)] = np.flip(x[tuple(src)], axis=time_axis - (time_axis > batch_axis))
    return out


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1), (0, 2), (2, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    shape = [3, 4, 2]
    x = rand(*shape, seed=7)
    lens = np.random.default_rng(8).integers(0, shape[time_axis] + 1, shape[batch_axis]).astype("int64")
    expected = _reverse_sequence_ref(x, lens, batch_axis, time_axis)
    ins = [In(x), In(lens, P.INT64), i32([batch_axis]), i32([time_axis])]
    check_op(REVERSE_SEQUENCE, ins, expected, **EXACT)


def test_reverse_sequence_int_symbolic():
    x = np.arange(20, dtype="int32").reshape(5, 4)
    lens = np.array([5, 1, 3, 0], "int32")
    ins = [In(x, P.INT32, dims=[UNKNOWN, 4]), In(lens, P.INT32)]
    check_op(REVERSE_SEQUENCE, ins, _reverse_sequence_ref(x, lens, 1, 0), [Out(P.INT32, dims=[UNKNOWN, 4])])


@pytest.mark.parametrize("bad", [5, -1])
def test_reverse_sequence_length_out_of_range(bad):
    ins = [In(rand(4, 2)), In(np.array([1, bad], "int64"), P.INT64)]
    expect_error(
        lambda: run_op(REVERSE_SEQUENCE, ins, [Out()], [(4, 2)]),
        "REVERSE_SEQUENCE",
        "'sequence_lens'",
        f"length {bad} is out of range [0, 4]",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_reverse_sequence_length_out_of_range_symbolic_time():
    ins = [In(rand(3, 2), dims=[UNKNOWN, 2]), In(np.array([4, 1], "int32"), P.INT32)]
    expect_error(
        lambda: run_op(REVERSE_SEQUENCE, ins, [Out(dims=[UNKNOWN, 2])], [None]),
        "'sequence_lens'",
        "length 4 is out of range [0, n] (n: the time axis' size at execution)",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )
