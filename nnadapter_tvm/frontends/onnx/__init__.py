"""The ONNX frontend: an ONNX model becomes NNAdapter models built through the public API.

- ``load_model(path_or_bytes_or_proto)``: parse, check, inline local functions, infer shapes.
- ``import_model(...)``: the whole model as one NNAdapter ``Model``.
- ``Predictor(model, devices=["llvm"], ...)``: import, partition (host fallback and partition
  config), compile or load from the cache, ``run(inputs) -> outputs``.
- ``backend``: ``onnx.backend.base.Backend`` for onnx's backend test suite.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from nnadapter_tvm.model import Model


def import_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> Model:
    """The whole ONNX model as one finished NNAdapter ``Model`` (every node on the NNAdapter devices)."""
    from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
    from nnadapter_tvm.frontends.onnx.loader import load_model
    from nnadapter_tvm.frontends.onnx.plan import single_model

    return single_model(ImportedGraph(load_model(model)))


def __getattr__(name: str) -> object:
    # Loaded when asked for: a Predictor that finds its model in the cache never imports onnx or the graph.
    if name == "Predictor":
        from nnadapter_tvm.session.predictor import Predictor

        return Predictor
    if name == "PartitionConfig":
        from nnadapter_tvm.frontends.onnx.partition_config import PartitionConfig

        return PartitionConfig
    if name == "load_model":
        from nnadapter_tvm.frontends.onnx.loader import load_model

        return load_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PartitionConfig", "Predictor", "import_model", "load_model"]
