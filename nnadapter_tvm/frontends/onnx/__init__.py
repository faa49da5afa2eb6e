"""The ONNX frontend: an ONNX model becomes NNAdapter models built through the public API.

- ``load_model(path_or_bytes_or_proto)``: parse, check, inline local functions, infer shapes.
- ``Predictor(model, devices=["llvm"], ...)``: import, partition (host fallback and partition
  config), compile or load from the cache, ``run(inputs) -> outputs``.
- ``backend``: ``onnx.backend.base.Backend`` for onnx's backend test suite.
"""

from nnadapter_tvm.frontends.onnx.loader import load_model
from nnadapter_tvm.frontends.onnx.partition_config import PartitionConfig
from nnadapter_tvm.frontends.onnx.predictor import Predictor

__all__ = ["PartitionConfig", "Predictor", "load_model"]
