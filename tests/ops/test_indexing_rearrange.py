"""ROLL, TILE, EXPAND, PAD and CHANNEL_SHUFFLE (elements moved within a tensor, or replicated
into a larger one) against numpy references written from the spec (and Paddle's operators where the
spec leaves a choice).

These only move or replicate elements, so every float comparison is exact (rtol = atol = 0), and
a quantized input whose output has the same scale must come back bit-exact (0 LSB): the values
are dequantized, moved, and requantized to the same grid.
"""

import numpy as np
import pytest
from indexing_refs import EXACT, OP, SCALE, expect_invalid, ints
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    P,
    check_op,
    check_quantized,
    expect_error,
    f32,
    i32,
    i64,
    q8_const,
    q8_input,
    quantize,
    rand,
    run_op,
)

import nnadapter_tvm as nna

MODE = nna.PadMode


# -- ROLL -----------------------------------------------------------------------------------


def _roll_ref(x, shifts, axes):
    """Element i moves to (i + shift) mod dim along each axis; no axes: the flattened input rolls."""
    if axes is None:
        flat = x.reshape(-1)
        n = flat.size
        return flat[[(i - sum(shifts)) % n for i in range(n)]].reshape(x.shape)
    out = x
    for s, a in zip(shifts, axes):
        n = x.shape[a]
        out = np.take(out, [(i - s) % n for i in range(n)], axis=a)
    return out


ROLL_CASES = [  # shape, shifts, axes
    ((5,), [2], [0]),
    ((5,), [-7], [-1]),
    ((3, 4), [1, -1], [0, 1]),
    ((3, 4), [5], [1]),
    ((3, 4), [2, 3], [1, -1]),  # one axis twice: the shifts add up
    ((2, 3, 4), [1, 2, 3], [2, 0, 1]),
    ((2, 3, 2, 4), [-1], [-3]),
    ((2, 3, 2, 2, 3), [4, 1], [4, 0]),
    ((3, 4), [3], None),  # no axes: flatten, roll, restore
    ((2, 3, 2), [-5], None),
]


@pytest.mark.parametrize("shape,shifts,axes", ROLL_CASES, ids=str)
def test_roll(shape, shifts, axes):
    x = rand(*shape, seed=23)
    ins = [In(x), i32(shifts)] + ([] if axes is None else [i32(axes)])
    check_op(OP.ROLL, ins, _roll_ref(x, shifts, axes), **EXACT)


def test_roll_axes_empty():
    x = rand(3, 4, seed=24)
    check_op(OP.ROLL, [In(x), i32([5]), Const(None, P.INT32)], _roll_ref(x, [5], None), **EXACT)


def test_roll_q8():
    q, real = q8_input(rand(3, 4, seed=25), SCALE)
    check_quantized(OP.ROLL, [q, i32([1, -2]), i32([0, 1])], _roll_ref(real, [1, -2], [0, 1]), SCALE, lsb=0)


def test_roll_unknown_batch():
    x = rand(3, 4, seed=26)
    ins = [In(x, dims=[UNKNOWN, 4]), i32([1, 1]), i32([0, 1])]
    check_op(OP.ROLL, ins, _roll_ref(x, [1, 1], [0, 1]), [Out(dims=[UNKNOWN, 4])], **EXACT)


def test_roll_constant_input():
    x = rand(3, 4, seed=27)
    check_op(OP.ROLL, [Const(x), i32([1]), i32([1])], _roll_ref(x, [1], [1]), **EXACT)


@pytest.mark.parametrize("shifts,axes,word", [([1], [2], "'axes'"), ([1, 2, 3], [0, 1], "'shifts'")], ids=str)
def test_roll_invalid(shifts, axes, word):
    expect_invalid(OP.ROLL, [In(rand(3, 4)), i32(shifts), i32(axes)], [(3, 4)], word)


# -- TILE -----------------------------------------------------------------------------------


def _tile_ref(x, repeats):
    """output_dims[i] = input_dims[i] * repeats[i]; short repeats are padded with leading 1s, long
    ones add leading dimensions (numpy.tile)."""
    rank = max(x.ndim, len(repeats))
    x = x.reshape((1,) * (rank - x.ndim) + x.shape)
    repeats = [1] * (rank - len(repeats)) + list(repeats)
    out = np.empty([d * r for d, r in zip(x.shape, repeats)], x.dtype)
    for j in np.ndindex(*out.shape):
        out[j] = x[tuple(i % d for i, d in zip(j, x.shape))]
    return out


TILE_CASES = [
    ((3,), [2]),
    ((3,), [2, 2]),
    ((2, 3), [1, 3]),
    ((2, 3), [2]),
    ((2, 3, 2), [2, 1, 2]),
    ((2, 3, 2), [3, 1, 1, 1]),
    ((1, 2, 1, 2), [1, 2, 3, 1]),
    ((1, 2, 1, 2, 2), [2, 1, 2, 1, 1]),
]


@pytest.mark.parametrize("shape,repeats", TILE_CASES, ids=str)
def test_tile(shape, repeats):
    x = rand(*shape, seed=28)
    check_op(OP.TILE, [In(x), i32(repeats)], _tile_ref(x, repeats), **EXACT)


def test_tile_q8():
    q, real = q8_input(rand(2, 3, seed=29), SCALE)
    check_quantized(OP.TILE, [q, i32([2, 2])], _tile_ref(real, [2, 2]), SCALE, lsb=0)


def test_tile_unknown_batch():
    x = rand(2, 3, seed=30)
    check_op(OP.TILE, [In(x, dims=[UNKNOWN, 3]), i32([1, 2])], _tile_ref(x, [1, 2]), [Out(dims=[UNKNOWN, 6])], **EXACT)


@pytest.mark.parametrize("repeats", [[0, 1], [2, -1], []], ids=str)
def test_tile_invalid(repeats):
    expect_invalid(OP.TILE, [In(rand(2, 3)), i32(repeats)], [(2, 3)], "'repeats'")


# -- EXPAND ---------------------------------------------------------------------------------


def _expand_ref(x, shape):
    """numpy broadcasting to ``shape``, where -1 keeps the input's (trailing-aligned) dimension."""
    diff = len(shape) - x.ndim
    target = [x.shape[i - diff] if s == -1 else s for i, s in enumerate(shape)]
    return np.broadcast_to(x, target).copy()


EXPAND_CASES = [
    ((1,), [4]),
    ((3,), [2, 3]),
    ((3, 1), [3, 4]),
    ((3, 1), [2, -1, 4]),
    ((1, 3, 1), [2, 3, 2]),
    ((2, 1, 3), [-1, 4, -1]),
    ((2, 1, 3, 1), [2, 2, 3, 2]),
    ((2, 1, 3, 1), [2, -1, 2, 3, 2]),
    ((1, 1, 2, 1, 2), [2, 2, 2, 2, 2]),
]


@pytest.mark.parametrize("shape,target", EXPAND_CASES, ids=str)
@pytest.mark.parametrize("shape_op", [i32, i64], ids=["int32", "int64"])
def test_expand(shape, target, shape_op):
    x = rand(*shape, seed=31)
    check_op(OP.EXPAND, [In(x), shape_op(target)], _expand_ref(x, target), **EXACT)


def test_expand_q8():
    q, real = q8_input(rand(3, 1, seed=32), SCALE)
    check_quantized(OP.EXPAND, [q, i32([2, 3, 4])], _expand_ref(real, [2, 3, 4]), SCALE, lsb=0)


def test_expand_unknown_batch():
    x = rand(2, 1, seed=33)
    ins = [In(x, dims=[UNKNOWN, 1]), i32([-1, 3])]
    check_op(OP.EXPAND, ins, _expand_ref(x, [-1, 3]), [Out(dims=[UNKNOWN, 3])], **EXACT)


@pytest.mark.parametrize("fed", [(1, 3), (2, 3)], ids=str)
def test_expand_unknown_dim_to_known(fed):
    """An UNKNOWN dimension expanded to 2 may turn out to be 1 (broadcast) or 2 (kept) when fed."""
    x = rand(*fed, seed=34)
    check_op(OP.EXPAND, [In(x, dims=[UNKNOWN, 3]), i32([2, 2, 3])], _expand_ref(x, [2, 2, 3]), **EXACT)


@pytest.mark.parametrize("target", [[2, 4], [4], [-1, 2, 3], [2, 0], [2, -2]], ids=str)
def test_expand_invalid(target):
    expect_invalid(OP.EXPAND, [In(rand(2, 3)), i32(target)], [(2, 3)], "'shape'")


@pytest.mark.parametrize("fed", [(2,), (3,), (7,), (0,)], ids=str)
def test_expand_unknown_dim_of_another_size_is_refused_at_execution(fed):
    """An UNKNOWN dimension expanded to 6 that turns out to be neither 1 nor 6: the kernel read past
    the input (heap memory came out); now the execution fails naming the operation and dimension."""
    x = rand(*fed, seed=35)
    expect_error(
        lambda: run_op(OP.EXPAND, [In(x, dims=[UNKNOWN]), i32([6])], [Out(dims=[6])], [None]),
        "EXPAND",
        "'input'",
        "input dimension 0 (unknown until execution) must be 1 or 6",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


# -- PAD ------------------------------------------------------------------------------------


def _pad_ref(x, pads, mode, value):
    """pads = [x0_begin, x0_end, x1_begin, ...]; CONSTANT fills ``value``, REFLECT mirrors without the
    edge, REPLICATE and EDGE repeat the edge."""
    widths = list(zip(pads[0::2], pads[1::2]))
    if mode == MODE.CONSTANT:
        return np.pad(x, widths, "constant", constant_values=value)
    return np.pad(x, widths, "reflect" if mode == MODE.REFLECT else "edge")


PAD_SHAPES = [  # shape, pads (asymmetric, so a swapped begin/end shows)
    ((5,), [2, 1]),
    ((3, 4), [1, 0, 0, 2]),
    ((2, 3, 4), [0, 1, 2, 0, 3, 1]),
    ((2, 3, 3, 4), [0, 0, 0, 0, 1, 2, 2, 3]),
    ((2, 2, 3, 2, 3), [1, 0, 0, 1, 2, 0, 1, 1, 0, 2]),
]
PAD_MODES = [MODE.CONSTANT, MODE.REFLECT, MODE.REPLICATE, MODE.EDGE]


@pytest.mark.parametrize("shape,pads", PAD_SHAPES, ids=str)
@pytest.mark.parametrize("mode", PAD_MODES, ids=lambda m: m.name)
def test_pad(shape, pads, mode):
    x = rand(*shape, seed=34)
    ins = [In(x), i32(pads), i32([mode]), Const(np.array([1.5], "float32"))]
    check_op(OP.PAD, ins, _pad_ref(x, pads, mode, 1.5), **EXACT)


def test_pad_value_empty():
    """An empty `value` pads CONSTANT with 0."""
    x = rand(2, 3, seed=35)
    check_op(
        OP.PAD, [In(x), i32([1, 1, 0, 2]), i32([MODE.CONSTANT]), Const(None)], np.pad(x, [(1, 1), (0, 2)]), **EXACT
    )


@pytest.mark.parametrize("dtype,precision", [("int32", P.INT32), ("int64", P.INT64)])
@pytest.mark.parametrize("mode", [MODE.CONSTANT, MODE.REFLECT, MODE.EDGE], ids=lambda m: m.name)
def test_pad_int(dtype, precision, mode):
    x = ints((3, 4), 1000, 36, dtype)
    ins = [In(x, precision), i32([1, 2, 2, 1]), i32([mode]), Const(np.array([-7], dtype), precision)]
    check_op(OP.PAD, ins, _pad_ref(x, [1, 2, 2, 1], mode, -7))


@pytest.mark.parametrize("mode", PAD_MODES, ids=lambda m: m.name)
def test_pad_q8(mode):
    q, real = q8_input(rand(2, 3, 4, seed=37), SCALE)
    value, value_real = q8_const(np.array([0.5], "float32"), SCALE)
    pads = [0, 0, 1, 2, 2, 1]
    check_quantized(OP.PAD, [q, i32(pads), i32([mode]), value], _pad_ref(real, pads, mode, value_real[0]), SCALE, lsb=0)


def test_pad_unknown_batch():
    x = rand(2, 3, seed=38)
    ins = [In(x, dims=[UNKNOWN, 3]), i32([0, 0, 2, 1]), i32([MODE.REFLECT]), Const(np.array([0], "float32"))]
    check_op(OP.PAD, ins, _pad_ref(x, [0, 0, 2, 1], MODE.REFLECT, 0), [Out(dims=[UNKNOWN, 6])], **EXACT)


@pytest.mark.parametrize(
    "pads,mode,word",
    [
        ([1, 1], MODE.CONSTANT, "'pads'"),
        ([1, 1, -1, 0], MODE.CONSTANT, "'pads'"),
        ([1, 1, 0, 0], MODE.NONE, "'mode'"),
        ([1, 1, 0, 0], 9, "'mode'"),
        ([0, 0, 3, 0], MODE.REFLECT, "'pads'"),  # reflecting needs pads < the dimension
    ],
    ids=str,
)
def test_pad_invalid(pads, mode, word):
    ins = [In(rand(2, 3)), i32(pads), i32([int(mode)]), Const(np.array([0], "float32"))]
    expect_invalid(OP.PAD, ins, [(4, 3)], word)


def test_pad_integers_into_a_quantized_output():
    x = np.array([[3, -4], [100, 0]], "int32")
    expected = quantize(np.pad(x, [(0, 1), (1, 0)]).astype("float32"), 2.0)
    (got,) = run_op(
        OP.PAD,
        [In(x, P.INT32), i32([0, 1, 1, 0]), i32([MODE.CONSTANT]), Const(None, P.INT32)],
        [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=2.0)],
        [expected.shape],
    )
    np.testing.assert_array_equal(got, expected)


# -- CHANNEL_SHUFFLE ------------------------------------------------------------------------


def _channel_shuffle_ref(x, group):
    """C_out[k * group + g] = C_in[g * size + k], size = C / group."""
    size = x.shape[1] // group
    out = np.empty_like(x)
    for g in range(group):
        for k in range(size):
            out[:, k * group + g] = x[:, g * size + k]
    return out


@pytest.mark.parametrize(
    "shape,group",
    [((1, 6, 2, 2), 2), ((2, 6, 1, 3), 3), ((2, 8, 2, 1), 4), ((1, 4, 2, 2), 1), ((1, 5, 2, 2), 5)],
    ids=str,
)
@pytest.mark.parametrize("group_type", ["int32", "float32"])
def test_channel_shuffle(shape, group, group_type):
    """group as the header types it (INT32) and as the spec does (FLOAT32 holding an integer)."""
    x = rand(*shape, seed=39)
    group_op = i32([group]) if group_type == "int32" else f32([group])
    check_op(OP.CHANNEL_SHUFFLE, [In(x), group_op], _channel_shuffle_ref(x, group), **EXACT)


def test_channel_shuffle_q8():
    q, real = q8_input(rand(2, 6, 2, 2, seed=40), SCALE)
    check_quantized(OP.CHANNEL_SHUFFLE, [q, i32([3])], _channel_shuffle_ref(real, 3), SCALE, lsb=0)


def test_channel_shuffle_unknown_batch():
    x = rand(2, 6, 2, 2, seed=41)
    out = [Out(dims=[UNKNOWN, 6, 2, 2])]
    check_op(OP.CHANNEL_SHUFFLE, [In(x, dims=[UNKNOWN, 6, 2, 2]), i32([2])], _channel_shuffle_ref(x, 2), out, **EXACT)


@pytest.mark.parametrize(
    "group",
    [i32([4]), i32([0]), i32([-2]), f32([4.0]), f32([2.5]), f32([0.0])],
    ids=["i32_4", "i32_0", "i32_-2", "f32_4", "f32_2.5", "f32_0"],
)
def test_channel_shuffle_bad_group(group):
    expect_invalid(OP.CHANNEL_SHUFFLE, [In(rand(1, 6, 2, 2)), group], [(1, 6, 2, 2)], "'group'")


def test_channel_shuffle_not_4d():
    expect_invalid(OP.CHANNEL_SHUFFLE, [In(rand(6, 2, 2)), i32([2])], [(6, 2, 2)], "'input'")
