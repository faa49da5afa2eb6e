"""If, Loop and Scan -> no NNAdapter operation: control flow runs on the host around its bodies, each
body imported as a nested graph and compiled into subgraphs of its own (``control.py`` does the work;
registering it here lets the importer find it without importing it)."""

from __future__ import annotations

from nnadapter_tvm.frontends.onnx.control import import_control
from nnadapter_tvm.frontends.onnx.registry import onnx_graph_op

onnx_graph_op("If", "Loop", "Scan")(import_control)
