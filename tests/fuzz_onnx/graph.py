"""The ONNX fuzzer's drawing primitives and the graph being built (part of tests/fuzz_onnx/).

The generator asks ``Draw`` for choices (hypothesis answers them; ``RandomDraw`` a seeded
``random.Random`` for long campaigns).  ``Graph`` holds one random graph: nodes, constant initializers,
float inputs (with feeds) and the pool of float tensors later nodes may read, their concrete shapes
tracked through onnx's shape inference.  Graph inputs may declare symbolic dimensions (dim_params);
feeds are numpy arrays from a drawn seed, some sprinkled with NaN, infinities, signed zeros, extremes
and denormals (``random_floats``).  The vocabulary's registry is here too: ``VOCABULARY`` maps each
ONNX operator we claim to a builder, registered with ``@op("Name")`` in the ops_*.py modules.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
CORPUS = Path(__file__).resolve().parents[1] / "fuzz_corpus_onnx"
F32 = TensorProto.FLOAT


# =================================================================================================
# Drawing: the generator asks ``Draw`` for choices; hypothesis answers them
# =================================================================================================
class Draw:
    """Choices from hypothesis' ``data`` (shrinkable, replayable)."""

    def __init__(self, data: Any):
        from hypothesis import strategies as st

        self._data, self._st = data, st

    def int(self, low: int, high: int) -> int:
        return self._data.draw(self._st.integers(low, high))

    def bool(self, p: float = 0.5) -> bool:
        return self.int(0, 999) < int(p * 1000)

    def choice(self, items: list) -> Any:
        return items[self.int(0, len(items) - 1)]

    def float(self, low: float, high: float) -> float:
        return self._data.draw(self._st.floats(low, high, allow_nan=False, allow_infinity=False))


class RandomDraw(Draw):
    """The same choices from a seeded ``random.Random``: for long campaigns, where hypothesis' habit of
    mutating earlier examples repeats graphs (in one run, 1,733 repeats to 517 new graphs)."""

    def __init__(self, seed: int):
        import random

        self._rng = random.Random(seed)

    def int(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)

    def float(self, low: float, high: float) -> float:
        return self._rng.uniform(low, high)


# =================================================================================================
# The graph being built
# =================================================================================================
@dataclasses.dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    depth: int  # nodes on the longest path from a graph input


class Graph:
    """One random graph: nodes, constant initializers, float inputs (with feeds) and the pool of float
    tensors later nodes may read."""

    def __init__(self, prefix: str, draw: Draw):
        self.prefix, self.draw = prefix, draw
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.pool: list[Tensor] = []
        self.used: set[str] = set()
        self._n = 0

    def name(self, what: str) -> str:
        self._n += 1
        return f"{self.prefix}{what}{self._n}"

    # -- values ---------------------------------------------------------------------------------
    def add_input(self, shape: tuple[int, ...]) -> Tensor:
        name = self.name("x")
        # Not a size of 1: two unknown dims broadcast against each other are refused (not silent).
        symbolic = self.draw.bool(0.3) and len(shape) > 0 and shape[0] > 1
        dims: list = list(shape)
        if symbolic:  # a dim_param for the leading dimension (the batch), fed with the concrete size
            dims[0] = f"{self.prefix}N{shape[0]}"  # inputs of one size share it, as a model's batch would
        self.inputs.append(helper.make_tensor_value_info(name, F32, dims))
        self.feeds[name] = random_floats(shape, self.draw.int(0, 2**31 - 1), self.draw.int(0, 3))
        t = Tensor(name, shape, 0)
        self.pool.append(t)
        return t

    def int_input(self, values: np.ndarray) -> str:
        """An integer graph input fed ``values`` (indices, sizes, counts known only at execution); not
        pooled."""
        name = self.name("i")
        values = np.asarray(values)
        dtype = helper.np_dtype_to_tensor_dtype(values.dtype)
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(values.shape)))
        self.feeds[name] = values
        return name

    def ints(self, values: Any, dtype: str = "int64", fed: float = 0.4) -> str:
        """An integer operand: a constant, or (with probability ``fed``) a graph input fed the same values,
        so that the converters must read it at execution and check it there."""
        array = np.array(values, dtype)
        return self.int_input(array) if self.draw.bool(fed) else self.const(array)

    def const(self, array: np.ndarray, what: str = "c") -> str:
        name = self.name(what)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape: tuple[int, ...], scale: float = 0.5) -> str:
        rng = np.random.default_rng(self.draw.int(0, 2**31 - 1))
        return self.const((rng.standard_normal(shape) * scale).astype("float32"), "w")

    def pick(self, rank_min: int = 0, rank_max: int = 6, pred: Callable[[Tensor], bool] | None = None) -> Tensor | None:
        # Not zero-size tensors: the builders' shape arithmetic assumes elements (tests/e2e/test_fuzz_models.py
        # fuzzes empty tensors).
        fits = [
            t
            for t in self.pool
            if rank_min <= len(t.shape) <= rank_max and math.prod(t.shape) > 0 and (pred is None or pred(t))
        ]
        if not fits:
            return None
        # Prefer recent tensors: deeper graphs, fewer dead ends.
        return fits[-1 - min(self.draw.int(0, 3), len(fits) - 1)] if self.draw.bool(0.7) else self.draw.choice(fits)

    def node(self, op: str, inputs: list[str], n_out: int = 1, keep: int | None = 1, **attrs: Any) -> list[str]:
        """Add a node; its float outputs (the first ``keep``) join the pool once their shapes are known."""
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, **attrs))
        self.used.update(reads(self.nodes[-1]))
        depth = 1 + max((t.depth for t in self.pool if t.name in inputs), default=0)
        self._pending = [(o, depth) for o in outs[: n_out if keep is None else keep]]
        return outs

    def settle(self, before: int) -> bool:
        """Shapes of the last node's outputs by onnx's shape inference (strict); False drops the nodes
        the builder added (those after the first ``before``)."""
        pending, self._pending = getattr(self, "_pending", []), []
        try:
            inferred = onnx.shape_inference.infer_shapes(self.concrete_model(), strict_mode=True, data_prop=True)
        except Exception:
            self._drop(before)
            return False
        types = {v.name: v.type.tensor_type for v in inferred.graph.value_info}
        added = []
        for name, depth in pending:
            tt = types.get(name)
            if tt is None or tt.elem_type != F32 or not all(d.HasField("dim_value") for d in tt.shape.dim):
                continue
            shape = tuple(d.dim_value for d in tt.shape.dim)
            if math.prod(shape) > 1 << 16:  # keep it small: compile time, not size, is the budget
                self._drop(before)
                return False
            added.append(Tensor(name, shape, depth))
        if not added:
            self._drop(before)
            return False
        self.pool.extend(added)
        return True

    def _drop(self, before: int) -> None:
        del self.nodes[before:]
        self.used = {i for n in self.nodes for i in reads(n)}
        self.inits = [i for i in self.inits if i.name in self.used]

    def concrete_model(self) -> onnx.ModelProto:
        """The graph with every input at its fed shape (for shape inference while building); integer inputs
        (sizes, counts, indices) as constants of their fed values, so that inference knows the shapes
        they make."""
        inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
            for n, a in self.feeds.items()
            if a.dtype.kind == "f"
        ]
        fed = [numpy_helper.from_array(a, n) for n, a in self.feeds.items() if a.dtype.kind != "f"]
        graph = helper.make_graph(self.nodes, "g", inputs, [], initializer=self.inits + fed)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])

    def outputs(self) -> list[Tensor]:
        """Every pooled tensor no node reads (the graph's leaves), the deepest first."""
        leaves = [t for t in self.pool if t.name not in self.used and t.depth > 0]
        return sorted(leaves, key=lambda t: -t.depth)


def reads(node: onnx.NodeProto) -> set[str]:
    """The names ``node`` reads: its inputs and, for If/Loop/Scan, the outer-scope names its bodies read."""
    names = {i for i in node.input if i}
    for attr in node.attribute:
        for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
            inner = {o for n in body.node for o in n.output} | {i.name for i in body.input}
            inner |= {i.name for i in body.initializer}
            names |= {name for n in body.node for name in reads(n) if name not in inner}
    return names


def random_floats(shape: tuple[int, ...], seed: int, mode: int) -> np.ndarray:
    """Mode 0-1: uniform in [-3, 3]; 2: one in eight elements NaN, +-inf, +-0, +-3e38, +-1e30, 1e-40 or
    1e-3; 3: wide magnitudes (sign * 10^U(-8, 8)) with a few specials."""
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        x = rng.uniform(-3, 3, shape).astype("float32")
        if mode == 3:
            x = (np.sign(x) * 10.0 ** rng.uniform(-8, 8, shape)).astype("float32")
        if mode >= 2 and x.size:
            flat = x.reshape(-1)
            specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, 1e30, -1e30, 1e-40, 1e-3], "float32")
            picks = rng.integers(0, flat.size, max(1, flat.size // 8))
            flat[picks] = rng.choice(specials, picks.size)
    return x


# =================================================================================================
# The vocabulary: ONNX operator -> builder (the builders are in ops_*.py: extend them there)
# =================================================================================================
Builder = Callable[[Graph], bool]
VOCABULARY: dict[str, Builder] = {}


def op(*names: str) -> Callable[[Callable], Callable]:
    """Register ``builder(g, name)`` for each ONNX operator in ``names``."""

    def register(fn: Callable[[Graph, str], bool]) -> Callable:
        for n in names:
            VOCABULARY[n] = lambda g, n=n: fn(g, n)
        return fn

    return register


def _axis(g: Graph, rank: int) -> int:
    a = g.draw.int(0, rank - 1)
    return a - rank if g.draw.bool() else a  # negative axes count from the end
