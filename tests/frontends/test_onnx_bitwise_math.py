"""ONNX's bit and math operators beyond the standard set (frontends/onnx/ops/bitwise.py, math_functions.py and
elementwise.py's float Mod) through the importer and the Predictor, against onnx's reference evaluator: symbolic
batches (the node cases are all static), one extension operation per node, and bad attributes named.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import nnadapter_tvm as nna
from nnadapter_tvm.frontends.onnx import import_model

OPSET = 28  # BitShift's signed types and Mod's float edge cases are opset 28; BitCast and CumProd 26


def _model(node: onnx.NodeProto, inputs: list[tuple[str, int, list]], output: tuple[str, int, list]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(*output)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    (got,) = nna.Predictor(model).run(feeds)
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    return got, expected


def test_bitwise_and_shift_with_a_symbolic_batch():
    u32 = TensorProto.UINT32
    for op, attrs in [("BitwiseAnd", {}), ("BitwiseOr", {}), ("BitwiseXor", {}), ("BitShift", {"direction": "LEFT"})]:
        node = helper.make_node(op, ["x", "y"], ["z"], **attrs)
        model = _model(node, [("x", u32, ["N", 3]), ("y", u32, [3])], ("z", u32, ["N", 3]))
        for n in (1, 4):
            x = np.random.default_rng(n).integers(0, 2**32, (n, 3), dtype="uint32")
            y = np.array([1, 31, 40], "uint32") if op == "BitShift" else x[0] ^ np.uint32(0xFF00FF00)
            got, expected = _check(model, {"x": x, "y": y})
            np.testing.assert_array_equal(got, expected)


def test_bitcast_and_bitwise_not_import_as_one_extension_each():
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT32)
    model = _model(node, [("x", TensorProto.FLOAT, ["N"])], ("y", TensorProto.INT32, ["N"]))
    assert [op.type.name for op in import_model(model).operations] == ["BITCAST"]
    got, expected = _check(model, {"x": np.array([1.0, -0.0, np.inf], "float32")})
    np.testing.assert_array_equal(got, expected)
    node = helper.make_node("BitwiseNot", ["x"], ["y"])
    model = _model(node, [("x", TensorProto.INT16, ["N", 2])], ("y", TensorProto.INT16, ["N", 2]))
    assert [op.type.name for op in import_model(model).operations] == ["BITWISE_NOT"]


def test_bitcast_of_another_element_size_is_refused():
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT64)
    model = _model(node, [("x", TensorProto.FLOAT, [2])], ("y", TensorProto.INT64, [2]))
    with pytest.raises(nna.NNAdapterError, match="element sizes differ"):
        import_model(model)


def test_bit_shift_direction_is_checked():
    node = helper.make_node("BitShift", ["x", "y"], ["z"], direction="UP")
    u8 = TensorProto.UINT8
    model = _model(node, [("x", u8, [2]), ("y", u8, [2])], ("z", u8, [2]))
    with pytest.raises(nna.NNAdapterError, match="direction 'UP'"):
        import_model(model)


@pytest.mark.parametrize("fmod", [0, 1])
def test_float_mod_with_a_symbolic_batch(fmod):
    node = helper.make_node("Mod", ["a", "b"], ["r"], fmod=fmod)
    f = TensorProto.FLOAT
    model = _model(node, [("a", f, ["N", 4]), ("b", f, [4])], ("r", f, ["N", 4]))
    assert [op.type.name for op in import_model(model).operations] == ["MOD"]
    a = np.random.default_rng(fmod).uniform(-10, 10, (3, 4)).astype("float32")
    b = np.array([3.0, -3.0, 0.7, -0.7], "float32")
    got, expected = _check(model, {"a": a, "b": b})
    np.testing.assert_array_equal(got, expected)  # exact: the remainder rounds nowhere


@pytest.mark.parametrize("op", ["Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Sinh", "Erf"])
def test_math_functions_import_as_their_extension(op):
    node = helper.make_node(op, ["x"], ["y"])
    f = TensorProto.FLOAT
    model = _model(node, [("x", f, ["N"])], ("y", f, ["N"]))
    assert [o.type.name for o in import_model(model).operations] == [op.upper()]
    x = np.array([1.0, 1.5, 3.0] if op == "Acosh" else [-0.75, 1e-6, 0.5], "float32")
    got, expected = _check(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=3e-7)  # within about 2 float32 ulps


def test_cum_prod_with_a_symbolic_batch():
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=1, reverse=1)
    axis = helper.make_tensor("axis", TensorProto.INT32, [], [-1])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["N", 4])],
        initializer=[axis],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    x = np.random.default_rng(0).integers(-5, 6, (3, 4))
    got, expected = _check(model, {"x": x})
    np.testing.assert_array_equal(got, expected)
