"""The ONNX fuzzer's builders for the elementwise operators, activations, comparisons (through Where),
IsNaN/IsInf, reductions, ArgMax/ArgMin, the softmax family, CumSum and TopK (part of tests/fuzz_onnx/).

Each builder picks inputs from the float tensors made so far (``g.pick``), draws attributes within
their domains and adds the node (and any constant inputs); ``@op("Name")`` registers it in
``VOCABULARY``.
"""

from __future__ import annotations

import numpy as np

from .graph import F32, Graph, Tensor, _axis, op

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
