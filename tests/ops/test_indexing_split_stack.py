"""SPLIT, STACK, UNSTACK and MESHGRID (one tensor into several, several into one) against numpy
references written from the spec (and Paddle's operators where the spec leaves a choice: one -1 split
size takes the rest).

These only move or replicate elements, so every float comparison is exact (rtol = atol = 0), and
a quantized input whose output has the same scale must come back bit-exact (0 LSB): the values
are dequantized, moved, and requantized to the same grid.
"""

import numpy as np
import pytest
from indexing_refs import EXACT, OP, SCALE, expect_invalid
from oputil import (
    UNKNOWN,
    In,
    Out,
    P,
    check_op,
    check_quantized,
    i32,
    q8_input,
    quantize,
    rand,
    run_op,
)


def check_q8_outputs(op, inputs, expected_real):
    """Several QUANT_INT8_SYMM_PER_LAYER outputs of scale SCALE, each exactly the quantized reference."""
    expected = [quantize(e, SCALE) for e in expected_real]
    outs = [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=SCALE) for _ in expected]
    got = run_op(op, inputs, outs, [e.shape for e in expected])
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == np.int8 and g.shape == e.shape, f"output {i}: {g.dtype}{g.shape} != int8{e.shape}"
        np.testing.assert_array_equal(g, e, err_msg=f"output {i}")


# -- SPLIT ----------------------------------------------------------------------------------

SPLIT_CASES = [  # shape, axis, split
    ((6,), 0, [1, 2, 3]),
    ((6,), -1, [6]),
    ((4, 5), 1, [2, 3]),
    ((4, 5), -2, [1, 1, 2]),
    ((2, 6, 3), 1, [-1, 2]),  # Paddle: one -1 takes the rest
    ((2, 6, 3), -1, [1, 1, 1]),
    ((2, 3, 4, 2), 2, [3, 0, 1]),  # a zero-size piece
    ((2, 3, 2, 4, 5), 4, [2, -1, 1]),
    ((2, 3, 2, 4, 5), -5, [1, 1]),
]


@pytest.mark.parametrize("shape,axis,sizes", SPLIT_CASES, ids=str)
def test_split(shape, axis, sizes):
    x = rand(*shape, seed=11)
    resolved = [x.shape[axis] - sum(s for s in sizes if s != -1) if s == -1 else s for s in sizes]
    expected = np.split(x, np.cumsum(resolved)[:-1], axis=axis)
    check_op(OP.SPLIT, [In(x), i32([axis]), i32(sizes)], expected, **EXACT)


def test_split_q8():
    q, real = q8_input(rand(2, 5, seed=12), SCALE)
    check_q8_outputs(OP.SPLIT, [q, i32([1]), i32([3, 2])], [real[:, :3], real[:, 3:]])


def test_split_unknown_batch():
    x = rand(3, 5, seed=13)
    outs = [Out(dims=[UNKNOWN, 1]), Out(dims=[UNKNOWN, 4])]
    check_op(OP.SPLIT, [In(x, dims=[UNKNOWN, 5]), i32([1]), i32([1, 4])], [x[:, :1], x[:, 1:]], outs, **EXACT)


@pytest.mark.parametrize(
    "axis,sizes,word",
    [([1], [2, 2], "'split'"), ([1], [-1, -1], "'split'"), ([1], [6, -1], "'split'"), ([2], [5], "'axis'")],
    ids=str,
)
def test_split_invalid(axis, sizes, word):
    expect_invalid(OP.SPLIT, [In(rand(2, 5)), i32(axis), i32(sizes)], [(2, 1)] * len(sizes), word)


def test_split_output_count():
    expect_invalid(OP.SPLIT, [In(rand(2, 5)), i32([1]), i32([2, 3])], [(2, 5)], "2 sizes")


# -- STACK ----------------------------------------------------------------------------------

STACK_CASES = [  # input shape, number of inputs, axis in [-(R + 1), R]
    ((3,), 2, 0),
    ((3,), 3, 1),
    ((3,), 2, -1),
    ((2, 3), 1, 0),
    ((2, 3), 3, 2),
    ((2, 3), 2, -3),
    ((2, 3, 4), 2, 1),
    ((2, 3, 4), 2, -2),
    ((2, 1, 3, 2), 3, 4),
    ((2, 1, 3, 2), 2, -5),
]


@pytest.mark.parametrize("shape,count,axis", STACK_CASES, ids=str)
def test_stack(shape, count, axis):
    xs = [rand(*shape, seed=20 + i) for i in range(count)]
    check_op(OP.STACK, [*(In(x) for x in xs), i32([axis])], np.stack(xs, axis=axis), **EXACT)


def test_stack_q8():
    (a, ra), (b, rb) = q8_input(rand(2, 3, seed=14), SCALE), q8_input(rand(2, 3, seed=15), SCALE)
    check_quantized(OP.STACK, [a, b, i32([1])], np.stack([ra, rb], axis=1), SCALE, lsb=0)


def test_stack_unknown_batch():
    a, b = rand(2, 3, seed=16), rand(2, 3, seed=17)
    ins = [In(a, dims=[UNKNOWN, 3]), In(b, dims=[UNKNOWN, 3]), i32([-1])]
    check_op(OP.STACK, ins, np.stack([a, b], axis=-1), [Out(dims=[UNKNOWN, 3, 2])], **EXACT)


def test_stack_mismatched_shapes():
    expect_invalid(OP.STACK, [In(rand(2, 3)), In(rand(2, 4)), i32([0])], [(2, 2, 3)], "'inputs'", "input 1")


@pytest.mark.parametrize("axis", [3, -4])
def test_stack_axis_out_of_range(axis):
    expect_invalid(OP.STACK, [In(rand(2, 3)), In(rand(2, 3)), i32([axis])], [(2, 2, 3)], "'axis'")


# -- UNSTACK --------------------------------------------------------------------------------

UNSTACK_CASES = [((3,), 0), ((2, 3), 1), ((2, 3), -2), ((2, 3, 4), 2), ((2, 3, 1, 2), -3), ((2, 1, 3, 2, 2), 4)]


@pytest.mark.parametrize("shape,axis", UNSTACK_CASES, ids=str)
def test_unstack(shape, axis):
    x = rand(*shape, seed=18)
    num = shape[axis]
    expected = [np.take(x, i, axis=axis) for i in range(num)]
    check_op(OP.UNSTACK, [In(x), i32([axis]), i32([num])], expected, **EXACT)


def test_unstack_q8():
    q, real = q8_input(rand(2, 3, seed=19), SCALE)
    check_q8_outputs(OP.UNSTACK, [q, i32([1]), i32([3])], [real[:, i] for i in range(3)])


def test_unstack_unknown_batch():
    x = rand(3, 2, seed=20)
    outs = [Out(dims=[UNKNOWN]), Out(dims=[UNKNOWN])]
    check_op(OP.UNSTACK, [In(x, dims=[UNKNOWN, 2]), i32([1]), i32([2])], [x[:, 0], x[:, 1]], outs, **EXACT)


def test_unstack_wrong_num():
    expect_invalid(OP.UNSTACK, [In(rand(2, 3)), i32([1]), i32([2])], [(2,), (2,)], "'num'")


def test_unstack_axis_out_of_range():
    expect_invalid(OP.UNSTACK, [In(rand(2, 3)), i32([2]), i32([3])], [(2,)] * 3, "'axis'")


# -- MESHGRID -------------------------------------------------------------------------------


def _meshgrid_ref(xs):
    """output_i[j0, ..., j(n-1)] = input_i[j_i] ('ij' indexing)."""
    shape = tuple(len(x) for x in xs)
    outs = []
    for i, x in enumerate(xs):
        out = np.empty(shape, x.dtype)
        for j in np.ndindex(*shape):
            out[j] = x[j[i]]
        outs.append(out)
    return outs


@pytest.mark.parametrize("sizes", [(4,), (3, 4), (2, 1, 3), (2, 3, 1, 2, 2)], ids=str)
def test_meshgrid(sizes):
    xs = [rand(n, seed=30 + i) for i, n in enumerate(sizes)]
    check_op(OP.MESHGRID, [In(x) for x in xs], _meshgrid_ref(xs), **EXACT)


def test_meshgrid_q8():
    (a, ra), (b, rb) = q8_input(rand(3, seed=21), SCALE), q8_input(rand(2, seed=22), SCALE)
    check_q8_outputs(OP.MESHGRID, [a, b], _meshgrid_ref([ra, rb]))


def test_meshgrid_not_1d():
    expect_invalid(OP.MESHGRID, [In(rand(3)), In(rand(2, 2))], [(3, 2), (3, 2)], "input 1")


def test_meshgrid_output_count():
    expect_invalid(OP.MESHGRID, [In(rand(3)), In(rand(2))], [(3, 2)], "output")
