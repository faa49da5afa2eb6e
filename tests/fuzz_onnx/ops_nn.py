"""The ONNX fuzzer's builders for the network operators: MatMul/Gemm, Conv/ConvTranspose, pools,
normalizations, LRN, DepthToSpace, Cast round trips, the recurrent layers (LSTM, GRU, RNN), control
flow (If, Loop, Scan) and the dynamic quantization extensions (DynamicQuantizeLinear, MatMulInteger,
ConvInteger) (part of tests/fuzz_onnx/).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from .graph import F32, Graph, Tensor, _axis, op


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
