"""ARG_MAX, ARG_MIN and TOP_K against numpy references written from the spec (Paddle's top_k_v2
where the spec is loose): ranks 1-5, negative axes, omitted optional operands, index dtypes, ties
(the first index wins), NaN and infinities ranked as numpy and onnxruntime do, integer types TVM's topk
rejects, quantized inputs, an UNKNOWN batch, empty axes, and bad operands."""

import numpy as np
import pytest
from oputil import (
    UNKNOWN,
    In,
    Out,
    P,
    b8,
    check_op,
    expect_error,
    i32,
    i64,
    q8_input,
    quantize,
    rand,
    run_op,
)
from reduce_refs import EXACT, OP, at_least_1d, invalid

import nnadapter_tvm as nna

INDEX = {5: "int32", 7: "int64"}  # Precision code -> dtype


# -- ARG_MAX / ARG_MIN ------------------------------------------------------------------------

# (shape, axis): every rank 1-5, negative axes, the first and the last axis.
ARG_CASES = [
    ((5,), 0),
    ((5,), -1),
    ((3, 4), 1),
    ((3, 4), -2),
    ((2, 3, 4), 1),
    ((2, 3, 4), -1),
    ((2, 3, 2, 3), 0),
    ((2, 3, 2, 3), -2),
    ((2, 2, 3, 2, 3), 2),
    ((2, 2, 3, 2, 3), -1),
]


def arg_ref(op, x, axis, keepdim, dtype):
    """numpy's argmax/argmin: the first index among equal extremes."""
    y = (np.argmax if op == OP.ARG_MAX else np.argmin)(x, axis=axis, keepdims=keepdim)
    return at_least_1d(y).astype(dtype)


@pytest.mark.parametrize("op", [OP.ARG_MAX, OP.ARG_MIN], ids=lambda o: o.name)
@pytest.mark.parametrize("shape,axis", ARG_CASES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keep"])
def test_arg_max_min(op, shape, axis, keepdim):
    x = rand(*shape, seed=len(shape) + axis)
    # dtype: omitted (INT64) for the first axis of each rank, otherwise INT32 / INT64 by keepdim.
    code = None if axis == 0 else (5 if keepdim else 7)
    inputs = [In(x), i32([axis]), b8([keepdim])] + ([] if code is None else [i32([code])])
    check_op(op, inputs, arg_ref(op, x, axis, keepdim, INDEX[code or 7]))


@pytest.mark.parametrize("op", [OP.ARG_MAX, OP.ARG_MIN], ids=lambda o: o.name)
def test_arg_max_min_ties_take_first_index(op):
    x = np.array([[1, 3, 3, 0, 0], [2, 2, 2, 2, 2], [0, 0, 1, 1, 0]], "float32")
    for axis in (0, 1):
        check_op(op, [In(x), i32([axis]), b8([False]), i32([5])], arg_ref(op, x, axis, False, "int32"))


@pytest.mark.parametrize("op", [OP.ARG_MAX, OP.ARG_MIN], ids=lambda o: o.name)
def test_arg_max_min_infinities_and_nan_as_numpy(op):
    """Rows of -inf / +inf only (TOPI's start from the lowest finite value gave -1 for them), and NaN
    anywhere: numpy returns the first NaN, for argmax and argmin alike."""
    inf, nan = np.inf, np.nan
    x = np.array(
        [[-inf, -inf, -inf], [inf, inf, inf], [1, nan, 3], [nan, 2, nan], [2, 5, 5], [0, -1, -1], [-inf, 0, inf]],
        "float32",
    )
    for axis in (0, 1):
        check_op(op, [In(x), i32([axis]), b8([False]), i32([7])], arg_ref(op, x, axis, False, "int64"))


@pytest.mark.parametrize("op", [OP.ARG_MAX, OP.ARG_MIN], ids=lambda o: o.name)
def test_arg_max_min_q8(op):
    # Quantization makes many ties: the first index still wins, on the dequantized values.
    q, real = q8_input(rand(3, 4, 5, seed=11), 0.25)
    check_op(op, [q, i32([-2]), b8([True]), i32([7])], arg_ref(op, real, -2, True, "int64"))


def test_arg_max_unknown_batch():
    x = rand(3, 4, seed=12)
    out = [Out(P.INT32, dims=[UNKNOWN])]
    check_op(
        OP.ARG_MAX, [In(x, dims=[UNKNOWN, 4]), i32([1]), b8([False]), i32([5])], np.argmax(x, 1).astype("int32"), out
    )


@pytest.mark.parametrize("axis", [2, -3])
def test_arg_max_axis_out_of_range(axis):
    invalid(OP.ARG_MAX, [In(rand(2, 3)), i32([axis]), b8([False])], [Out(P.INT64)], [(2,)], "'axis'", "out of range")


@pytest.mark.parametrize("op", [OP.ARG_MAX, OP.ARG_MIN], ids=lambda o: o.name)
def test_arg_max_min_of_a_static_empty_axis_is_invalid(op):
    """An empty axis has no largest element (numpy: "attempt to get argmax of an empty sequence")."""
    inputs = [In(np.zeros((2, 0), "float32")), i32([1]), b8([False])]
    invalid(op, inputs, [Out(P.INT64)], [(2,)], "'input'", "axis 1 has size 0")


@pytest.mark.parametrize("op", [OP.ARG_MAX, OP.ARG_MIN], ids=lambda o: o.name)
def test_arg_max_min_of_an_empty_axis_at_execution_fails(op):
    """Known only at execution: the indices were never written (uninitialized memory came out)."""
    inputs = [In(np.zeros((2, 0), "float32"), dims=[2, UNKNOWN]), i32([1]), b8([False])]
    expect_error(
        lambda: run_op(op, inputs, [Out(P.INT64, dims=[2])], [None]),
        op.name,
        "axis 1 has size 0 at execution",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_arg_min_bad_dtype():
    inputs = [In(rand(2, 3)), i32([1]), b8([False]), i32([int(P.FLOAT32)])]
    invalid(OP.ARG_MIN, inputs, [Out(P.INT64)], [(2,)], "'dtype'", "INT32 (5) or INT64 (7)")


# -- TOP_K ------------------------------------------------------------------------------------


def top_k_ref(x, k, axis, largest, dtype):
    """Paddle's top_k_v2: the k largest (smallest) values, largest (smallest) first; equal values
    by smaller index first."""
    key = -x if largest else x
    order = np.argsort(key, axis=axis, kind="stable")  # stable: equal keys keep index order
    indices = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, indices, axis), indices.astype(dtype)


def top_k_inputs(x, k, axis, largest, sorted_, code, k_op=i32, **kw):
    return [In(x, **kw), k_op([k]), i32([axis]), b8([largest]), b8([sorted_]), i32([code])]


# (shape, k, axis): ranks 1-5, k = 1, k = the whole axis, negative axes.
TOP_K_CASES = [
    ((6,), 3, 0),
    ((6,), 6, -1),
    ((3, 5), 1, 1),
    ((3, 5), 2, -2),
    ((2, 4, 3), 2, 1),
    ((2, 3, 2, 4), 3, -1),
    ((2, 2, 3, 2, 3), 2, 2),
]


@pytest.mark.parametrize("shape,k,axis", TOP_K_CASES, ids=str)
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_top_k(shape, k, axis, largest):
    x = rand(*shape, seed=len(shape) + k)
    code = 5 if largest else 7
    k_op = i64 if len(shape) % 2 else i32  # k given as INT32 and as INT64
    inputs = top_k_inputs(x, k, axis, largest, True, code, k_op)
    check_op(OP.TOP_K, inputs, top_k_ref(x, k, axis, largest, INDEX[code]), **EXACT)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_top_k_integer_input_with_ties(dtype, largest):
    # Small integers: many equal values, within a row and at the k-th place.
    x = np.random.default_rng(41).integers(-3, 4, (3, 8)).astype(dtype)
    x[0] = [2, 2, 2, 2, 2, 2, 2, 2]
    inputs = top_k_inputs(x, 4, 1, largest, True, 7, precision=P.INT32 if dtype == "int32" else P.INT64)
    check_op(OP.TOP_K, inputs, top_k_ref(x, 4, 1, largest, "int64"), **EXACT)


def test_top_k_unsorted():
    """sorted = false: the same k elements in any order (compared after ordering by index)."""
    x = rand(3, 7, seed=42)
    values, indices = run_op(OP.TOP_K, top_k_inputs(x, 3, 1, True, False, 5), [Out(), Out(P.INT32)], [(3, 3)] * 2)
    ref_values, ref_indices = top_k_ref(x, 3, 1, True, "int32")
    by_index, ref_by_index = np.argsort(indices, 1), np.argsort(ref_indices, 1)
    np.testing.assert_array_equal(
        np.take_along_axis(indices, by_index, 1), np.take_along_axis(ref_indices, ref_by_index, 1)
    )
    np.testing.assert_array_equal(
        np.take_along_axis(values, by_index, 1), np.take_along_axis(ref_values, ref_by_index, 1)
    )


_WIDENED_TOP_K = {"int16": P.INT16, "uint16": P.UINT16, "uint32": P.UINT32, "uint64": P.UINT64}


@pytest.mark.parametrize("dtype", sorted(_WIDENED_TOP_K))
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_top_k_widened_integer_types(dtype, largest):
    """Types TVM's topk kernel rejects go through an order-preserving int64 key (ONNX TopK takes them);
    the extremes of each type are included (uint64 above 2**63 must stay the largest)."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(45).integers(0, 50, (3, 7)).astype(dtype)
    x[0, :4] = [info.max, info.min, info.max - 1, 1]
    x[1, 2] = info.max // 2 + 1
    inputs = top_k_inputs(x, 3, 1, largest, True, 7, precision=_WIDENED_TOP_K[dtype])
    outputs = [Out(_WIDENED_TOP_K[dtype]), Out(P.INT64)]
    # Python ints as keys: negating the type's minimum would overflow in its own dtype.
    key = -x.astype(object) if largest else x.astype(object)
    indices = np.argsort(key, axis=1, kind="stable")[:, :3]
    expected = [np.take_along_axis(x, indices, 1), indices.astype("int64")]
    check_op(OP.TOP_K, inputs, expected, outputs, **EXACT)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_top_k_nan_ranks_above_infinity(dtype, largest):
    """Floats in a total order, as onnxruntime's TopK and numpy's sort: NaN is the largest value (first
    when largest, last when smallest), -0 equals +0, ties by smaller index.  TVM's topk compares with
    ``<`` and placed a NaN in the middle."""
    nan, inf = np.nan, np.inf
    x = np.array(
        [
            [1, nan, 3, nan, -inf, inf, 0.0, -0.0, 2, 3],
            [-0.0, 0.0, 2, 2, nan, -1, 5, -7, inf, -inf],
            [nan, nan, nan, 1, -1, nan, 0, 4, -4, nan],
        ],
        dtype,
    )
    k = 7
    value = np.where(np.isnan(x), 0, x) + 0.0  # + 0.0: -0 becomes +0, equal to it
    primary, secondary = (-np.isnan(x).astype(int), -value) if largest else (np.isnan(x).astype(int), value)
    order = np.stack([np.lexsort((secondary[r], primary[r]))[:k] for r in range(x.shape[0])])  # stable
    expected = [np.take_along_axis(x, order, 1), order.astype("int64")]
    precision = {"float32": P.FLOAT32, "float16": P.FLOAT16, "float64": P.FLOAT64}[dtype]
    got = check_op(
        OP.TOP_K,
        top_k_inputs(x, k, 1, largest, True, 7, precision=precision),
        expected,
        [Out(precision), Out(P.INT64)],
        **EXACT,
    )
    assert np.array_equal(np.signbit(got[0]), np.signbit(expected[0]))  # -0 and +0 kept as they were


def test_top_k_q8():
    # Values come back requantized to the output's scale; with the input's scale that is exact.
    q, real = q8_input(rand(2, 3, 6, seed=43), 0.05)
    ref_values, ref_indices = top_k_ref(real, 3, -1, True, "int32")
    outputs = [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.05), Out(P.INT32)]
    values, indices = run_op(OP.TOP_K, [q, *top_k_inputs(real, 3, -1, True, True, 5)[1:]], outputs, [(2, 3, 3)] * 2)
    assert values.dtype == np.int8 and indices.dtype == np.int32
    np.testing.assert_array_equal(values, quantize(ref_values, 0.05))
    np.testing.assert_array_equal(indices, ref_indices)


def test_top_k_unknown_batch():
    x = rand(3, 5, seed=44)
    outputs = [Out(dims=[UNKNOWN, 2]), Out(P.INT64, dims=[UNKNOWN, 2])]
    inputs = top_k_inputs(x, 2, 1, False, True, 7, dims=[UNKNOWN, 5])
    check_op(OP.TOP_K, inputs, top_k_ref(x, 2, 1, False, "int64"), outputs, **EXACT)


@pytest.mark.parametrize("k", [0, 6])
def test_top_k_bad_k(k):
    inputs = top_k_inputs(rand(2, 5), k, 1, True, True, 7)
    invalid(OP.TOP_K, inputs, [Out(), Out(P.INT64)], [(2, 1), (2, 1)], "'k'", "out of range [1, 5]")


def test_top_k_k_above_an_axis_known_at_execution():
    """k = 3 of an axis fed with 2 elements: refused at execution, naming k."""
    inputs = top_k_inputs(rand(2, 2), 3, 1, True, True, 7, dims=[2, UNKNOWN])
    expect_error(
        lambda: run_op(OP.TOP_K, inputs, [Out(dims=[2, 3]), Out(P.INT64, dims=[2, 3])], [None, None]),
        "TOP_K",
        "'k'",
        "k 3 exceeds the size of axis 1 at execution",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_top_k_bad_axis():
    inputs = top_k_inputs(rand(2, 5), 1, 2, True, True, 7)
    invalid(OP.TOP_K, inputs, [Out(), Out(P.INT64)], [(2, 1), (2, 1)], "'axis'", "out of range")


def test_top_k_bad_indices_dtype():
    inputs = top_k_inputs(rand(2, 5), 1, 1, True, True, int(P.INT8))
    invalid(OP.TOP_K, inputs, [Out(), Out(P.INT64)], [(2, 1), (2, 1)], "'return_indices_dtype'", "INT32 (5)")
