"""``Predictor``: a Paddle-Lite-style runner for ONNX models (import, partition, compile or load, run)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.context import Context
from nnadapter_tvm.device import Device
from nnadapter_tvm.errors import check, fail
from nnadapter_tvm.execution import Execution
from nnadapter_tvm.frontends.onnx.graph import ImportedGraph, ImportOptions, Value
from nnadapter_tvm.frontends.onnx.loader import load_model
from nnadapter_tvm.frontends.onnx.partition_config import PartitionConfig
from nnadapter_tvm.frontends.onnx.plan import HostStep, Subgraph, make_plan
from nnadapter_tvm.token import model_token

Progress = Callable[[int, int, Subgraph], None]


class Predictor:
    """Runs an ONNX model: NNAdapter subgraphs compiled by TVM on ``devices``, the rest on the host.

    ``model``: a path, bytes or ``onnx.ModelProto``. ``partition_config``: a Paddle Lite partition
    config (a file path or its text) naming nodes to keep on the host. ``host_fallback``: run nodes
    that no device supports on the host instead of failing. With ``cache_dir``, each subgraph is
    cached as ``<cache_dir>/<token>.nnc`` under the model token it computes, and a later process
    loads it instead of compiling.
    """

    def __init__(
        self,
        model: str | os.PathLike | bytes | onnx.ModelProto,
        devices: Sequence[str] = ("llvm",),
        context_properties: str = "",
        cache_dir: str | os.PathLike | None = None,
        partition_config: str | os.PathLike | None = None,
        host_fallback: bool = False,
        progress: Progress | None = None,
    ):
        config = PartitionConfig.load(partition_config) if partition_config is not None else None
        self.onnx_model = load_model(model)
        self.graph = ImportedGraph(self.onnx_model, ImportOptions(host_fallback=host_fallback, host_ops=config))
        self.steps = make_plan(self.graph)
        if isinstance(devices, str):
            devices = [devices]
        self.context = Context([Device.acquire(d) for d in devices], context_properties)
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.compilations: list[Compilation] = []
        self.tokens: list[str] = []
        self.compile_seconds = 0.0
        start = time.perf_counter()
        subgraphs = self.subgraphs
        for k, subgraph in enumerate(subgraphs):
            if progress:
                progress(k, len(subgraphs), subgraph)
            nn_model = subgraph.build_model()
            token = model_token(nn_model, self.context)
            compilation = Compilation(
                nn_model, self.context, cache_token=token if self.cache_dir else None, cache_dir=self.cache_dir
            )
            compilation.finish()
            self.compilations.append(compilation)
            self.tokens.append(token)
        if progress and subgraphs:
            progress(len(subgraphs), len(subgraphs), subgraphs[-1])
        self.seconds = time.perf_counter() - start
        self.loaded_from_cache = bool(self.compilations) and all(c.loaded_from_cache for c in self.compilations)

    @property
    def subgraphs(self) -> list[Subgraph]:
        return [s for s in self.steps if isinstance(s, Subgraph)]

    @property
    def token(self) -> str:
        """The model token: the one subgraph's, or an MD5 over every subgraph's and the host nodes."""
        if len(self.tokens) == 1 and len(self.steps) == 1:
            return self.tokens[0]
        h = hashlib.md5(usedforsecurity=False)
        for step in self.steps:
            h.update(step.unit.node.SerializeToString() if isinstance(step, HostStep) else b"")
            h.update(b"\0")
        for token in self.tokens:
            h.update(token.encode())
        return h.hexdigest()

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.graph.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.onnx_model.graph.output]

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
        """Outputs in the graph's order; ``inputs`` by name, or a list in the graph's input order."""
        env: dict[int, np.ndarray] = {}
        for value, array in zip(self.graph.inputs, self._feeds(inputs)):
            env[id(value)] = array
        subgraphs = iter(self.compilations)
        for step in self.steps:
            if isinstance(step, HostStep):
                results = step.node.run([_read(env, v) for v in step.unit.inputs])
                for value, array in zip(step.unit.outputs, results):
                    env[id(value)] = array
            else:
                execution = Execution(next(subgraphs))
                outputs = execution.use_arrays([_read(env, v) for v in step.inputs])
                execution.compute()
                for value, array in zip(step.outputs, outputs):
                    env[id(value)] = array
        return [_read(env, v) for v in self.graph.outputs]

    def _feeds(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
        declared = self.graph.inputs
        if isinstance(inputs, Mapping):
            names = {v.name for v in declared}
            unknown = sorted(set(inputs) - names)
            check(not unknown, f"unknown input name(s) {unknown}; the model's inputs are {sorted(names)}")
            missing = [v.name for v in declared if v.name not in inputs]
            check(not missing, f"missing input(s) {missing}")
            arrays = [inputs[v.name] for v in declared]
        else:
            arrays = list(inputs)
            check(len(arrays) == len(declared), f"{len(arrays)} inputs given, the model has {len(declared)}")
        return [_checked_input(v, np.asarray(a)) for v, a in zip(declared, arrays)]


def _checked_input(value: Value, array: np.ndarray) -> np.ndarray:
    where = f"input '{value.name}'"
    if array.dtype != value.dtype:
        fail(f"{where} must be {value.dtype}, got {array.dtype}")
    if value.shape is not None:
        if array.ndim != len(value.shape):
            fail(f"{where} must have rank {len(value.shape)} {_dims(value.shape)}, got shape {list(array.shape)}")
        for axis, (want, got) in enumerate(zip(value.shape, array.shape)):
            if want is not None and want != got:
                fail(f"{where} dimension {axis} must be {want} {_dims(value.shape)}, got shape {list(array.shape)}")
    return np.ascontiguousarray(array)


def _dims(shape: tuple) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _read(env: dict[int, np.ndarray], value: Value) -> np.ndarray:
    if value.is_const:
        return value.const
    return env[id(value)]
