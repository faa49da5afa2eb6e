"""ai.onnx.ml and signal extensions (codes 2410-2439): BINARIZER, ARRAY_FEATURE_EXTRACTOR, TREE_ENSEMBLE,
MEL_WEIGHT_MATRIX, ONE_HOT_ENCODER and TFIDF_VECTORIZER (op_converters/ml.py, text.py). The ONNX importer
lowers the older TreeEnsembleClassifier and TreeEnsembleRegressor onto TREE_ENSEMBLE too."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.operations.schema import ANY, BOOL, F32, INT32, INT32_64, Arg
from nnadapter_tvm.operations.shape_rules import infer_same_shape
from nnadapter_tvm.operations.table import define
from nnadapter_tvm.precision import Precision as P

NUMBERS = (P.FLOAT32, P.FLOAT64, P.INT32, P.INT64)
FLOATS = (P.FLOAT32, P.FLOAT64)
INT64 = (P.INT64,)
# TreeEnsemble's node modes and aggregate functions (ai.onnx.ml opset 5).
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AVERAGE, SUM, MIN, MAX = range(4)
# TFIDF_VECTORIZER's weighting of the counts, operand ``mode``: ONNX's attribute mode by its index here.
TFIDF_MODES = ("TF", "IDF", "TFIDF")


def _infer_feature_extractor(shapes: list, values: list) -> list:
    x, indices = shapes[0], shapes[1]
    if x is None or indices is None:
        return [None]
    k = None if any(d is None for d in indices) else int(np.prod(indices, dtype=np.int64))
    return [(1, k) if len(x) == 1 else (*x[:-1], k)]


def _infer_tree_ensemble(shapes: list, values: list) -> list:
    n = None if shapes[0] is None else shapes[0][0]
    return [(n, None if values[11] is None else int(np.reshape(values[11], -1)[0]))]


def _infer_one_hot(shapes: list, values: list) -> list:
    x, cats = shapes[0], shapes[1]
    return [None if x is None or cats is None else (*x, cats[0])]


def _infer_mel(shapes: list, values: list) -> list:
    mel, dft = values[0], values[1]
    rows = None if dft is None else int(np.reshape(dft, -1)[0]) // 2 + 1
    return [(rows, None if mel is None else int(np.reshape(mel, -1)[0]))]


def _infer_tfidf(shapes: list, values: list) -> list:
    indexes = values[6]
    if shapes[0] is None or indexes is None:
        return [None]
    return [(*shapes[0][:-1], int(np.max(indexes)) + 1)]


BINARIZER = define(
    "BINARIZER",
    2410,
    [Arg("input", NUMBERS), Arg("threshold", F32, optional=True)],
    [Arg("output", NUMBERS)],
    infer=infer_same_shape,
).operation_type
ARRAY_FEATURE_EXTRACTOR = define(
    "ARRAY_FEATURE_EXTRACTOR",
    2411,
    [Arg("input", ANY), Arg("indices", INT32_64)],
    [Arg("output", ANY)],
    infer=_infer_feature_extractor,
).operation_type
TREE_ENSEMBLE = define(
    "TREE_ENSEMBLE",
    2412,
    [
        Arg("input", FLOATS),
        Arg("nodes_featureids", INT32_64),
        Arg("nodes_modes", INT32_64),
        Arg("nodes_splits", FLOATS, same_as="input"),
        Arg("nodes_truenodeids", INT32_64),
        Arg("nodes_trueleafs", INT32_64),
        Arg("nodes_falsenodeids", INT32_64),
        Arg("nodes_falseleafs", INT32_64),
        Arg("leaf_targetids", INT32_64),
        Arg("leaf_weights", FLOATS, same_as="input"),
        Arg("tree_roots", INT32_64),
        Arg("n_targets", INT32),
        Arg("aggregate_function", INT32, optional=True),
        Arg("membership_values", FLOATS, optional=True),
        Arg("nodes_missing_value_tracks_true", INT32_64, optional=True),
        Arg("leaf_ids", INT32_64, optional=True),
    ],
    [Arg("output", FLOATS)],
    infer=_infer_tree_ensemble,
    version="2",  # 2: trees walked by a kernel (1: path matrices), several weights a leaf (leaf_ids)
).operation_type
MEL_WEIGHT_MATRIX = define(
    "MEL_WEIGHT_MATRIX",
    2413,
    [
        Arg("num_mel_bins", INT32_64),
        Arg("dft_length", INT32_64),
        Arg("sample_rate", INT32_64),
        Arg("lower_edge_hertz", FLOATS),
        Arg("upper_edge_hertz", FLOATS),
        Arg("output_datatype", INT32, optional=True),
    ],
    [Arg("output", ANY)],
    infer=_infer_mel,
).operation_type
ONE_HOT_ENCODER = define(
    "ONE_HOT_ENCODER",
    2414,
    [Arg("input", NUMBERS), Arg("categories", INT64), Arg("zeros", BOOL, optional=True)],
    [Arg("output", F32)],
    infer=_infer_one_hot,
).operation_type
TFIDF_VECTORIZER = define(
    "TFIDF_VECTORIZER",
    2430,
    [
        Arg("input", INT32_64),
        Arg("min_gram_length", INT32),
        Arg("max_gram_length", INT32),
        Arg("max_skip_count", INT32),
        Arg("mode", INT32),
        Arg("ngram_counts", INT32_64),
        Arg("ngram_indexes", INT32_64),
        Arg("pool", INT32_64),
        Arg("weights", F32, optional=True),
    ],
    [Arg("output", F32)],
    infer=_infer_tfidf,
).operation_type
