"""Shape rules the built-in extensions share: ``infer(input_shapes, input_values) -> output shapes``, shapes
as tuples with None for a size known only at execution (see ``table.Infer``)."""

from __future__ import annotations


def infer_same_shape(shapes: list, values: list) -> list:
    """The one output has the first input's shape."""
    return [shapes[0]]


def infer_broadcast(shapes: list, values: list) -> list:
    """The one output has the first two inputs' shapes broadcast as numpy does; None where either shape is
    unknown, and a None dimension where two differ and neither is 1 (or one is not known)."""
    a, b = shapes[0], shapes[1]
    if a is None or b is None:
        return [None]
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    return [tuple(y if x == 1 else x if y == 1 or x == y else None for x, y in zip(a, b))]
