"""The ONNX fuzzer's builders for the shape and indexing operators: Transpose, Reshape, Flatten,
Squeeze/Unsqueeze, Concat, Split, Slice, Gather/GatherElements/GatherND, Expand, Tile and Pad (part of
tests/fuzz_onnx/).

Sizes, counts and bounds are constants or (``g.ints``) graph inputs fed the same values, so that the
converters must read and check them at execution.
"""

from __future__ import annotations

import math

import numpy as np

from .graph import Graph, _axis, op


@op("Transpose")
def _transpose(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=2)
    if x is None:
        return False
    perm = list(range(len(x.shape)))
    for i in range(len(perm) - 1, 0, -1):
        j = g.draw.int(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    g.node(name, [x.name], perm=perm)
    return True


@op("Reshape")
def _reshape(g: Graph, name: str) -> bool:
    x = g.pick()
    if x is None:
        return False
    n = math.prod(x.shape)
    dims, rest = [], n
    for _ in range(g.draw.int(0, 3)):
        divisors = [d for d in range(1, min(rest, 16) + 1) if rest % d == 0]
        d = g.draw.choice(divisors)
        dims.append(d)
        rest //= d
    dims.append(rest)
    if g.draw.bool(0.4):
        dims[g.draw.int(0, len(dims) - 1)] = -1
    g.node(name, [x.name, g.ints(dims)])
    return True


@op("Flatten")
def _flatten(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1)
    if x is None:
        return False
    g.node(name, [x.name], axis=g.draw.int(0, len(x.shape)))
    return True


@op("Unsqueeze", "Squeeze")
def _squeeze(g: Graph, name: str) -> bool:
    if name == "Unsqueeze":
        x = g.pick(rank_max=4)
        if x is None:
            return False
        axis = g.draw.int(-len(x.shape) - 1, len(x.shape))
    else:
        x = g.pick(rank_min=1, pred=lambda t: 1 in t.shape)
        if x is None:
            return False
        axis = g.draw.choice([a for a, d in enumerate(x.shape) if d == 1])
    g.node(name, [x.name, g.const(np.array([axis], "int64"))])
    return True


@op("Concat")
def _concat(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1)
    if x is None:
        return False
    axis = _axis(g, len(x.shape))
    others = [t for t in g.pool if len(t.shape) == len(x.shape) and t.name != x.name and
              all(d == e for a, (d, e) in enumerate(zip(t.shape, x.shape)) if a != axis % len(x.shape))]  # fmt: skip
    ins = [x.name] + [g.draw.choice(others).name for _ in range(g.draw.int(0, 2))] if others else [x.name]
    if len(ins) == 1:
        shape = list(x.shape)
        shape[axis] = g.draw.int(1, 4)
        ins.append(g.add_input(tuple(shape)).name)
    g.node(name, ins, axis=axis)
    return True


@op("Split")
def _split(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1, pred=lambda t: max(t.shape, default=0) >= 2)
    if x is None:
        return False
    axis = g.draw.choice([a for a, d in enumerate(x.shape) if d >= 2])
    first = g.draw.int(1, x.shape[axis] - 1)
    sizes = g.ints([first, x.shape[axis] - first])
    g.node(name, [x.name, sizes], n_out=2, keep=2, axis=axis)
    return True


@op("Slice")
def _slice(g: Graph, name: str) -> bool:
    """Slice with starts/ends anywhere in [-2n, 2n] (ONNX clamps them) and steps of either sign."""
    x = g.pick(rank_min=1)
    if x is None:
        return False
    axes = sorted({g.draw.int(0, len(x.shape) - 1) for _ in range(g.draw.int(1, len(x.shape)))})
    starts, ends, steps = [], [], []
    for a in axes:
        n = x.shape[a]
        step = g.draw.choice([1, 1, 2, 3, -1, -2])
        starts.append(g.draw.int(-2 * n - 1, 2 * n + 1))
        ends.append(g.draw.choice([g.draw.int(-2 * n - 1, 2 * n + 1), 2**62, -(2**62)]))
        steps.append(step)
    ins = [x.name] + [g.ints(v) for v in (starts, ends, axes, steps)]
    g.node(name, ins)
    return True


@op("Gather", "GatherElements", "GatherND")
def _gather(g: Graph, name: str) -> bool:
    """Indices in [-n, n) (out-of-range ones are refused by both sides: tests/ops/test_indexing.py),
    constant or fed at run time (then checked at execution, which must not refuse these)."""
    x = g.pick(rank_min=1, pred=lambda t: min(t.shape) > 0)
    if x is None:
        return False
    axis = _axis(g, len(x.shape))
    n = x.shape[axis]
    rng = np.random.default_rng(g.draw.int(0, 2**31 - 1))
    if name == "GatherND":  # tuples over the leading k dims
        k = g.draw.int(1, len(x.shape))
        lead = tuple(rng.integers(1, 4, g.draw.int(1, 2)))
        values = np.stack([rng.integers(-d, d, lead) for d in x.shape[:k]], -1).astype("int64")
        attrs: dict = {}
    elif name == "Gather":
        values = rng.integers(-n, n, tuple(rng.integers(1, 4, g.draw.int(0, 2)))).astype("int64")
        attrs = {"axis": axis}
    else:
        shape = tuple(
            rng.integers(1, d + 1) if a != axis % len(x.shape) else rng.integers(1, 5) for a, d in enumerate(x.shape)
        )
        values = rng.integers(-n, n, shape).astype("int64")
        attrs = {"axis": axis}
    g.node(name, [x.name, g.int_input(values) if g.draw.bool(0.5) else g.const(values)], **attrs)
    return True


@op("Expand", "Tile")
def _expand(g: Graph, name: str) -> bool:
    x = g.pick(rank_max=4, pred=lambda t: math.prod(t.shape) <= 256)
    if x is None:
        return False
    if name == "Tile":
        reps = [g.draw.int(1, 3) for _ in x.shape]
        g.node(name, [x.name, g.ints(reps)])
        return True
    shape = [d if d != 1 or g.draw.bool(0.5) else g.draw.int(1, 4) for d in x.shape]
    if g.draw.bool(0.3):
        shape = [g.draw.int(1, 3), *shape]
    g.node(name, [x.name, g.ints(shape)])
    return True


@op("Pad")
def _pad(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1, rank_max=4)
    if x is None:
        return False
    mode = g.draw.choice(["constant", "constant", "reflect", "edge"])
    pads = []
    for _ in range(2):
        for d in x.shape:
            limit = d - 1 if mode == "reflect" else 3
            pads.append(g.draw.int(0, max(limit, 0)))
    ins = [x.name, g.const(np.array(pads, "int64"))]
    if mode == "constant" and g.draw.bool():
        ins.append(g.const(np.float32(g.draw.float(-2, 2))))
    g.node(name, ins, mode=mode)
    return True
