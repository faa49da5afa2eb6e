"""ai.onnx.ml's numeric operators and MelWeightMatrix: Binarizer ArrayFeatureExtractor TreeEnsemble Scaler Normalizer
Imputer OneHotEncoder LabelEncoder LinearClassifier LinearRegressor ZipMap MelWeightMatrix -> the extensions
BINARIZER, ARRAY_FEATURE_EXTRACTOR, TREE_ENSEMBLE, ONE_HOT_ENCODER, MEL_WEIGHT_MATRIX (op_converters/ml.py) and
short compositions of standard operations; TreeEnsembleClassifier and TreeEnsembleRegressor are in ml_trees.py.

Converters of domain ai.onnx.ml are registered as "ai.onnx.ml.<OpType>" (imported_graph looks other domains up
so). The semantics are onnxruntime's where it differs from onnx's reference (docs/onnx.md, "ai.onnx.ml"): the
classifiers' post transforms, label rules and binary special cases are taken from what onnxruntime 1.32 gives.
NNAdapter has no string tensor: string keys, values and categories are refused, and a classifier with string
class labels runs only where its label output is unused (the probabilities are computed; the labels are not).
"""

from __future__ import annotations

import numpy as np
import onnx

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast
from nnadapter_tvm.frontends.onnx.ops.elementwise import op, scalar
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value, precision_of
from nnadapter_tvm.operations.ml import (
    ARRAY_FEATURE_EXTRACTOR,
    BINARIZER,
    MEL_WEIGHT_MATRIX,
    ONE_HOT_ENCODER,
    TREE_ENSEMBLE,
)
from nnadapter_tvm.types import FuseCode, Precision
from nnadapter_tvm.types import OperationType as O

POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def _array(value: object) -> np.ndarray:
    """An attribute's value as an array (TENSOR attributes arrive as TensorProto)."""
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def strings(ctx: NodeContext, name: str) -> list[str]:
    """A STRINGS attribute's values as str (absent: empty)."""
    return [s.decode() if isinstance(s, bytes) else str(s) for s in ctx.attrs.get(name, [])]


def numbers(ctx: NodeContext, name: str, dtype: str, tensor_name: str | None = None) -> np.ndarray | None:
    """A FLOATS or INTS attribute (or its ``*_as_tensor`` twin, ``tensor_name``) as a 1-D array of ``dtype``;
    None where the node gives neither (an empty list counts as absent, as onnxruntime reads it)."""
    for key in (tensor_name, name):
        if key is not None and key in ctx.attrs:
            values = _array(ctx.attrs[key]).reshape(-1)
            if values.size:
                return values.astype(dtype)
    return None


def post_transform(ctx: NodeContext) -> str:
    post = ctx.attr("post_transform", "NONE")
    if post not in POST_TRANSFORMS:
        ctx.fail(f"post_transform '{post}' is not one of {', '.join(POST_TRANSFORMS)}")
    return post


def output_used(ctx: NodeContext, i: int) -> bool:
    """Whether output ``i`` of the node is read: a graph output, or an input of a node (or of a subgraph)."""
    if i >= len(ctx.node.output) or not ctx.node.output[i]:
        return False
    name = ctx.node.output[i]
    if name in ctx.graph.declared_outputs:
        return True

    def reads(graph: onnx.GraphProto) -> bool:
        for node in graph.node:
            if name in node.input:
                return True
            for attr in node.attribute:
                subgraphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
                if any(reads(g) for g in subgraphs):
                    return True
        return False

    return reads(ctx.graph.model.graph)


def string_labels_unused(ctx: NodeContext, labels_attr: str) -> None:
    """A classifier with string class labels: refused when its label output is read (NNAdapter has no string
    tensor; with host fallback the whole node runs on the host)."""
    if output_used(ctx, 0):
        ctx.unsupported(
            f"the class labels ({labels_attr}) are strings and the label output '{ctx.node.output[0]}' is read: "
            "NNAdapter has no string tensor (the probabilities alone would run compiled; enable host fallback "
            "to run this node on the host, or export integer class labels)"
        )


# -- shape and arithmetic helpers ---------------------------------------------------------------------------


def rows(x: Value) -> int | None:
    return None if x.shape is None else x.shape[0]


def column(ctx: NodeContext, y: Value, k: int) -> Value:
    """Column k of [N, K] as [N, 1]."""
    return ctx.emit(O.SLICE, [y, ctx.i32([1]), ctx.i32([k]), ctx.i32([k + 1]), ctx.i32([1])], shape=(rows(y), 1))


def columns(ctx: NodeContext, parts: list[Value]) -> Value:
    """[N, 1] columns side by side."""
    width = sum(p.shape[1] for p in parts)
    return ctx.emit(O.CONCAT, [*parts, ctx.i32(1)], shape=(rows(parts[0]), width))


def flat(ctx: NodeContext, y: Value) -> Value:
    """[N, 1] as [N]."""
    return ctx.emit(O.RESHAPE, [y, ctx.i32(np.array([-1], "int32"))], shape=(rows(y),))


def where(ctx: NodeContext, cond: bool | Value, a: Value, b: Value) -> Value:
    """WHERE, folded where the condition is known at import (a Python bool)."""
    if cond is True:
        return a
    if cond is False:
        return b
    return op(ctx, O.WHERE, cond, a, b)


def negate(ctx: NodeContext, y: Value) -> Value:
    return op(ctx, O.SUB, scalar(ctx, 0, y), y)


def logistic(ctx: NodeContext, y: Value) -> Value:
    """onnxruntime's ComputeLogistic: v = 1 / (1 + exp(-|y|)), 1 - v where y < 0 (the trees' transform)."""
    one = scalar(ctx, 1, y)
    v = op(ctx, O.DIV, one, op(ctx, O.ADD, one, op(ctx, O.EXP, negate(ctx, op(ctx, O.ABS, y)))))
    return op(ctx, O.WHERE, op(ctx, O.LESS, y, scalar(ctx, 0, y), dtype="bool"), op(ctx, O.SUB, one, v), v)


def probit(ctx: NodeContext, y: Value) -> Value:
    """onnxruntime's ComputeProbit: sqrt(2) * erfinv(2y - 1), erfinv by Winitzki's approximation (a = 0.147) in
    float32 as onnxruntime computes it (-inf at 0, +inf at 1, NaN outside [0, 1])."""

    def c(v: float) -> Value:
        return scalar(ctx, v, y)

    x = op(ctx, O.SUB, op(ctx, O.MUL, y, c(2)), c(1))
    sign = op(ctx, O.WHERE, op(ctx, O.LESS, x, c(0), dtype="bool"), c(-1), c(1))
    log = op(ctx, O.LOG, op(ctx, O.MUL, op(ctx, O.SUB, c(1), x), op(ctx, O.ADD, c(1), x)))
    a = np.float32(0.147)
    v = op(ctx, O.ADD, c(np.float32(2) / (np.float32(np.pi) * a)), op(ctx, O.MUL, c(0.5), log))
    v2 = op(ctx, O.MUL, c(np.float32(1) / a), log)
    root = op(ctx, O.POW, op(ctx, O.SUB, op(ctx, O.MUL, v, v), v2), c(0.5))
    erfinv = op(ctx, O.MUL, sign, op(ctx, O.POW, op(ctx, O.SUB, root, v), c(0.5)))
    return op(ctx, O.MUL, c(np.float32(np.sqrt(2))), erfinv)


def softmax_zero(ctx: NodeContext, y: Value) -> Value:
    """onnxruntime's ComputeSoftmaxZero along axis 1: exp(y - max) for the entries with |y| > 1e-7, y *
    exp(-max) for the others (which the sum leaves out), all divided by the sum."""
    kept = (rows(y), 1)
    top = ctx.emit(O.REDUCE_MAX, [y, ctx.i32([1]), ctx.boolean(True)], shape=kept)
    big = op(ctx, O.GREATER, op(ctx, O.ABS, y), scalar(ctx, 1e-7, y), dtype="bool")
    e = op(ctx, O.EXP, op(ctx, O.SUB, y, top))
    small = op(ctx, O.MUL, y, op(ctx, O.EXP, negate(ctx, top)))
    kept_e = op(ctx, O.WHERE, big, e, scalar(ctx, 0, y))
    total = ctx.emit(O.REDUCE_SUM, [kept_e, ctx.i32([1]), ctx.boolean(True)], shape=kept)
    return op(ctx, O.DIV, op(ctx, O.WHERE, big, e, small), total)


def transform(ctx: NodeContext, y: Value, post: str, sigmoid: bool = False) -> Value:
    """A post transform of float32 scores [N, K] along K. ``sigmoid``: LOGISTIC as SIGMOID (onnxruntime's
    linear models use MLAS's logistic, close to the exact one), else onnxruntime's ComputeLogistic."""
    if post == "LOGISTIC":
        return ctx.emit(O.SIGMOID, [y], shape=y.shape) if sigmoid else logistic(ctx, y)
    if post == "SOFTMAX":
        return ctx.emit(O.SOFTMAX, [y, ctx.i32(1)], shape=y.shape)
    if post == "SOFTMAX_ZERO":
        return softmax_zero(ctx, y)
    if post == "PROBIT":
        return probit(ctx, y)
    return y


def argmax_labels(ctx: NodeContext, scores: Value, labels: np.ndarray) -> Value:
    """labels[argmax along axis 1] (the first of equal maxima, as onnxruntime's strict > keeps it)."""
    inputs = [scores, ctx.i32(1), ctx.boolean(False), ctx.i32(int(Precision.INT64))]
    index = ctx.emit(O.ARG_MAX, inputs, dtype="int64", shape=(rows(scores),))
    if np.array_equal(labels, np.arange(len(labels))):
        return index
    return ctx.emit(O.GATHER, [ctx.i64(labels), index, ctx.i32(0)], dtype="int64", shape=(rows(scores),))


def class_labels(ctx: NodeContext, ints_attr: str, strings_attr: str) -> tuple[np.ndarray, bool]:
    """The class labels as int64 (string labels: their positions) and whether they are strings."""
    text = strings(ctx, strings_attr)
    if text:
        string_labels_unused(ctx, strings_attr)
        return np.arange(len(text), dtype="int64"), True
    return np.asarray(ctx.attrs.get(ints_attr, []), "int64").reshape(-1), False


def matrix_input(ctx: NodeContext, what: str) -> Value:
    """Input 0 as [N, F]: float32 (onnxruntime casts the other numeric types; a 1-D input is one row)."""
    x = ctx.input(0)
    if x.dtype.kind not in "fiu":
        ctx.unsupported(f"{x.describe()}: {what} takes numbers")
    if x.rank == 1:
        x = ctx.emit(O.RESHAPE, [x, ctx.i32(np.array([1, -1], "int32"))], shape=(1, x.shape[0]))
    if x.rank != 2:
        ctx.unsupported(f"{x.describe()}: {what} takes [N, F] (or [F])")
    return cast(ctx, x, "float32")


# -- Binarizer, ArrayFeatureExtractor, TreeEnsemble (opset 5) ------------------------------------------------


@onnx_op("ai.onnx.ml.Binarizer")
def binarizer(ctx: NodeContext) -> Value:
    """Binarizer(threshold=0) -> BINARIZER."""
    x = ctx.input(0)
    return ctx.emit(BINARIZER, [x, ctx.f32(float(ctx.attr("threshold", 0.0)))], shape=x.shape)


@onnx_op("ai.onnx.ml.ArrayFeatureExtractor")
def array_feature_extractor(ctx: NodeContext) -> Value:
    """ArrayFeatureExtractor(X, Y) -> ARRAY_FEATURE_EXTRACTOR (a gather on X's last axis)."""
    x, indices = ctx.input(0), ctx.input(1)
    if indices.dtype is None or indices.dtype.kind not in "iu":
        ctx.fail(f"{indices.describe()}: the indices must be integers")
    return ctx.emit(ARRAY_FEATURE_EXTRACTOR, [x, indices])


@onnx_op("ai.onnx.ml.TreeEnsemble")
def tree_ensemble(ctx: NodeContext) -> Value:
    """TreeEnsemble (ai.onnx.ml opset 5) -> TREE_ENSEMBLE; post_transform NONE only (onnx's reference
    implements no other)."""
    x = ctx.input(0)
    if x.dtype is None or x.dtype.kind != "f" or x.dtype.itemsize < 4:
        ctx.unsupported(f"{x.describe()}: TREE_ENSEMBLE takes float32 or float64")
    post = int(ctx.attr("post_transform", 0))
    if post != 0:
        ctx.unsupported(f"post_transform {post} (only 0, NONE, is supported)")
    if x.shape is not None and len(x.shape) == 1:
        ctx.unsupported(f"{x.describe()}: a 1-D input (TREE_ENSEMBLE takes [N, F])")
    dtype = x.dtype

    def ints(name: str) -> Value:
        return ctx.i64(_array(ctx.attr(name)).astype(np.int64).reshape(-1))

    def floats(name: str) -> Value:
        return ctx.constant(_array(ctx.attr(name)).reshape(-1), dtype)

    inputs = [
        x,
        ints("nodes_featureids"),
        ints("nodes_modes"),
        floats("nodes_splits"),
        ints("nodes_truenodeids"),
        ints("nodes_trueleafs"),
        ints("nodes_falsenodeids"),
        ints("nodes_falseleafs"),
        ints("leaf_targetids"),
        floats("leaf_weights"),
        ints("tree_roots"),
        ctx.i32(int(ctx.attr("n_targets"))),
        ctx.i32(int(ctx.attr("aggregate_function", 1))),
        floats("membership_values") if "membership_values" in ctx.attrs else None,
        ints("nodes_missing_value_tracks_true") if "nodes_missing_value_tracks_true" in ctx.attrs else None,
    ]
    n = None if x.shape is None else x.shape[0]
    return ctx.emit(TREE_ENSEMBLE, inputs, shape=(n, int(ctx.attr("n_targets"))))


# -- preprocessing: Scaler, Normalizer, Imputer, OneHotEncoder, LabelEncoder ------------------------------------


@onnx_op("ai.onnx.ml.Scaler")
def scaler(ctx: NodeContext) -> Value:
    """Scaler(offset, scale) -> (x - offset) * scale along the last axis, in float64 for a float64 input
    (then float32, the output's type), else in float32; offset and scale have 1 or C values."""
    x = ctx.input(0)
    if x.dtype.kind not in "fiu" or x.rank is None or x.rank == 0:
        ctx.unsupported(f"{x.describe()}: Scaler takes numbers of rank >= 1")
    dtype = "float64" if x.dtype == np.float64 else "float32"
    width = x.shape[-1]
    result = cast(ctx, x, dtype)
    for name, operation in (("offset", O.SUB), ("scale", O.MUL)):
        values = numbers(ctx, name, dtype)
        if values is None:
            continue
        if values.size != 1 and (width is None or values.size != width):
            ctx.fail(f"{name} has {values.size} values: it needs 1 or one per column ({width})")
        result = op(ctx, operation, result, ctx.constant(values if values.size > 1 else values[0], dtype))
    return cast(ctx, result, "float32")


@onnx_op("ai.onnx.ml.Normalizer")
def normalizer(ctx: NodeContext) -> Value:
    """Normalizer(norm=MAX|L1|L2) -> each row (of [N, C], or the one row of [C]) divided by its max, by the sum
    of its |x| or, for L2, sign(x) * sqrt(x^2 / sum(x^2)) (onnxruntime's form); a row whose max or sum is 0
    is passed through. Computed in float32."""
    x = ctx.input(0)
    if x.dtype.kind not in "fiu" or x.rank not in (1, 2):
        ctx.unsupported(f"{x.describe()}: Normalizer takes numbers of rank 1 or 2")
    norm = ctx.attr("norm", "MAX")
    if norm not in ("MAX", "L1", "L2"):
        ctx.fail(f"norm '{norm}' is not MAX, L1 or L2")
    xf = cast(ctx, x, "float32")
    axis = x.rank - 1
    kept = (*x.shape[:-1], 1)

    def reduce(operation: O, v: Value) -> Value:
        return ctx.emit(operation, [v, ctx.i32([axis]), ctx.boolean(True)], shape=kept)

    zero = scalar(ctx, 0, xf)
    if norm == "MAX":
        # onnxruntime's std::max from the lowest float skips NaN: NaN is never above it.
        top = reduce(O.REDUCE_MAX, op(ctx, O.WHERE, _is_nan(ctx, xf), scalar(ctx, np.finfo("float32").min, xf), xf))
        scaled, total = op(ctx, O.DIV, xf, top), top
    elif norm == "L1":
        total = reduce(O.REDUCE_SUM, op(ctx, O.ABS, xf))
        scaled = op(ctx, O.DIV, xf, total)
    else:
        square = op(ctx, O.MUL, xf, xf)
        total = reduce(O.REDUCE_SUM, square)
        root = op(ctx, O.POW, op(ctx, O.DIV, square, total), scalar(ctx, 0.5, xf))
        scaled = op(ctx, O.WHERE, op(ctx, O.LESS, xf, zero, dtype="bool"), negate(ctx, root), root)
    return op(ctx, O.WHERE, op(ctx, O.NOT_EQUAL, total, zero, dtype="bool"), scaled, xf)


def _is_nan(ctx: NodeContext, x: Value) -> Value:
    """NOT(x >= -inf): NaN is the one value not >= -inf (logical.isnan's form)."""
    at_least = op(ctx, O.GREATER_EQUAL, x, ctx.constant(np.array(-np.inf, x.dtype)), dtype="bool")
    return op(ctx, O.NOT, at_least, dtype="bool")


@onnx_op("ai.onnx.ml.Imputer")
def imputer(ctx: NodeContext) -> Value:
    """Imputer -> WHERE(x == replaced_value (NaN: x is NaN), imputed_value, x) per column; float inputs use
    imputed_value_floats / replaced_value_float, int64 inputs the *_int64 attributes (1 or C values)."""
    x = ctx.input(0)
    if x.rank is None or x.rank == 0:
        ctx.unsupported(f"{x.describe()}: Imputer takes rank >= 1")
    if x.dtype.kind == "f":
        values, replaced = numbers(ctx, "imputed_value_floats", x.dtype.name), ctx.attr("replaced_value_float", 0.0)
    elif x.dtype.kind in "iu":
        values, replaced = numbers(ctx, "imputed_value_int64s", x.dtype.name), ctx.attr("replaced_value_int64", 0)
    else:
        ctx.unsupported(f"{x.describe()}: Imputer takes numbers")
    if values is None:
        kind = "floats" if x.dtype.kind == "f" else "int64s"
        ctx.fail(f"imputed_value_{kind} is required for a {x.dtype} input")
    width = x.shape[-1]
    if values.size != 1 and (width is None or values.size != width):
        ctx.fail(f"{values.size} imputed values: it needs 1 or one per column ({width})")
    if x.dtype.kind == "f" and np.isnan(replaced):
        hit = _is_nan(ctx, x)
    else:
        hit = op(ctx, O.EQUAL, x, scalar(ctx, replaced, x), dtype="bool")
    return op(ctx, O.WHERE, hit, ctx.constant(values if values.size > 1 else values[0], x.dtype), x)


@onnx_op("ai.onnx.ml.OneHotEncoder")
def one_hot_encoder(ctx: NodeContext) -> Value:
    """OneHotEncoder(cats_int64s, zeros=1) -> ONE_HOT_ENCODER (float and double inputs truncated to integers, as
    onnxruntime casts them); zeros=0 fails the execution on a value that is no category. String categories
    are refused (NNAdapter has no string tensor)."""
    x = ctx.input(0)
    if strings(ctx, "cats_strings"):
        ctx.unsupported("cats_strings: string categories (NNAdapter has no string tensor)")
    cats = numbers(ctx, "cats_int64s", "int64")
    if cats is None:
        ctx.fail("cats_int64s is required (no categories)")
    if x.dtype.kind not in "fiu" or x.rank is None or x.rank > 2:
        ctx.unsupported(f"{x.describe()}: OneHotEncoder takes numbers of rank <= 2")
    zeros = bool(ctx.attr("zeros", 1))
    shape = None if x.shape is None else (*x.shape, cats.size)
    return ctx.emit(ONE_HOT_ENCODER, [x, ctx.i64(cats), ctx.boolean(zeros)], dtype="float32", shape=shape)


@onnx_op("ai.onnx.ml.LabelEncoder")
def label_encoder(ctx: NodeContext) -> Value:
    """LabelEncoder (opset 2-4, numeric forms: keys_int64s / keys_floats / keys_tensor to values_int64s /
    values_floats / values_tensor) -> EQUAL against every key, the first match's value by ARG_MAX and GATHER,
    the default where none matches (a NaN key matches NaN). String keys or values are refused."""
    x = ctx.input(0)
    for name in ("keys_strings", "values_strings", "classes_strings"):
        if strings(ctx, name):
            ctx.unsupported(f"{name}: string keys or values (NNAdapter has no string tensor)")
    for name in ("keys_tensor", "values_tensor", "default_tensor"):
        if name in ctx.attrs and _array(ctx.attrs[name]).dtype.kind in "OUS":
            ctx.unsupported(f"{name}: string keys or values (NNAdapter has no string tensor)")
    if "keys_tensor" in ctx.attrs:
        keys = _array(ctx.attrs["keys_tensor"]).reshape(-1)
    else:
        keys = next(
            (numbers(ctx, n, d) for n, d in (("keys_int64s", "int64"), ("keys_floats", "float32")) if n in ctx.attrs),
            None,
        )
    if "values_tensor" in ctx.attrs:
        values = _array(ctx.attrs["values_tensor"]).reshape(-1)
        default = _array(ctx.attrs["default_tensor"]).reshape(-1)[0] if "default_tensor" in ctx.attrs else None
        if default is None:
            default = {"i": -1, "u": 0, "f": -0.0}.get(values.dtype.kind, 0)
    elif "values_int64s" in ctx.attrs:
        values, default = numbers(ctx, "values_int64s", "int64"), ctx.attr("default_int64", -1)
    elif "values_floats" in ctx.attrs:
        values, default = numbers(ctx, "values_floats", "float32"), ctx.attr("default_float", -0.0)
    else:
        values = None
    if keys is None or values is None:
        ctx.fail("needs numeric keys and values (keys_int64s/keys_floats/keys_tensor, values_*)")
    if keys.size != values.size:
        ctx.fail(f"{keys.size} keys but {values.size} values")
    if x.dtype != keys.dtype:
        ctx.fail(f"{x.describe()}: the input's type must be the keys' ({keys.dtype})")
    if values.dtype.kind not in "fiu" or x.rank is None:
        ctx.unsupported(f"values of type {values.dtype}, or an input of unknown rank")
    column_shape = None if x.shape is None else (*x.shape, 1)
    wide = None if x.shape is None else (*x.shape, keys.size)
    unsqueezed = ctx.emit(O.UNSQUEEZE, [x, ctx.i32([x.rank])], shape=column_shape)
    nan_keys = np.isnan(keys) if keys.dtype.kind == "f" else np.zeros(keys.size, bool)
    match = ctx.emit(O.EQUAL, [unsqueezed, ctx.constant(keys, keys.dtype)], dtype="bool", shape=wide)
    if nan_keys.any():
        nan = ctx.emit(O.AND, [_is_nan(ctx, unsqueezed), ctx.constant(nan_keys)], dtype="bool", shape=wide)
        match = ctx.emit(O.OR, [match, nan], dtype="bool", shape=wide)
    hits = cast(ctx, match, "int32")
    axis = ctx.i32(x.rank)
    index = ctx.emit(
        O.ARG_MAX, [hits, axis, ctx.boolean(False), ctx.i32(int(Precision.INT64))], dtype="int64", shape=x.shape
    )
    found = ctx.emit(O.REDUCE_MAX, [hits, ctx.i32([x.rank]), ctx.boolean(False)], shape=x.shape)
    found = op(ctx, O.GREATER, found, scalar(ctx, 0, found), dtype="bool")
    mapped = ctx.emit(
        O.GATHER, [ctx.constant(values, values.dtype), index, ctx.i32(0)], dtype=values.dtype, shape=x.shape
    )
    return op(ctx, O.WHERE, found, mapped, ctx.constant(default, values.dtype))


# -- linear models ------------------------------------------------------------------------------------------------


def _linear_scores(ctx: NodeContext, what: str, count: int | None) -> tuple[Value, int]:
    """FULLY_CONNECTED(x as float32, coefficients [C, F], intercepts [C]) -> scores [N, C] and C; ``count``: C
    where an attribute fixes it (targets), else len(intercepts) or the coefficients over the input's F."""
    x = matrix_input(ctx, what)
    coefficients = numbers(ctx, "coefficients", "float32")
    if coefficients is None:
        ctx.fail("coefficients are required")
    intercepts = numbers(ctx, "intercepts", "float32")
    if count is None:
        if intercepts is not None:
            count = intercepts.size
        elif x.shape[1] is not None and coefficients.size % x.shape[1] == 0:
            count = coefficients.size // x.shape[1]
        else:
            ctx.unsupported("without intercepts the class count follows from the input's width, unknown here")
    if count < 1 or coefficients.size % count:
        ctx.fail(f"{coefficients.size} coefficients do not make {count} rows")
    features = coefficients.size // count
    if x.shape[1] is not None and x.shape[1] != features:
        ctx.fail(f"{x.describe()}: the coefficients are for {features} features")
    if intercepts is None:
        intercepts = np.zeros(count, "float32")
    if intercepts.size != count:
        ctx.fail(f"{intercepts.size} intercepts for {count} rows of coefficients")
    weight = ctx.constant(coefficients.reshape(count, features), "float32")
    inputs = [x, weight, ctx.constant(intercepts, "float32"), ctx.i32(int(FuseCode.NONE))]
    return ctx.emit(O.FULLY_CONNECTED, inputs, shape=(rows(x), count)), count


@onnx_op("ai.onnx.ml.LinearRegressor")
def linear_regressor(ctx: NodeContext) -> Value:
    """LinearRegressor(coefficients, intercepts, targets=1, post_transform) -> FULLY_CONNECTED in float32, then
    the post transform; with one target only PROBIT applies (onnxruntime leaves the others out)."""
    post = post_transform(ctx)
    scores, count = _linear_scores(ctx, "LinearRegressor", int(ctx.attr("targets", 1)))
    if count == 1:
        return probit(ctx, scores) if post == "PROBIT" else scores
    return transform(ctx, scores, post, sigmoid=True)


@onnx_op("ai.onnx.ml.LinearClassifier")
def linear_classifier(ctx: NodeContext) -> list[Value]:
    """LinearClassifier(coefficients, intercepts, classlabels_*, post_transform) -> scores = FULLY_CONNECTED in
    float32; label = the labels' argmax of the scores, probabilities = the post transform of the scores.
    One row of coefficients with two labels is binary: label = labels[1] where the score s > 0, scores
    [1 - s, s] ([1 - p, p] with p = sigmoid(s) for LOGISTIC; [probit(-s), probit(s)] for PROBIT, onnx's
    reference, where onnxruntime misplaces its values); one row without two labels gives 1 or 0 and the
    score alone (PROBIT applied)."""
    post = post_transform(ctx)
    labels, _ = class_labels(ctx, "classlabels_ints", "classlabels_strings")
    scores, count = _linear_scores(ctx, "LinearClassifier", None)
    if count > 1:
        if labels.size != count:
            ctx.fail(f"{labels.size} class labels for {count} rows of coefficients")
        return [argmax_labels(ctx, scores, labels), transform(ctx, scores, post, sigmoid=True)]
    positive = flat(ctx, op(ctx, O.GREATER, scores, scalar(ctx, 0, scores), dtype="bool"))
    pair = labels if labels.size == 2 else np.array([0, 1], "int64")
    label = op(ctx, O.WHERE, positive, ctx.i64(pair[1]), ctx.i64(pair[0]))
    if labels.size != 2:
        return [label, probit(ctx, scores) if post == "PROBIT" else scores]
    if post == "PROBIT":
        probabilities = probit(ctx, columns(ctx, [negate(ctx, scores), scores]))
    else:
        p = ctx.emit(O.SIGMOID, [scores], shape=scores.shape) if post == "LOGISTIC" else scores
        probabilities = columns(ctx, [op(ctx, O.SUB, scalar(ctx, 1, p), p), p])
    return [label, probabilities]


# -- ZipMap, MelWeightMatrix ----------------------------------------------------------------------------------


@onnx_op("ai.onnx.ml.ZipMap")
def zip_map(ctx: NodeContext) -> Value:
    """ZipMap gives a sequence of maps, which NNAdapter cannot hold: passed over where its output is read by
    nothing, refused otherwise (export the classifier without it: skl2onnx's options zipmap=False)."""
    if output_used(ctx, 0):
        ctx.unsupported(
            "ZipMap's output (a sequence of maps) is read: NNAdapter holds tensors only; export the classifier "
            "without ZipMap (skl2onnx: options={id(model): {'zipmap': False}}) and read the probabilities tensor"
        )
    return ctx.input(0)


@onnx_op("MelWeightMatrix")
def mel_weight_matrix(ctx: NodeContext) -> Value:
    """MelWeightMatrix(output_datatype=FLOAT) -> MEL_WEIGHT_MATRIX; inputs computed at execution give a
    symbolic output size."""
    to = int(ctx.attr("output_datatype", onnx.TensorProto.FLOAT))
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        ctx.unsupported(f"output_datatype {to}, which has no NNAdapter precision")
    precision = precision_of(dtype, ctx.label)
    inputs = [ctx.input(k) for k in range(5)]
    shape = ctx.out_shape(0)
    if shape is None or any(not isinstance(d, int) for d in shape):
        shape = "node"
    return ctx.emit(MEL_WEIGHT_MATRIX, [*inputs, ctx.i32(int(precision))], dtype=dtype, shape=shape)
