"""The differential ONNX fuzzer's generator, runner, comparison and minimizer (tests/e2e/test_fuzz_onnx.py runs
it in CI, scripts/fuzz_onnx.py runs long campaigns).

A graph is drawn node by node with hypothesis: ``VOCABULARY`` maps each ONNX operator we claim to a
builder that picks inputs from the float tensors made so far (their concrete shapes tracked through
onnx's shape inference), draws attributes within their domains and adds the node (and any constant
inputs).  Graph inputs may declare symbolic dimensions (dim_params); feeds are numpy arrays from a drawn
seed, some sprinkled with NaN, infinities, signed zeros, extremes and denormals.  Several independent
graphs are merged into one multi-output model, compiled once by nnadapter_tvm's Predictor and run by
onnxruntime (onnx's ReferenceEvaluator where onnxruntime has no kernel); each output must agree within a
tolerance derived from its dtype and its depth in the graph.  Where it does not, onnx's evaluator is a
second opinion and the operators' definition (the evaluator on the model in float64, the max family
propagating NaN) a third: one that sides with us makes the difference ambiguous, not a failure.  A
difference is minimized to the first node whose output differs while its inputs agree, run alone on the
values that reached it.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
CORPUS = Path(__file__).resolve().parent / "fuzz_corpus_onnx"
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
        # Not zero-size tensors: the builders' shape arithmetic assumes elements (tests/e2e/test_fuzz.py
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
# The vocabulary: ONNX operator -> builder (extend it here)
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


UNARY = [
    "Abs", "Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Floor", "Ceil", "Round", "Sign",
    "Reciprocal", "Softplus", "Softsign", "HardSwish", "Identity",
]  # fmt: skip


@op(*UNARY)
def _unary(g: Graph, name: str) -> bool:
    x = g.pick()
    if x is None:
        return False
    g.node(name, [x.name])
    return True


@op("Sin", "Cos")
def _periodic(g: Graph, name: str) -> bool:
    """Sin and Cos read graph inputs only, which both sides hold bit for bit: of a computed value, a
    one-ulp difference in a large argument (float32's ulp at 1e7 is 1) changes the result entirely (the
    condition number is |x tan x|), so no tolerance could tell a bug from rounding (an LpPool summed in
    another order, then Cos, differed by 0.6)."""
    x = g.pick(pred=lambda t: t.depth == 0)
    if x is None:
        return False
    g.node(name, [x.name])
    return True


@op("LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "ThresholdedRelu")
def _activation(g: Graph, name: str) -> bool:
    x = g.pick()
    if x is None:
        return False
    attrs = {
        "LeakyRelu": {"alpha": g.draw.float(0.0, 1.0)},
        "Elu": {"alpha": g.draw.float(0.1, 2.0)},
        "Selu": {},
        "Celu": {"alpha": g.draw.float(0.1, 2.0)},
        "HardSigmoid": {"alpha": g.draw.float(0.05, 1.0), "beta": g.draw.float(0.0, 1.0)},
        "ThresholdedRelu": {"alpha": g.draw.float(-1.0, 2.0)},
    }[name]
    g.node(name, [x.name], **attrs)
    return True


@op("Clip")
def _clip(g: Graph, name: str) -> bool:
    x = g.pick()
    if x is None:
        return False
    lo = g.draw.float(-3, 1)
    bounds = [g.const(np.float32(lo)), g.const(np.float32(lo + g.draw.float(0, 4)))]
    g.node(name, [x.name, *bounds[: g.draw.int(0, 2)]])
    return True


def _broadcast_partner(g: Graph, x: Tensor) -> str:
    """Another tensor of x's shape or one that broadcasts to it (a pooled one, or a new input or constant)."""
    same = [t for t in g.pool if t.shape == x.shape and t.name != x.name]
    if same and g.draw.bool(0.5):
        return g.draw.choice(same).name
    shape = list(x.shape)
    for a in range(len(shape)):
        if g.draw.bool(0.3):
            shape[a] = 1
    shape = shape[g.draw.int(0, len(shape)) :] if g.draw.bool(0.3) else shape
    if g.draw.bool(0.5):
        return g.add_input(tuple(shape)).name
    return g.weight(tuple(shape), 1.0)


@op("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum")
def _binary(g: Graph, name: str) -> bool:
    x = g.pick()
    if x is None:
        return False
    other = _broadcast_partner(g, x)
    ins = [other, x.name] if g.draw.bool(0.2) else [x.name, other]
    if name in ("Max", "Min", "Mean", "Sum") and g.draw.bool(0.2):
        ins = ins[:1] if g.draw.bool() else [*ins, _broadcast_partner(g, x)]
    g.node(name, ins)
    return True


@op("PRelu")
def _prelu(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1)
    if x is None:
        return False
    slope = [1] * len(x.shape)
    slope[-1] = x.shape[-1]
    if len(x.shape) >= 2 and g.draw.bool():
        slope = [x.shape[1], *([1] * (len(x.shape) - 2))]
    g.node(name, [x.name, g.weight(tuple(slope))])
    return True


@op("Where")
def _where(g: Graph, name: str) -> bool:
    """Where(Greater/Less/Equal(a, b), a, b): the condition comes from a comparison in the graph."""
    x = g.pick()
    if x is None:
        return False
    other = _broadcast_partner(g, x)
    cmp = g.draw.choice(["Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"])
    (cond,) = g.node(cmp, [x.name, other], keep=0)
    g.node("Where", [cond, x.name, other] if g.draw.bool() else [cond, other, x.name])
    return True


@op("IsNaN", "IsInf")
def _is_special(g: Graph, name: str) -> bool:
    """IsNaN/IsInf -> Where(mask, 1, x): the mask steers a float result."""
    x = g.pick()
    if x is None:
        return False
    (mask,) = g.node(name, [x.name], keep=0)
    g.node("Where", [mask, g.const(np.float32(g.draw.float(-2, 2))), x.name])
    return True


@op("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum")  # fmt: skip
def _reduce(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1)
    if x is None:
        return False
    rank = len(x.shape)
    axes = sorted({_axis(g, rank) % rank for _ in range(g.draw.int(1, rank))})
    keep = int(g.draw.bool())
    if name == "ReduceSum":  # axes is an input from opset 13
        g.node(name, [x.name, g.const(np.array(axes, "int64"))], keepdims=keep)
    else:
        g.node(name, [x.name], axes=axes, keepdims=keep)
    return True


@op("ArgMax", "ArgMin")
def _arg(g: Graph, name: str) -> bool:
    """ArgMax/ArgMin -> Cast to float (the pool holds float tensors)."""
    x = g.pick(rank_min=1)
    if x is None:
        return False
    attrs = {"axis": _axis(g, len(x.shape)), "keepdims": int(g.draw.bool())}
    if g.draw.bool(0.3):
        attrs["select_last_index"] = 1
    (idx,) = g.node(name, [x.name], keep=0, **attrs)
    g.node("Cast", [idx], to=F32)
    return True


@op("Softmax", "LogSoftmax", "Hardmax")
def _softmax(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1)
    if x is None:
        return False
    g.node(name, [x.name], axis=_axis(g, len(x.shape)))
    return True


@op("CumSum")
def _cumsum(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1)
    if x is None:
        return False
    axis = g.const(np.array(_axis(g, len(x.shape)), "int64"))
    g.node(name, [x.name, axis], exclusive=int(g.draw.bool(0.3)), reverse=int(g.draw.bool(0.3)))
    return True


@op("TopK")
def _topk(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1)
    if x is None:
        return False
    axis = _axis(g, len(x.shape))
    k = g.draw.int(1, x.shape[axis]) if x.shape[axis] else 0
    if not k:
        return False
    values, idx = g.node(name, [x.name, g.ints([k])], n_out=2, keep=1, axis=axis,
                         largest=int(g.draw.bool(0.7)), sorted=1)  # fmt: skip
    del values, idx
    return True


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


@op("MatMul", "Gemm")
def _matmul(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=2 if name == "Gemm" else 1, rank_max=2 if name == "Gemm" else 4)
    if x is None:
        return False
    k = x.shape[-1]
    n = g.draw.int(1, 8)
    if name == "Gemm":
        trans_b = int(g.draw.bool())
        w = g.weight((n, k) if trans_b else (k, n))
        ins = [x.name, w] + ([g.weight((n,))] if g.draw.bool() else [])
        g.node(name, ins, transB=trans_b, alpha=g.draw.float(0.5, 2), beta=g.draw.float(0.5, 2))
        return True
    w = g.weight((k, n) if len(x.shape) > 1 else (k,)) if g.draw.bool(0.7) else g.add_input((k, n)).name
    g.node(name, [x.name, w])
    return True


def _nchw(g: Graph) -> Tensor | None:
    x = g.pick(rank_min=4, rank_max=4, pred=lambda t: t.shape[2] >= 2 and t.shape[3] >= 2)
    if x is None and g.draw.bool(0.5):
        shape = (g.draw.int(1, 2), g.draw.int(1, 4), g.draw.int(3, 9), g.draw.int(3, 9))
        x = g.add_input(shape)
    return x


@op("Conv", "ConvTranspose")
def _conv(g: Graph, name: str) -> bool:
    x = _nchw(g)
    if x is None:
        return False
    c = x.shape[1]
    group = g.draw.choice([d for d in (1, 2, c) if c % d == 0])
    oc = g.draw.int(1, 3) * group
    kh, kw = g.draw.int(1, min(3, x.shape[2])), g.draw.int(1, min(3, x.shape[3]))
    w_shape = (oc, c // group, kh, kw) if name == "Conv" else (c, oc // group, kh, kw)
    ins = [x.name, g.weight(w_shape)] + ([g.weight((oc,))] if g.draw.bool() else [])
    attrs: dict = {"group": group, "strides": [g.draw.int(1, 2), g.draw.int(1, 2)]}
    if g.draw.bool(0.5):
        attrs["pads"] = [g.draw.int(0, kh - 1), g.draw.int(0, kw - 1), g.draw.int(0, kh - 1), g.draw.int(0, kw - 1)]
    if name == "Conv" and g.draw.bool(0.2):
        attrs["dilations"] = [2, 2]
    g.node(name, ins, **attrs)
    return True


@op("MaxPool", "AveragePool", "LpPool")
def _pool(g: Graph, name: str) -> bool:
    x = _nchw(g)
    if x is None:
        return False
    k = [g.draw.int(1, min(3, x.shape[2])), g.draw.int(1, min(3, x.shape[3]))]
    attrs: dict = {"kernel_shape": k, "strides": [g.draw.int(1, 2), g.draw.int(1, 2)]}
    if g.draw.bool(0.5):
        attrs["pads"] = [
            g.draw.int(0, k[0] - 1),
            g.draw.int(0, k[1] - 1),
            g.draw.int(0, k[0] - 1),
            g.draw.int(0, k[1] - 1),
        ]
    if name == "AveragePool":
        attrs["count_include_pad"] = int(g.draw.bool())
    if name != "LpPool" and g.draw.bool(0.2):
        attrs["ceil_mode"] = 1
    g.node(name, [x.name], **attrs)
    return True


@op("GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization", "BatchNormalization", "LRN", "DepthToSpace")
def _nchw_op(g: Graph, name: str) -> bool:
    x = _nchw(g)
    if x is None:
        return False
    c = x.shape[1]
    if name == "InstanceNormalization":
        g.node(name, [x.name, g.weight((c,)), g.weight((c,))], epsilon=g.draw.float(1e-6, 1e-2))
    elif name == "BatchNormalization":
        rng = np.random.default_rng(g.draw.int(0, 2**31 - 1))
        var = g.const(rng.uniform(0.1, 2, c).astype("float32"))
        g.node(name, [x.name, g.weight((c,)), g.weight((c,)), g.weight((c,)), var], epsilon=1e-5)
    elif name == "LRN":
        g.node(name, [x.name], size=g.draw.choice([1, 3, 5]), alpha=1e-3, beta=0.75, bias=1.0)
    elif name == "DepthToSpace":
        if c % 4:
            return False
        g.node(name, [x.name], blocksize=2, mode=g.draw.choice(["DCR", "CRD"]))
    else:
        g.node(name, [x.name])
    return True


@op("LayerNormalization")
def _layer_norm(g: Graph, name: str) -> bool:
    x = g.pick(rank_min=1)
    if x is None:
        return False
    axis = _axis(g, len(x.shape))
    tail = x.shape[axis % len(x.shape) :]
    g.node(name, [x.name, g.weight(tail), g.weight(tail)], axis=axis, epsilon=g.draw.float(1e-6, 1e-2))
    return True


@op("Cast")
def _cast(g: Graph, name: str) -> bool:
    """Float -> int32/int64/bool/float16 -> float: a round trip through another type."""
    x = g.pick()
    if x is None:
        return False
    to = g.draw.choice([TensorProto.INT32, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.INT64])
    (mid,) = g.node(name, [x.name], keep=0, to=to)
    g.node("Cast", [mid], to=F32)
    return True


@op("LSTM", "GRU", "RNN")
def _recurrent(g: Graph, name: str) -> bool:
    """A recurrent layer over a [seq, batch, input] tensor (pooled or new), every direction, an optional
    bias, initial state and per-batch sequence lengths (constant or fed: shorter rows are zero-padded in
    Y), and GRU's linear_before_reset; Y, Y_h (and LSTM's Y_c) join the pool."""
    x = g.pick(rank_min=3, rank_max=3, pred=lambda t: t.shape[0] <= 6 and t.shape[2] <= 8)
    if x is None:
        x = g.add_input((g.draw.int(1, 4), g.draw.int(1, 3), g.draw.int(1, 5)))
    seq, batch, size = x.shape
    hidden = g.draw.int(1, 6)
    direction = g.draw.choice(["forward", "reverse", "bidirectional"])
    dirs = 2 if direction == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[name]
    ins = [x.name, g.weight((dirs, gates * hidden, size)), g.weight((dirs, gates * hidden, hidden))]
    optional = [
        g.weight((dirs, 2 * gates * hidden)) if g.draw.bool(0.6) else "",
        g.ints(np.random.default_rng(g.draw.int(0, 99)).integers(1, seq + 1, batch), "int32")
        if g.draw.bool(0.4)
        else "",
        g.weight((dirs, batch, hidden)) if g.draw.bool(0.4) else "",
    ]
    if name == "LSTM" and g.draw.bool(0.3):
        optional.append(g.weight((dirs, batch, hidden)))
    while optional and not optional[-1]:
        optional.pop()
    attrs: dict = {"hidden_size": hidden, "direction": direction}
    if name == "GRU":
        attrs["linear_before_reset"] = int(g.draw.bool())
    n_out = 3 if name == "LSTM" else 2
    g.node(name, ins + optional, n_out=n_out, keep=n_out, **attrs)
    return True


def _subgraph(g: Graph, nodes: list[onnx.NodeProto], inputs: list, outputs: list) -> onnx.GraphProto:
    return helper.make_graph(nodes, g.name("body"), inputs, outputs)


@op("If")
def _if(g: Graph, name: str) -> bool:
    """If on a condition computed at run time (the sign of a sum, or a fed boolean); the branches read
    outer-scope tensors and give outputs of one shape."""
    x = g.pick(rank_max=4)
    if x is None:
        return False
    if g.draw.bool(0.5):
        (total,) = g.node("ReduceSum", [x.name], keep=0, keepdims=0)
        (cond,) = g.node("Greater", [total, g.const(np.float32(0))], keep=0)
    else:
        cond = g.int_input(np.array(g.draw.bool()))
    then_out, else_out = g.name("then"), g.name("else")
    then_nodes = [helper.make_node(g.draw.choice(["Tanh", "Neg", "Relu"]), [x.name], [then_out])]
    else_nodes = [helper.make_node("Mul", [x.name, g.const(np.float32(g.draw.float(-2, 2)))], [else_out])]
    shape = list(x.shape)
    then_branch = _subgraph(g, then_nodes, [], [helper.make_tensor_value_info(then_out, F32, shape)])
    else_branch = _subgraph(g, else_nodes, [], [helper.make_tensor_value_info(else_out, F32, shape)])
    g.node(name, [cond], then_branch=then_branch, else_branch=else_branch)
    return True


@op("Loop")
def _loop(g: Graph, name: str) -> bool:
    """Loop with a constant or fed trip count and a condition that stays true: v <- tanh(v * a + x) carried
    (x from the outer scope), each iteration's v stacked as a scan output."""
    x = g.pick(rank_max=3, pred=lambda t: math.prod(t.shape) <= 64)
    if x is None:
        return False
    shape = list(x.shape)
    trips = g.ints(g.draw.int(0, 4))
    i, c_in, v_in = g.name("iter"), g.name("cond"), g.name("v")
    c_out, scaled, summed, v_out, stacked = (g.name(n) for n in ("cond_out", "scaled", "summed", "v_out", "stack"))
    body = _subgraph(
        g,
        [
            helper.make_node("Identity", [c_in], [c_out]),
            helper.make_node("Mul", [v_in, g.const(np.float32(g.draw.float(-1, 1)))], [scaled]),
            helper.make_node("Add", [scaled, x.name], [summed]),
            helper.make_node("Tanh", [summed], [v_out]),
            helper.make_node("Identity", [v_out], [stacked]),
        ],
        [
            helper.make_tensor_value_info(i, TensorProto.INT64, []),
            helper.make_tensor_value_info(c_in, TensorProto.BOOL, []),
            helper.make_tensor_value_info(v_in, F32, shape),
        ],
        [
            helper.make_tensor_value_info(c_out, TensorProto.BOOL, []),
            helper.make_tensor_value_info(v_out, F32, shape),
            helper.make_tensor_value_info(stacked, F32, None),
        ],
    )
    g.node(name, [trips, g.const(np.array(True)), x.name], n_out=2, keep=1, body=body)
    return True


@op("Scan")
def _scan(g: Graph, name: str) -> bool:
    """Scan over axis 0 of a tensor: a running sum as the state, each step's state times a constant as
    the scan output."""
    x = g.pick(rank_min=1, rank_max=3, pred=lambda t: t.shape[0] <= 6)
    if x is None:
        return False
    row = list(x.shape[1:])
    s_in, x_t, s_out, y_t = (g.name(n) for n in ("state", "row", "state_out", "y"))
    body = _subgraph(
        g,
        [
            helper.make_node("Add", [s_in, x_t], [s_out]),
            helper.make_node("Mul", [s_out, g.const(np.float32(g.draw.float(-2, 2)))], [y_t]),
        ],
        [helper.make_tensor_value_info(s_in, F32, row), helper.make_tensor_value_info(x_t, F32, row)],
        [helper.make_tensor_value_info(s_out, F32, row), helper.make_tensor_value_info(y_t, F32, row)],
    )
    g.node(name, [g.weight(tuple(row)), x.name], n_out=2, keep=2, body=body, num_scan_inputs=1)
    return True


@op("DynamicQuantizeLinear")
def _dynamic_quantize(g: Graph, name: str) -> bool:
    """DynamicQuantizeLinear, then DequantizeLinear back to float (the round trip's error is the
    quantization's, which both sides must make alike)."""
    x = g.pick()
    if x is None:
        return False
    y, scale, zero = g.node(name, [x.name], n_out=3, keep=0)
    g.node("DequantizeLinear", [y, scale, zero])
    return True


@op("MatMulInteger", "ConvInteger")
def _integer_product(g: Graph, name: str) -> bool:
    """A float tensor quantized by DynamicQuantizeLinear, times constant uint8 weights with a zero point
    (MatMulInteger on [m, k], ConvInteger on NCHW), the int32 result cast back to float."""
    x = g.pick(rank_min=2, rank_max=2) if name == "MatMulInteger" else _nchw(g)
    if x is None:
        return False
    rng = np.random.default_rng(g.draw.int(0, 2**31 - 1))
    y, _scale, zero = g.node("DynamicQuantizeLinear", [x.name], n_out=3, keep=0)
    if name == "MatMulInteger":
        w = rng.integers(0, 256, (x.shape[-1], g.draw.int(1, 6))).astype("uint8")
        attrs: dict = {}
    else:
        kh, kw = g.draw.int(1, min(3, x.shape[2])), g.draw.int(1, min(3, x.shape[3]))
        w = rng.integers(0, 256, (g.draw.int(1, 3), x.shape[1], kh, kw)).astype("uint8")
        attrs = {"strides": [g.draw.int(1, 2), g.draw.int(1, 2)]}
    w_zero = g.const(np.array(rng.integers(0, 256), "uint8"))
    (product,) = g.node(name, [y, g.const(w), zero, w_zero], keep=0, **attrs)
    g.node("Cast", [product], to=F32)
    return True


# =================================================================================================
# Whole graphs and batches
# =================================================================================================
@dataclasses.dataclass
class Case:
    """One graph: a model whose outputs are its leaves, the feeds, and each output's depth."""

    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    depths: dict[str, int]

    def feeds_of(self, model: onnx.ModelProto) -> dict[str, np.ndarray]:
        """The feeds of ``model``'s inputs (``model``: this case's model or a part of it)."""
        return {i.name: self.feeds[i.name] for i in model.graph.input if i.name in self.feeds}


def draw_graph(draw: Draw, prefix: str, max_nodes: int, vocabulary: list[str] | None = None) -> Case:
    g = Graph(prefix, draw)
    rank = draw.int(0, 4)
    g.add_input(tuple(draw.int(1, 5) for _ in range(rank)))
    if draw.bool(0.4):
        g.add_input(tuple(draw.int(1, 5) for _ in range(draw.int(1, 4))))
    names = sorted(vocabulary or VOCABULARY)
    target = draw.int(2, max_nodes)
    for _ in range(target * 3):
        if len(g.nodes) >= target:
            break
        before = len(g.nodes)
        if VOCABULARY[draw.choice(names)](g) and len(g.nodes) > before:
            g.settle(before)
    outs = g.outputs() or [t for t in g.pool if t.depth > 0][-1:]
    if not outs:  # nothing applied: one Identity keeps the case well-formed
        g.node("Identity", [g.pool[0].name])
        g.settle(len(g.nodes) - 1)
        outs = g.outputs()
    return _case(g, outs)


def _case(g: Graph, outs: list[Tensor]) -> Case:
    outputs = [helper.make_tensor_value_info(t.name, F32, list(t.shape)) for t in outs]
    used = {i for n in g.nodes for i in reads(n)}
    inputs = [v for v in g.inputs if v.name in used]
    feeds = {v.name: g.feeds[v.name] for v in inputs}
    graph = helper.make_graph(g.nodes, "fuzz", inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return Case(model, feeds, {t.name: t.depth for t in outs})


def merge(cases: list[Case]) -> Case:
    """Independent graphs (disjoint names) as one multi-output model: one compilation for all."""
    nodes, inits, inputs, outputs, feeds, depths = [], [], [], [], {}, {}
    for c in cases:
        g = c.model.graph
        nodes += g.node
        inits += g.initializer
        inputs += g.input
        outputs += g.output
        feeds.update(c.feeds)
        depths.update(c.depths)
    graph = helper.make_graph(nodes, "fuzz_batch", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return Case(model, feeds, depths)


# =================================================================================================
# Running both sides and comparing
# =================================================================================================
def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], str]:
    """onnxruntime's outputs (``"onnxruntime"``), or onnx's ReferenceEvaluator's where onnxruntime has
    no kernel for an operator (``"reference"``)."""
    import onnxruntime as ort

    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as err:
        if "NOT_IMPLEMENTED" not in str(err) and "not implemented" not in str(err).lower():
            raise
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)], "reference"
    return session.run(None, feeds), "onnxruntime"


def tolerance(dtype: np.dtype, depth: int) -> tuple[float, float]:
    """(rtol, atol) for an output ``depth`` nodes from the inputs: float32 results may drift by a few
    ulps per node (other summation orders, other transcendental approximations), so the bound grows
    with the depth; integers and booleans must be exact."""
    if np.dtype(dtype).kind not in "fc":
        return 0.0, 0.0
    eps = float(np.finfo(dtype).eps)
    scale = 64 * eps * (1 + depth)  # 7.6e-6 per node for float32
    return scale * 4, scale


def mismatch(ref: np.ndarray, got: np.ndarray, depth: int) -> np.ndarray | str:
    """Where ``got`` differs from ``ref`` (a boolean mask: NaN or infinity placement, values beyond
    the tolerance), or why they cannot be compared element by element (shape, dtype)."""
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape:
        return f"shape {got.shape} != reference {ref.shape}"
    if ref.dtype != got.dtype:
        return f"dtype {got.dtype} != reference {ref.dtype}"
    if ref.dtype.kind not in "fc":
        return ref != got
    rtol, atol = tolerance(ref.dtype, depth)
    r, x = ref.astype("float64"), got.astype("float64")
    nan = np.isnan(r) != np.isnan(x)
    inf = (np.isinf(r) | np.isinf(x)) & ~(np.isnan(r) | np.isnan(x)) & (r != x)
    finite = np.isfinite(r) & np.isfinite(x)
    # Values are compared against the output's own scale too: a sum that cancels keeps the rounding
    # error of its largest terms.
    magnitude = max(1.0, float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)))
    with np.errstate(all="ignore"):
        far = finite & (np.abs(r - x) > atol * magnitude + rtol * np.abs(r))
    return nan | inf | far


def differs(ref: np.ndarray, got: np.ndarray, depth: int, also: np.ndarray | None = None) -> str | None:
    """Why ``got`` is not ``ref`` (counting only elements that differ from ``also`` too, where given),
    or None."""
    bad = mismatch(ref, got, depth)
    if isinstance(bad, str):
        return bad
    if also is not None:
        other = mismatch(also, got, depth)
        if not isinstance(other, str):
            bad = bad & other
    if not bad.any():
        return None
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return (
        f"{int(bad.sum())} of {bad.size} elements differ, first at {list(at)}: got {got[at]!r}, reference {ref[at]!r}"
    )


@dataclasses.dataclass
class Outcome:
    """``ok``; ``differs`` (a silent wrong answer: the failure this fuzzer hunts); ``ambiguous`` (we
    differ from onnxruntime but agree, at every differing element, with onnx's reference evaluator or
    with the operators' definition, ``definition``: the oracles disagree, or rounding and NaN rules the
    spec leaves open decide); ``refused`` (we
    raised NNAdapterError where the reference ran: unsupported or invalid, not silent); ``invalid``
    (the reference refused the model: a generator slip, not counted); ``error`` (any other exception
    of ours: a failure)."""

    status: str
    detail: str = ""
    output: str | None = None


def run_case(case: Case) -> dict[str, Outcome]:
    """Every output of ``case`` -> its outcome (one compilation, one run on each side)."""
    import nnadapter_tvm as nna

    names = [o.name for o in case.model.graph.output]
    try:
        want, _ = reference(case.model, case.feeds)
    except Exception as err:
        return {n: Outcome("invalid", _line(err)) for n in names}
    try:
        # Host fallback on, as applications meet it through nnadapter_tvm.onnxruntime: what no device
        # runs goes to the host, whose run-time checks are fuzzed too.
        got = nna.Predictor(case.model, host_fallback=True).run(case.feeds)
    except nna.NNAdapterError as err:
        # TVM failing to build a valid model is our failure, not a refusal.
        status = "error" if err.code == nna.ResultCode.DEVICE_INTERNAL_ERROR else "refused"
        return {n: Outcome(status, _line(err)) for n in names}
    except Exception as err:
        import traceback

        where = traceback.extract_tb(err.__traceback__)[-1]
        at = f" at {Path(where.filename).name}:{where.lineno}"
        return {n: Outcome("error", f"{type(err).__name__}: {_line(err)}{at}") for n in names}
    result = {}
    second: list | None = None
    third: list | None = None
    for i, (name, r, x) in enumerate(zip(names, want, got)):
        depth = case.depths.get(name, 1)
        why = differs(r, x, depth)
        if not why:
            result[name] = Outcome("ok")
            continue
        if second is None:
            second = _second_opinion(case)
        sided = None
        if second and second[i] is not None and differs(r, x, depth, also=second[i]) is None:
            # Wherever we differ from onnxruntime, onnx's reference evaluator sides with us: the two
            # oracles disagree, the spec leaves it open (Clip's missing bound, Hardmax of NaN).
            sided = "onnx's reference evaluator"
        else:
            # The third opinion, only where the first two disagree with us (it costs a float64 run).
            if third is None:
                third = definition(case, second)
            if third and third[i] is not None and differs(r, x, depth, also=third[i]) is None:
                sided = DEFINITION
        if sided:
            result[name] = Outcome("ambiguous", f"onnxruntime: {why}; {sided} agrees with us there", name)
        else:
            result[name] = Outcome("differs", why, name)
    return result


def _second_opinion(case: Case) -> list:
    """onnx's ReferenceEvaluator's outputs (None for one it cannot compute), or [] where it computes none.
    Where it cannot run the whole model (one node it cannot evaluate on these values), each output is
    asked again on the part of the graph it depends on."""
    from onnx.reference import ReferenceEvaluator

    def evaluate(model: onnx.ModelProto) -> list | None:
        try:
            with np.errstate(all="ignore"):
                return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, case.feeds_of(model))]
        except Exception:
            return None

    whole = evaluate(case.model)
    if whole is not None:
        return whole
    each = []
    for output in case.model.graph.output:
        alone = evaluate(_ancestors(case.model, output.name))
        each.append(None if alone is None else alone[0])
    return each if any(v is not None for v in each) else []


# =================================================================================================
# The third opinion: the operators' definition, as onnx's evaluator computes it in float64
# =================================================================================================
DEFINITION = "the definition (onnx's reference evaluator in float64, with our documented NaN rules)"
# The operators whose NaN rule, documented in docs/reliability.md, is numpy's (a NaN anywhere in a window
# or row gives NaN, IEEE 754-2019 maximum/minimum) where onnxruntime skips NaN and onnx's evaluator skips
# it unless it comes first in a window.  ArgMax/ArgMin/Hardmax (the first NaN's index), TopK (NaN ranks
# above +inf), Max/Min, Clip and Relu already follow numpy in the evaluator.
NAN_PROPAGATING = ("MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin")
F64 = TensorProto.DOUBLE


def _float64_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    """``t`` as float64 if it is float32 (the values widened exactly: NaN, infinities and signs kept)."""
    if t.data_type != F32:
        return t
    return numpy_helper.from_array(numpy_helper.to_array(t).astype("float64"), t.name)


def _float64_type(tp: onnx.TypeProto) -> None:
    which = tp.WhichOneof("value")
    if which == "tensor_type" and tp.tensor_type.elem_type == F32:
        tp.tensor_type.elem_type = F64
    elif which == "sequence_type":
        _float64_type(tp.sequence_type.elem_type)
    elif which == "optional_type":
        _float64_type(tp.optional_type.elem_type)


def _float64_graph(g: onnx.GraphProto) -> None:
    for v in [*g.input, *g.output, *g.value_info]:
        _float64_type(v.type)
    for t in g.initializer:
        t.CopyFrom(_float64_tensor(t))
    for node in g.node:
        for attr in list(node.attribute):
            if attr.type == onnx.AttributeProto.TENSOR:
                attr.t.CopyFrom(_float64_tensor(attr.t))  # Constant's value, ConstantOfShape's value
            elif attr.type == onnx.AttributeProto.GRAPH:
                _float64_graph(attr.g)  # If's branches, Loop's and Scan's bodies
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    _float64_graph(sub)
            if node.op_type == "Cast" and attr.name == "to" and attr.i == F32:
                attr.i = F64  # CastLike follows its converted second input
            if node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
                # A float32 constant by its attribute's kind: the same values as a float64 tensor.
                values = np.array(attr.f if attr.name == "value_float" else list(attr.floats), "float32")
                node.attribute.remove(attr)
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(values.astype("float64"))))


def _float_only(schema: Any, formal: Any) -> bool:
    """Whether ``formal`` (an input or output of ``schema``) takes float32 but not float64."""
    allowed = {formal.type_str}
    for constraint in schema.type_constraints:
        if constraint.type_param_str == formal.type_str:
            allowed = set(constraint.allowed_type_strs)
    return "tensor(float)" in allowed and "tensor(double)" not in allowed


def _keep_float32_operators(g: onnx.GraphProto, opset: int, types: dict[str, int]) -> None:
    """Operators whose definition is float32 only (DynamicQuantizeLinear's input, DequantizeLinear's
    scale and output before opset 19, QuantizeLinear's input) compute in float32 inside the float64 graph:
    their float32 inputs are cast back to float32 before them, their float32 outputs to float64 after
    (a quantization's rounding depends on its scale's precision, so float64 there would be another
    operator).  ``types``: each tensor's elem_type in the float32 model."""
    nodes = []
    for node in g.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                _keep_float32_operators(body, opset, types)
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        except Exception:
            nodes.append(node)
            continue
        before, after = [], []
        for i, name in enumerate(node.input):
            formal = schema.inputs[min(i, len(schema.inputs) - 1)] if schema.inputs else None
            if name and formal is not None and types.get(name) == F32 and _float_only(schema, formal):
                narrow = f"{name}__f32_for_{node.output[0]}"
                before.append(helper.make_node("Cast", [name], [narrow], to=F32))
                node.input[i] = narrow
        for i, name in enumerate(node.output):
            formal = schema.outputs[min(i, len(schema.outputs) - 1)] if schema.outputs else None
            if name and formal is not None and types.get(name, F32) == F32 and _float_only(schema, formal):
                narrow = f"{name}__f32"
                after.append(helper.make_node("Cast", [narrow], [name], to=F64))
                node.output[i] = narrow
        nodes += [*before, node, *after]
    del g.node[:]
    g.node.extend(nodes)


def _elem_types(g: onnx.GraphProto, types: dict[str, int]) -> dict[str, int]:
    """Name -> elem_type of every typed tensor of ``g`` and its bodies (inputs, outputs, value infos,
    initializers)."""
    for v in [*g.input, *g.output, *g.value_info]:
        if v.type.WhichOneof("value") == "tensor_type":
            types[v.name] = v.type.tensor_type.elem_type
    types.update({t.name: t.data_type for t in g.initializer})
    for node in g.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                _elem_types(body, types)
    return types


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` computing in float64: every float32 tensor type (inputs, outputs, value infos),
    initializer, Constant / ConstantOfShape value and Cast target, in the main graph and in every
    If / Loop / Scan body; operators defined for float32 only stay float32 between casts
    (``_keep_float32_operators``)."""
    try:  # the tensors' types, for the operators that stay float32
        typed = onnx.shape_inference.infer_shapes(model)
    except Exception:
        typed = model
    types = _elem_types(typed.graph, {})
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    _float64_graph(wide.graph)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    _keep_float32_operators(wide.graph, opset, types)
    return wide


def max_pool(
    x: np.ndarray,
    kernel_shape=None,
    pads=None,
    strides=None,
    dilations=None,
    ceil_mode=0,
    storage_order=0,
) -> np.ndarray:
    """ONNX MaxPool (explicit pads) from its definition: each output element the maximum of its window,
    padding left out, NaN anywhere in the window giving NaN (numpy's maximum); with ``ceil_mode`` a last
    window that would start in the end padding is dropped, as onnxruntime does."""
    rank = len(kernel_shape)
    spatial = x.shape[2:]
    pads = list(pads or [0] * (2 * rank))
    strides = list(strides or [1] * rank)
    dilations = list(dilations or [1] * rank)
    out_shape, pad_end = [], []
    for i in range(rank):
        span = dilations[i] * (kernel_shape[i] - 1) + 1
        total = spatial[i] + pads[i] + pads[rank + i] - span
        n = (-(-total // strides[i]) if ceil_mode else total // strides[i]) + 1
        if ceil_mode and (n - 1) * strides[i] >= spatial[i] + pads[i]:
            n -= 1
        out_shape.append(n)
        pad_end.append(max((n - 1) * strides[i] + span - spatial[i] - pads[i], 0))
    padded = np.pad(
        x,
        [(0, 0), (0, 0)] + [(pads[i], pad_end[i]) for i in range(rank)],
        constant_values=-np.inf,
    )
    result = np.full(x.shape[:2] + tuple(out_shape), -np.inf, x.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel_shape)):
        window = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offsets, dilations, out_shape, strides)
        )
        result = np.maximum(result, padded[(slice(None), slice(None), *window)])
    return result


def nan_propagating_ops(opset: int) -> list[type]:
    """``new_ops`` for onnx's ReferenceEvaluator: its own implementation of each ``NAN_PROPAGATING``
    operator at ``opset``, whose first output is NaN wherever a window or row it reduces holds a NaN
    (found by the same implementation run on the NaN mask)."""
    from onnx.reference.ops import load_op

    def make(op_type: str) -> type:
        base = load_op("", op_type, opset)
        smallest = op_type == "ReduceMin"

        def _run(self, x, *args, **kwargs):
            x = np.asarray(x)
            if op_type == "MaxPool" and len(self.output) == 1 and kwargs.get("auto_pad") in (None, "NOTSET", ""):
                # The evaluator's pool fails on some windows (it pads with NaN, then drops NaN: numpy's
                # max of nothing); this one is the definition, with numpy's maximum propagating NaN.
                return (max_pool(x, **{k: v for k, v in kwargs.items() if k != "auto_pad"}),)
            if x.dtype.kind != "f" or not np.isnan(x).any():
                return base._run(self, x, *args, **kwargs)
            # The evaluator's pools drop NaN and fail on a window of NaN alone (numpy's max of nothing):
            # the numbers' result comes from NaN as the reduction's identity, the NaN from the mask.
            out = base._run(self, np.where(np.isnan(x), np.inf if smallest else -np.inf, x), *args, **kwargs)
            nan = np.isnan(x).astype(x.dtype)
            # The max of the mask (the min of its negation for ReduceMin) is positive where a NaN is.
            hit = base._run(self, -nan if smallest else nan, *args, **kwargs)[0]
            hit = -hit if smallest else hit
            first = np.where(hit > 0, np.array(np.nan, out[0].dtype), out[0])
            return (first, *out[1:])

        schema = onnx.defs.get_schema(op_type, opset)
        return type(op_type, (base,), {"op_domain": "", "_run": _run, "op_schema": schema})

    return [make(op) for op in NAN_PROPAGATING] + [_lrn_op(opset), _dynamic_quantize_op(opset)] + _dequantize_op(opset)


def _dequantize_op(opset: int) -> list[type]:
    """DequantizeLinear below opset 19, which onnx's evaluator does not implement (it has 19 onward, the
    same formula (x - zero_point) * scale with more types): without it no output after a
    DynamicQuantizeLinear round trip had a second or third opinion."""
    from onnx.reference.ops import load_op

    if opset >= 19:
        return []
    base = load_op("", "DequantizeLinear", 19)
    schema = onnx.defs.get_schema("DequantizeLinear", opset)
    return [type("DequantizeLinear", (base,), {"op_domain": "", "op_schema": schema})]


def _dynamic_quantize_op(opset: int) -> type:
    """DynamicQuantizeLinear with our documented NaN rule (docs/reliability.md): NaN left out of the range
    (numpy's nanmin/nanmax), a NaN element quantized to 0, as onnxruntime does in most SIMD lanes (its
    range depends on the lane a NaN falls in; onnx's evaluator gives a NaN scale)."""
    from onnx.reference.ops import load_op

    base = load_op("", "DynamicQuantizeLinear", opset)

    def _run(self, x):
        x = np.asarray(x)
        nan = np.isnan(x)
        y, scale, zero_point = base._run(self, np.where(nan, 0, x).astype(x.dtype))
        return np.where(nan, np.zeros_like(y), y), scale, zero_point

    schema = onnx.defs.get_schema("DynamicQuantizeLinear", opset)
    return type("DynamicQuantizeLinear", (base,), {"op_domain": "", "_run": _run, "op_schema": schema})


def _lrn_op(opset: int) -> type:
    """LRN from its definition: onnx's evaluator loops over the batch instead of the channels (channels
    past the batch size keep a square sum of 0), and onnxruntime's running sum gives NaN once a channel
    outside the window squares to inf."""
    from onnx.reference.ops import load_op

    base = load_op("", "LRN", opset)

    def _run(self, x, alpha=None, beta=None, bias=None, size=None):
        x = np.asarray(x)
        square_sum = np.zeros_like(x)
        channels = x.shape[1]
        for c in range(channels):
            begin, end = max(0, c - (size - 1) // 2), min(channels, c + -(-(size - 1) // 2) + 1)
            square_sum[:, c] = np.sum(x[:, begin:end] ** 2, axis=1)
        return ((x / (bias + (alpha / size) * square_sum) ** beta).astype(x.dtype),)

    return type("LRN", (base,), {"op_domain": "", "_run": _run, "op_schema": onnx.defs.get_schema("LRN", opset)})


def definition(case: Case, second: list | None = None) -> list:
    """Each output as the operators' definition gives it: onnx's ReferenceEvaluator on ``case`` converted
    to float64 (``to_float64``), with the max family propagating NaN (``nan_propagating_ops``), rounded
    back to each output's type; where the evaluator cannot run an output's part in float64, the float32
    second opinion (``second``) stands in; None where neither has it."""
    from onnx.reference import ReferenceEvaluator

    opset = next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    new_ops = nan_propagating_ops(opset)
    types = [helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in case.model.graph.output]

    def evaluate(model: onnx.ModelProto) -> list | None:
        feeds = {k: (v.astype("float64") if v.dtype == np.float32 else v) for k, v in case.feeds_of(model).items()}
        try:  # a model the conversion or the evaluator cannot handle leaves the float32 opinion in place
            wide = to_float64(model)
            with np.errstate(all="ignore"):
                return [np.asarray(v) for v in ReferenceEvaluator(wide, new_ops=new_ops).run(None, feeds)]
        except Exception:
            return None

    values = evaluate(case.model)
    if values is None:
        values = [
            (lambda alone: None if alone is None else alone[0])(evaluate(_ancestors(case.model, o.name)))
            for o in case.model.graph.output
        ]
    result = []
    for i, (value, dtype) in enumerate(zip(values, types)):
        if value is None:
            result.append(second[i] if second else None)
            continue
        with np.errstate(all="ignore"):
            result.append(value.astype(dtype) if value.dtype != dtype else value)
    return result


def run_graphs(cases: list[Case]) -> list[tuple[Case, dict[str, Outcome]]]:
    """Each case's outcomes, from one compilation of all of them merged; where the merged model as a
    whole is refused, invalid or fails (one graph's operator can do that to all), case by case."""
    outcomes = run_case(merge(cases)) if len(cases) > 1 else {}
    whole = {o.status for o in outcomes.values()} & {"refused", "invalid", "error"}
    results = []
    for case in cases:
        names = [o.name for o in case.model.graph.output]
        mine = {n: outcomes[n] for n in names} if outcomes and not whole else None
        if mine is None or any(o.status == "differs" for o in mine.values()):
            # Alone, too, where the batch differs: onnx's evaluator, the second opinion, runs the whole merged
            # model, and one graph it cannot run (LRN of size 1) would leave every other graph without it.
            mine = run_case(case)
        results.append((case, mine))
    return results


def _line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return (" ".join(lines[:3]) if lines else type(err).__name__)[:400]


# =================================================================================================
# Minimizing: the first node whose output differs while its inputs agree, alone
# =================================================================================================
def _ancestors(model: onnx.ModelProto, output: str) -> onnx.ModelProto:
    """``model`` cut down to what ``output`` depends on, ``output`` its only output."""
    producer = {o: n for n in model.graph.node for o in n.output}
    keep, stack = set(), [output]
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if node is not None and id(node) not in keep:
            keep.add(id(node))
            stack.extend(reads(node))  # a body's outer-scope reads too (If/Loop/Scan)
    nodes = [n for n in model.graph.node if id(n) in keep]
    used = {i for n in nodes for i in reads(n)}
    out = [o for o in model.graph.output if o.name == output] or [helper.make_empty_tensor_value_info(output)]
    graph = helper.make_graph(
        nodes,
        model.graph.name,
        [i for i in model.graph.input if i.name in used],
        out,
        initializer=[i for i in model.graph.initializer if i.name in used],
    )
    m = helper.make_model(graph, opset_imports=model.opset_import)
    m.ir_version = model.ir_version
    return m


def _value_info(name: str, array: np.ndarray, symbolic: bool = False) -> onnx.ValueInfoProto:
    dims: list = list(array.shape)
    if symbolic and dims:
        dims[0] = f"N{dims[0]}"
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), dims)


def minimize(case: Case, output: str, status: str = "differs") -> Case:
    """The smallest case that still fails (``status``: differs, or error): the first node (in order)
    that fails alone on the reference's values of its inputs; else the ancestors of ``output``.  An
    error fails the whole compilation, so every node of the graph is a suspect there."""
    model = _ancestors(case.model, output) if status != "error" else case.model
    feeds = {i.name: case.feeds[i.name] for i in model.graph.input}
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    # Every intermediate as an output, on the reference side only: its values feed the single-node cases.
    everything = onnx.ModelProto()
    everything.CopyFrom(model)
    del everything.graph.output[:]
    names = [o for n in model.graph.node for o in n.output if o]
    everything.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in names)
    try:
        values = dict(zip(names, reference(everything, feeds)[0]))
    except Exception:
        values = {}
    values.update(feeds)
    if values:
        # A node that fails the same way first; else (a difference) one the oracles disagree on,
        # as an open bug the spec decides may be (Clip's default bounds).
        for wanted in (status, "ambiguous") if status == "differs" else (status,):
            for node in model.graph.node:
                single = _single(model, node, values, inits, wanted)
                if single is not None:
                    return single
    return Case(model, feeds, {output: case.depths.get(output, 1)})


def node_case(
    model: onnx.ModelProto, node: onnx.NodeProto, values: dict, inits: dict, symbolic: bool = False
) -> Case | None:
    """``node`` of ``model`` alone, fed ``values`` of its inputs (``inits``: the model's initializers it
    reads), its outputs typed as ``values`` holds them (leading dims as dim_params with ``symbolic``);
    None where an input's value is missing."""
    if not all(i in values or i in inits or not i for i in node.input):
        return None
    ins = [i for i in node.input if i and i not in inits]
    single_inits = [numpy_helper.from_array(inits[i], i) for i in node.input if i in inits]
    outs = [o for o in node.output if o and o in values]
    graph = helper.make_graph(
        [node],
        "minimized",
        [_value_info(i, np.asarray(values[i]), symbolic) for i in ins],
        [_value_info(o, np.asarray(values[o])) for o in outs],
        initializer=single_inits,
    )
    m = helper.make_model(graph, opset_imports=model.opset_import)
    m.ir_version = model.ir_version
    return Case(m, {i: np.asarray(values[i]) for i in ins}, dict.fromkeys(outs, 1))


def _single(model: onnx.ModelProto, node: onnx.NodeProto, values: dict, inits: dict, status: str) -> Case | None:
    """``node`` alone on ``values`` (static inputs, then leading dims as dim_params), if it gives an
    output of ``status`` so."""
    import nnadapter_tvm as nna

    for symbolic in (False, True):
        single = node_case(model, node, values, inits, symbolic)
        if single is None:
            return None
        try:
            outcome = run_case(single)
        except nna.NNAdapterError:
            continue
        if any(o.status == status for o in outcome.values()):
            return single
    return None


# =================================================================================================
# Differences that are not wrong answers
# =================================================================================================
# Operators whose products, squares or sums of inputs near the float32 maximum overflow in one evaluation
# order and not in another (onnxruntime's MLAS fuses each product into its sum; ours rounds some first).
PRODUCT_OPS = {
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "ReduceProd",
    "ConvInteger",
    "MatMulInteger",
    # Sums not accumulated in float64 (the average pools, variadic Sum/Mean): terms near 3e38 overflow
    # in one order, before an infinite term is met, and not in another (ours NaN, the exact sum -inf).
    "AveragePool",
    "Sum",
    "Mean",
    # Squares: values above 1.8e19 square past float32's range (the variance, the L2 norm).
    "InstanceNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "LpNormalization",
    "ReduceL2",
    "ReduceSumSquare",
}


# Operators that are sums of products (of one term for the plain sums): their float32 result may differ
# from another order's by the standard rounding-error bound, n * u * (the same sums over |terms|).
SUMMING_OPS = {
    "ReduceSum",
    "ReduceMean",
    "GlobalAveragePool",
    "AveragePool",
    "MatMul",
    "Gemm",
    "Conv",
    "ConvTranspose",
    "Sum",
    "Mean",
}


def ill_conditioned(case: Case) -> bool:
    """Whether ``case`` (a minimized, one-node difference) is a sum whose terms cancel: at every
    differing element, ours and onnxruntime's are finite and differ by no more than the rounding-error
    bound of a float32 sum in any order, n * 2^-24 * S (n: the most terms an output can have, S: the
    same operator on the terms' magnitudes, |inputs|, computed in float64).  Such an output has no
    float32 answer independent of the order (a mean of -3e38, +3e38 and small values is whatever the
    small values sum to after the large ones cancel, or 0 where they were absorbed); counted apart from
    the differences, never among the matches (docs/reliability.md)."""
    from onnx.reference import ReferenceEvaluator

    nodes = case.model.graph.node
    if len(nodes) != 1 or nodes[0].op_type not in SUMMING_OPS:
        return False
    import nnadapter_tvm as nna

    want, _ = reference(case.model, case.feeds)
    got = nna.Predictor(case.model, host_fallback=True).run(case.feeds)
    magnitudes = onnx.ModelProto()
    magnitudes.CopyFrom(case.model)
    for init in magnitudes.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype.kind == "f":
            init.CopyFrom(numpy_helper.from_array(np.abs(array), init.name))
    for attr in magnitudes.graph.node[0].attribute:
        if attr.name in ("alpha", "beta"):
            attr.f = abs(attr.f)
    feeds = {k: (np.abs(v).astype("float64") if v.dtype.kind == "f" else v) for k, v in case.feeds.items()}
    try:
        with np.errstate(all="ignore"):
            bound_of = ReferenceEvaluator(to_float64(magnitudes)).run(None, feeds)
    except Exception:
        return False
    terms = max(np.asarray(v).size for v in case.feeds.values())
    terms = max([terms] + [numpy_helper.to_array(i).size for i in case.model.graph.initializer])
    for r, x, s in zip(want, got, bound_of):
        bad = mismatch(r, x, 1)  # at the output's own precision (float32's tolerance)
        if isinstance(bad, str):
            return False
        r, x, s = np.asarray(r, "float64"), np.asarray(x, "float64"), np.asarray(s, "float64")
        if not bad.any():
            continue
        if not (np.isfinite(r[bad]).all() and np.isfinite(x[bad]).all()):
            return False
        if not (np.abs(r[bad] - x[bad]) <= terms * 2.0**-24 * s[bad]).all():
            return False
    return True


def locally_correct(case: Case) -> bool:
    """Whether ``case`` (a minimized chain of several nodes, none differing alone on the reference's
    values) has every node right on *our* values of its inputs: our intermediates are computed, each
    node is run by the reference on them, and its output matches ours within the tolerance.  Then the
    difference is upstream differences within the tolerance amplified downstream (a last-ulp difference
    of a Sigmoid flipping a DynamicQuantizeLinear rounding, then multiplied by MatMulInteger's weights),
    no node is wrong; counted apart from the differences (docs/reliability.md)."""
    import nnadapter_tvm as nna

    nodes = list(case.model.graph.node)
    if len(nodes) < 2:
        return False
    everything = onnx.ModelProto()
    everything.CopyFrom(case.model)
    names = [o for n in nodes for o in n.output if o]
    del everything.graph.output[:]
    everything.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in names)
    try:
        inferred = onnx.shape_inference.infer_shapes(everything)
        typed = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
        del everything.graph.output[:]
        everything.graph.output.extend(typed[o] for o in names)
        ours = dict(zip(names, nna.Predictor(everything, host_fallback=True).run(case.feeds)))
    except Exception:
        return False
    values = {**case.feeds, **ours}
    inits = {i.name: numpy_helper.to_array(i) for i in case.model.graph.initializer}
    for node in nodes:
        single = node_case(case.model, node, values, inits)
        if single is None:
            return False
        try:
            want, _ = reference(single.model, single.feeds)
        except Exception:
            return False
        outs = [o.name for o in single.model.graph.output]
        exact: list | None = None
        for i, (name, r) in enumerate(zip(outs, want)):
            if _close_elementwise(np.asarray(r), np.asarray(ours[name])):
                continue
            # onnxruntime's own approximation may be the looser one (its Sigmoid is 7e-5 off at -7.76 and
            # 0 below -30): the node is right if the float64 definition agrees with us.
            exact = definition(single) if exact is None else exact
            if exact and exact[i] is not None and _close_elementwise(np.asarray(exact[i]), np.asarray(ours[name])):
                continue
            if not ill_conditioned(single):  # a sum whose terms cancel has no order-free answer
                return False
    return True


def _close_elementwise(ref, got) -> bool:
    """Each element within 2^-16 of the reference's own magnitude (about 128 float32 ulps) or of float32's
    smallest normal number (results in the denormal range carry fewer digits in any implementation:
    sigmoid(-100) is 0 here, 3.7e-44 in onnxruntime), NaN and infinities in the same places, integers
    equal: stricter than the campaign's tolerance (scaled by the output's largest value), so that a node
    wrong on its small values (tanh(1e-8) = 0, fixed) is not called locally correct."""
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return False
    if ref.dtype.kind not in "fc":
        return bool(np.array_equal(ref, got))
    r, x = ref.astype("float64"), got.astype("float64")
    if not np.array_equal(np.isnan(r), np.isnan(x)):
        return False
    finite = np.isfinite(r) & np.isfinite(x)
    if not np.array_equal(r[~finite & ~np.isnan(r)], x[~finite & ~np.isnan(r)]):
        return False
    smallest_normal = float(np.finfo("float32").tiny)
    return bool(np.all(np.abs(r[finite] - x[finite]) <= np.maximum(2.0**-16 * np.abs(r[finite]), smallest_normal)))


def float32_range(case: Case) -> bool:
    """Whether ``case`` (a minimized, one-node difference) is one of float32's range: a product operator
    whose inputs hold a finite value of magnitude >= 1e30 beside values whose products overflow float32,
    and whose differing elements are non-finite on one side (ours or onnxruntime's).  Neither runtime is
    exact there (the float64 definition may side with either); counted apart from the differences,
    never among them silently (docs/reliability.md)."""
    nodes = case.model.graph.node
    if len(nodes) != 1 or nodes[0].op_type not in PRODUCT_OPS:
        return False
    values = [np.asarray(v, "float64") for v in case.feeds.values() if np.asarray(v).dtype.kind == "f"]
    values += [
        numpy_helper.to_array(i).astype("float64")
        for i in case.model.graph.initializer
        if numpy_helper.to_array(i).dtype.kind == "f"
    ]
    finite = [np.abs(v[np.isfinite(v)]) for v in values]
    if not any(f.size and f.max() >= 1e30 for f in finite):
        return False
    import nnadapter_tvm as nna

    want, _ = reference(case.model, case.feeds)
    got = nna.Predictor(case.model, host_fallback=True).run(case.feeds)
    for r, x in zip(want, got):
        bad = mismatch(r, x, 1)  # at the output's own precision (float32's tolerance)
        if isinstance(bad, str):
            return False
        r, x = np.asarray(r, "float64"), np.asarray(x, "float64")
        if bad.any() and not np.all(~np.isfinite(r[bad]) | ~np.isfinite(x[bad])):
            return False
    return True


def explain(case: Case) -> str | None:
    """Why the difference of ``case`` (a minimized difference) is not a wrong answer, or None: the oracles
    disagree there (``ambiguous``), a product overflowing float32 in one order and not another
    (``float32_range``), a sum whose terms cancel (``ill_conditioned``), or upstream differences within
    the tolerance amplified by nodes each right on its inputs (``amplified``).  Campaigns count these
    apart, CI does not fail on them; anything else that differs is a finding."""
    if {o.status for o in run_case(case).values()} <= {"ok", "ambiguous"}:
        return "ambiguous"
    tests = (("float32_range", float32_range), ("ill_conditioned", ill_conditioned), ("amplified", locally_correct))
    for name, test in tests:
        if test(case):
            return name
    return None


# =================================================================================================
# The corpus: one JSON file per minimized case
# =================================================================================================
def _encode(array: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode()


def _decode(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def describe(model: onnx.ModelProto) -> list[str]:
    """The nodes, one line each (op, inputs -> outputs, attributes): what a reader of the corpus sees."""
    lines = []
    for n in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
        lines.append(f"{n.op_type}({', '.join(n.input)}) -> {', '.join(n.output)} {attrs if attrs else ''}".strip())
    return lines


def signature(case: Case, status: str, detail: str) -> str:
    """What makes two findings one bug: the (minimized) case's operators and the outcome's kind."""
    import re

    ops = "+".join(sorted({n.op_type for n in case.model.graph.node}))
    kind = re.sub(r"[^A-Za-z]+", "-", detail.split(":")[0])[:40] if status == "error" else status
    return f"{ops}-{kind}".strip("-")


def save(
    case: Case,
    path: Path,
    why: str,
    bug: str | None = None,
    status: str = "differs",
    oracle_bug: str | None = None,
    expected: dict[str, np.ndarray] | None = None,
) -> None:
    """Write ``case`` as JSON: ``bug`` set marks it an expected failure (the difference is known and
    open, reported to the file's owner; batches that hit its ``signature`` report it as known);
    without it the case must pass.  ``oracle_bug``: the reference is the one that is wrong, and
    ``expected`` (computed from the operator's definition) replaces it when the case is replayed."""
    data = {
        "why": why,
        "bug": bug,
        "oracle_bug": oracle_bug,
        "expected": {k: _encode(v) for k, v in (expected or {}).items()},
        "signature": signature(case, status, why),
        "nodes": describe(case.model),
        "model": base64.b64encode(case.model.SerializeToString()).decode(),
        "feeds": {k: _encode(v) for k, v in case.feeds.items()},
        "depths": case.depths,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def load(path: Path) -> tuple[Case, dict]:
    data = json.loads(path.read_text())
    model = onnx.load_from_string(base64.b64decode(data["model"]))
    case = Case(model, {k: _decode(v) for k, v in data["feeds"].items()}, data.get("depths", {}))
    return case, data
