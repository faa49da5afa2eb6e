"""The operation table (nnadapter_tvm/operations/): codes and model tokens of existing models stay what they
were before the table, the table imports no TVM, and the one path the built-in extensions and a user's
operations take."""

from __future__ import annotations

import numpy as np
import pytest

import nnadapter_tvm as nna
from nnadapter_tvm import operations
from nnadapter_tvm.operations import OperationType as O
from nnadapter_tvm.types import OperandType
from nnadapter_tvm.types import Precision as P

# nnadapter.h's enum, in its order (a code is the position).
UPSTREAM = (
    "ABS", "ADAPTIVE_AVERAGE_POOL_2D", "ADAPTIVE_MAX_POOL_2D", "ADD", "AND", "ARG_MAX", "ARG_MIN", "ASSIGN",
    "AVERAGE_POOL_2D", "BATCH_NORMALIZATION", "CAST", "CHANNEL_SHUFFLE", "CLIP", "CONCAT", "CONV_2D",
    "CONV_2D_TRANSPOSE", "COS", "CUM_SUM", "DEFORMABLE_CONV_2D", "DEQUANTIZE", "DIV", "EQUAL", "EXP", "EXPAND",
    "FILL", "FILL_LIKE", "FLATTEN", "FLOOR", "FLOOR_DIV", "FULLY_CONNECTED", "GATHER", "GELU", "GREATER",
    "GREATER_EQUAL", "GRID_SAMPLE", "GROUP_NORMALIZATION", "HARD_SIGMOID", "HARD_SWISH",
    "INSTANCE_NORMALIZATION", "LAYER_NORMALIZATION", "LEAKY_RELU", "LESS", "LESS_EQUAL", "LOG", "LOG_SOFTMAX",
    "LP_NORMALIZATION", "LRN", "MAT_MUL", "MAX", "MAX_POOL_2D", "MESHGRID", "MIN", "MUL", "NOT", "NOT_EQUAL",
    "OR", "PAD", "POW", "PRIOR_BOX", "PRELU", "QUANTIZE", "RANGE", "REDUCE_MEAN", "REDUCE_MAX", "REDUCE_SUM",
    "RELU", "RELU6", "RESHAPE", "RESIZE_NEAREST", "RESIZE_LINEAR", "ROI_ALIGN", "ROLL", "RSQRT", "SHAPE",
    "SIGMOID", "SIN", "SLICE", "SOFTMAX", "SOFTPLUS", "SPLIT", "SQUARE", "SQUEEZE", "STACK", "SUB", "SUM",
    "SWISH", "TANH", "TILE", "TOP_K", "TRANSPOSE", "UNSQUEEZE", "UNSTACK", "WHERE", "XOR",
    "NON_MAX_SUPPRESSION", "YOLO_BOX",
)  # fmt: skip

# The extensions' codes as models and caches written before the table recorded them.
EXTENSION_CODES = {
    "LSTM": 1001, "GRU": 1002, "RNN": 1003, "DYNAMIC_QUANTIZE_LINEAR": 1010, "CONV_2D_INTEGER": 1011,
    "MAT_MUL_INTEGER": 1012, "BITWISE_AND": 2000, "BITWISE_OR": 2001, "BITWISE_XOR": 2002, "BITWISE_NOT": 2003,
    "BIT_SHIFT": 2004, "BITCAST": 2005, "ACOS": 2010, "ACOSH": 2011, "ASIN": 2012, "ASINH": 2013, "ATAN": 2014,
    "ATANH": 2015, "SINH": 2016, "ERF": 2017, "MOD": 2020, "CUM_PROD": 2030, "SCATTER_ELEMENTS": 2100,
    "SCATTER_ND": 2101, "TENSOR_SCATTER": 2102, "EINSUM": 2103, "COL2IM": 2104, "DET": 2105,
    "REVERSE_SEQUENCE": 2106, "RESIZE_ONNX": 2200, "GRID_SAMPLE_ONNX": 2201, "ROI_ALIGN_ONNX": 2202,
    "NONZERO": 2300, "COMPRESS": 2301, "UNIQUE": 2302, "ALL_CLASS_NON_MAX_SUPPRESSION": 2303, "DFT": 2310,
    "STFT": 2311, "CONV_3D_TRANSPOSE": 2400, "BINARIZER": 2410, "ARRAY_FEATURE_EXTRACTOR": 2411,
    "TREE_ENSEMBLE": 2412, "MEL_WEIGHT_MATRIX": 2413, "ONE_HOT_ENCODER": 2414, "TFIDF_VECTORIZER": 2430,
}  # fmt: skip


def test_codes_are_those_models_were_written_with():
    assert [(m.name, int(m)) for m in O] == [(name, code) for code, name in enumerate(UPSTREAM)]
    built_in = {e.name: e.code for e in operations.entries(("extension",))}
    assert built_in == EXTENSION_CODES
    for name, code in EXTENSION_CODES.items():
        assert O(code) is O[name] is getattr(O, name) and O(code).name == name
    standard = {m.name for m in operations.STANDARD_OPERATIONS}
    assert len(standard) == 93 and set(UPSTREAM) - standard == {"UNSTACK", "XOR", "NON_MAX_SUPPRESSION"}


def _const(m: nna.Model, precision: P, value) -> nna.Operand:
    value = np.asarray(value)
    operand = m.add_operand(OperandType(precision, value.shape))
    m.set_operand_value(operand, value)
    return operand


def _add_relu() -> nna.Model:
    m = nna.Model()
    x = m.add_operand(OperandType(P.FLOAT32, (2, 3)))
    b = _const(m, P.FLOAT32, np.array([1.0, -2.0, 0.5], "float32"))
    y = m.add_operand(OperandType(P.FLOAT32, (2, 3)))
    m.add_operation(O.ADD, [x, b, _const(m, P.INT32, np.array([1], "int32"))], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def _lstm() -> nna.Model:
    m = nna.Model()
    x = m.add_operand(OperandType(P.FLOAT32, (5, 1, 3)))
    w = _const(m, P.FLOAT32, np.linspace(-1, 1, 48, dtype="float32").reshape(1, 16, 3))
    r = _const(m, P.FLOAT32, np.linspace(-1, 1, 64, dtype="float32").reshape(1, 16, 4))
    y = m.add_operand(OperandType(P.FLOAT32, (5, 1, 1, 4)))
    m.add_operation(O.LSTM, [x, w, r], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def _scatter_nd() -> nna.Model:
    m = nna.Model()
    x = m.add_operand(OperandType(P.FLOAT32, (4, 3)))
    indices = _const(m, P.INT64, np.array([[1], [3]], "int64"))
    updates = m.add_operand(OperandType(P.FLOAT32, (2, 3)))
    y = m.add_operand(OperandType(P.FLOAT32, (4, 3)))
    m.add_operation(O(2101), [x, indices, updates], [y])
    m.identify_inputs_and_outputs([x, updates], [y])
    m.finish()
    return m


def _tree_ensemble_and_erf() -> nna.Model:
    m = nna.Model()
    x = m.add_operand(OperandType(P.FLOAT32, (3, 2)))
    e = m.add_operand(OperandType(P.FLOAT32, (3, 2)))
    m.add_operation(O(2017), [x], [e])

    def i64(*v):
        return _const(m, P.INT64, np.array(v, "int64"))

    def f32(*v):
        return _const(m, P.FLOAT32, np.array(v, "float32"))

    y = m.add_operand(OperandType(P.FLOAT32, (3, 1)))
    tree = [i64(0), i64(0), f32(0.5), i64(0), i64(1), i64(1), i64(1), i64(0, 0), f32(1.0, 2.0), i64(0)]
    m.add_operation(O(2412), [e, *tree, _const(m, P.INT32, np.array([1], "int32"))], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


# Tokens computed by the code before the operation table (5720716), with the host and library part of the
# token held fixed so that they hold on any machine: a standard model, an enum extension (1001-1012,
# outside the recorded identities) and built-in extensions with versions 1 and 2.
TOKENS = {
    "add_relu": "317c6dbfcf6bf42033fc85e4f8acdf15",
    "lstm": "1c999fe26dcab1de3e068a3ac915ca85",
    "scatter_nd": "e86e01dcf59f10865a62c463e90255ab",
    "tree_ensemble_and_erf": "e5cf5cd5a8c70cb8084494d5a6f556ce",
}


def test_model_tokens_are_those_of_before_the_table(monkeypatch):
    from nnadapter_tvm.runtime import token

    monkeypatch.setattr(token, "codegen_setup", lambda context: [["fixed"]])
    context = nna.Context([nna.Device.acquire("llvm")])
    models = {"add_relu": _add_relu, "lstm": _lstm, "scatter_nd": _scatter_nd}
    models["tree_ensemble_and_erf"] = _tree_ensemble_and_erf
    assert {name: token.model_token(build(), context) for name, build in models.items()} == TOKENS


def test_the_table_imports_no_tvm():
    """The model, its schema checks and the ONNX importer's naming of extensions need no compiler: no module
    of the table imports TVM, at module level or in a function (the layer test keeps it from importing the
    rest of the package)."""
    import ast
    from pathlib import Path

    package = Path(operations.__file__).parent
    found = []
    for path in [*sorted(package.glob("*.py")), package.parent / "precision.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("tvm", "tvm_ffi")]
    assert len(list(package.glob("*.py"))) > 10 and not found


def test_extensions_take_the_custom_operations_path():
    """Every built-in extension is an entry of kind extension with the converter attached by op_converters;
    a second converter for one raises, naming both."""
    from nnadapter_tvm.op_converters import get_converter
    from nnadapter_tvm.op_converters.registry import converter

    for entry in operations.entries(("extension",)):
        assert entry.converter is not None and get_converter(entry.operation_type) is entry.converter
    with pytest.raises(RuntimeError, match=r"SCATTER_ND already has a converter: .*scatter_nd"):
        converter(O.SCATTER_ND)(lambda args: None)
    with pytest.raises(ValueError, match=r"code 2101 is taken by SCATTER_ND"):
        operations.define("OTHER", 2101, [], [])
    with pytest.raises(ValueError, match=r"outside \[1000, 9999\]"):
        operations.define("OTHER", 10001, [], [])
