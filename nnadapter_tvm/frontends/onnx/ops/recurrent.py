"""Recurrent layers: LSTM, GRU, RNN -> nnadapter-tvm's LSTM, GRU, RNN extension operations.

The operations take ONNX's operands in ONNX's order, attributes as constant operands (direction and
activations as RecurrentDirection / RecurrentActivation codes).  Activation alpha/beta are resolved
here, one value per activation, as onnxruntime reads them: each activation that takes an alpha (beta)
consumes the next value of ``activation_alpha`` (``activation_beta``); when the list runs out,
LeakyRelu's alpha is 0.01, HardSigmoid's 0.2 / 0.5, Elu's 1.0, and other activations' 0.
"""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import RecurrentActivation as A
from nnadapter_tvm.types import RecurrentDirection

_ACTIVATIONS = {
    "relu": A.RELU,
    "tanh": A.TANH,
    "sigmoid": A.SIGMOID,
    "affine": A.AFFINE,
    "leakyrelu": A.LEAKY_RELU,
    "thresholdedrelu": A.THRESHOLDED_RELU,
    "scaledtanh": A.SCALED_TANH,
    "hardsigmoid": A.HARD_SIGMOID,
    "elu": A.ELU,
    "softsign": A.SOFTSIGN,
    "softplus": A.SOFTPLUS,
}
# Which activations read alpha and beta, and their defaults (onnxruntime's rnn_helpers tables).
_USES = {A.AFFINE: (True, True), A.LEAKY_RELU: (True, False), A.THRESHOLDED_RELU: (True, False)}
_USES |= {A.SCALED_TANH: (True, True), A.HARD_SIGMOID: (True, True), A.ELU: (True, False)}
_DEFAULTS = {A.LEAKY_RELU: (0.01, 0.0), A.HARD_SIGMOID: (0.2, 0.5), A.ELU: (1.0, 0.0)}
_DEFAULT_NAMES = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
_DIRECTIONS = {
    "forward": RecurrentDirection.FORWARD,
    "reverse": RecurrentDirection.REVERSE,
    "bidirectional": RecurrentDirection.BIDIRECTIONAL,
}


def _activations(ctx: NodeContext, op: O, num_dirs: int) -> tuple[list[int], list[float], list[float]]:
    names = ctx.attr("activations", None)
    per = len(_DEFAULT_NAMES[op.name])
    if names is None:
        names = _DEFAULT_NAMES[op.name] * num_dirs
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if len(names) == per and num_dirs == 2:
        names = names * 2  # onnxruntime repeats one direction's list for both
    if len(names) != per * num_dirs:
        ctx.fail(f"activations {names}: expected {per} per direction ({per * num_dirs})")
    alphas = iter(float(v) for v in ctx.attr("activation_alpha", []))
    betas = iter(float(v) for v in ctx.attr("activation_beta", []))
    codes, alpha, beta = [], [], []
    for name in names:
        code = _ACTIVATIONS.get(name.lower())
        if code is None:
            ctx.unsupported(f"activation '{name}' is not one of {sorted(_ACTIVATIONS)}")
        uses_alpha, uses_beta = _USES.get(code, (False, False))
        default_alpha, default_beta = _DEFAULTS.get(code, (0.0, 0.0))
        codes.append(int(code))
        alpha.append(next(alphas, default_alpha) if uses_alpha else 0.0)
        beta.append(next(betas, default_beta) if uses_beta else 0.0)
    return codes, alpha, beta


def _recurrent(ctx: NodeContext, op: O, weights: tuple[Value, Value] | None = None) -> list[Value | None]:
    """``op`` on the node's operands in ONNX's order; ``weights``: W and R in ONNX's layout, in place of inputs
    1 and 2 (com.microsoft's DynamicQuantizeLSTM gives them quantized and transposed)."""
    x = ctx.input(0)
    if x.dtype != np.float32:
        ctx.unsupported(f"{ctx.op_type} of {x.dtype}: the {op.name} operation takes float32")
    if x.shape is not None and len(x.shape) != 3:
        # At import, where a branch that no input reaches (a rank another branch rules out) can be set aside.
        ctx.fail(f"X {x.describe()} must be 3-D ([seq_length, batch, input_size], or batch first with layout 1)")
    direction_name = str(ctx.attr("direction", "forward")).lower()
    if direction_name not in _DIRECTIONS:
        ctx.fail(f"direction '{direction_name}' is not one of {sorted(_DIRECTIONS)}")
    direction = _DIRECTIONS[direction_name]
    num_dirs = 2 if direction == RecurrentDirection.BIDIRECTIONAL else 1
    layout = int(ctx.attr("layout", 0))
    codes, alpha, beta = _activations(ctx, op, num_dirs)
    empty = ctx.f32(np.zeros([0]))

    def opt(i: int) -> Value:
        v = ctx.optional(i)
        return empty if v is None else cast(ctx, v, np.float32)

    seq = ctx.optional(4)
    seq = ctx.i32(np.zeros([0])) if seq is None else cast(ctx, seq, np.int32)
    w, r = weights if weights is not None else (ctx.input(1), ctx.input(2))
    inputs = [x, cast(ctx, w, np.float32), cast(ctx, r, np.float32), opt(3), seq, opt(5)]
    if op == O.LSTM:
        inputs += [opt(6), opt(7)]
    clip = ctx.attr("clip", None)
    inputs += [
        ctx.i32([int(direction)]),
        ctx.i32([layout]),
        ctx.i32(codes),
        ctx.f32(alpha),
        ctx.f32(beta),
        ctx.f32([clip]) if clip is not None else empty,
    ]
    if op == O.LSTM:
        inputs.append(ctx.boolean(bool(ctx.attr("input_forget", 0))))
    if op == O.GRU:
        inputs.append(ctx.boolean(bool(ctx.attr("linear_before_reset", 0))))
    outputs = 3 if op == O.LSTM else 2
    hidden = ctx.attr("hidden_size", None)
    r_hidden = r.shape[2] if r.shape is not None and len(r.shape) == 3 else None
    if hidden is not None and r_hidden is not None and hidden != r_hidden:
        ctx.fail(f"hidden_size {hidden} differs from R {r.describe()} ([directions, gates * hidden, hidden])")
    hidden = hidden if hidden is not None else r_hidden
    shapes = _shapes(x, num_dirs, hidden, layout)
    results = ctx.emit(op, inputs, dtype=np.float32, outputs=outputs)
    for k, value in enumerate(results):
        # Outputs the node does not list (or ONNX did not infer) get the shape the operands give.
        if value.shape is None and shapes[min(k, 1)] is not None:
            value.shape = shapes[min(k, 1)]
    return results


def _shapes(x: Value, num_dirs: int, hidden: int | None, layout: int) -> tuple:
    """(Y, Y_h / Y_c) shapes, None where unknown at import."""
    if x.shape is None or len(x.shape) != 3:
        return None, None
    steps, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    if layout == 0:
        return (steps, num_dirs, batch, hidden), (num_dirs, batch, hidden)
    return (batch, steps, num_dirs, hidden), (batch, num_dirs, hidden)


@onnx_op("LSTM")
def lstm(ctx: NodeContext) -> list[Value | None]:
    """LSTM -> the LSTM extension operation (Y, Y_h, Y_c; peepholes, input_forget, layout 0/1)."""
    return _recurrent(ctx, O.LSTM)


def lstm_with_weights(ctx: NodeContext, w: Value, r: Value) -> list[Value | None]:
    """The LSTM extension operation on the node's operands in ONNX LSTM's order, with W and R (ONNX's layout,
    [directions, 4 * hidden, size]) given in place of inputs 1 and 2."""
    return _recurrent(ctx, O.LSTM, (w, r))


@onnx_op("GRU")
def gru(ctx: NodeContext) -> list[Value | None]:
    """GRU -> the GRU extension operation (Y, Y_h; linear_before_reset)."""
    return _recurrent(ctx, O.GRU)


@onnx_op("RNN")
def rnn(ctx: NodeContext) -> list[Value | None]:
    """RNN -> the RNN extension operation (Y, Y_h)."""
    return _recurrent(ctx, O.RNN)
