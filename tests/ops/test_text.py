"""TFIDF_VECTORIZER (extension 2430) against ONNX's reference evaluator running a TfIdfVectorizer node of the
same configuration (onnx.reference.ops.op_tfidf_vectorizer): 1-D and batched inputs of int32 and int64
tokens, every mode with and without weights, n-gram size ranges, skips, a pool listing an n-gram twice and
slots shared by several n-grams; then the errors for bad operands and the ONNX importer's refusal of a
string pool."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from oputil import UNKNOWN, In, Out, check_op, expect_error, f32, i32, i64, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.frontends.onnx import import_model
from nnadapter_tvm.operations import ml as T

OP = T.TFIDF_VECTORIZER
# Unigrams 2 3 5 4, bigrams (5 6) (7 8) (6 7) (3 3) (5 6) -- listed twice --, trigram (2 3 4).
POOL = np.array([2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 3, 3, 5, 6, 2, 3, 4], np.int64)
COUNTS = [0, 4, 14]
PERMUTED = [3, 8, 0, 1, 2, 5, 4, 6, 7, 9]  # each n-gram its own slot (slot 7 gets the repeated (5 6))
SHARED = [0, 1, 1, 2, 3, 3, 0, 4, 2, 1]  # several n-grams per slot
WEIGHTS = np.linspace(0.5, 2.0, 10).astype(np.float32)


def tokens(shape, seed, dtype):
    return np.random.default_rng(seed).integers(2, 9, shape).astype(dtype)


def onnx_tfidf(x, *, mode, min_gram, max_gram, skip, indexes, weights=None, pool=POOL, counts=COUNTS):
    attrs = dict(
        mode=mode,
        min_gram_length=min_gram,
        max_gram_length=max_gram,
        max_skip_count=skip,
        ngram_counts=counts,
        ngram_indexes=indexes,
        pool_int64s=[int(v) for v in pool],
    )
    if weights is not None:
        attrs["weights"] = [float(w) for w in weights]
    node = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], **attrs)
    inputs = [helper.make_tensor_value_info("X", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    if weights is None and mode != "TF":
        # onnx's reference fails on IDF and TFIDF without weights (it takes len() of the absent attribute);
        # its branch for that case, which the spec describes, is: IDF 1 where f > 0, TFIDF f.
        _, tf = onnx_tfidf(
            x, mode="TF", min_gram=min_gram, max_gram=max_gram, skip=skip, indexes=indexes, pool=pool, counts=counts
        )
        return model, (tf > 0).astype(np.float32) if mode == "IDF" else tf
    return model, ReferenceEvaluator(model).run(None, {"X": x})[0]


def operands(x, *, mode, min_gram, max_gram, skip, indexes, weights=None, pool=POOL, counts=COUNTS, dims=None):
    precision = nna.Precision.INT64 if x.dtype == np.int64 else nna.Precision.INT32
    ops = [
        In(x, precision, dims=dims),
        i32(min_gram),
        i32(max_gram),
        i32(skip),
        i32(T.TFIDF_MODES.index(mode)),
        i64(counts),
        i64(indexes),
        i64(pool),
    ]
    return ops if weights is None else [*ops, f32(weights)]


@pytest.mark.parametrize("shape,dtype", [((12,), np.int32), ((3, 10), np.int64), ((2, 1), np.int32)])
@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", None), ("IDF", WEIGHTS), ("TFIDF", WEIGHTS)])
@pytest.mark.parametrize("min_gram,max_gram,skip", [(1, 1, 0), (1, 2, 0), (2, 2, 3), (1, 3, 2), (3, 3, 1)])
def test_against_onnx(shape, dtype, mode, weights, min_gram, max_gram, skip):
    x = tokens(shape, seed=len(shape) + skip, dtype=dtype)
    kwargs = dict(mode=mode, min_gram=min_gram, max_gram=max_gram, skip=skip, indexes=PERMUTED, weights=weights)
    _, expected = onnx_tfidf(x, **kwargs)
    check_op(OP, operands(x, **kwargs), expected)


@pytest.mark.parametrize("mode,weights", [("TF", None), ("TFIDF", None), ("TFIDF", WEIGHTS[:5])])
def test_shared_slots(mode, weights):
    x = tokens((2, 15), seed=7, dtype=np.int64)
    kwargs = dict(mode=mode, min_gram=1, max_gram=3, skip=2, indexes=SHARED, weights=weights)
    _, expected = onnx_tfidf(x, **kwargs)
    check_op(OP, operands(x, **kwargs), expected)


def test_no_ngram_in_range_gives_zeros():
    x = tokens((2, 6), seed=3, dtype=np.int32)
    kwargs = dict(mode="TF", min_gram=4, max_gram=5, skip=1, indexes=PERMUTED)
    _, expected = onnx_tfidf(x, **kwargs)
    assert not expected.any()
    check_op(OP, operands(x, **kwargs), expected)


def test_symbolic_batch_and_length():
    kwargs = dict(mode="TF", min_gram=1, max_gram=2, skip=1, indexes=PERMUTED)
    model = operands(tokens((2, 9), 0, np.int64), dims=[UNKNOWN, UNKNOWN], **kwargs)
    for shape in [(2, 9), (4, 5)]:
        x = tokens(shape, seed=shape[1], dtype=np.int64)
        _, expected = onnx_tfidf(x, **kwargs)
        model[0] = In(x, nna.Precision.INT64, dims=[UNKNOWN, UNKNOWN])
        (got,) = run_op(OP, model, [Out(dims=[UNKNOWN, 10])], [expected.shape])
        np.testing.assert_array_equal(got, expected)


def test_onnx_import():
    x = tokens((2, 8), seed=5, dtype=np.int32)
    model, expected = onnx_tfidf(x, mode="TFIDF", min_gram=1, max_gram=2, skip=1, indexes=PERMUTED, weights=WEIGHTS)
    assert [op.type.name for op in import_model(model).operations] == ["TFIDF_VECTORIZER"]
    (got,) = nna.Predictor(model).run({"X": x})
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize(
    "element,fragment",
    [
        (onnx.TensorProto.STRING, "element type STRING has no NNAdapter precision"),
        (onnx.TensorProto.INT64, "string pool"),
    ],
)
def test_onnx_string_pool_is_unsupported(element, fragment):
    """String tokens stop at the graph input; a string pool over integer tokens at the converter."""
    node = helper.make_node(
        "TfIdfVectorizer",
        ["X"],
        ["Y"],
        mode="TF",
        min_gram_length=1,
        max_gram_length=1,
        max_skip_count=0,
        ngram_counts=[0],
        ngram_indexes=[0, 1],
        pool_strings=["a", "b"],
    )
    x_info = helper.make_tensor_value_info("X", element, [4])
    y_info = helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([node], "g", [x_info], [y_info]))
    expect_error(lambda: import_model(model), fragment, code=nna.ResultCode.FEATURE_NOT_SUPPORTED)


@pytest.mark.parametrize(
    "change,fragments",
    [
        (dict(min_gram=0), ["min_gram_length", "at least 1, got 0"]),
        (dict(min_gram=2, max_gram=1), ["max_gram_length", "at least min_gram_length 2, got 1"]),
        (dict(skip=-1), ["max_skip_count", "at least 0, got -1"]),
        (dict(mode=3), ["mode", "0=TF, 1=IDF, 2=TFIDF, got 3"]),
        (dict(counts=[0, 20]), ["ngram_counts", "[0, 17]", "[0, 20]"]),
        (dict(counts=[4, 0]), ["ngram_counts", "non-decreasing"]),
        (dict(indexes=PERMUTED[:9]), ["ngram_indexes", "one slot per n-gram of the pool (10), got 9"]),
        (dict(indexes=[-1, *PERMUTED[1:]]), ["ngram_indexes", "non-negative"]),
        (dict(mode=1, weights=WEIGHTS[:4]), ["weights", "a weight per output slot (10), got 4"]),
        (dict(shape=(2, 2, 3)), ["input", "rank 1 ([C]) or 2 ([B, C]), got shape [2, 2, 3]"]),
    ],
)
def test_errors(change, fragments):
    kwargs = dict(mode=0, min_gram=1, max_gram=2, skip=0, indexes=PERMUTED, weights=None, counts=COUNTS)
    kwargs.update(change)
    x = tokens(kwargs.pop("shape", (2, 5)), seed=0, dtype=np.int32)
    mode = kwargs.pop("mode")
    ops = operands(x, mode="TF", **kwargs)
    ops[4] = i32(mode)
    expect_error(lambda: run_op(OP, ops, [Out()], [(2, 10)]), "TFIDF_VECTORIZER", *fragments)
