"""Nodes that run on the host (folded at import, or host fallback) through onnx's reference evaluator."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from nnadapter_tvm.errors import fail
from nnadapter_tvm.types import NNAdapterError, ResultCode

# Operators the reference evaluator implements only from a later version, which computes the same for
# every input the earlier ones accept (onnx 1.23 has DequantizeLinear and QuantizeLinear from 19, which
# added float8 types: the int32 bias of a QDQ model written at opset 13 is folded at that version).
_EVALUATED_FROM = {"DequantizeLinear": 19, "QuantizeLinear": 19}


class HostNode:
    """One ONNX node, evaluated on numpy arrays."""

    def __init__(self, node: onnx.NodeProto, opset: int):
        self.node = node
        if node.domain in ("", "ai.onnx"):
            opset = max(opset, _EVALUATED_FROM.get(node.op_type, opset))
        inputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.input if n]
        outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = onnx.helper.make_graph([node], "host", inputs, outputs)
        opsets = [onnx.helper.make_opsetid("", opset)]
        if node.domain not in ("", "ai.onnx"):
            opsets.append(onnx.helper.make_opsetid(node.domain, _domain_version(node)))
        model = onnx.helper.make_model(graph, opset_imports=opsets)
        try:
            self._evaluator = ReferenceEvaluator(model)
        except Exception as err:  # the evaluator raises whatever its op implementation raises
            fail(
                f"{node.op_type} '{node.name or node.output[0]}': the host cannot run it: {err}",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        self._names = [n for n in node.input if n]

    def run(self, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        check = _CHECKS.get(self.node.op_type)
        problem = check(self.node, inputs) if check else None
        if problem:
            fail(f"{self.node.op_type} '{self.node.name or self.node.output[0]}': {problem}")
        rewrite = _REWRITES.get(self.node.op_type)
        if rewrite:
            inputs = rewrite(self.node, inputs)
        own = _OWN.get(self.node.op_type)
        result = own(self.node, inputs) if own else None
        if result is not None:
            return result
        feeds = dict(zip(self._names, [x for x in inputs if x is not None]))
        try:
            results = self._evaluator.run(None, feeds)
        except Exception as err:
            fail(f"{self.node.op_type} '{self.node.name or self.node.output[0]}' failed on the host: {err}")
        return [np.asarray(r) for r in results]


def _split_sizes(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> str | None:
    """Split's sizes, read at execution, must cover the axis exactly (onnxruntime refuses otherwise; onnx's
    evaluator would slice past the end and return a short last part)."""
    if len(inputs) < 2 or inputs[1] is None:
        return None
    x, sizes = np.asarray(inputs[0]), np.reshape(inputs[1], -1)
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if not -x.ndim <= axis < x.ndim:
        return None  # the evaluator reports it
    dim = x.shape[axis]
    if (sizes < 0).any() or int(sizes.sum()) != dim:
        return f"input 'split' {sizes.tolist()} must be non-negative sizes adding up to axis {axis}'s size {dim}"
    return None


# Checks of run-time values that onnx's reference evaluator does not make, by op type: a message, or None.
_CHECKS = {"Split": _split_sizes}


def _by_position(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
    """``inputs`` one per input slot of ``node``, None for an omitted one (at execution the omitted inputs
    are not passed: they are put back)."""
    if len(inputs) == len(node.input):
        return list(inputs)
    given = iter(inputs)
    return [next(given) if name else None for name in node.input]


def _slice_starts(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
    """Slice's starts as the spec clamps them for a negative step: start + dim if negative, then into
    [0, dim - 1] (onnxruntime too).  onnx's evaluator slices as numpy, which sends a start still negative
    to -1, an empty slice: x[-8::-2] of 5 elements is [x[0]] by the spec, [] by numpy.  Clamped starts are
    non-negative, which numpy reads the same; ends need nothing (numpy's clamping of them is the spec's)."""
    inputs = _by_position(node, inputs)
    if len(inputs) < 5 or any(inputs[i] is None for i in (0, 1, 4)):
        return inputs  # opset 1's attributes, or no steps: positive steps only
    x, starts, steps = np.asarray(inputs[0]), np.reshape(inputs[1], -1), np.reshape(inputs[4], -1)
    axes = np.reshape(inputs[3], -1) if inputs[3] is not None else np.arange(starts.size)
    if not (starts.size == steps.size == axes.size) or not (steps < 0).any():
        return inputs  # the evaluator reports mismatched lengths
    clamped = starts.copy()
    for i, (axis, step) in enumerate(zip(axes, steps)):
        if step >= 0 or not -x.ndim <= axis < x.ndim:
            continue
        dim = x.shape[axis]
        start = int(clamped[i]) + dim if clamped[i] < 0 else int(clamped[i])
        clamped[i] = min(max(start, 0), max(dim - 1, 0))
    inputs[1] = clamped.astype(np.asarray(inputs[1]).dtype).reshape(np.shape(inputs[1]))
    return inputs


# Inputs rewritten where onnx's reference evaluator departs from the spec, by op type.
_REWRITES = {"Slice": _slice_starts}


def _gather_elements(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX GatherElements: out[i][j][k] = data[index[i][j][k]][j][k] (axis 0; likewise for others), the
    output of the indices' shape.  The indices may be smaller than the input along the other axes (the
    spec and onnxruntime allow it; onnx's evaluator, numpy's take_along_axis, requires equal sizes and
    fails).  Each index must lie in [-dim, dim) (onnxruntime refuses others too)."""
    data, indices = np.asarray(inputs[0]), np.asarray(inputs[1])
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    label = f"GatherElements '{node.name or node.output[0]}'"
    if indices.ndim != data.ndim or not -data.ndim <= axis < max(data.ndim, 1):
        fail(f"{label}: indices of shape {list(indices.shape)} must have the rank of input {list(data.shape)}")
    axis %= max(data.ndim, 1)
    for a, (n, m) in enumerate(zip(indices.shape, data.shape)):
        if a != axis and n > m:
            fail(f"{label}: indices of shape {list(indices.shape)} exceed input {list(data.shape)} along axis {a}")
    dim = data.shape[axis]
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        bad = indices[(indices < -dim) | (indices >= dim)].reshape(-1)[0]
        fail(
            f"{label}: input 1 'indices': index {int(bad)} is out of range [-{dim}, {dim}) for axis {axis}",
            ResultCode.INVALID_DIMENSIONS,
        )
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = np.where(indices < 0, indices + dim, indices)
    return [data[tuple(where)]]


def _pad(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
    """ONNX Pad (opset 11 on: pads, constant_value and axes as inputs) with negative pads, which remove
    elements (onnxruntime crops; onnx's evaluator refuses "index can't contain negative values"): the
    negative parts crop first, then the rest pads in the node's mode.  None (the evaluator's) before
    opset 11, where the pads are an attribute."""
    if len(node.input) < 2 or not node.input[1]:
        return None
    inputs = _by_position(node, inputs)
    data = np.asarray(inputs[0])
    pads = np.reshape(np.asarray(inputs[1]), -1).astype(np.int64)
    value = inputs[2] if len(inputs) > 2 and inputs[2] is not None and np.size(inputs[2]) else None
    axes = np.reshape(inputs[3], -1) if len(inputs) > 3 and inputs[3] is not None else np.arange(data.ndim)
    mode = next((a.s.decode() for a in node.attribute if a.name == "mode"), "constant")
    label = f"Pad '{node.name or node.output[0]}'"
    if pads.size != 2 * axes.size:
        fail(f"{label}: input 1 'pads' holds {pads.size} values, expected {2 * axes.size} (two per axis)")
    before, after = [0] * data.ndim, [0] * data.ndim
    for i, axis in enumerate(axes):
        axis = int(axis) + data.ndim if axis < 0 else int(axis)
        before[axis], after[axis] = int(pads[i]), int(pads[axes.size + i])
    crop = tuple(slice(max(-b, 0), d - max(-a, 0)) for b, a, d in zip(before, after, data.shape))
    if any(max(-b, 0) + max(-a, 0) > d for b, a, d in zip(before, after, data.shape)):
        fail(f"{label}: input 1 'pads' {pads.tolist()} remove more elements than the input {list(data.shape)} has")
    cropped = data[crop]
    widths = [(max(b, 0), max(a, 0)) for b, a in zip(before, after)]
    if mode == "constant":
        fill = np.asarray(value).reshape(()).astype(data.dtype) if value is not None else data.dtype.type(0)
        return [np.pad(cropped, widths, mode="constant", constant_values=fill)]
    return [np.pad(cropped, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _lrn(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX LRN: x / (bias + alpha / size * sum of x^2 over the channel window)^beta, the window
    [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] cut at the edges.  onnx's evaluator loops over
    the batch instead of the channels: channels past the batch size were left unnormalized, and a batch
    larger than the channel count failed ("index out of bounds")."""
    x = np.asarray(inputs[0])
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    size = int(attrs["size"])
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    if x.ndim < 3:
        fail(f"LRN '{node.name or node.output[0]}': input 0 must have rank >= 3 [N, C, ...], got {list(x.shape)}")
    square_sum = np.zeros_like(x)
    channels = x.shape[1]
    for c in range(channels):
        begin, end = max(0, c - (size - 1) // 2), min(channels, c + -(-(size - 1) // 2) + 1)
        square_sum[:, c] = np.sum(x[:, begin:end] ** 2, axis=1)
    return [(x / (bias + (alpha / size) * square_sum) ** beta).astype(x.dtype)]


# Ops computed here instead of by onnx's evaluator, where its implementation is narrower than the spec
# (a function returning None leaves the node to the evaluator).
_OWN = {"GatherElements": _gather_elements, "Pad": _pad, "LRN": _lrn}


def _domain_version(node: onnx.NodeProto) -> int:
    """The newest version of ``node``'s domain that defines its op (1 where onnx knows no schema)."""
    try:
        return onnx.defs.get_schema(node.op_type, domain=node.domain).since_version
    except onnx.defs.SchemaError:
        return 1


def host_refusal(node: onnx.NodeProto, opset: int) -> str | None:
    """Why onnx's reference evaluator cannot run ``node`` (None: it can, so host fallback runs it)."""
    try:
        _cached(node.SerializeToString(), opset)
    except NNAdapterError as err:
        return str(err.args[0])
    return None


@functools.lru_cache(maxsize=256)
def _cached(serialized: bytes, opset: int) -> HostNode:
    node = onnx.NodeProto()
    node.ParseFromString(serialized)
    return HostNode(node, opset)


def evaluate(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """Fold ``node`` on constant ``inputs`` (``None`` for omitted optional inputs)."""
    return _cached(node.SerializeToString(), opset).run(inputs)
