"""The nine light models of onnx's backend test data: real architectures end to end.

1. With their own (constant) weights, on onnx's dummy input, they match the outputs onnx ships.
2. With every weight replaced by seeded random values, they match onnxruntime.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.tools.benchmark import LIGHT_DIR
from nnadapter_tvm.tools.benchmark import LIGHT_MODELS as MODELS

# onnx's runner compares these models with rtol 1e-3 and atol 1e-7 on its dummy input; the
# softmax outputs are probabilities, so absolute differences are what matter.
RTOL, ATOL = 1e-3, 1e-5

pytestmark = pytest.mark.slow


def light_path(name: str) -> str:
    return os.path.join(LIGHT_DIR, f"light_{name}.onnx")


def dummy_input(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """onnx's runner input for these models: arange(n) / n in the input's shape."""
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for x in model.graph.input:
        if x.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("light-cache"))


@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_shipped_output(name: str, cache_dir: str) -> None:
    model = onnx.load(light_path(name))
    predictor = nna.Predictor(light_path(name), cache_dir=cache_dir)
    assert len(predictor.subgraphs) == 1 and not predictor.graph.host_units, "everything runs on TVM"
    (got,) = predictor.run(dummy_input(model))
    want = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT_DIR, f"light_{name}_output_0.pb")))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def randomize_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """Every constant-filled weight (ConstantOfShape) becomes a seeded random initializer, scaled by
    fan-in like a trained network's so activations stay in range; BatchNormalization variances stay positive."""
    rng = np.random.default_rng(seed)
    bn_variances = {n.input[4] for n in model.graph.node if n.op_type == "BatchNormalization"}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = max(out.ir_version, 4)  # IR 4 lets initializers be more than graph inputs
    del out.graph.node[:]
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            out.graph.node.append(node)
            continue
        shape = tuple(int(d) for d in _constant_shape(model, node.input[0]))
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        value = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
        if node.output[0] in bn_variances:
            value = np.abs(value) + 0.5
        value = value.astype(np.float32)
        out.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
    return out


def _constant_shape(model: onnx.ModelProto, name: str) -> np.ndarray:
    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return numpy_helper.to_array(node.attribute[0].t)
    raise KeyError(name)


# Random weights make logits spread: compare the probabilities to 1e-4 absolute (float32
# summation orders differ between onnxruntime and TVM).
RANDOM_RTOL, RANDOM_ATOL = 1e-3, 1e-4


@pytest.mark.parametrize("name", MODELS)
def test_light_model_with_random_weights_matches_onnxruntime(name: str, cache_dir: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = randomize_weights(onnx.load(light_path(name)), seed=MODELS.index(name))
    rng = np.random.default_rng(1)
    feeds = {k: rng.random(v.shape, np.float32) for k, v in dummy_input(model).items()}
    (got,) = nna.Predictor(model, cache_dir=cache_dir).run(feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RANDOM_RTOL, atol=RANDOM_ATOL)
