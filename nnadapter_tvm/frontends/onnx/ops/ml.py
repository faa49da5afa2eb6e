"""ai.onnx.ml's numeric operators and MelWeightMatrix: Binarizer ArrayFeatureExtractor TreeEnsemble MelWeightMatrix
-> the extensions BINARIZER, ARRAY_FEATURE_EXTRACTOR, TREE_ENSEMBLE, MEL_WEIGHT_MATRIX (op_converters/ml.py).

Converters of domain ai.onnx.ml are registered as "ai.onnx.ml.<OpType>" (imported_graph looks other domains up
so). LabelEncoder and the other operators on string tensors stay unsupported: NNAdapter has no string type.
"""

from __future__ import annotations

import numpy as np
import onnx

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value, precision_of
from nnadapter_tvm.op_converters.ml import ARRAY_FEATURE_EXTRACTOR, BINARIZER, MEL_WEIGHT_MATRIX, TREE_ENSEMBLE


def _array(value: object) -> np.ndarray:
    """An attribute's value as an array (TENSOR attributes arrive as TensorProto)."""
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


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
