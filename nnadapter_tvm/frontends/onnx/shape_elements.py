"""Shape arithmetic at import: the elements of small integer tensors that follow from static dimensions.

``Shape`` of a ``[?, 96, ?, ?]`` tensor is known at import in part: ``[?, 96, ?, ?]``.  Carrying those
elements through the usual shape arithmetic (Gather, Slice, Concat, Unsqueeze, Cast, Add, Mul, ...) lets
the importer fold what is static (``Gather(Shape(x), 1)`` is the constant 96, so a Reshape to
``[0, 96, -1]`` needs nothing at run time) and know the length of what is not.  What stays unknown is
emitted as NNAdapter operations (SHAPE, GATHER, CONCAT, ...), whose values the NNAdapter converters then
carry as expressions over the symbolic dimensions (``op_converters.shape_values``).

An element is an ``int`` or ``None`` (unknown until execution).  Only integer tensors of at most
``MAX_ELEMENTS`` elements are tracked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx

MAX_ELEMENTS = 64
Elements = tuple  # of int | None, flat (row-major)


def of(value) -> Elements | None:
    """A Value's elements: all of a constant's, the tracked ones of a computed tensor, else None."""
    if value is None:
        return None
    if value.is_const:
        array = np.asarray(value.const)
        if array.dtype.kind not in "iu" or array.size > MAX_ELEMENTS:
            return None
        return tuple(int(v) for v in array.reshape(-1))
    return value.elements


def propagate(node: onnx.NodeProto, inputs: Sequence, attrs: dict) -> list[Elements | None] | None:
    """The elements of the node's outputs, from its inputs' (Values), or None where not derivable."""
    fn = _RULES.get(node.op_type)
    if fn is None:
        return None
    try:
        result = fn(inputs, attrs)
    except (ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError):
        return None
    if result is None or (result and len(result) > MAX_ELEMENTS):
        return None
    return [tuple(result)]


def _shape(inputs, attrs):
    x = inputs[0]
    if x is None or x.shape is None:
        return None
    rank = len(x.shape)
    start, end = int(attrs.get("start", 0)), attrs.get("end", None)
    end = rank if end is None else int(end)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return tuple(x.shape[start : max(start, end)])


def _size(inputs, attrs):
    x = inputs[0]
    if x is None or x.shape is None:
        return None
    return (None if None in x.shape else int(np.prod(x.shape, dtype=np.int64)),)


def _same(inputs, attrs):
    return of(inputs[0])


def _cast(inputs, attrs):
    to = attrs.get("to")
    if to is None:
        return None
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(to)))
    if dtype.kind not in "iu":
        return None
    return of(inputs[0])


def _concat(inputs, attrs):
    parts = [of(v) for v in inputs if v is not None]
    if any(p is None for p in parts) or any(v.shape is None or len(v.shape) != 1 for v in inputs if v is not None):
        return None
    return tuple(e for p in parts for e in p)


def _gather(inputs, attrs):
    data = of(inputs[0])
    indices = inputs[1]
    if data is None or indices is None or not indices.is_const or int(attrs.get("axis", 0)) != 0:
        return None
    if inputs[0].shape is None or len(inputs[0].shape) != 1:
        return None
    n = len(data)
    picked = []
    for k in np.reshape(indices.const, -1):
        k = int(k)
        if not -n <= k < n:
            return None
        picked.append(data[k % n])
    return tuple(picked)


def _slice(inputs, attrs):
    data = of(inputs[0])
    if data is None or inputs[0].shape is None or len(inputs[0].shape) != 1:
        return None
    if len(inputs) > 1:  # opset 10+: starts, ends, axes, steps as inputs
        starts, ends = of(inputs[1]), of(inputs[2])
        axes = of(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else (0,)
        steps = of(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else (1,)
    else:
        starts, ends = tuple(attrs.get("starts", ())), tuple(attrs.get("ends", ()))
        axes, steps = tuple(attrs.get("axes", (0,))), (1,)
    if None in (starts, ends, axes, steps) or len(starts) != 1 or tuple(axes) not in ((0,), (-1,)):
        return None
    if None in (*starts, *ends, *steps):
        return None
    return data[slice(starts[0], ends[0], steps[0])]


def _elementwise(fn: Callable[[int, int], int]):
    def apply(inputs, attrs):
        a, b = of(inputs[0]), of(inputs[1])
        if a is None or b is None:
            return None
        if len(a) != len(b):
            if len(a) == 1:
                a = a * len(b)
            elif len(b) == 1:
                b = b * len(a)
            else:
                return None
        return tuple(None if x is None or y is None else fn(x, y) for x, y in zip(a, b))

    return apply


def _truncdiv(x: int, y: int) -> int:
    q = abs(x) // abs(y)  # ZeroDivisionError: not derivable
    return q if (x >= 0) == (y >= 0) else -q


def _reduction(fn: Callable[[int, int], int]):
    """A 1-D tensor reduced to its one element (axes: all, or axis 0, as attribute or input)."""

    def apply(inputs, attrs):
        data = of(inputs[0])
        if data is None or not data or inputs[0].shape is None or len(inputs[0].shape) != 1:
            return None
        axes = of(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else tuple(attrs.get("axes", (0,)))
        if axes is None or tuple(axes) not in ((), (0,), (-1,)) or (not axes and attrs.get("noop_with_empty_axes")):
            return None
        if None in data:
            return (None,)
        result = data[0]
        for v in data[1:]:
            result = fn(result, v)
        return (result,)

    return apply


def _constant_of_shape(inputs, attrs):
    shape = of(inputs[0])
    value = attrs.get("value")
    if shape is None or None in shape or value is None:
        return None
    from onnx import numpy_helper

    array = numpy_helper.to_array(value)
    if array.dtype.kind not in "iu" or int(np.prod(shape)) > MAX_ELEMENTS:
        return None
    return (int(array.reshape(-1)[0]),) * int(np.prod(shape))


_RULES: dict[str, Callable] = {
    "Shape": _shape,
    "Size": _size,
    "Identity": _same,
    "Reshape": _same,
    "Flatten": _same,
    "Squeeze": _same,
    "Unsqueeze": _same,
    "Cast": _cast,
    "Concat": _concat,
    "Gather": _gather,
    "Slice": _slice,
    "Add": _elementwise(lambda x, y: x + y),
    "Sub": _elementwise(lambda x, y: x - y),
    "Mul": _elementwise(lambda x, y: x * y),
    "Div": _elementwise(_truncdiv),
    "Max": _elementwise(max),
    "Min": _elementwise(min),
    "ConstantOfShape": _constant_of_shape,
    "ReduceMin": _reduction(min),
    "ReduceMax": _reduction(max),
    "ReduceSum": _reduction(lambda x, y: x + y),
}

#: The op types whose outputs' elements are tracked.
OPS = frozenset(_RULES)
