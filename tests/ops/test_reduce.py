"""REDUCE_MAX/MEAN/SUM and CUM_SUM against numpy references written from the spec (Paddle's cumsum
where the spec is loose): ranks 1-5, negative and unsorted axes, omitted optional operands, reductions
over no elements, quantized inputs, an UNKNOWN batch, and bad operands; NaN and infinities as numpy
gives them, ONNX's reductions composed of these, and float32 sums accumulated in float64 (rounded once)
on every target but OpenCL."""

import numpy as np
import pytest
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    P,
    b8,
    check_op,
    check_quantized,
    i32,
    q8_input,
    rand,
)
from reduce_refs import EXACT, OP, at_least_1d, invalid

import nnadapter_tvm as nna

# Sums and means of at most 120 float32 values of magnitude <= 2, accumulated in a different order
# than numpy's pairwise float32 summation: a few ulps of the partial sums.
SUM_TOL = {"rtol": 1e-5, "atol": 1e-5}


# -- REDUCE_MAX / REDUCE_MEAN / REDUCE_SUM ----------------------------------------------------

REDUCERS = {OP.REDUCE_MAX: np.max, OP.REDUCE_MEAN: np.mean, OP.REDUCE_SUM: np.sum}
# (shape, axes): ranks 1-5, one or several axes, negative axes, unsorted axes, empty (= every axis).
REDUCE_CASES = [
    ((6,), [0]),
    ((6,), []),
    ((3, 4), [-1]),
    ((3, 4), [0, 1]),
    ((2, 3, 4), [1]),
    ((2, 3, 4), [2, 0]),
    ((2, 3, 4), []),
    ((2, 3, 2, 3), [-3, -1]),
    ((2, 3, 2, 3), [1, 2, 3]),
    ((2, 2, 3, 2, 3), [0, -2, 4]),
]


def reduce_ref(op, x, axes, keepdim):
    axis = tuple(axes) if axes else None
    return at_least_1d(np.asarray(REDUCERS[op](x.astype("float64"), axis=axis, keepdims=keepdim), "float32"))


@pytest.mark.parametrize("op", list(REDUCERS), ids=lambda o: o.name)
@pytest.mark.parametrize("shape,axes", REDUCE_CASES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True, None], ids=["drop", "keep", "omitted"])
def test_reduce(op, shape, axes, keepdim):
    x = rand(*shape, seed=len(shape) + len(axes))
    inputs = [In(x), i32(axes)] + ([] if keepdim is None else [b8([keepdim])])
    # An omitted keepdim defaults to true (the header).
    expected = reduce_ref(op, x, axes, True if keepdim is None else keepdim)
    check_op(op, inputs, expected, **(EXACT if op == OP.REDUCE_MAX else SUM_TOL))


@pytest.mark.parametrize("op", list(REDUCERS), ids=lambda o: o.name)
def test_reduce_q8(op):
    q, real = q8_input(rand(2, 3, 4, seed=21), 0.02)
    # Requantized to the output's own scale; at most 1 LSB off (docs/quantization.md).
    check_quantized(op, [q, i32([-1, 0]), b8([False])], reduce_ref(op, real, [-1, 0], False), out_scale=0.05)


@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keep"])
def test_reduce_max_of_minus_infinity_is_minus_infinity(keepdim):
    """A row of -inf (a fully masked attention row) has max -inf, not the lowest finite float32."""
    x = np.array([[-np.inf, -np.inf, -np.inf], [1.0, -np.inf, 2.0]], "float32")
    check_op(OP.REDUCE_MAX, [In(x), i32([1]), b8([keepdim])], np.max(x, axis=1, keepdims=keepdim), **EXACT)


def test_reduce_mean_unknown_batch():
    x = rand(3, 4, 2, seed=22)
    out = [Out(dims=[UNKNOWN, 1, 2])]
    check_op(OP.REDUCE_MEAN, [In(x, dims=[UNKNOWN, 4, 2]), i32([1])], x.mean(1, keepdims=True), out, **SUM_TOL)


def test_reduce_sum_unknown_batch_reduced():
    # Reducing the UNKNOWN axis itself: the output is static.
    x = rand(5, 3, seed=23)
    check_op(OP.REDUCE_SUM, [In(x, dims=[UNKNOWN, 3]), i32([0]), b8([False])], x.sum(0), **SUM_TOL)


# Over no elements: numpy's sum (0) and mean (NaN, 0 / 0); max has no numpy value (it refuses), so
# its identity, -inf (the lowest value of an integer type).
EMPTY_REDUCTION = {OP.REDUCE_SUM: 0.0, OP.REDUCE_MEAN: np.nan, OP.REDUCE_MAX: -np.inf}
EMPTY_CASES = [  # input shape, axes, keepdim
    ((4, 0), [0, 1], True),
    ((4, 0), [1], False),
    ((0, 3), [0], True),
    ((2, 0, 3), [1, 2], False),
    ((0,), [], False),
    ((0, 2), [1], True),  # reduces a non-empty axis of an empty tensor: an empty output
]


def empty_ref(op, shape, axes, keepdim):
    axes = axes or list(range(len(shape)))
    out = [1 if a in axes else d for a, d in enumerate(shape) if keepdim or a not in axes]
    return at_least_1d(np.full(out, EMPTY_REDUCTION[op], "float32"))


@pytest.mark.parametrize("op", list(REDUCERS), ids=lambda o: o.name)
@pytest.mark.parametrize("shape,axes,keepdim", EMPTY_CASES, ids=str)
def test_reduce_over_no_elements_gives_the_identity(op, shape, axes, keepdim):
    """A static zero-size reduction: REDUCE_MAX was left unwritten, REDUCE_MEAN a raw TVM error."""
    x = np.zeros(shape, "float32")
    expected = empty_ref(op, shape, axes, keepdim)
    check_op(op, [In(x), i32(axes), b8([keepdim])], expected, **EXACT)


@pytest.mark.parametrize("op", list(REDUCERS), ids=lambda o: o.name)
@pytest.mark.parametrize("fed", [(5, 0), (5, 3)], ids=str)
def test_reduce_over_an_axis_empty_at_execution(op, fed):
    """[5, ?] fed [5, 0], every axis reduced: the output was never written (it differed from compute to
    compute); now the identity, computed again and again the same."""
    x = rand(*fed, seed=25)
    expected = empty_ref(op, fed, [], True) if 0 in fed else reduce_ref(op, x, [], True)
    for _ in range(3):
        noise = [np.full(64, 7.0, "float32") for _ in range(16)]  # reuse freed memory with something else
        del noise
        check_op(op, [In(x, dims=[5, UNKNOWN]), i32([])], expected, [Out(dims=[1, 1])], **SUM_TOL)


@pytest.mark.parametrize("dtype,precision", [("int32", P.INT32), ("int64", P.INT64)])
def test_reduce_integers_over_no_elements(dtype, precision):
    x = np.zeros((3, 0), dtype)
    expected_max = np.full(3, np.iinfo(dtype).min, dtype)
    check_op(OP.REDUCE_MAX, [In(x, precision, dims=[3, UNKNOWN]), i32([1]), b8([False])], expected_max,
             [Out(precision, dims=[3])])  # fmt: skip
    check_op(OP.REDUCE_SUM, [In(x, precision), i32([1]), b8([False])], np.zeros(3, dtype), [Out(precision)])


@pytest.mark.parametrize("op", [OP.ARG_MAX, OP.REDUCE_SUM, OP.REDUCE_MAX], ids=lambda o: o.name)
@pytest.mark.parametrize("shape", [(4,), (2, 3, 2)], ids=str)
def test_rank0_results_are_shape_1(op, shape):
    """Where numpy gives rank 0 (every axis reduced without keepdim, ARG_* of a 1-D input), the output
    is [1]: Paddle-Lite's reduce.cc / arg_min_max.cc, the convention SQUEEZE and MAT_MUL share."""
    x = rand(*shape, seed=24)
    if op == OP.ARG_MAX:
        x = x.reshape(-1)
        inputs, expected = [In(x), i32([0]), b8([False])], np.array([x.argmax()], "int64")
    else:
        inputs = [In(x), i32(list(range(len(shape)))), b8([False])]
        expected = reduce_ref(op, x, list(range(len(shape))), False)
    (got,) = check_op(op, inputs, expected, **(SUM_TOL if op == OP.REDUCE_SUM else EXACT))
    assert got.shape == (1,)


@pytest.mark.parametrize("axes,word", [([3], "out of range"), ([-4], "out of range"), ([1, -2], "twice")], ids=str)
def test_reduce_bad_axes(axes, word):
    invalid(OP.REDUCE_SUM, [In(rand(2, 3, 4)), i32(axes)], [Out()], [(2, 3, 4)], "'axes'", word)


@pytest.mark.parametrize("position", [0, 2, 4], ids=["first", "middle", "last"])
def test_reduce_max_keeps_nan_wherever_it_is(position):
    """numpy's max is NaN when the row holds a NaN; TVM's max(acc, x) kept it only in the last place."""
    x = rand(3, 5, seed=30)
    x[1, position] = np.nan
    x[2, :] = -np.inf
    check_op(OP.REDUCE_MAX, [In(x), i32([1]), b8([False])], np.max(x, axis=1), **EXACT)


# -- CUM_SUM ----------------------------------------------------------------------------------


def cum_sum_ref(x, axis, exclusive, reverse):
    """Paddle's cumsum: output[i] = sum(x[0..i]); exclusive leaves x[i] out; reverse sums x[i..n-1]."""
    x = np.moveaxis(x.astype("float64"), axis, -1)
    if reverse:
        x = x[..., ::-1]
    y = np.cumsum(x, -1)
    if exclusive:
        y = np.concatenate([np.zeros_like(y[..., :1]), y[..., :-1]], -1)
    if reverse:
        y = y[..., ::-1]
    return np.moveaxis(y, -1, axis).astype("float32")


CUM_CASES = [((7,), 0), ((3, 4), -2), ((2, 3, 4), 1), ((2, 3, 2, 3), -1), ((2, 2, 3, 2, 3), 2)]


@pytest.mark.parametrize("shape,axis", CUM_CASES, ids=str)
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_cum_sum(shape, axis, exclusive, reverse):
    x = rand(*shape, seed=len(shape))
    inputs = [In(x), i32([axis]), b8([exclusive]), b8([reverse])]
    check_op(OP.CUM_SUM, inputs, cum_sum_ref(x, axis, exclusive, reverse), **SUM_TOL)


@pytest.mark.parametrize("given", [1, 2, 3], ids=["axis_only", "no_reverse", "empty_axis"])
def test_cum_sum_defaults(given):
    """Omitted (or empty) operands: axis -1, exclusive false, reverse false."""
    x = rand(2, 3, 4, seed=31)
    if given == 3:  # an empty axis operand counts as omitted
        inputs = [In(x), Const(None, P.INT32), b8([False]), b8([True])]
        expected = cum_sum_ref(x, -1, False, True)
    else:
        inputs = [In(x), i32([1]), b8([True])][: given + 1]
        expected = cum_sum_ref(x, 1, given == 2, False)
    check_op(OP.CUM_SUM, inputs, expected, **SUM_TOL)


def test_cum_sum_input_only():
    x = rand(3, 5, seed=32)
    check_op(OP.CUM_SUM, [In(x)], cum_sum_ref(x, -1, False, False), **SUM_TOL)


def test_cum_sum_q8():
    q, real = q8_input(rand(3, 6, seed=33), 0.02)
    # Requantized to the output's own scale; at most 1 LSB off (docs/quantization.md).
    inputs = [q, i32([1]), b8([True]), b8([True])]
    check_quantized(OP.CUM_SUM, inputs, cum_sum_ref(real, 1, True, True), out_scale=0.1)


def test_cum_sum_unknown_batch():
    x = rand(3, 4, seed=34)
    out = [Out(dims=[UNKNOWN, 4])]
    check_op(OP.CUM_SUM, [In(x, dims=[UNKNOWN, 4]), i32([0])], cum_sum_ref(x, 0, False, False), out, **SUM_TOL)


def test_cum_sum_axis_out_of_range():
    invalid(OP.CUM_SUM, [In(rand(2, 3)), i32([-3])], [Out()], [(2, 3)], "'axis'", "out of range")


# -- ONNX ReduceLogSumExp (composed by the frontend of REDUCE_MAX, SUB, EXP, REDUCE_SUM, LOG, ADD) ----
@pytest.mark.parametrize("keepdims", [0, 1])
def test_onnx_reduce_log_sum_exp_of_infinities(keepdims):
    """log(sum(exp(x))) is +inf for a row holding +inf, -inf for a row of -inf only, NaN with a NaN, and
    near float32's largest value it does not overflow: numpy in float64 (shifted by the row's max, which
    is exact), and onnxruntime.  The shifted form alone gave inf - inf = NaN for the infinite rows."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    inf, nan = np.inf, np.nan
    x = np.array(
        [[1, inf, 2], [inf, inf, inf], [-inf, -inf, -inf], [1, -inf, 2], [inf, -inf, 0], [nan, inf, 1],
         [3e38, 3e38, 1], [-3e38, 0, 1], [0.5, -1.5, 80.0]],
        "float32",
    )  # fmt: skip
    node = helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1], keepdims=keepdims)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x64 = x.astype("float64")
    with np.errstate(all="ignore"):
        m = np.max(x64, axis=1, keepdims=True)
        want = np.where(np.isinf(m), m, np.log(np.sum(np.exp(x64 - m), axis=1, keepdims=True)) + m)
    want = (want if keepdims else want[:, 0]).astype("float32")
    got = nna.Predictor(model).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)  # NaN and infinities in the same places
    onnxruntime = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, onnxruntime, rtol=1e-6, atol=0)


# -- float32 sums accumulate in float64 (no overflow on the way to a finite sum) ------------------
def _large_terms(rows: int, cols: int, seed: int) -> np.ndarray:
    """Rows of +-2.5e38 and +-9e37 terms among small values, ordered so that a float32 running sum passes
    3.4e38 (inf) before the negative terms arrive, while every row's exact sum is finite."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (rows, cols)).astype("float32")
    x[:, :3] = [2.5e38, 9e37, 1e38]
    x[:, 3:6] = [-2.5e38, -2.5e38, 2e37]
    return x


@pytest.mark.parametrize("op", [OP.REDUCE_SUM, OP.REDUCE_MEAN], ids=lambda o: o.name)
@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keep"])
def test_reduce_sum_of_large_terms_does_not_overflow(op, keepdim):
    """The exact sum (numpy in float64, rounded once): a float32 accumulator gave +inf for these rows."""
    x = _large_terms(4, 9, seed=40)
    x64 = x.astype("float64")
    total = x64.sum(1, keepdims=keepdim)
    want = (total if op == OP.REDUCE_SUM else total / x.shape[1]).astype("float32")
    with np.errstate(over="ignore"):
        assert np.isfinite(want).all() and not np.isfinite(np.cumsum(x, 1, dtype="float32")).all()
    check_op(op, [In(x), i32([1]), b8([keepdim])], want, rtol=1e-7, atol=0)


@pytest.mark.parametrize("op", [OP.REDUCE_SUM, OP.REDUCE_MEAN], ids=lambda o: o.name)
def test_reduce_sum_float64_accumulation_several_axes_and_unknown_batch(op):
    """Several reduced axes (one of them the innermost), an UNKNOWN batch, and sums that cancel: within
    float32 rounding of the float64 sum (float32 accumulation is ~1e-4 off the cancelling rows)."""
    rng = np.random.default_rng(41)
    x = (rng.standard_normal((3, 64, 2, 32)) * 1e4).astype("float32")
    x[:, 0, :, :] = -x[:, 1:, :, :].sum(1, dtype="float64").astype("float32")  # columns that sum to ~0
    x64 = x.astype("float64")
    total = x64.sum((1, 3), keepdims=True)
    want = (total if op == OP.REDUCE_SUM else total / (64 * 32)).astype("float32")
    out = [Out(dims=[UNKNOWN, 1, 2, 1])]
    got = check_op(op, [In(x, dims=[UNKNOWN, 64, 2, 32]), i32([1, -1])], want, out, rtol=1e-6, atol=0)
    assert got[0].dtype == np.float32


@pytest.mark.parametrize(
    "onnx_op,ref",
    [
        ("ReduceSum", lambda x: x.sum(1)),
        ("ReduceMean", lambda x: x.mean(1)),
        ("ReduceL1", lambda x: np.abs(x).sum(1)),
        ("ReduceLogSum", lambda x: np.log(x.sum(1))),
    ],
)
def test_onnx_reductions_of_large_terms_match_the_float64_sum(onnx_op, ref):
    """The ONNX reductions composed of REDUCE_SUM / REDUCE_MEAN (fuzz corpus
    fixed-Conv-Transpose-ReduceLogSum-fused-drops-nan: log of a row whose exact sum is -5.9e37 is NaN,
    the float32 running sum's +inf gave inf)."""
    from onnx import TensorProto, helper

    x = _large_terms(3, 7, seed=42)
    if onnx_op == "ReduceL1":
        x /= 4  # |x| sums to a finite value too (terms of one sign overflow in no order: precision only)
    attrs = {} if onnx_op == "ReduceSum" else {"axes": [1]}
    inputs = ["x", "axes"] if onnx_op == "ReduceSum" else ["x"]
    node = helper.make_node(onnx_op, inputs, ["y"], keepdims=0, **attrs)
    init = [helper.make_tensor("axes", TensorProto.INT64, [1], [1])] if onnx_op == "ReduceSum" else []
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=init,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with np.errstate(all="ignore"):
        want = ref(x.astype("float64")).astype("float32")
    got = nna.Predictor(model).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)  # NaN (log of a negative sum) in place


def test_reduce_sum_keeps_float32_accumulation_on_opencl():
    """OpenCL kernels must not use float64 (Mali and Adreno have no cl_khr_fp64): there the REDUCE's sum
    legalizes to TVM's float32 one; on llvm and cuda to the float64 accumulator.  Sums of other
    operations (SOFTMAX's) are not the REDUCE's and keep float32."""
    import tvm
    from oputil import build_model

    from nnadapter_tvm.runtime.convert import convert_model
    from nnadapter_tvm.targets.relax_passes import legalize_ops

    model = build_model(OP.REDUCE_SUM, [In(rand(4, 8)), i32([1]), b8([False])], [Out()], [(4,)])
    softmax = build_model(OP.SOFTMAX, [In(rand(4, 8)), i32([1])], [Out()], [(4, 8)])

    def float64_in_kernels(target, model=model) -> bool:
        mod, _ = convert_model(model)
        with tvm.target.Target(target):
            mod = legalize_ops()(mod)  # every pipeline's legalization
        return any(
            "float64" in func.script() for _, func in mod.functions_items() if isinstance(func, tvm.tirx.PrimFunc)
        )

    assert not float64_in_kernels({"kind": "opencl"})
    assert float64_in_kernels({"kind": "llvm"})
    assert float64_in_kernels({"kind": "cuda", "arch": "sm_80"})
    assert not float64_in_kernels({"kind": "llvm"}, softmax)  # other sums keep TVM's float32 lowering


def test_global_average_pool_after_a_convolution_accumulates_in_float64():
    """Conv -> GlobalAveragePool (REDUCE_MEAN), the CPU pipeline's NHWC path: the marker that picks the
    float64 accumulator survives the layout conversion (an identity 1x1 convolution passes the large
    terms through exactly)."""
    from onnx import TensorProto, helper, numpy_helper

    x = _large_terms(4, 9, seed=43).reshape(1, 4, 3, 3)
    w = np.eye(4, dtype="float32").reshape(4, 4, 1, 1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = x.astype("float64").mean((2, 3), keepdims=True).astype("float32")
    got = nna.Predictor(model).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=0)


def test_reduce_sum_accumulates_in_float64_without_the_cpu_schedules():
    """CPU_SCHEDULES=0 (tvm.compile's default pipeline after our legalization) takes the same rule."""
    from oputil import build_model, run_model

    x = _large_terms(2, 7, seed=44)
    model = build_model(OP.REDUCE_SUM, [In(x), i32([1]), b8([False])], [Out()], [(2,)])
    (got,) = run_model(model, [x], properties="CPU_SCHEDULES=0")
    np.testing.assert_allclose(got, x.astype("float64").sum(1).astype("float32"), rtol=1e-7, atol=0)
