"""Output ranks ONNX's shape inference leaves open, from each operator's definition.

onnx's inference gives up an output's whole shape where a size it needs is read from a tensor at
execution: Split with fed ``split`` sizes, Slice with fed bounds, Tile with fed repeats, Reshape to a
fed shape.  The *rank* of those outputs is still fixed by the operator's definition (a Split's pieces
have its input's rank, a Reshape's output has as many dimensions as its shape tensor has elements),
and a compiled subgraph reading such an output needs no more than that: its sizes become symbolic
dimensions bound at execution.  Without a rank the importer could only refuse ("the rank of ... is
unknown"), and every graph that computes sizes in the graph and reads the result on a device was
refused.

Each rule takes the node's input Values (``None`` for an absent optional input) and attributes and
returns its outputs' shapes (a tuple of int | None per output, None where it cannot tell), keeping
every dimension the definition fixes (a Split's pieces keep every axis but the split one).  Only the
rank and such fixed dimensions are derived here; sizes that depend on data stay None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx

Shape = tuple  # of int | None

_RULES: dict[str, Callable[[list, dict, int], list]] = {}


def shapes(node: onnx.NodeProto, inputs: Sequence) -> list[Shape | None]:
    """Each output's shape as far as the operator's definition fixes it (None: not even its rank)."""
    rule = _RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    outputs = len(node.output)
    if rule is None:
        return [None] * outputs
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    found = rule(list(inputs), attrs, outputs)
    return list(found) + [None] * (outputs - len(found))


def _rule(*names: str) -> Callable:
    def register(fn: Callable) -> Callable:
        for name in names:
            _RULES[name] = fn
        return fn

    return register


def _shape(inputs: list, i: int) -> Shape | None:
    v = inputs[i] if i < len(inputs) else None
    return None if v is None or v.shape is None else tuple(v.shape)


def _length(inputs: list, i: int) -> int | None:
    """The number of elements of 1-D input ``i`` where its length is static (a shape, axes, repeats)."""
    shape = _shape(inputs, i)
    if shape is None or len(shape) != 1 or shape[0] is None:
        return None
    return int(shape[0])


def _unknown(rank: int | None) -> Shape | None:
    return None if rank is None else (None,) * rank


def _axis(axis: int, rank: int) -> int | None:
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None


@_rule("Split")
def _split(inputs: list, attrs: dict, outputs: int) -> list:
    """Each piece keeps the input's rank and every dimension but the split axis."""
    x = _shape(inputs, 0)
    if x is None:
        return []
    axis = _axis(attrs.get("axis", 0), len(x))
    piece = tuple(None if a == axis or axis is None else d for a, d in enumerate(x))
    return [piece] * outputs


@_rule("Slice")
def _slice(inputs: list, attrs: dict, outputs: int) -> list:
    """The input's rank; the axes not sliced keep their sizes where the axes are constant (absent:
    the first len(starts) axes)."""
    x = _shape(inputs, 0)
    if x is None:
        return []
    axes_value = inputs[3] if len(inputs) > 3 else None
    if axes_value is not None and axes_value.is_const:
        sliced = {_axis(int(a), len(x)) for a in axes_value.const.reshape(-1)}
    elif axes_value is None and _length(inputs, 1) is not None:
        sliced = set(range(_length(inputs, 1)))
    else:
        return [_unknown(len(x))]
    return [tuple(None if a in sliced else d for a, d in enumerate(x))]


@_rule("Tile", "Pad", "Resize", "Upsample", "CenterCropPad")
def _same_rank(inputs: list, attrs: dict, outputs: int) -> list:
    """The input's rank; sizes read from data."""
    return [_unknown(None if _shape(inputs, 0) is None else len(_shape(inputs, 0)))]


@_rule("TopK")
def _topk(inputs: list, attrs: dict, outputs: int) -> list:
    """Values and indices keep every dimension but the axis, whose size is the fed k."""
    x = _shape(inputs, 0)
    if x is None:
        return []
    axis = _axis(attrs.get("axis", -1), len(x))
    out = tuple(None if a == axis else d for a, d in enumerate(x))
    return [out, out]


@_rule("Reshape", "ConstantOfShape")
def _rank_of_shape_input(inputs: list, attrs: dict, outputs: int) -> list:
    """As many dimensions as the shape tensor has elements (Reshape's input 1, ConstantOfShape's 0)."""
    return [_unknown(_length(inputs, 1 if len(inputs) > 1 else 0))]


@_rule("Expand")
def _expand(inputs: list, attrs: dict, outputs: int) -> list:
    """Broadcast of the input against the shape: max of the two ranks."""
    x, n = _shape(inputs, 0), _length(inputs, 1)
    return [None if x is None or n is None else _unknown(max(len(x), n))]


@_rule("Range", "Compress")
def _one_dim(inputs: list, attrs: dict, outputs: int) -> list:
    """Range, and Compress without an axis (the flattened input's selected elements): 1-D."""
    if "axis" in attrs:
        return [_unknown(None if _shape(inputs, 0) is None else len(_shape(inputs, 0)))]
    return [(None,)]


@_rule("NonZero")
def _nonzero(inputs: list, attrs: dict, outputs: int) -> list:
    x = _shape(inputs, 0)
    return [None if x is None else (len(x), None)]


@_rule("Unsqueeze")
def _unsqueeze(inputs: list, attrs: dict, outputs: int) -> list:
    x, n = _shape(inputs, 0), _length(inputs, 1)
    return [None if x is None or n is None else _unknown(len(x) + n)]


@_rule("Squeeze")
def _squeeze(inputs: list, attrs: dict, outputs: int) -> list:
    """Fed axes: one dimension fewer per axis (without axes the count depends on the sizes)."""
    x, n = _shape(inputs, 0), _length(inputs, 1)
    return [None if x is None or not n else _unknown(len(x) - n)]


@_rule(
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)
def _reduce(inputs: list, attrs: dict, outputs: int) -> list:
    """Fed axes: the input's rank with keepdims; without it one dimension fewer per axis, an empty
    axes tensor reducing every axis (rank 0) unless noop_with_empty_axes keeps the input."""
    x, n = _shape(inputs, 0), _length(inputs, 1)
    if x is None:
        return []
    if attrs.get("keepdims", 1):
        return [_unknown(len(x))]
    if n is None:
        return []
    if n == 0:
        return [x if attrs.get("noop_with_empty_axes", 0) else ()]
    return [_unknown(len(x) - n)]


@_rule("OneHot")
def _onehot(inputs: list, attrs: dict, outputs: int) -> list:
    """The indices' rank plus the depth axis."""
    x = _shape(inputs, 0)
    return [None if x is None else _unknown(len(x) + 1)]
