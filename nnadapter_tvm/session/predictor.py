"""``Predictor``: a Paddle-Lite-style runner for ONNX models (import, partition, compile or load, run)."""

from __future__ import annotations

import hashlib
import mmap
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.context import Context
from nnadapter_tvm.device import Device
from nnadapter_tvm.errors import check
from nnadapter_tvm.execution import check_shared_dimensions, run_arrays
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.session import index
from nnadapter_tvm.session.index import Port
from nnadapter_tvm.types import UNKNOWN, NNAdapterError

if TYPE_CHECKING:
    import onnx

    from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
    from nnadapter_tvm.frontends.onnx.plan import CompiledSegment, Plan

Progress = Callable[[int, int, "CompiledSegment"], None]


class Predictor:
    """Runs an ONNX model: NNAdapter subgraphs compiled by TVM on ``devices``, the rest on the host.

    ``model``: a path, bytes or ``onnx.ModelProto``. ``partition_config``: a Paddle Lite partition
    config (a file path or its text) naming nodes to keep on the host. ``host_fallback``: run nodes
    that no device supports on the host instead of failing. With ``cache_dir``, each subgraph is
    cached as ``<cache_dir>/<token>.nnc`` under the model token it computes, and a later process
    loads it instead of compiling; a model that is one subgraph is also indexed by its bytes
    (``<key>.nnp``, see ``session.index``), so that such a load skips importing the graph.
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
        start = time.perf_counter()
        if isinstance(devices, str):
            devices = [devices]
        self.context = Context([Device.acquire(d) for d in devices], context_properties)
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self._model = model
        self._host_fallback = host_fallback
        self._config = None
        options: dict = {"host_fallback": host_fallback}
        if partition_config is not None:
            from nnadapter_tvm.frontends.onnx.partition_config import PartitionConfig

            self._config = PartitionConfig.load(partition_config)
            options["partition_config"] = [(r.op_type, r.inputs, r.outputs) for r in self._config.rules]
        self._onnx_model: onnx.ModelProto | None = None
        self._graph: ImportedGraph | None = None
        self._plan: Plan | None = None
        self.compilations: list[Compilation] = []
        self.tokens: list[str] = []
        if self.cache_dir:
            self._load_or_compile(options, progress)
        else:
            self._import_and_compile(progress)
        self.seconds = time.perf_counter() - start
        self.loaded_from_cache = bool(self.compilations) and all(c.loaded_from_cache for c in self.compilations)

    def _load_or_compile(self, options: dict, progress: Progress | None) -> None:
        """Through the index: a file model by its identity first (no pass over its bytes), then by the
        hash of its bytes; else import and compile, and index what was compiled (``session.index``)."""
        source, info, seen_ns = _source(self._model)
        ident = index.identity(info)
        entry = index.read_identity(self.cache_dir, ident, self.context, options) if ident else None
        if entry is not None and self._load_indexed(entry):
            return
        entry_key = index.key(source, self.context, options)
        entry = index.read(self.cache_dir, entry_key, self.context) if entry_key else None
        if entry is None or not self._load_indexed(entry):
            self._import_and_compile(progress)
            entry = None
            if entry_key and self.single_subgraph:
                entry = index.Entry(self.tokens[0], self._inputs, self._output_names, self._in_order, self._out_order)
                index.write(self.cache_dir, entry_key, entry, self.context)
        if entry is not None and ident is not None:
            # The file as it is now: unchanged since the fstat that preceded the hash, or no entry.
            try:
                now = index.identity(os.stat(os.fspath(self._model)))
            except (OSError, TypeError):
                now = None
            index.write_identity(self.cache_dir, ident, seen_ns, now, entry, self.context, options)

    def _load_indexed(self, entry: index.Entry) -> bool:
        """The compiled model the index names, loaded without the graph; False when it does not load."""
        try:
            compilation = Compilation(None, self.context, cache_token=entry.token, cache_dir=self.cache_dir)
            compilation.finish()
        except NNAdapterError:  # gone, corrupted, built for something else: import and compile instead
            return False
        self.compilations, self.tokens = [compilation], [entry.token]
        self._inputs, self._output_names = entry.inputs, entry.outputs
        self._in_order, self._out_order = entry.input_order, entry.output_order
        self.single_subgraph = True
        return True

    def _import_and_compile(self, progress: Progress | None) -> None:
        graph, plan = self.graph, self.plan
        # The bodies of control nodes (If/Loop/Scan) are compiled here too: running never compiles.
        subgraphs = plan.all_segments()
        # Equal subgraphs (a tail an If duplicates into both branches) are one compilation.
        by_token: dict[str, Compilation] = {}
        for k, subgraph in enumerate(subgraphs):
            if progress:
                progress(k, len(subgraphs), subgraph)
            nn_model = subgraph.build_model()
            token = model_token(nn_model, self.context)
            if token not in by_token:
                compilation = Compilation(
                    nn_model, self.context, cache_token=token if self.cache_dir else None, cache_dir=self.cache_dir
                )
                compilation.finish()
                by_token[token] = compilation
                self.compilations.append(compilation)
            subgraph.compilation, subgraph.token = by_token[token], token
            self.tokens.append(token)
        if progress and subgraphs:
            progress(len(subgraphs), len(subgraphs), subgraphs[-1])
        self._inputs = [Port(v.name, v.dtype, v.shape, v.dim_names) for v in graph.inputs]
        self._output_names = [o.name for o in self.onnx_model.graph.output]
        # One subgraph fed by the graph's inputs and giving its outputs, in whatever order (the partitioner
        # orders a subgraph's inputs as its nodes first read them), runs without walking the plan.
        self.single_subgraph = False
        if len(plan) == 1 and len(subgraphs) == 1 and subgraphs[0] is plan[0]:
            orders = _orders(subgraphs[0], graph)
            if orders is not None:
                self.single_subgraph = True
                self._in_order, self._out_order = orders

    # The graph and its plan, built on first use when the model was loaded through the index; imported
    # here, not at the top, so that such a load never imports onnx (which the graph and the plan need).
    @property
    def onnx_model(self) -> onnx.ModelProto:
        if self._onnx_model is None:
            from nnadapter_tvm.frontends.onnx.loader import load_model

            self._onnx_model = load_model(self._model)
        return self._onnx_model

    @property
    def graph(self) -> ImportedGraph:
        if self._graph is None:
            from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph, ImportOptions

            options = ImportOptions(host_fallback=self._host_fallback, host_ops=self._config)
            self._graph = ImportedGraph(self.onnx_model, options)
        return self._graph

    @property
    def plan(self) -> Plan:
        """The graph's plan: compiled segments and host steps in the order they run."""
        if self._plan is None:
            from nnadapter_tvm.frontends.onnx.plan import make_plan

            self._plan = make_plan(self.graph)
        return self._plan

    @property
    def subgraphs(self) -> list[CompiledSegment]:
        """The plan's compiled segments (Paddle Lite's NNAdapter subgraphs), not those of control bodies."""
        return self.plan.segments

    @property
    def token(self) -> str:
        """The model token: the one subgraph's, or an MD5 over every subgraph's and the host nodes."""
        if self.single_subgraph or (len(self.tokens) == 1 and len(self.plan) == 1):
            return self.tokens[0]
        h = hashlib.md5(usedforsecurity=False)
        for step in self.plan:
            h.update(step.unit.node.SerializeToString() if step.on_host else b"")
            h.update(b"\0")
        for token in self.tokens:
            h.update(token.encode())
        return h.hexdigest()

    @property
    def inputs(self) -> list[Port]:
        """The graph's inputs: name, element type and dimensions (None where the model leaves them open)."""
        return list(self._inputs)

    @property
    def host_node_count(self) -> int:
        return 0 if self.single_subgraph else len(self.graph.host_units)

    @property
    def input_names(self) -> list[str]:
        return [p.name for p in self._inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self._output_names)

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
        """Outputs in the graph's order; ``inputs`` by name, or a list in the graph's input order.

        Safe from several threads at once. The inputs are checked here, once; each output is a new
        array (copied once from the compiled code's result). Between subgraphs on one device the
        values stay on it."""
        arrays = self._feeds(inputs)
        if self.single_subgraph:
            if self._in_order is not None:
                arrays = [arrays[i] for i in self._in_order]
            outputs = run_arrays(self.compilations[0], arrays, checked=self._checked)
            return outputs if self._out_order is None else [outputs[i] for i in self._out_order]
        from nnadapter_tvm.session.runner import run_plan  # imports the plan's modules, and onnx with them

        return run_plan(self.plan, arrays)

    @property
    def _checked(self) -> bool:
        """Whether the checks of ``_feeds`` are all the compiled subgraph's own (then nothing repeats
        them): same element types and dimensions, so that a fed array is what it takes."""
        checked = self.__dict__.get("_checked_value")
        if checked is None:
            signature = self.compilations[0].input_signature
            ports = self._inputs if self._in_order is None else [self._inputs[i] for i in self._in_order]
            checked = self._checked_value = len(signature) == len(ports) and all(
                p.dtype is not None
                and np.dtype(p.dtype) == dtype
                and p.shape is not None
                and tuple(UNKNOWN if d is None else int(d) for d in p.shape) == dims
                for p, (dtype, _, dims) in zip(ports, signature)
            )
        return checked

    def _feeds(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
        """The inputs as arrays in the graph's order, checked (the one check of a run's inputs)."""
        declared = self._inputs
        expected = self._expected
        if expected is None:  # first run: what each input must be, worked out once
            self._names = [p.name for p in declared]
            self._named = any(p.dim_names for p in declared)
            expected = self._expected = [_Expected(p) for p in declared]
        if type(inputs) is dict or isinstance(inputs, Mapping):
            names = self._names
            if len(inputs) == len(names) and all(n in inputs for n in names):
                arrays = [inputs[n] for n in names]
            else:
                known = set(names)
                unknown = sorted(set(inputs) - known)
                check(not unknown, f"unknown input name(s) {unknown}; the model's inputs are {sorted(known)}")
                missing = [n for n in names if n not in inputs]
                check(not missing, f"missing input(s) {missing}")
                arrays = [inputs[n] for n in names]
        else:
            arrays = list(inputs)
            check(len(arrays) == len(declared), f"{len(arrays)} inputs given, the model has {len(declared)}")
        arrays = [e.check(a) for e, a in zip(expected, arrays)]
        if self._named:
            labels = [f"input '{p.name}'" for p in declared]
            check_shared_dimensions([p.dim_names for p in declared], [a.shape for a in arrays], labels)
        return arrays

    _expected: list | None = None  # per input, its _Expected (made on the first run)
    # A single subgraph's input k is graph input _in_order[k]; graph output j is its output _out_order[j]
    # (None: the same order).
    _in_order: tuple[int, ...] | None = None
    _out_order: tuple[int, ...] | None = None


def _orders(segment: CompiledSegment, graph: ImportedGraph) -> tuple | None:
    """(input order, output order) of a segment whose inputs are the graph's inputs and whose outputs are
    its outputs, each exactly once, in some order (None for an order that is the graph's); None when the
    segment's inputs or outputs are not those."""
    seg_in, graph_in = [id(v) for v in segment.inputs], [id(v) for v in graph.inputs]
    seg_out, graph_out = [id(v) for v in segment.outputs], [id(v) for v in graph.outputs]
    for mine, theirs in ((seg_in, graph_in), (seg_out, graph_out)):
        if len(set(mine)) != len(mine) or sorted(mine) != sorted(theirs):
            return None
    in_order = tuple(graph_in.index(v) for v in seg_in)
    out_order = tuple(seg_out.index(v) for v in graph_out)
    return tuple(None if order == tuple(range(len(order))) else order for order in (in_order, out_order))


class _Expected:
    """An input's quick check: an array of the element type and dimensions the port declares passes
    as it is; any other goes through ``Port.check``, which converts it or says what is wrong."""

    __slots__ = ("dtype", "port", "shape", "static")

    def __init__(self, port: Port):
        self.port = port
        self.dtype = None if port.dtype is None else np.dtype(port.dtype)
        self.shape = port.shape
        self.static = port.shape is not None and None not in port.shape

    def check(self, array: object) -> np.ndarray:
        if type(array) is np.ndarray and array.dtype == self.dtype and array.flags.c_contiguous:
            shape = self.shape
            if self.static:
                if array.shape == shape:
                    return array
            elif shape is None or (
                array.ndim == len(shape) and all(d is None or d == n for d, n in zip(shape, array.shape))
            ):
                return array
        array = np.asarray(array)
        checked = self.port.check(array)
        # np.ascontiguousarray (in Port.check) makes a scalar 1-D: keep the shape that was checked.
        return checked if checked.shape == array.shape else checked.reshape(array.shape)


def _source(model: object) -> tuple[bytes | mmap.mmap | None, os.stat_result | None, int]:
    """The serialized model the index keys on (None when it cannot be had cheaply: the import reports
    why); for a file, also its ``fstat`` and the ``time.time_ns()`` taken just before it (what its
    identity entry is judged by). A file is mapped, not read: the key hashes the pages the kernel
    caches (a 100 MB copy saved), and only when its identity finds no entry."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), None, 0
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString(deterministic=True), None, 0
    try:
        with open(os.fspath(model), "rb") as f:
            seen_ns = time.time_ns()
            info = os.fstat(f.fileno())
            try:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), info, seen_ns
            except (OSError, ValueError):  # empty, or a file system that cannot map
                return f.read(), info, seen_ns
    except (OSError, TypeError):
        return None, None, 0
