"""GATHER and SLICE (elements picked by index, ranges cut by start / end / step) against numpy
references written from the spec (and Paddle's operators where the spec leaves a choice): indices
constant or fed at run time and checked at execution against the axis' size, ONNX's Gather,
GatherElements and GatherND refusing out-of-range indices as onnxruntime does, and ONNX Slice's
clamping of out-of-range bounds, on axes known at compilation or only at execution.

These only move or replicate elements, so every float comparison is exact (rtol = atol = 0), and
a quantized input whose output has the same scale must come back bit-exact (0 LSB): the values
are dequantized, moved, and requantized to the same grid.
"""

import numpy as np
import pytest
from dynutil import check_sizes, compile_op
from indexing_refs import EXACT, OP, SCALE, expect_invalid, ints
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    P,
    build_model,
    check_op,
    check_quantized,
    expect_error,
    i32,
    i64,
    q8_input,
    quantize,
    rand,
    run_op,
)

import nnadapter_tvm as nna

INT_MAX, INT_MIN = 2**31 - 1, -(2**31)


# -- GATHER ---------------------------------------------------------------------------------


def _gather_ref(x, indices, axis):
    """output[i_<axis>, j..., i_>axis] = input[i_<axis>, indices[j...], i_>axis]; negative indices count
    from the end (numpy.take)."""
    axis %= x.ndim
    out = np.empty(x.shape[:axis] + indices.shape + x.shape[axis + 1 :], x.dtype)
    for j in np.ndindex(*indices.shape):
        out[(slice(None),) * axis + j] = np.moveaxis(x, axis, 0)[indices[j]]
    return out


GATHER_CASES = [  # input shape, axis, indices
    ((5,), 0, [0, 4, -1, 2]),
    ((5,), -1, 3),  # rank-0 indices: the axis disappears
    ((3, 4), 0, [2, 0]),
    ((3, 4), 1, [[0, -4], [3, 1], [2, 2]]),
    ((3, 4), -2, [-1]),
    ((2, 3, 4), 1, [[[2]], [[0]]]),
    ((2, 3, 4), -1, [3, 0, 1, 1, -2]),
    ((2, 3, 2, 4), 2, [1, 0]),
    ((2, 3, 2, 2, 3), 4, [[2, 0], [1, -3]]),
    ((2, 3, 2, 2, 3), -5, [1]),
]


@pytest.mark.parametrize("shape,axis,indices", GATHER_CASES, ids=str)
@pytest.mark.parametrize("index", [i32, i64], ids=["int32", "int64"])
def test_gather(shape, axis, indices, index):
    x = rand(*shape, seed=1)
    idx = index(indices)
    check_op(OP.GATHER, [In(x), idx, i32([axis])], _gather_ref(x, idx.value, axis), **EXACT)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather_runtime_indices(index_dtype):
    """Indices fed at run time (negative ones included) rather than constant."""
    x = rand(4, 3, seed=2)
    idx = np.array([[3, -1], [0, -4], [1, 2]], index_dtype)
    check_op(
        OP.GATHER,
        [In(x), In(idx, P.INT32 if index_dtype == "int32" else P.INT64), i32([0])],
        _gather_ref(x, idx, 0),
        **EXACT,
    )


@pytest.mark.parametrize("dtype,precision", [("int32", P.INT32), ("int64", P.INT64)])
def test_gather_int_input(dtype, precision):
    x = ints((3, 5), 1000, 3, dtype)
    check_op(OP.GATHER, [In(x, precision), i32([4, -5, 0]), i32([1])], _gather_ref(x, np.array([4, -5, 0]), 1))


def test_gather_q8():
    q, real = q8_input(rand(3, 4, seed=4), SCALE)
    check_quantized(
        OP.GATHER,
        [q, i32([[2, 0], [-1, 1]]), i32([0])],
        _gather_ref(real, np.array([[2, 0], [-1, 1]]), 0),
        SCALE,
        lsb=0,
    )


def test_gather_unknown_batch():
    x = rand(2, 5, seed=5)
    ins = [In(x, dims=[UNKNOWN, 5]), i32([4, 0]), i32([1])]
    check_op(OP.GATHER, ins, _gather_ref(x, np.array([4, 0]), 1), [Out(dims=[UNKNOWN, 2])], **EXACT)


def test_gather_index_out_of_range():
    expect_invalid(OP.GATHER, [In(rand(3, 4)), i32([0, 4]), i32([1])], [(3, 2)], "'indices'", "[-4, 4)")


def test_gather_axis_out_of_range():
    expect_invalid(OP.GATHER, [In(rand(3, 4)), i32([0]), i32([2])], [(3, 1)], "'axis'")


def _gather_runtime(x_dims, x, indices):
    ins = [In(x, dims=x_dims), In(np.asarray(indices, "int32"), P.INT32, dims=[UNKNOWN]), i32([1])]
    return run_op(OP.GATHER, ins, [Out(dims=[2, UNKNOWN])], [None])


def test_gather_empty_axis_at_execution_is_refused():
    """An axis of size 0 known only at execution: run-time indices were taken modulo 0 (SIGFPE, the
    process died); now the execution fails naming the operation and the axis."""
    err = expect_error(
        lambda: _gather_runtime([2, UNKNOWN], np.zeros((2, 0), "float32"), [0]),
        "GATHER",
        "'input'",
        "axis 1 has size 0 at execution",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )
    assert "[[2, 0], [1]]" in str(err)  # the dimensions it was fed


def test_gather_empty_axis_with_no_indices_gives_an_empty_output():
    (out,) = _gather_runtime([2, UNKNOWN], np.zeros((2, 0), "float32"), np.zeros([0], "int32"))
    assert out.shape == (2, 0)


def test_gather_static_empty_axis_is_refused():
    x = np.zeros((2, 0), "float32")
    ins = [In(x), In(np.array([0], "int32"), P.INT32), i32([1])]
    expect_invalid(OP.GATHER, ins, [(2, 1)], "'input'", "axis 1 has size 0")


def _gather_fed(x, indices, x_dims=None, index_dims=None):
    """GATHER along axis 0 with both operands fed at execution (indices INT64)."""
    idx = np.asarray(indices, "int64")
    ins = [In(x, dims=x_dims), In(idx, P.INT64, dims=index_dims), i32([0])]
    out_dims = [UNKNOWN] * (idx.ndim + x.ndim - 1)
    return run_op(OP.GATHER, ins, [Out(dims=out_dims)], [None])[0]


@pytest.mark.parametrize("bad", [3, 7, 100000, -4, 2**40, -(2**62)])
def test_gather_runtime_index_out_of_range_is_refused(bad):
    """The spec bounds the indices by the axis (numpy and onnxruntime refuse the rest): an index fed at
    run time outside [-3, 3) used to be taken modulo 3 (7 and 100000 gave row 1); now the execution
    fails naming the operation, the operand, the value and the range."""
    x = rand(3, 4, seed=6)
    with pytest.raises(IndexError):
        np.take(x, [0, bad], 0)  # the reference refuses it too
    err = expect_error(
        lambda: _gather_fed(x, [[0, bad], [1, 2]]),
        "GATHER",
        "'indices'",
        f"index {bad} is out of range [-3, 3) for axis 0",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )
    assert "wrap" not in str(err)


def test_gather_runtime_index_against_an_axis_known_at_execution():
    """The axis' size arrives with the input: the same indices are in range for 5 rows, not for 3."""
    idx = [[4, -1], [0, -5]]
    x = rand(5, 2, seed=7)
    np.testing.assert_array_equal(_gather_fed(x, idx, x_dims=[UNKNOWN, 2]), _gather_ref(x, np.array(idx), 0))
    expect_error(
        lambda: _gather_fed(rand(3, 2), idx, x_dims=[UNKNOWN, 2]),
        "GATHER",
        "index -5 is out of range [-n, n) for axis 0 (n: its size at execution)",
        "[[3, 2], [2, 2]]",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_gather_runtime_indices_at_the_bounds_and_empty():
    """-dim and dim - 1 are in range; a run-time count of 0 indices needs no check."""
    x = rand(3, 4, seed=8)
    np.testing.assert_array_equal(_gather_fed(x, [-3, 2, -1, 0]), _gather_ref(x, np.array([-3, 2, -1, 0]), 0))
    out = _gather_fed(x, np.zeros([0], "int64"), index_dims=[UNKNOWN])
    assert out.shape == (0, 4)


def test_gather_index_check_survives_the_cache():
    """A compilation loaded from its cache buffer (no model) still names the index and the range."""
    x = rand(3, 4, seed=11)
    model = build_model(
        OP.GATHER, [In(x), In(np.array([0, 1], "int64"), P.INT64), i32([0])], [Out(dims=[2, 4])], [(2, 4)]
    )
    with nna.Context([nna.Device.acquire("llvm")]) as ctx:
        first = nna.Compilation(model, ctx)
        first.finish()
        loaded = nna.Compilation(None, ctx, cache_buffer=first.serialize())
        loaded.finish()

        def run(indices):
            out = np.empty((2, 4), "float32")
            execution = nna.Execution(loaded)
            execution.set_input(0, x)
            execution.set_input(1, np.array(indices, "int64"))
            execution.set_output(0, out)
            execution.compute()
            return out

        np.testing.assert_array_equal(run([2, -3]), x[[2, 0]])
        expect_error(
            lambda: run([1, -9]),
            "GATHER",
            "index -9 is out of range [-3, 3) for axis 0",
            code=nna.ResultCode.INVALID_DIMENSIONS,
        )


def test_gather_data_checks_switch_off_for_measuring(monkeypatch):
    """NNADAPTER_TVM_DATA_CHECKS=0 builds without the check (to measure its cost): the old modulo take."""
    monkeypatch.setenv("NNADAPTER_TVM_DATA_CHECKS", "0")
    x = rand(3, 4, seed=9)
    np.testing.assert_array_equal(_gather_fed(x, [7]), x[[1]])


def _onnx_gather(op, x, idx_shape, **attrs):
    import onnx
    from onnx import TensorProto, helper

    from nnadapter_tvm.frontends.onnx import Predictor

    graph = helper.make_graph(
        [helper.make_node(op, ["x", "i"], ["y"], **attrs)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
            helper.make_tensor_value_info("i", 7, idx_shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return model, Predictor(model)


@pytest.mark.parametrize(
    "op,attrs,good,bad,words",
    [
        ("Gather", {"axis": 0}, [[2, -3]], [[0, 7]], "index 7 is out of range [-3, 3)"),
        ("GatherElements", {"axis": 1}, [[3, -4], [0, 1], [-1, 2]], [[3, 4], [0, 1], [-1, 2]], "index 4"),
        ("GatherND", {}, [[2, 3], [-3, -4]], [[2, 3], [0, 4]], "index 4 is out of range [-4, 4)"),
        ("GatherND", {}, [[2, 3], [-3, -4]], [[3, 0], [0, 0]], "index 3 is out of range [-3, 3)"),
        ("GatherND", {"batch_dims": 1}, [[1], [-4], [3]], [[1], [-5], [3]], "index -5 is out of range [-4, 4)"),
    ],
)
def test_onnx_gathers_refuse_out_of_range_indices_like_onnxruntime(op, attrs, good, bad, words):
    """ONNX's gathers require indices in [-n, n) and onnxruntime refuses the rest; GatherElements and
    GatherND gather from the flattened input, where a coordinate past its own axis (GatherND's [0, 4]
    on a 3 x 4 input) lands on another row's element: each coordinate is checked against its axis."""
    import onnxruntime as ort

    x = rand(3, 4, seed=10)
    model, predictor = _onnx_gather(op, x, list(np.shape(good)), **attrs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    good, bad = np.array(good, "int64"), np.array(bad, "int64")
    np.testing.assert_array_equal(predictor.run({"x": x, "i": good})[0], session.run(None, {"x": x, "i": good})[0])
    refusals = (ort.capi.onnxruntime_pybind11_state.Fail, ort.capi.onnxruntime_pybind11_state.InvalidArgument)
    with pytest.raises(refusals, match=r"(?i)index|bounds|range"):
        session.run(None, {"x": x, "i": bad})
    expect_error(lambda: predictor.run({"x": x, "i": bad}), "GATHER", words, code=nna.ResultCode.INVALID_DIMENSIONS)


@pytest.mark.parametrize("dtype,precision", [("int32", P.INT32), ("int64", P.INT64)])
def test_gather_integers_into_a_quantized_output(dtype, precision):
    """The operand table allows INT32 data with a quantized output: the integers are the real values,
    quantized like any result (was a raw TVM TypeError at compile time)."""
    x = np.array([7, -300, 2, 41], dtype)
    expected = quantize(x[[0, 3, 1]].astype("float32"), 0.5)
    (got,) = run_op(
        OP.GATHER,
        [In(x, precision), i32([0, 3, 1]), i32([0])],
        [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.5)],
        [expected.shape],
    )
    np.testing.assert_array_equal(got, expected)  # 41 / 0.5 = 82 exact, -300 / 0.5 saturates to -128


# -- SLICE ----------------------------------------------------------------------------------


def _slice_ref(x, axes, starts, ends, steps):
    """Slicing along each listed axis by the clamping rules of ONNX Slice (the spec's "numpy-like, out of
    range clamped"): a negative bound counts from the end; then a forward slice clamps both bounds into
    [0, dim], a backward one its start into [0, dim - 1] and its end into [-1, dim - 1] (numpy alone
    makes a start below -dim an empty backward slice)."""
    for a, b, e, s in zip(axes, starts, ends, steps):
        dim = x.shape[a]
        b, e = (v + dim if v < 0 else v for v in (b, e))
        if s > 0:
            b, e = min(max(b, 0), dim), min(max(e, 0), dim)
        else:
            b, e = min(max(b, 0), dim - 1), min(max(e, -1), dim - 1)
        x = np.take(x, np.arange(b, e, s, dtype=np.int64), axis=a)
    return x


def test_slice_reference_is_numpy_where_the_two_agree():
    """The reference above is numpy's slicing wherever numpy and ONNX agree, and a backward start below
    -dim is the first element (ONNX; numpy: empty), on every bound in [-8, 8], INT_MAX and INT_MIN, with
    steps of either sign, over 5 elements."""
    x = np.arange(5)
    for b in [*range(-8, 9), INT_MAX, INT_MIN]:
        for e in [*range(-8, 9), INT_MAX, INT_MIN]:
            for s in (1, 2, -1, -3):
                want = x[0:e:s] if s < 0 and b < -5 else x[b:e:s]
                np.testing.assert_array_equal(_slice_ref(x, [0], [b], [e], [s]), want, err_msg=str((b, e, s)))


SLICE_CASES = [  # shape, axes, starts, ends, steps
    ((6,), [0], [1], [4], [1]),
    ((6,), [0], [-4], [-1], [2]),
    ((6,), [0], [5], [INT_MIN], [-1]),  # INT_MIN: backwards through index 0
    ((6,), [-1], [-100], [100], [3]),  # clamped both ends
    ((6,), [0], [4], [1], [-2]),
    ((3, 5), [1], [1], [INT_MAX], [1]),  # INT_MAX: to the end
    ((3, 5), [0, 1], [2, 4], [-4, -6], [-1, -2]),
    ((3, 5), [-1, 0], [0, 1], [3, 2], [2, 1]),
    ((2, 3, 4), [2], [-1], [0], [-1]),
    ((2, 3, 4), [0, 2], [0, 1], [1, 10], [1, 2]),
    ((2, 3, 4, 5), [1, 3], [-2, 4], [3, -10], [1, -3]),
    ((2, 3, 2, 4, 3), [4, 0, 3], [1, -1, 3], [3, -3, 0], [1, -1, -1]),
    ((3, 4), [1], [3], [1], [1]),  # empty: a zero-size output
    ((6,), [0], [-9], [INT_MIN], [-2]),  # a backward start below -dim: from element 0 (numpy: empty)
    ((2, 6), [1, 0], [-100, -3], [-8, 1], [-1, -1]),
]


@pytest.mark.parametrize("shape,axes,starts,ends,steps", SLICE_CASES, ids=str)
def test_slice(shape, axes, starts, ends, steps):
    x = rand(*shape, seed=6)
    ins = [In(x), i32(axes), i32(starts), i32(ends), i32(steps)]
    check_op(OP.SLICE, ins, _slice_ref(x, axes, starts, ends, steps), **EXACT)


def test_slice_steps_omitted():
    x = rand(4, 5, seed=7)
    check_op(OP.SLICE, [In(x), i32([1, 0]), i32([1, -3]), i32([-1, 3])], x[-3:3, 1:-1], **EXACT)


def test_slice_axes_empty():
    """Empty axes mean [0, 1, ..., len(starts) - 1]."""
    x = rand(4, 5, 3, seed=8)
    ins = [In(x), Const(None, P.INT32), i32([1, 4]), i32([3, 0]), i32([1, -2])]
    check_op(OP.SLICE, ins, x[1:3, 4:0:-2], **EXACT)


def test_slice_q8():
    q, real = q8_input(rand(3, 6, seed=9), SCALE)
    ins = [q, i32([1, 0]), i32([-1, 0]), i32([0, 2]), i32([-2, 1])]
    check_quantized(OP.SLICE, ins, real[0:2, -1:0:-2], SCALE, lsb=0)


def test_slice_unknown_batch():
    """The UNKNOWN batch is sliced to its end (INT_MAX) backwards, and another axis forwards."""
    x = rand(3, 4, seed=10)
    ins = [In(x, dims=[UNKNOWN, 4]), i32([0, 1]), i32([-1, 1]), i32([INT_MIN, 3]), i32([-1, 1])]
    check_op(OP.SLICE, ins, x[::-1, 1:3], [Out(dims=[UNKNOWN, 2])], **EXACT)


# (start, end, step) on axes of unknown size, four per model (one per axis of a rank-4 input): every
# sign of each, bounds past either end, INT_MAX / INT_MIN, and slices that come out empty.
SYMBOLIC_SLICES = [
    [(-1, 3, 1), (-8, -5, -1), (1, INT_MAX, 1), (-3, INT_MAX, 2)],
    [(-8, 3, 1), (7, -8, -3), (5, INT_MIN, -1), (-1, INT_MIN, -2)],
    [(2, -1, 1), (-2, 1, -1), (0, 0, 1), (3, 1, 1)],
    [(-100, 100, 3), (100, -100, -2), (INT_MIN, INT_MAX, 1), (INT_MAX, INT_MIN, -1)],
    [(-8, INT_MIN, -2), (1, -1, -1), (0, 3, -1), (-5, -1, 2)],
]


@pytest.mark.parametrize("bounds", SYMBOLIC_SLICES, ids=str)
def test_slice_of_axes_known_at_execution(bounds):
    """Constant bounds on axes whose size comes only at execution: numpy's result at every size fed,
    empty slices included (x[-1:3] of 5 elements was a tensor of -1 elements, std::bad_alloc), and the
    same compilation run on axes of 0, 1, 5 and 8 elements."""
    starts, ends, steps = (list(v) for v in zip(*bounds))
    probe = np.zeros((1, 1, 1, 1), "float32")
    ins = [In(probe, dims=[UNKNOWN] * 4), i32([0, 1, 2, 3]), i32(starts), i32(ends), i32(steps)]
    compilation = compile_op(OP.SLICE, ins, [Out(dims=[UNKNOWN] * 4)])
    cases = []
    for shape in [(5, 5, 5, 5), (0, 0, 0, 0), (1, 1, 1, 1), (8, 3, 2, 5), (2, 8, 5, 3), (3, 2, 8, 0)]:
        x = rand(*shape, seed=sum(shape))
        cases.append(([x], [_slice_ref(x, [0, 1, 2, 3], starts, ends, steps)]))
    check_sizes(compilation, cases, rtol=0, atol=0)


def test_slice_of_an_axis_known_at_execution_beside_a_static_one():
    """A symbolic axis sliced backwards and a static one forwards in one operation (one kernel for both)."""
    ins = [In(rand(1, 6), dims=[UNKNOWN, 6]), i32([1, 0]), i32([1, -1]), i32([INT_MAX, -6]), i32([2, -1])]
    compilation = compile_op(OP.SLICE, ins, [Out(dims=[UNKNOWN, 3])])
    cases = [([x], [x[-1:-6:-1, 1::2]]) for x in (rand(7, 6, seed=1), rand(3, 6, seed=2), rand(0, 6))]
    check_sizes(compilation, cases, rtol=0, atol=0)


@pytest.mark.parametrize(
    "axes,starts,ends,steps,word",
    [
        ([0], [0], [1], [0], "'steps'"),
        ([2], [0], [1], [1], "'axes'"),
        ([0, -2], [0, 0], [1, 1], [1, 1], "'axes'"),  # the same axis twice
        ([0, 1], [0], [1, 1], [1, 1], "'starts'"),
        ([0], [0], [1, 2], [1], "'ends'"),
    ],
    ids=str,
)
def test_slice_invalid(axes, starts, ends, steps, word):
    expect_invalid(OP.SLICE, [In(rand(3, 4)), i32(axes), i32(starts), i32(ends), i32(steps)], [(1, 4)], word)
