"""An ONNX graph imported as units: each node is folded at import, converted into NNAdapter
standard operations (recorded, not yet placed in a model), or left to the host."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
from collections.abc import Sequence

import numpy as np
import onnx
import onnx.shape_inference
from onnx import numpy_helper

from nnadapter_tvm.errors import fail
from nnadapter_tvm.frontends.onnx import function_bodies, host, qoperator, rank_rules, shape_elements
from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.registry import get_converter, get_fold_note, get_graph_importer
from nnadapter_tvm.frontends.onnx.value_info import dim_names, type_of
from nnadapter_tvm.frontends.onnx.values import Shape, Unit, Value, node_label
from nnadapter_tvm.types import NNAdapterError, ResultCode

#: Constants up to this many elements are given to ONNX's inference of one node by value (shapes, axes,
#: sizes); larger ones (weights) by type only: serializing them took most of a BERT's import.
LOCAL_CONSTANT_ELEMENTS = 4096

# Random ops must draw at every run, never once at import.
_NOT_FOLDABLE = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)

log = logging.getLogger("nnadapter_tvm")


@dataclasses.dataclass
class ImportOptions:
    host_fallback: bool = False
    host_ops: object = None  # a partition config: matches(node, inputs, outputs) -> bool


class ImportedGraph:
    """The graph's values by ONNX name and its nodes as units, in topological order."""

    def __init__(self, model: onnx.ModelProto, options: ImportOptions | None = None):
        self.model = model
        self.options = options or ImportOptions()
        self.opset = _opset(model)
        graph = model.graph
        self.inferred: dict[str, tuple[np.dtype | None, Shape | None]] = {}
        self.declared_outputs = {info.name for info in graph.output}
        for info in itertools.chain(graph.input, graph.value_info, graph.output):
            self.inferred[info.name] = type_of(info)
        # What ONNX's whole-graph inference knew, before any node refined it (``_infer_locally``).
        self._whole_graph = dict(self.inferred)
        self.values: dict[str, Value] = {}
        for init in graph.initializer:
            array = numpy_helper.to_array(init)
            self.values[init.name] = Value(init.name, array.dtype, array.shape, const=array)
        self._initializers = {init.name for init in graph.initializer}
        self.inputs: list[Value] = []
        for info in graph.input:
            if info.name in self.values:
                continue  # an initializer that may be overridden: treated as the constant it is
            dtype, shape = self.inferred[info.name]
            if dtype is None:
                if info.type.HasField("tensor_type"):
                    elem = onnx.TensorProto.DataType.Name(info.type.tensor_type.elem_type)
                    fail(
                        f"graph input '{info.name}': element type {elem} has no NNAdapter precision",
                        ResultCode.FEATURE_NOT_SUPPORTED,
                    )
                fail(
                    f"graph input '{info.name}' is not a tensor (sequences, maps and optionals are not supported)",
                    ResultCode.FEATURE_NOT_SUPPORTED,
                )
            value = Value(info.name, dtype, shape, dim_names=dim_names(info))
            self.values[info.name] = value
            self.inputs.append(value)
        self.units: list[Unit] = []
        self.errors: list[str] = []
        # Graph inputs that values a converter needed as constants derive from (shape parameters fed at run time).
        self.needs_constant: list[str] = []
        self._sources: dict[int, list[Value]] = {}  # a node output -> the node's inputs
        self._readers: dict[str, list[onnx.NodeProto | None]] = {}  # None: read inside a subgraph
        for node in graph.node:
            for name in node.input:
                self._readers.setdefault(name, []).append(node)
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                for name in _names([node]):
                    self._readers.setdefault(name, []).append(None)
        for index, node in enumerate(graph.node):
            self._import_node(index, node)
        if self.errors:
            listing = "\n  ".join(self.errors)
            err = NNAdapterError(
                ResultCode.FEATURE_NOT_SUPPORTED,
                f"{len(self.errors)} ONNX node(s) cannot run on the NNAdapter devices "
                f"(enable host fallback to run them on the host):\n  {listing}",
            )
            err.needs_constant = sorted(set(self.needs_constant))
            raise err
        self.outputs: list[Value] = []
        for info in graph.output:
            if info.name not in self.values:
                fail(f"graph output '{info.name}' is not produced by any node")
            self.outputs.append(self.values[info.name])
        self._drop_dead_shape_units()

    def _drop_dead_shape_units(self) -> None:
        """Shape arithmetic that folding left unused (a Shape whose every use became a constant)."""
        used = {id(v) for v in self.outputs}
        names: set[str] = set()
        kept = []
        for unit in reversed(self.units):
            dead = (
                unit.ops
                and unit.node.op_type in shape_elements.OPS
                and not any(id(v) in used or v.name in names for v in unit.outputs)
                and not any(o in names for o in unit.node.output)
            )
            if dead:
                continue
            kept.append(unit)
            if unit.folded:
                continue  # computed at import: it reads nothing at run time
            used.update(id(v) for v in unit.inputs)
            used.update(id(v) for op in unit.ops for v in op.inputs if v is not None)
            names.update(unit.node.input)
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in unit.node.attribute):
                names.update(_names([unit.node]))  # outer values a body reads
        self.units = kept[::-1]

    def _import_node(self, index: int, node: onnx.NodeProto, opset: int | None = None) -> None:
        if getattr(self, "continued_from", None) is not None:
            return  # the rest is imported inside the branches of an If whose outputs' ranks differ (control.py)
        opset = opset or self.opset
        label = node_label(node, index)
        inputs: list[Value | None] = []
        for name in node.input:
            if not name:
                inputs.append(None)
                continue
            if name not in self.values:
                fail(f"{label}: input '{name}' is not produced by any earlier node (the graph is not sorted?)")
            inputs.append(self.values[name])
        quantized = qoperator.expand(node, index, inputs, opset)
        if quantized is not None:  # onnxruntime's QOperator form, imported as its QDQ form
            for sub in quantized[0]:
                self._import_node(index, sub, quantized[1])
            return
        unit = Unit(node, index, [v for v in inputs if v is not None], [])
        default_domain = node.domain in ("", "ai.onnx")
        # Ops of other domains convert where a converter is registered as "<domain>.<op_type>".
        converter = get_converter(node.op_type if default_domain else f"{node.domain}.{node.op_type}")
        if not default_domain and converter is None:
            refusal = host.host_refusal(node, opset)
            reason = f"domain '{node.domain}' is not ONNX's default domain"
            if refusal is not None:  # then host fallback cannot run it either: always an error
                reason += (
                    f", and onnx's reference evaluator does not implement {node.domain}.{node.op_type}: "
                    "host fallback cannot run it either"
                )
            self.to_host(unit, reason, runnable=refusal is None)
            return
        if _foldable(node, inputs):
            unit.outputs = self.bind(node, host.evaluate(node, [v.const if v else None for v in inputs], opset))
            unit.folded = True
            note = get_fold_note(node.op_type) if default_domain else None
            if note is not None:
                note(node, inputs, unit.outputs)
            self.units.append(unit)
            return
        elements = self._shape_elements(node, inputs)
        folded = self._fold_elements(node, elements)
        if folded is not None:
            unit.outputs = self.bind(node, folded)
            unit.folded = True
            self.units.append(unit)
            return
        if node.op_type in ("If", "Loop", "Scan"):
            cond = inputs[0] if node.op_type == "If" and inputs else None
            if cond is not None and cond.is_const:
                self._inline_branch(index, node, bool(np.reshape(cond.const, -1)[0]), opset)
                return
            # Control flow runs on the host around its bodies' own compiled subgraphs (control.py).
            get_graph_importer(node.op_type)(self, index, node, inputs, opset)
            return
        config = self.options.host_ops
        if config is not None and config.matches(node):
            self.to_host(unit, "matched by the partition config", chosen=True)
            return
        if converter is None:
            if not self._expand(index, node, inputs, opset):
                self.to_host(unit, f"no converter for ONNX op {node.op_type}")
            return
        self._infer_locally(node, inputs, opset)
        ctx = NodeContext(self, node, index, inputs, opset)
        try:
            result = converter(ctx)
        except NNAdapterError as err:
            if err.code != ResultCode.FEATURE_NOT_SUPPORTED:
                raise
            self.to_host(unit, err.args[0])
            return
        results = result if isinstance(result, (list, tuple)) else [result]
        unit.ops = ctx.ops
        unit.outputs = self.bind(node, results, check_against_onnx=True)
        for value, known in zip(unit.outputs, elements or ()):
            if not value.is_const and known is not None:
                value.elements = known
        self.note_sources(unit)
        self.units.append(unit)

    def read_as_quantized(self, name: str) -> bool:
        """Whether ``name`` is read only as a quantized tensor (by DequantizeLinear or onnxruntime's QOperator
        operators, which dequantize it) and is no graph output: how it is stored is then the importer's
        choice (``Value.shifted``)."""
        readers = self._readers.get(name)  # None: a value of a subgraph or an expansion, not known here
        return (
            bool(readers)
            and name not in self.declared_outputs
            and all(r is not None and qoperator.reads_quantized(r, name) for r in readers)
        )

    def _shape_elements(self, node: onnx.NodeProto, inputs: list[Value | None]) -> list | None:
        """The elements of the node's (small integer) outputs that follow from static dimensions."""
        if node.op_type not in shape_elements.OPS:
            return None
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        return shape_elements.propagate(node, inputs, attrs)

    def _fold_elements(self, node: onnx.NodeProto, elements: list | None) -> list[np.ndarray] | None:
        """The node's outputs as constants when shape arithmetic knows every element of them."""
        if not elements or any(e is None or None in e for e in elements):
            return None
        arrays = []
        for name, known in zip(node.output, elements):
            dtype, shape = self.inferred.get(name, (None, None))
            if dtype is None or shape is None or None in shape or int(np.prod(shape)) != len(known):
                return None
            arrays.append(np.array(known, dtype).reshape(shape))
        return arrays

    def _infer_locally(self, node: onnx.NodeProto, inputs: list[Value | None], opset: int) -> None:
        """Where ONNX's whole-graph inference left an output's shape open (e.g. inside an expanded
        function), infer it from this node alone, with the shapes and constant values known here."""
        shapes = [self.inferred.get(n, (None, None))[1] for n in node.output if n]
        if all(shape is not None and None not in shape for shape in shapes):
            return
        if all(shape is not None for shape in shapes) and not self._knows_more(node, inputs):
            return  # the same inputs as the whole graph's inference had: nothing to learn
        graph_inputs, initializers = [], []
        for name, v in zip(node.input, inputs):
            if v is None or v.dtype is None or v.shape is None:
                continue
            # Only small constants' values (shapes, axes, sizes) inform inference; a weight's type does.
            if v.is_const and np.size(v.const) <= LOCAL_CONSTANT_ELEMENTS:
                initializers.append(numpy_helper.from_array(np.asarray(v.const), name))
            else:
                elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype))
                graph_inputs.append(onnx.helper.make_tensor_value_info(name, elem, list(v.shape)))
        outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = onnx.helper.make_graph([node], "infer", graph_inputs, outputs, initializer=initializers)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:  # best effort: converters then see an unknown shape
            return
        for info in itertools.chain(inferred.graph.output, inferred.graph.value_info):
            dtype, shape = type_of(info)
            old_dtype, old_shape = self.inferred.get(info.name, (None, None))
            if shape is not None and (old_shape is None or len(old_shape) == len(shape)):
                merged = (
                    shape if old_shape is None else tuple(a if a is not None else b for a, b in zip(old_shape, shape))
                )
                self.inferred[info.name] = (old_dtype or dtype, merged)

    def _knows_more(self, node: onnx.NodeProto, inputs: list[Value | None]) -> bool:
        """Whether the import knows more of ``node``'s inputs than ONNX's whole-graph inference did: a
        value folded to a constant here, or a dimension or rank it left open. Where it does not, inferring
        the node alone gives back what the whole graph gave (in a symbolic-batch BERT, each of its 800
        nodes, 5 s of its import)."""
        for name, v in zip(node.input, inputs):
            if v is None or v.shape is None:
                continue
            if v.is_const and name not in self._initializers:
                return True
            whole = self._whole_graph.get(name, (None, None))[1]
            if whole is None or len(whole) != len(v.shape):
                return True
            if any(w is None and d is not None for w, d in zip(whole, v.shape)):
                return True
        return False

    @functools.cached_property
    def value_infos(self) -> dict[str, onnx.ValueInfoProto]:
        """The model's value infos by name: its inputs, what shape inference wrote, its outputs."""
        g = self.model.graph
        return {v.name: v for v in itertools.chain(g.input, g.value_info, g.output)}

    def note_sources(self, unit: Unit) -> None:
        """Record that ``unit``'s outputs are computed from its inputs (what the host-vs-TVM split follows)."""
        for v in unit.outputs:
            self._sources.setdefault(id(v), unit.inputs)

    def input_ancestors(self, value: Value) -> list[str]:
        """The graph inputs ``value`` is computed from."""
        names, seen, stack = [], set(), [value]
        while stack:
            v = stack.pop()
            if id(v) in seen or v.is_const:
                continue
            seen.add(id(v))
            if any(v is g for g in self.inputs):
                names.append(v.name)
            stack.extend(self._sources.get(id(v), ()))
        return names

    def _inline_branch(self, index: int, node: onnx.NodeProto, cond: bool, opset: int) -> None:
        """An If whose condition is known at import is the branch it takes."""
        branch = next(a.g for a in node.attribute if a.name == ("then_branch" if cond else "else_branch"))
        for init in branch.initializer:
            array = numpy_helper.to_array(init)
            self.values[init.name] = Value(init.name, array.dtype, array.shape, const=array)
        for info in branch.value_info:
            self.inferred.setdefault(info.name, type_of(info))
        for info in branch.output:
            # Element type only: exporters declare a branch's output shape as traced on one path
            # (PyTorch's squeeze-if-batch-1), which the path taken here may not share.
            self.inferred.setdefault(info.name, (type_of(info)[0], None))
        for sub in branch.node:
            self._import_node(index, sub, opset)
        if getattr(self, "continued_from", None) is not None:
            return  # the branch's rest (and the graph's) went into a control node's branches (control.py)
        for name, out in zip(node.output, branch.output):
            if name:
                if out.name not in self.values:
                    fail(f"{node_label(node, index)}: branch output '{out.name}' is not produced")
                self.values[name] = self.values[out.name]

    def _expand(self, index: int, node: onnx.NodeProto, inputs: list[Value | None], opset: int) -> bool:
        """Import the node's ONNX function body instead, when its op is defined as one."""
        expansion = function_bodies.expand(node, opset, [(v.dtype, v.shape) if v else (None, None) for v in inputs])
        if expansion is None:
            return False
        nodes, body_opset, inferred = expansion
        outer = set(node.input) | set(node.output)
        # Bodies expanded separately reuse internal names: make them unique to this node.
        rename = {n: f"{n}#{index}" for n in _names(nodes) if n not in outer}
        for name, info in inferred.items():
            self.inferred.setdefault(rename.get(name, name), info)
        for sub in nodes:
            renamed = onnx.NodeProto()
            renamed.CopyFrom(sub)
            _rename(renamed, rename)
            self._import_node(index, renamed, body_opset)
        return True

    def to_host(self, unit: Unit, reason: str, chosen: bool = False, runnable: bool = True) -> None:
        """Run the node on the host: ``chosen`` by the partition config, else only under host fallback
        (never when not ``runnable``: onnx's reference evaluator lacks it)."""
        outputs = []
        by_definition = rank_rules.shapes(unit.node, unit.inputs)
        for name, defined in zip(unit.node.output, by_definition):
            dtype, shape = self.inferred.get(name, (None, None))
            outputs.append(Value(name, dtype, defined if shape is None else shape) if name else None)
        unit.outputs = self.bind(unit.node, outputs)
        self.note_sources(unit)
        if not runnable or not (chosen or self.options.host_fallback):
            # Keep importing (with placeholder outputs) so that one error lists every such node.
            self.errors.append(reason if reason.startswith(unit.label) else f"{unit.label}: {reason}")
            return
        unit.host = reason
        self.units.append(unit)

    def bind(self, node: onnx.NodeProto, results: Sequence[object], check_against_onnx: bool = False) -> list[Value]:
        """``node``'s outputs, by name, as the ``Value``s of ``results`` (emitted operands or folded
        constants); ``check_against_onnx`` compares them with what ONNX's shape inference declared."""
        bound = []
        for i, name in enumerate(node.output):
            if not name:
                continue
            if i >= len(results) or results[i] is None:
                fail(f"{node_label(node, -1)}: output {i} '{name}' was not produced")
            value = results[i]
            if isinstance(value, np.ndarray):
                value = Value(name, value.dtype, value.shape, const=value)
            if check_against_onnx and name in self.declared_outputs:
                _adopt_declared(node, i, value, self.inferred.get(name))
            elif check_against_onnx:
                if _ceil_window_overcounted(node, value, self.inferred.get(name)):
                    self._forget_inferred_shapes(name)
                _check_inferred(node, i, value, self.inferred.get(name))
            self.values[name] = value
            bound.append(value)
        return bound

    def _forget_inferred_shapes(self, name: str) -> None:
        """ONNX inferred ``name``'s shape wrongly: drop it and the shapes of every value not imported yet (those
        downstream were inferred from it), keeping element types and the graph outputs' declarations; each
        later node then infers its outputs from its own inputs (_infer_locally)."""
        for other, (dtype, _) in list(self.inferred.items()):
            if other == name or (other not in self.values and other not in self.declared_outputs):
                self.inferred[other] = (dtype, None)

    # -- describing ------------------------------------------------------------------------
    @property
    def host_units(self) -> list[Unit]:
        return [u for u in self.units if u.host is not None]


def _names(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """Every value name the nodes (and the graphs of their If/Loop/Scan attributes) use."""
    names: set[str] = set()
    for node in nodes:
        names.update(n for n in [*node.input, *node.output] if n)
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                names |= _names(g.node) | {v.name for v in [*g.input, *g.output]}
    return names


def _rename(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    """Rename values in place, inside subgraph attributes too."""
    node.input[:] = [rename.get(n, n) for n in node.input]
    node.output[:] = [rename.get(n, n) for n in node.output]
    for attr in node.attribute:
        for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            for sub in g.node:
                _rename(sub, rename)
            for v in [*g.input, *g.output]:
                v.name = rename.get(v.name, v.name)


def _adopt_declared(node: onnx.NodeProto, i: int, value: Value, declared: tuple | None) -> None:
    """A graph output's shape as the file declares it: exporters write stale ones (ddddocr's model says
    [1, seqlen] for a [seqlen, 1, classes] result, which onnxruntime only warns about), so the shape
    the conversion derives wins; the declaration only fills dimensions the conversion left open."""
    if declared is None or declared[1] is None:
        return
    shape = declared[1]
    if value.shape is None:
        value.shape = shape
        return
    if len(shape) != len(value.shape) or any(
        a is not None and b is not None and a != b for a, b in zip(shape, value.shape)
    ):
        log.warning(
            "%s '%s' output %d: the model declares shape %s, the conversion gives %s (kept)",
            node.op_type, node.name or node.output[0], i, list(shape), list(value.shape),
        )  # fmt: skip
        return
    value.shape = tuple(a if a is not None else b for a, b in zip(shape, value.shape))


_POOLS = ("MaxPool", "AveragePool", "LpPool")


def _ceil_window_overcounted(node: onnx.NodeProto, value: Value, inferred: tuple | None) -> bool:
    """Whether ONNX's shape inference counted, for a pooling with ceil_mode, a last window that starts past
    the input and its begin pad, which the operator drops (onnx's reference evaluator and onnxruntime do:
    MaxPool(ceil_mode=1, kernel 1, stride 2) of a width of 4 gives 2, onnx 1.23's inference says 3).  The
    conversion's size (frontends/onnx/ops/pool.py's _onnx_sizes) is then the right one: one less on a
    spatial axis, the rest equal."""
    if node.op_type not in _POOLS or inferred is None or inferred[1] is None or value.shape is None:
        return False
    if not any(a.name == "ceil_mode" and a.i for a in node.attribute):
        return False
    shape = inferred[1]
    if len(shape) != len(value.shape) or len(shape) < 3:
        return False
    pairs = list(zip(shape, value.shape))
    if any(a is not None and b is not None and a != b for a, b in pairs[:2]):
        return False
    spatial = [(a, b) for a, b in pairs[2:] if a is not None and b is not None and a != b]
    return bool(spatial) and all(a == b + 1 for a, b in spatial)


def _check_inferred(node: onnx.NodeProto, i: int, value: Value, inferred: tuple | None) -> None:
    """A converter's result must agree with ONNX's own type and shape inference."""
    if inferred is None:
        return
    dtype, shape = inferred
    where = f"{node.op_type} '{node.name or node.output[0]}' output {i}"
    stored = np.dtype("int8") if value.shifted else value.dtype  # Value.shifted: int8 stored as uint8
    if dtype is not None and stored is not None and np.dtype(dtype) != np.dtype(stored):
        fail(f"{where}: the conversion gives {value.dtype}, ONNX infers {dtype}", ResultCode.DEVICE_INTERNAL_ERROR)
    if shape is None or value.shape is None:
        if value.shape is None and shape is not None:
            value.shape = shape
        return
    if len(shape) != len(value.shape):
        fail(
            f"{where}: the conversion gives rank {len(value.shape)}, ONNX infers {list(shape)}",
            ResultCode.DEVICE_INTERNAL_ERROR,
        )
    for a, b in zip(shape, value.shape):
        if a is not None and b is not None and a != b:
            fail(
                f"{where}: the conversion gives {list(value.shape)}, ONNX infers {list(shape)}",
                ResultCode.DEVICE_INTERNAL_ERROR,
            )
    value.shape = tuple(a if a is not None else b for a, b in zip(shape, value.shape))


def _foldable(node: onnx.NodeProto, inputs: list[Value | None]) -> bool:
    if node.op_type in _NOT_FOLDABLE:
        return False
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return False
    return all(v is None or v.is_const for v in inputs)


def _opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return 1
