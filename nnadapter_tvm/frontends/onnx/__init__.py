"""The ONNX frontend: an ONNX model becomes NNAdapter models built through the public API.

- ``load_model(path_or_bytes_or_proto)``: parse, check, inline local functions, infer shapes.
- ``import_model(...)``: the whole model as one NNAdapter ``Model``.
- ``Predictor(model, devices=["llvm"], ...)``: import, partition (host fallback and partition
  config), compile or load from the cache, ``run(inputs) -> outputs``.
- ``backend``: ``onnx.backend.base.Backend`` for onnx's backend test suite.
"""

from __future__ import annotations

import os

import onnx

from nnadapter_tvm.frontends.onnx.graph import ImportedGraph
from nnadapter_tvm.frontends.onnx.loader import load_model
from nnadapter_tvm.frontends.onnx.partition_config import PartitionConfig
from nnadapter_tvm.frontends.onnx.plan import single_model
from nnadapter_tvm.frontends.onnx.predictor import Predictor
from nnadapter_tvm.model import Model


def import_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> Model:
    """The whole ONNX model as one finished NNAdapter ``Model`` (every node on the NNAdapter devices)."""
    return single_model(ImportedGraph(load_model(model)))


__all__ = ["PartitionConfig", "Predictor", "import_model", "load_model"]
