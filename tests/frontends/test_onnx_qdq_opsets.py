"""QDQ files at every opset onnxruntime's quantizer writes: the constant DequantizeLinear of a QDQ model's
int32 bias (and any QuantizeLinear of constants) is folded at import by onnx's reference evaluator, which
implements both operators only from opset 19; earlier opsets fold at 19, whose results are the same for
the inputs opsets 10 and 13 accept.  Compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
def test_constant_qdq_folds_at_every_opset(opset: int) -> None:
    nodes = [
        helper.make_node("DequantizeLinear", ["bias_q", "bias_scale", "bias_zero"], ["bias"]),
        helper.make_node("QuantizeLinear", ["w", "w_scale", "w_zero"], ["w_q"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"]),
        helper.make_node("Mul", ["x", "w_dq"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([100, -200, 300], "int32"), "bias_q"),
        numpy_helper.from_array(np.array(0.01, "float32"), "bias_scale"),
        numpy_helper.from_array(np.array(0, "int32"), "bias_zero"),
        numpy_helper.from_array(np.array([0.3, -1.27, 0.505], "float32"), "w"),
        numpy_helper.from_array(np.array(0.01, "float32"), "w_scale"),
        numpy_helper.from_array(np.array(3, "uint8"), "w_zero"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", opset)]
    )
    predictor = nna.Predictor(model)
    feed = np.random.default_rng(opset).standard_normal((4, 3)).astype("float32")
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": feed})
    np.testing.assert_allclose(predictor.run([feed])[0], want, rtol=1e-6, atol=1e-6)
