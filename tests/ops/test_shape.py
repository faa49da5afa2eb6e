"""RESHAPE, FLATTEN, TRANSPOSE, CONCAT, SQUEEZE, UNSQUEEZE against numpy references written from the spec.

These only move data, so every comparison is exact (rtol = atol = 0).
"""

import itertools

import numpy as np
import pytest
from oputil import UNKNOWN, Const, In, Out, check_op, expect_error, i32, i64, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
EXACT = {"rtol": 0, "atol": 0}


def expect_invalid(op, inputs, out_shape, *words):
    """Compilation fails with INVALID_PARAMETER, the message naming the operation and ``words``."""
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(op, inputs, [Out()], [out_shape])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    for word in (op.name, *words):
        assert word in str(info.value)


# -- RESHAPE ------------------------------------------------------------------


def _reshape_ref(x, shape):
    """0 copies the input's dimension at the same position; one -1 is inferred."""
    dims = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(dims)


RESHAPES = [
    ((6,), [2, 3]),
    ((2, 3), [6]),
    ((2, 3), [-1]),
    ((2, 3, 4), [0, -1]),
    ((2, 3, 4), [0, 0, 2, 2]),
    ((2, 3, 4), [-1, 0, 2]),
    ((2, 3, 4), [4, 0, -1]),
    ((2, 3, 4, 5), [0, 3, 20]),
    ((1, 2, 3, 2, 2), [0, 0, -1, 1, 1]),
    ((2, 3, 4), [1, 1, 24, 1, 1]),
]


@pytest.mark.parametrize("in_shape,shape", RESHAPES, ids=str)
@pytest.mark.parametrize("shape_op", [i32, i64], ids=["int32", "int64"])
def test_reshape(in_shape, shape, shape_op):
    x = rand(*in_shape, seed=1)
    check_op(OP.RESHAPE, [In(x), shape_op(shape)], _reshape_ref(x, shape), **EXACT)


@pytest.mark.parametrize(
    "in_shape,shape,out_dims",
    [
        ((2, 3, 4), [0, -1], [UNKNOWN, 12]),
        ((2, 3, 4), [0, 0, 2, 2], [UNKNOWN, 3, 2, 2]),
        ((2, 3, 4), [-1, 4], [UNKNOWN, 4]),
    ],
    ids=str,
)
def test_reshape_unknown_batch(in_shape, shape, out_dims):
    """The batch dimension is UNKNOWN when the model is built; the fed input is 2 x ..."""
    x = rand(*in_shape, seed=2)
    dims = [UNKNOWN, *in_shape[1:]]
    check_op(OP.RESHAPE, [In(x, dims=dims), i32(shape)], _reshape_ref(x, shape), [Out(dims=out_dims)], **EXACT)


def test_reshape_to_a_scalar():
    """An empty shape operand is the scalar shape: [1] or [1, 1] -> rank 0 (the ONNX importer relies on it)."""
    for in_shape in ((1,), (1, 1)):
        x = rand(*in_shape, seed=3)
        check_op(OP.RESHAPE, [In(x), i32(np.zeros([0], "int32"))], x.reshape(()), [Out(dims=[])], **EXACT)


def test_reshape_two_minus_ones():
    expect_invalid(OP.RESHAPE, [In(rand(2, 3, 4)), i32([-1, -1])], (6, 4), "'shape'")


def test_reshape_wrong_element_count():
    expect_invalid(OP.RESHAPE, [In(rand(2, 3, 4)), i32([5, 5])], (5, 5), "'shape'")


def test_reshape_minus_one_that_does_not_divide():
    """4 elements to [1, -1, 1, 3]: was Relax's raw ValueError; now names the operand and the count."""
    expect_invalid(OP.RESHAPE, [In(rand(4)), i32([1, -1, 1, 3])], (1, 1, 1, 3), "'shape'", "do not divide by 3")


def test_reshape_ambiguous_minus_one_of_zero_elements():
    """[4, 0] to [-1, 0]: any size fits the -1 (numpy refuses it too)."""
    expect_invalid(OP.RESHAPE, [In(np.zeros((4, 0), "float32")), i32([-1, 0])], (0, 0), "'shape'", "ambiguous")


@pytest.mark.parametrize(
    "in_shape,shape", [((4, 0), [-1, 2]), ((2, 0, 3), [0, 6, -1]), ((3, 0), [0, 0, 5]), ((0, 3), [3, -1])], ids=str
)
def test_reshape_zero_size(in_shape, shape):
    """Zero-element tensors reshape like numpy's (Relax's reshape alone reads a literal 0 in the target
    as "copy the input's dimension": [4, 0] to [0, 2] became [4, 2])."""
    x = np.zeros(in_shape, "float32")
    check_op(OP.RESHAPE, [In(x), i32(shape)], _reshape_ref(x, shape), **EXACT)


def _reshape_unknown(dims, x, shape):
    return run_op(OP.RESHAPE, [In(x, dims=dims), i32(shape)], [Out(dims=[UNKNOWN] * len(shape))], [None])[0]


@pytest.mark.parametrize(
    "dims,fed,shape,words",
    [
        ([2, UNKNOWN], (2, 0), [4], "shape [4] needs 4 elements"),  # was SIGFPE: the process died
        ([2, UNKNOWN], (2, 1), [4], "shape [4] needs 4 elements"),  # read past the input
        ([2, UNKNOWN], (2, 3), [4], "shape [4] needs 4 elements"),
        ([UNKNOWN], (5,), [2, -1], "a multiple of 2 elements"),  # gave [2, 2]: an element silently lost
        ([UNKNOWN, 3], (1, 3), [2, -1, 2], "a multiple of 4 elements"),
    ],
    ids=str,
)
def test_reshape_element_count_checked_at_execution(dims, fed, shape, words):
    err = expect_error(
        lambda: _reshape_unknown(dims, rand(*fed), shape),
        "RESHAPE",
        "'shape'",
        words,
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )
    assert f"input dimensions at execution: [{list(fed)}]" in str(err)


@pytest.mark.parametrize(
    "dims,fed,shape",
    [
        ([2, UNKNOWN], (2, 2), [4]),
        ([2, UNKNOWN], (2, 0), [-1]),
        ([2, UNKNOWN], (2, 0), [0, 0]),
        ([UNKNOWN, 3], (0, 3), [-1, 0]),
        ([UNKNOWN], (6,), [2, -1]),
        ([UNKNOWN, 2], (3, 2), [0, 2]),
    ],
    ids=str,
)
def test_reshape_unknown_dims_valid_at_execution(dims, fed, shape):
    x = rand(*fed, seed=5)
    np.testing.assert_array_equal(_reshape_unknown(dims, x, shape), _reshape_ref(x, shape))


def test_reshape_minus_one_beside_zero_elements_at_execution_is_refused():
    """[?, 3] fed [0, 3] to [0, -1]: ambiguous, and refused at execution as numpy and onnxruntime refuse
    it (no division by the 0 elements of the other dimensions); fed [2, 3] it is [2, 3]."""
    assert _reshape_unknown([UNKNOWN, 3], np.ones((2, 3), "float32"), [0, -1]).shape == (2, 3)
    with pytest.raises(nna.NNAdapterError) as info:
        _reshape_unknown([UNKNOWN, 3], np.zeros((0, 3), "float32"), [0, -1])
    assert info.value.code == nna.ResultCode.INVALID_DIMENSIONS and "ambiguous" in str(info.value)


# -- FLATTEN ------------------------------------------------------------------


def _flatten_ref(x, start, end):
    start, end = start % x.ndim, end % x.ndim
    return x.reshape(*x.shape[:start], -1, *x.shape[end + 1 :])


FLATTEN_SHAPES = [(5,), (2, 3), (2, 3, 4), (2, 3, 2, 2), (1, 2, 3, 2, 2)]
FLATTEN_CASES = [
    (shape, start, end)
    for shape in FLATTEN_SHAPES
    for start, end in itertools.product(range(-len(shape), len(shape)), repeat=2)
    if start % len(shape) <= end % len(shape) and (len(shape) < 4 or (start >= 0) != (end >= 0) or start == end)
]


@pytest.mark.parametrize("shape,start,end", FLATTEN_CASES, ids=str)
def test_flatten(shape, start, end):
    x = rand(*shape, seed=3)
    check_op(OP.FLATTEN, [In(x), i32([start]), i32([end])], _flatten_ref(x, start, end), **EXACT)


@pytest.mark.parametrize(
    "shape,start,end,out", [((2, 0, 3), 1, 2, (2, 0)), ((3, 0), 0, 1, (0,)), ((0, 2, 2), 1, 2, (0, 4))], ids=str
)
def test_flatten_zero_size(shape, start, end, out):
    """The merged dimensions' product, also when it is 0 (numpy's -1 cannot say (0, 2, 2) -> (0, 4))."""
    x = np.zeros(shape, "float32")
    check_op(OP.FLATTEN, [In(x), i32([start]), i32([end])], np.zeros(out, "float32"), **EXACT)


def test_flatten_start_after_end():
    expect_invalid(OP.FLATTEN, [In(rand(2, 3, 4)), i32([2]), i32([1])], (2, 3, 4), "'start_axis'")


def test_flatten_axis_out_of_range():
    expect_invalid(OP.FLATTEN, [In(rand(2, 3, 4)), i32([0]), i32([3])], (24,), "'end_axis'")


# -- TRANSPOSE ----------------------------------------------------------------

PERMS = [
    (1, 0),
    (0, 1),
    (2, 0, 1),
    (1, 0, 2),
    (0, 2, 3, 1),
    (3, 2, 1, 0),
    (0, 3, 1, 2),
    (4, 2, 0, 1, 3),
    (0, 1, 2, 4, 3),
    (0,),
]


@pytest.mark.parametrize("perm", PERMS, ids=str)
def test_transpose(perm):
    x = rand(*[2 + i for i in range(len(perm))], seed=4)
    check_op(OP.TRANSPOSE, [In(x), i32(perm)], np.transpose(x, perm), **EXACT)


@pytest.mark.parametrize("perm", [(0, 0, 1), (0, 1), (0, 1, 3)], ids=str)
def test_transpose_invalid_perm(perm):
    expect_invalid(OP.TRANSPOSE, [In(rand(2, 3, 4)), i32(perm)], (2, 3, 4), "'perm'")


# -- CONCAT -------------------------------------------------------------------

CONCAT_CASES = [
    ([(3,), (4,)], 0),
    ([(3,), (4,)], -1),
    ([(2, 3), (2, 1), (2, 2)], 1),
    ([(2, 3), (1, 3), (4, 3), (2, 3)], 0),
    ([(2, 3), (1, 3)], -2),
    ([(2, 1, 4), (2, 3, 4), (2, 2, 4)], 1),
    ([(2, 3, 1), (2, 3, 2)], -1),
    ([(1, 2, 3, 2), (2, 2, 3, 2)], 0),
    ([(1, 2, 3, 2), (1, 1, 3, 2), (1, 3, 3, 2)], -3),
    ([(1, 2, 2, 2), (1, 2, 2, 1)], 3),
    ([(1, 2, 1, 2, 2), (1, 2, 3, 2, 2)], 2),
]


@pytest.mark.parametrize("shapes,axis", CONCAT_CASES, ids=str)
def test_concat(shapes, axis):
    xs = [rand(*s, seed=10 + i) for i, s in enumerate(shapes)]
    check_op(OP.CONCAT, [*(In(x) for x in xs), i32([axis])], np.concatenate(xs, axis=axis), **EXACT)


def test_concat_with_constant_input():
    a, b = rand(2, 3, seed=5), rand(2, 2, seed=6)
    check_op(OP.CONCAT, [In(a), Const(b), i32([1])], np.concatenate([a, b], axis=1), **EXACT)


def test_concat_mismatched_dims():
    expect_invalid(OP.CONCAT, [In(rand(2, 3)), In(rand(3, 3)), i32([1])], (2, 6), "'inputs'", "input 1")


def test_concat_mismatched_static_dims_after_unknown():
    """Input 0's dim is UNKNOWN, inputs 1 and 2 give it two different static sizes."""
    ins = [In(rand(2, 3), dims=[UNKNOWN, 3]), In(rand(2, 1)), In(rand(3, 1)), i32([1])]
    expect_invalid(OP.CONCAT, ins, (2, 5), "'inputs'", "input 2")


def test_concat_axis_out_of_range():
    expect_invalid(OP.CONCAT, [In(rand(2, 3)), In(rand(2, 3)), i32([2])], (2, 6), "'axis'")


# -- SQUEEZE ------------------------------------------------------------------


def _squeeze_ref(x, axes=None):
    """numpy.squeeze, except that squeezing every axis gives shape [1]: NNAdapter's convention for a
    result numpy would make rank 0 (Paddle-Lite's operation/squeeze.cc)."""
    y = np.squeeze(x, axis=None if axes is None else tuple(axes))
    return y.reshape(1) if y.ndim == 0 else y


SQUEEZE_CASES = [
    ((1,), [0]),
    ((3, 1), [1]),
    ((3, 1), [-1]),
    ((1, 3, 1), [0]),
    ((1, 3, 1), [0, 2]),
    ((1, 3, 1), [-3, -1]),
    ((2, 1, 3, 1), [3, 1]),
    ((1, 2, 1, 3, 1), [-5, 2]),
    ((1, 2, 1, 3, 1), [4]),
]


@pytest.mark.parametrize("shape,axes", SQUEEZE_CASES, ids=str)
def test_squeeze(shape, axes):
    x = rand(*shape, seed=7)
    check_op(OP.SQUEEZE, [In(x), i32(axes)], _squeeze_ref(x, axes), **EXACT)


@pytest.mark.parametrize("shape", [(1, 3, 1), (2, 1, 3, 1), (1, 2, 1, 3, 1), (2, 3), (3,)], ids=str)
@pytest.mark.parametrize("how", ["empty", "omitted"])
def test_squeeze_all(shape, how):
    """Empty (or omitted) axes remove every size-1 dimension."""
    x = rand(*shape, seed=8)
    axes = [i32([])] if how == "empty" else []
    check_op(OP.SQUEEZE, [In(x), *axes], _squeeze_ref(x), **EXACT)


@pytest.mark.parametrize("shape", [(1,), (1, 1, 1), (1, 1, 1, 1, 1)], ids=str)
@pytest.mark.parametrize("how", ["all_axes", "empty"])
def test_squeeze_every_axis_gives_shape_1(shape, how):
    """Not rank 0: the output is [1], as for REDUCE_* / ARG_* / MAT_MUL of 1-D operands."""
    x = rand(*shape, seed=18)
    axes = i32(list(range(-len(shape), 0)) if how == "all_axes" else [])
    (got,) = check_op(OP.SQUEEZE, [In(x), axes], x.reshape(1), **EXACT)
    assert got.shape == (1,)


def test_squeeze_same_axis_twice():
    """0 and -3 name the same axis of a rank-3 input: it is removed once."""
    x = rand(1, 3, 1, seed=9)
    check_op(OP.SQUEEZE, [In(x), i32([0, -3])], x.reshape(3, 1), **EXACT)


def test_squeeze_non_one_dim():
    expect_invalid(OP.SQUEEZE, [In(rand(1, 3, 1)), i32([1])], (1, 3, 1), "'axes'")


def test_squeeze_axis_out_of_range():
    expect_invalid(OP.SQUEEZE, [In(rand(1, 3, 1)), i32([3])], (3, 1), "'axes'")


# -- UNSQUEEZE ----------------------------------------------------------------


def _unsqueeze_ref(x, axes):
    """Axes index the output (rank R + len(axes)); negative ones count from its end."""
    return np.expand_dims(x, tuple(axes))


UNSQUEEZE_CASES = [
    ((3,), [0]),
    ((3,), [1]),
    ((3,), [-1]),
    ((3,), [-2]),
    ((2, 3), [0, 3]),
    ((2, 3), [1, 2]),
    ((2, 3), [-1, 0]),
    ((2, 3, 4), [2]),
    ((2, 3, 4), [0, 4]),
    ((2, 3, 4), [-5, 2]),
    ((2, 3, 2, 2), [4]),
    ((2, 3, 2, 2), [-5]),
    ((2, 3), [0, 1, 2]),
]


@pytest.mark.parametrize("shape,axes", UNSQUEEZE_CASES, ids=str)
def test_unsqueeze(shape, axes):
    x = rand(*shape, seed=10)
    check_op(OP.UNSQUEEZE, [In(x), i32(axes)], _unsqueeze_ref(x, axes), **EXACT)


@pytest.mark.parametrize("axes", [[3], [-4], [0, 0]], ids=str)
def test_unsqueeze_invalid_axes(axes):
    expect_invalid(OP.UNSQUEEZE, [In(rand(2, 3)), i32(axes)], (1, 2, 3), "'axes'")


# -- UNKNOWN (batch) dimensions -------------------------------------------------


def test_flatten_unknown_batch():
    x = rand(2, 3, 2, 2, seed=11)
    dims = [UNKNOWN, 3, 2, 2]
    check_op(OP.FLATTEN, [In(x, dims=dims), i32([1]), i32([-1])], x.reshape(2, 12), [Out(dims=[UNKNOWN, 12])], **EXACT)


def test_flatten_through_unknown_batch():
    x = rand(2, 3, 4, seed=12)
    dims = [UNKNOWN, 3, 4]
    check_op(OP.FLATTEN, [In(x, dims=dims), i32([0]), i32([1])], x.reshape(6, 4), [Out(dims=[UNKNOWN, 4])], **EXACT)


def test_transpose_unknown_batch():
    x = rand(2, 3, 4, seed=13)
    out = [Out(dims=[4, UNKNOWN, 3])]
    check_op(OP.TRANSPOSE, [In(x, dims=[UNKNOWN, 3, 4]), i32([2, 0, 1])], x.transpose(2, 0, 1), out, **EXACT)


def test_concat_unknown_batch():
    a, b = rand(2, 3, seed=14), rand(2, 1, seed=15)
    ins = [In(a, dims=[UNKNOWN, 3]), In(b, dims=[UNKNOWN, 1]), i32([-1])]
    check_op(OP.CONCAT, ins, np.concatenate([a, b], axis=1), [Out(dims=[UNKNOWN, 4])], **EXACT)


def test_squeeze_all_keeps_unknown_dims():
    """An UNKNOWN dimension is not known to be 1, so squeezing "every size-1 axis" keeps it."""
    x = rand(1, 1, 3, seed=16)
    check_op(OP.SQUEEZE, [In(x, dims=[UNKNOWN, 1, 3])], x.reshape(1, 3), [Out(dims=[UNKNOWN, 3])], **EXACT)


def test_unsqueeze_unknown_batch():
    x = rand(2, 3, seed=17)
    ins = [In(x, dims=[UNKNOWN, 3]), i32([0, -1])]
    check_op(OP.UNSQUEEZE, ins, x.reshape(1, 2, 3, 1), [Out(dims=[1, UNKNOWN, 3, 1])], **EXACT)


def test_concat_unknown_with_static_batch():
    """An UNKNOWN dim concatenated with a static one takes the static size."""
    a, b = rand(2, 3, seed=18), rand(2, 2, seed=19)
    ins = [In(a, dims=[UNKNOWN, 3]), Const(b), i32([1])]
    check_op(OP.CONCAT, ins, np.concatenate([a, b], axis=1), [Out(dims=[2, 5])], **EXACT)


def _floor_then_concat(pattern: list[int], axis: int, x_dims: list[int], other: np.ndarray) -> nna.Model:
    """x -> FLOOR -> f; CONCAT of f (0 in ``pattern``) and the constant ``other`` (1) along ``axis``."""
    P = nna.Precision
    model = nna.Model()
    x = model.add_operand(nna.OperandType(P.FLOAT32, x_dims))
    f = model.add_operand(nna.OperandType(P.FLOAT32, x_dims))
    model.add_operation(OP.FLOOR, [x], [f])
    c = model.add_operand(nna.OperandType(P.FLOAT32, list(other.shape)))
    model.set_operand_value(c, other)
    a = model.add_operand(nna.OperandType(P.INT32, []))
    model.set_operand_value(a, np.array(axis, "int32"))
    y = model.add_operand(nna.OperandType(P.FLOAT32, [UNKNOWN] * 3))
    model.add_operation(OP.CONCAT, [f if k == 0 else c for k in pattern] + [a], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model


@pytest.mark.parametrize("pattern", [[0, 0], [1, 0, 0], [0, 1, 0, 1, 0]], ids=str)
@pytest.mark.parametrize("axis", [0, 2])
@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "unknown-dim"])
def test_concat_of_a_repeated_operand_computed_in_the_same_kernel(pattern, axis, symbolic):
    """CONCAT naming one operand several times, that operand computed by FLOOR (both land in one fused
    kernel): TOPI's concatenate read it at two indices and TVM kept only the first access's region, so
    one copy came out as uninitialized memory (found by the differential fuzzer: Concat(Floor(x),
    Floor(x))). Against numpy; where the concatenated axis is unknown, at two sizes of one compilation."""
    from dynutil import execute

    other = rand(*([1, 3, 4] if axis == 0 else [2, 3, 1]), seed=41)
    x_dims = [2, 3, 4]
    if symbolic:
        x_dims[axis] = UNKNOWN
    compilation = nna.Compilation(
        _floor_then_concat(pattern, axis, x_dims, other), nna.Context([nna.Device.acquire("llvm")])
    )
    compilation.finish()
    for n in (2, 5) if symbolic else (x_dims[axis],):
        shape = [2, 3, 4]
        shape[axis] = n
        xv = rand(*shape, seed=40 + n) * 4
        (got,) = execute(compilation, [xv])
        parts = [np.floor(xv) if k == 0 else other for k in pattern]
        np.testing.assert_array_equal(got, np.concatenate(parts, axis=axis))
