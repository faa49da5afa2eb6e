"""SCATTER_ELEMENTS, SCATTER_ND and TENSOR_SCATTER (built-in extensions) against numpy references
written from the ONNX operator specs (ScatterElements-18, ScatterND-18, TensorScatter-24).

Scatters only move elements (or reduce them with one add, mul, max or min per update, in the same
order as the reference), so every comparison is exact.
"""

import itertools

import numpy as np
import pytest
from oputil import UNKNOWN, In, Out, P, check_op, expect_error, i32, i64, rand, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations.scatter import REDUCTIONS, SCATTER_ELEMENTS, SCATTER_ND, TENSOR_SCATTER

EXACT = {"rtol": 0, "atol": 0}
_F = {
    "none": lambda a, b: b,
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "max": max,
    "min": min,
}


def _scatter_elements_ref(data, indices, updates, axis, reduction):
    """The spec's loop: output[idx with axis replaced by indices[idx]] = f(output[...], updates[idx])."""
    out = data.copy()
    for idx in itertools.product(*[range(d) for d in indices.shape]):
        k = int(indices[idx])
        k = k + data.shape[axis] if k < 0 else k
        place = (*idx[:axis], k, *idx[axis + 1 :])
        out[place] = _F[reduction](out[place], updates[idx])
    return out


def _scatter_nd_loop(data, indices, updates, reduction):
    """ScatterND's reference: one index tuple after another, reducing element-wise over the slice."""
    ufunc = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    out = data.copy()
    for idx in np.ndindex(indices.shape[:-1]):
        place = tuple(int(v) for v in indices[idx])
        out[place] = updates[idx] if ufunc is None else ufunc(out[place], updates[idx])
    return out


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_reductions(reduction, axis):
    """Every reduction, duplicate and negative indices, indices smaller than the input on other axes."""
    data = rand(3, 4, seed=1)
    rng = np.random.default_rng(2)
    dim = data.shape[axis]
    indices = rng.integers(-dim, dim, (2, 3)).astype("int64")
    updates = rand(2, 3, seed=3)
    expected = _scatter_elements_ref(data, indices, updates, axis % 2, reduction)
    ins = [In(data), In(indices, P.INT64), In(updates), i32([axis]), i32([REDUCTIONS.index(reduction)])]
    check_op(SCATTER_ELEMENTS, ins, expected, **EXACT)


@pytest.mark.parametrize("dtype,precision", [("int32", P.INT32), ("int64", P.INT64), ("float64", P.FLOAT64)])
def test_scatter_elements_types_constant_indices(dtype, precision):
    data = np.arange(10, dtype=dtype).reshape(2, 5)
    updates = np.array([[7, 8, 9]], dtype)
    indices = np.array([[4, -5, 4]], "int32")
    expected = _scatter_elements_ref(data, indices, updates, 1, "add")
    ins = [In(data, precision), i32(indices), In(updates, precision), i32([1]), i32([1])]
    check_op(SCATTER_ELEMENTS, ins, expected, **EXACT)


@pytest.mark.parametrize("reduction", ["none", "max", "min"])
def test_scatter_elements_bool(reduction):
    """BOOL8: max is or, min is and (add and mul are refused, below)."""
    data = np.array([[True, False, True], [False, False, True]])
    indices = np.array([[1, 0, 0], [1, 1, 1]], "int64")
    updates = np.array([[True, True, False], [False, True, False]])
    expected = _scatter_elements_ref(data, indices, updates, 0, reduction)
    ins = [In(data, P.BOOL8), In(indices, P.INT64), In(updates, P.BOOL8), i32([0]), i32([REDUCTIONS.index(reduction)])]
    check_op(SCATTER_ELEMENTS, ins, expected)


def test_scatter_elements_symbolic_shapes():
    data, updates = rand(4, 3, seed=4), rand(2, 3, seed=5)
    indices = np.array([[3, 0, -1], [1, 1, 2]], "int32")
    expected = _scatter_elements_ref(data, indices, updates, 0, "max")
    ins = [
        In(data, dims=[UNKNOWN, 3]),
        In(indices, P.INT32, dims=[UNKNOWN, 3]),
        In(updates, dims=[UNKNOWN, 3]),
        i32([0]),
        i32([3]),
    ]
    check_op(SCATTER_ELEMENTS, ins, expected, [Out(dims=[UNKNOWN, 3])], **EXACT)


@pytest.mark.parametrize("bad,dims", [(4, [4, 3]), (-5, [4, 3]), (7, [UNKNOWN, 3])])
def test_scatter_elements_index_out_of_range_at_execution(bad, dims):
    """An index fed at execution outside [-dim, dim) fails naming 'indices', the value and the range;
    nothing is written past the output (the kernel skips it)."""
    indices = np.array([[0, bad, 1]], "int64")
    ins = [In(rand(4, 3), dims=dims), In(indices, P.INT64), In(rand(1, 3)), i32([0])]
    rng = "[-4, 4)" if dims[0] == 4 else "[-n, n)"
    expect_error(
        lambda: run_op(SCATTER_ELEMENTS, ins, [Out(dims=dims)], [None]),
        "SCATTER_ELEMENTS",
        "'indices'",
        f"index {bad} is out of range {rng}",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_scatter_elements_constant_index_out_of_range():
    ins = [In(rand(2, 3)), i32([[0, 3]]), In(rand(1, 2)), i32([1])]
    expect_error(
        lambda: run_op(SCATTER_ELEMENTS, ins, [Out()], [(2, 3)]), "'indices'", "index 3 is out of range [-3, 3)"
    )


def test_scatter_elements_bad_operands():
    ins = [In(rand(2, 3)), i32([0, 1]), In(rand(2)), i32([1])]
    expect_error(lambda: run_op(SCATTER_ELEMENTS, ins, [Out()], [(2, 3)]), "'indices'", "rank 2")
    ins = [In(rand(2, 3)), i32([[0, 1]]), In(rand(1, 2)), i32([1]), i32([9])]
    expect_error(lambda: run_op(SCATTER_ELEMENTS, ins, [Out()], [(2, 3)]), "'reduction'", "0..4")
    ins = [In(np.ones((2, 3), bool), P.BOOL8), i32([[0, 1]]), In(np.ones((1, 2), bool), P.BOOL8), i32([1]), i32([1])]
    expect_error(lambda: run_op(SCATTER_ELEMENTS, ins, [Out(P.BOOL8)], [(2, 3)]), "'reduction'", "BOOL8")


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_slices(reduction):
    """Index tuples shorter than the rank update slices; duplicate tuples reduce one after another."""
    data = rand(4, 2, 3, seed=6)
    indices = np.array([[[0], [-1]], [[2], [0]]], "int64")
    updates = rand(2, 2, 2, 3, seed=7)
    expected = _scatter_nd_loop(data, indices, updates, reduction)
    ins = [In(data), In(indices, P.INT64), In(updates), i32([REDUCTIONS.index(reduction)])]
    check_op(SCATTER_ND, ins, expected, **EXACT)


def test_scatter_nd_elements_symbolic():
    data = np.arange(12, dtype="int32").reshape(3, 4)
    indices = np.array([[2, -1], [0, 0], [2, 3]], "int32")
    updates = np.array([5, -6, 7], "int32")
    expected = _scatter_nd_loop(data, indices, updates, "min")
    ins = [
        In(data, P.INT32, dims=[UNKNOWN, 4]),
        In(indices, P.INT32, dims=[UNKNOWN, 2]),
        In(updates, P.INT32, dims=[UNKNOWN]),
        i32([4]),
    ]
    check_op(SCATTER_ND, ins, expected, [Out(P.INT32, dims=[UNKNOWN, 4])], **EXACT)


def test_scatter_nd_index_out_of_range_at_execution():
    indices = np.array([[1, 0], [0, 4]], "int64")
    ins = [In(rand(3, 4)), In(indices, P.INT64), In(rand(2)), i32([0])]
    expect_error(
        lambda: run_op(SCATTER_ND, ins, [Out()], [(3, 4)]),
        "SCATTER_ND",
        "'indices'",
        "index 4 is out of range [-4, 4) for axis 1",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_scatter_nd_bad_updates_shape():
    ins = [In(rand(3, 4)), i64([[1], [2]]), In(rand(2, 3)), i32([0])]
    expect_error(lambda: run_op(SCATTER_ND, ins, [Out()], [(3, 4)]), "'updates'", "[2, 4]")


def _tensor_scatter_ref(past, update, writes, axis, circular):
    """TensorScatter-24's pseudocode."""
    out = past.copy()
    axis = axis % past.ndim
    length, size = past.shape[axis], update.shape[axis]
    for prefix in np.ndindex(past.shape[:axis]):
        for s in range(size):
            pos = int(writes[prefix[0]]) + s
            pos = pos % length if circular else pos
            out[(*prefix, pos)] = update[(*prefix, s)]
    return out


@pytest.mark.parametrize("circular", [False, True])
@pytest.mark.parametrize("axis", [-2, 1])
def test_tensor_scatter(circular, axis):
    past, update = rand(2, 5, 3, seed=8), rand(2, 2, 3, seed=9)
    writes = np.array([4, 1], "int64") if circular else np.array([3, 0], "int64")
    expected = _tensor_scatter_ref(past, update, writes, axis, circular)
    ins = [In(past), In(update), In(writes, P.INT64), i32([axis]), i32([int(circular)])]
    check_op(TENSOR_SCATTER, ins, expected, **EXACT)


def test_tensor_scatter_without_write_indices_symbolic():
    past, update = rand(2, 4, 3, seed=10), rand(2, 3, 3, seed=11)
    expected = _tensor_scatter_ref(past, update, np.zeros(2, "int64"), 1, False)
    ins = [In(past, dims=[UNKNOWN, 4, 3]), In(update, dims=[UNKNOWN, UNKNOWN, 3]), i64(np.zeros([0])), i32([1])]
    check_op(TENSOR_SCATTER, ins, expected, [Out(dims=[UNKNOWN, 4, 3])], **EXACT)


def test_tensor_scatter_linear_overflow_at_execution():
    ins = [In(rand(2, 4, 3)), In(rand(2, 2, 3)), In(np.array([1, 3], "int64"), P.INT64), i32([1]), i32([0])]
    expect_error(
        lambda: run_op(TENSOR_SCATTER, ins, [Out()], [(2, 4, 3)]),
        "TENSOR_SCATTER",
        "'write_indices'",
        "write index 3 is out of range [0, 2]",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def _unpool_model(x_shape, out_shape, attrs, output_shape=None):
    from onnx import TensorProto, helper

    inputs = ["x", "i"] + (["shape"] if output_shape is not None else [])
    node = helper.make_node("MaxUnpool", inputs, ["y"], **attrs)
    inits = [helper.make_tensor("shape", TensorProto.INT64, [len(output_shape)], output_shape)] if output_shape else []
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
            helper.make_tensor_value_info("i", TensorProto.INT64, x_shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = min(model.ir_version, 8)
    return model


@pytest.mark.parametrize(
    "source_shape,attrs,output_shape",
    [
        ((2, 3, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}, None),
        ((2, 3, 6, 4), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]}, [2, 3, 7, 5]),
    ],
)
def test_onnx_max_unpool(source_shape, attrs, output_shape):
    """MaxUnpool (FILL + SCATTER_ELEMENTS + RESHAPE + PAD) against onnx's reference evaluator, on the
    indices MaxPool gives for the same attributes."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    source = rand(*source_shape, seed=12)  # shapes the unpooling restores exactly
    pool = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)],
        "p",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, source.shape)],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
    )
    pooled, indices = ReferenceEvaluator(helper.make_model(pool)).run(None, {"x": source})
    model = _unpool_model(list(pooled.shape), None, attrs, output_shape)
    feeds = {"x": pooled, "i": indices}
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    (got,) = nna.Predictor(model).run(feeds)
    np.testing.assert_array_equal(got, expected)


def test_onnx_max_unpool_index_out_of_range():
    model = _unpool_model([1, 1, 2, 2], None, {"kernel_shape": [2, 2], "strides": [2, 2]})
    feeds = {"x": rand(1, 1, 2, 2), "i": np.array([[[[0, 3], [16, 15]]]], "int64")}
    expect_error(
        lambda: nna.Predictor(model).run(feeds),
        "SCATTER_ELEMENTS",
        "'indices'",
        "index 16 is out of range [-16, 16)",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_tensor_scatter_linear_overflow_symbolic_cache():
    ins = [
        In(rand(2, 4, 3), dims=[2, UNKNOWN, 3]),
        In(rand(2, 3, 3), dims=[2, UNKNOWN, 3]),
        In(np.array([-1, 0], "int32"), P.INT32),
        i32([1]),
    ]
    expect_error(
        lambda: run_op(TENSOR_SCATTER, ins, [Out(dims=[2, UNKNOWN, 3])], [None]),
        "'write_indices'",
        "write index -1 is out of range [0, max_sequence_length - sequence_length]",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )
