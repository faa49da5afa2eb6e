"""Recurrent layers: LSTM, GRU and RNN, nnadapter-tvm's extension operations (codes 1001-1003).

NNAdapter has no recurrent standard operation.  Two routes were open: standard operations inside a
loop that the runtime drives on the host (one VM call per time step, as Paddle Lite runs ``while``
around its subgraphs), or one operation per layer.  A host-driven loop costs a VM call (tens of
microseconds here) per step, more than the step's arithmetic for the sizes real models use (a
64-unit LSTM step is ~33 k multiply-adds, a few microseconds), and it needs the sequence length on
the host.  So each layer is one extension operation, documented as such (as upstream's UNSTACK, XOR
and NON_MAX_SUPPRESSION are), and compiles to two kernels:

- the input projection of every time step at once, ``X[T*B, I] x W^T -> [T*B, D*G*H]`` (plus the
  biases that can be folded in), one MAT_MUL that the default CPU schedules tile and vectorize;
- the recurrence (``recurrent_kernel.py``): one hand-written TIR kernel with a sequential loop over
  time (T symbolic: one compilation serves every length) doing the small recurrent product ``h x R^T``
  (R packed at compile time into blocks of 128 gate rows, each streamed contiguously into 8 AVX-512
  registers of accumulators), the peepholes and the gate nonlinearities, and writing Y, Y_h (and Y_c).
  Directions x batch tiles (1, 2 or 4 rows sharing each weight load) are parallel tasks (a lone row
  can instead split each step over the threads, ``SPLIT_ONE_ROW``, off by default).  The kernel
  carries its own schedule and is marked ``tirx.is_scheduled`` so the default CPU rules leave it.

Semantics are ONNX's (LSTM-7/14, GRU-7/14, RNN-7/14) as onnxruntime runs them: gate order i, o, f, c
(LSTM) and z, r, h (GRU); ``sequence_lens`` steps past a sequence's length leave zeros in Y and keep
the state; reverse reads each sequence backwards within its own length; ``clip`` bounds the inputs
of the gate activations; alpha/beta are one value per activation (the ONNX importer fills
onnxruntime's defaults).  Tanh and Sigmoid use a rational approximation (TVM's fast_tanh, max error ~1e-7), as
onnxruntime's MLAS kernels do, because LLVM scalarizes ``exp`` into libm calls.
"""

from __future__ import annotations

import functools

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import Key, OpArgs
from nnadapter_tvm.op_converters.float32 import F32
from nnadapter_tvm.op_converters.recurrent_kernel import GATES, SCHEDULED, pack_rows, recurrence_ir, register_block
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import RecurrentActivation as A
from nnadapter_tvm.types import RecurrentDirection, ResultCode

# Per operation: its default activations.
_DEFAULT_ACTIVATIONS = {
    O.LSTM: (A.SIGMOID, A.TANH, A.TANH),
    O.GRU: (A.SIGMOID, A.TANH),
    O.RNN: (A.TANH,),
}


def _static(args: OpArgs, i: Key, rank: int, what: str) -> list[int]:
    shape = args.shape(args.tensor(i))
    if len(shape) != rank:
        args.fail(f"must be {rank}-D {what}, got shape {shape}", i)
    if not all(isinstance(v, int) for v in shape):
        args.fail(f"needs a static shape {what}, got {shape}", i, ResultCode.FEATURE_NOT_SUPPORTED)
    return shape


def _check_dims(args: OpArgs, i: Key, shape: list, expected: list, what: str) -> None:
    """Fail naming operand ``i`` unless its (possibly symbolic) ``shape`` matches ``expected``."""
    ok = len(shape) == len(expected) and all(
        not isinstance(a, int) or not isinstance(e, int) or a == e for a, e in zip(shape, expected)
    )
    if not ok:
        shown = ["?" if not isinstance(e, int) else e for e in expected]
        args.fail(f"must have shape {what} = {shown}, got {shape}", i)


def _activations(args: OpArgs, op: O, num_dirs: int) -> list[tuple[int, float, float]]:
    """(code, alpha, beta) per activation: ``num_dirs`` x the operation's count (defaults where
    ``activations`` is absent; alpha and beta, when given, hold one value per activation)."""
    per = len(_DEFAULT_ACTIVATIONS[op])
    n = per * num_dirs
    if not args.has("activations"):
        return [(int(c), 0.0, 0.0) for c in _DEFAULT_ACTIVATIONS[op]] * num_dirs
    codes = args.ints("activations")
    if len(codes) != n:
        message = f"must hold {per} activation(s) per direction ({n} for {num_dirs} direction(s)), got {codes}"
        args.fail(message, "activations")
    valid = {int(c) for c in A}
    for c in codes:
        if c not in valid:
            args.fail(f"activation {c} is not one of {[f'{a.name}={a.value}' for a in A]}", "activations")
    values = []
    for k in ("activation_alpha", "activation_beta"):
        v = [float(x) for x in np.reshape(args.value(k), -1)] if args.has(k) else [0.0] * n
        if len(v) != n:
            args.fail(f"must hold one value per activation ({n}), got {len(v)}", k)
        values.append(v)
    return [(c, a, b) for c, a, b in zip(codes, *values)]


def _recurrent(args: OpArgs, op: O) -> list[relax.Expr]:
    gates = GATES[op]
    direction = args.int("direction", RecurrentDirection.FORWARD)
    if direction not in [int(v) for v in RecurrentDirection]:
        args.fail(f"must be one of {[f'{v.name}={v.value}' for v in RecurrentDirection]}, got {direction}", "direction")
    num_dirs = 2 if direction == RecurrentDirection.BIDIRECTIONAL else 1
    layout = args.int("layout", 0)
    if layout not in (0, 1):
        args.fail(f"must be 0 ([seq, batch, ...]) or 1 ([batch, seq, ...]), got {layout}", "layout")
    acts = _activations(args, op, num_dirs)
    clip = args.float("clip", None)
    if clip is not None and not clip > 0:
        args.fail(f"must be positive, got {clip}", "clip")
    # Each operation's own last operand (GRU and RNN have no input_forget, LSTM and RNN no linear_before_reset).
    input_forget = op == O.LSTM and args.bool("input_forget", False)
    lbr = op == O.GRU and args.bool("linear_before_reset", False)

    x = args.tensor("input")
    x_shape = args.shape(x)
    if len(x_shape) != 3:
        args.fail(
            f"must be 3-D ({'[seq, batch, input]' if layout == 0 else '[batch, seq, input]'}), got {x_shape}", "input"
        )
    batch = x_shape[1] if layout == 0 else x_shape[0]
    w_shape = _static(args, "weight", 3, "[directions, gates * hidden, input]")
    r_shape = _static(args, "recurrence_weight", 3, "[directions, gates * hidden, hidden]")
    hidden = r_shape[2]
    gh = gates * hidden
    size = x_shape[2]
    if not isinstance(size, int):
        # The weight fixes the input size: an input whose last dimension is known only at execution (a
        # host output, a Reshape to a fed shape) is cast to it, checked at execution.
        size = w_shape[2]
        args.record_check(
            tirx.EQ(x_shape[2], tirx.const(size, "int64")),
            f"last dimension {x_shape[2]} must equal the weight's input size {size} at execution",
            "input",
        )
        x = args.match_cast(x, [*x_shape[:2], size])
        x_shape = [*x_shape[:2], size]
    # R first: it sets the hidden size that W is then checked against.
    _check_dims(args, "recurrence_weight", r_shape, [num_dirs, gh, hidden], "[directions, gates * hidden, hidden]")
    _check_dims(args, "weight", w_shape, [num_dirs, gh, size], "[directions, gates * hidden, input]")
    state_shape = [num_dirs, batch, hidden] if layout == 0 else [batch, num_dirs, hidden]
    state_text = "[directions, batch, hidden]" if layout == 0 else "[batch, directions, hidden]"

    w = args.tensor("weight")
    r = args.tensor("recurrence_weight")
    if args.has("bias"):
        bias = args.tensor("bias")
        _check_dims(args, "bias", args.shape(bias), [num_dirs, 2 * gh], "[directions, 2 * gates * hidden]")
        wb = relax.op.strided_slice(bias, axes=[1], begin=[0], end=[gh])
        rb = relax.op.strided_slice(bias, axes=[1], begin=[gh], end=[2 * gh])
        if lbr:
            # Rbh is multiplied by r inside the kernel; Rbz, Rbr fold into the projection.
            fold = np.ones([1, gh], F32)
            fold[:, 2 * hidden :] = 0
            x_bias = relax.op.add(wb, relax.op.multiply(rb, relax.const(fold)))
        else:
            x_bias = relax.op.add(wb, rb)
    else:
        bias, x_bias = None, None

    # The input projection of every step at once: [rows, I] x [I, D*G*H].
    # X stays 3-D: the dense schedule fuses the leading axes itself, where a reshape to [T*B, I] and
    # back was two copy kernels.
    w2 = relax.op.permute_dims(relax.op.reshape(w, [num_dirs * gh, size]), [1, 0])
    xw = relax.op.matmul(x, w2)
    if x_bias is not None:
        xw = relax.op.add(xw, relax.op.reshape(x_bias, [num_dirs * gh]))
    xw = args.emit(xw)
    # GRU (without linear_before_reset) multiplies R's h rows by r * h_prev: a part of its own.
    split = op == O.GRU and not lbr
    parts = [(0, 2 * hidden), (2 * hidden, hidden)] if split else [(0, gh)]
    packed = [args.emit(pack_rows(r, start, count, num_dirs, hidden)) for start, count in parts]

    flags = {"seq": False, "h0": False, "c0": False, "peephole": False, "rbh": False}
    extra = []
    if args.has("sequence_lens"):
        seq = args.raw_tensor("sequence_lens")
        _check_dims(args, "sequence_lens", args.shape(seq), [batch], "[batch]")
        flags["seq"] = True
        extra.append(seq)
    if args.has("initial_h"):
        _check_dims(args, "initial_h", args.shape(args.tensor("initial_h")), state_shape, state_text)
        flags["h0"] = True
        extra.append(args.tensor("initial_h"))
    if op == O.LSTM and args.has("initial_c"):
        _check_dims(args, "initial_c", args.shape(args.tensor("initial_c")), state_shape, state_text)
        flags["c0"] = True
        extra.append(args.tensor("initial_c"))
    if op == O.LSTM and args.has("peephole"):
        peephole = args.tensor("peephole")
        _check_dims(args, "peephole", args.shape(peephole), [num_dirs, 3 * hidden], "[directions, 3 * hidden]")
        flags["peephole"] = True
        extra.append(peephole)
    if lbr and bias is not None:
        flags["rbh"] = True
        extra.append(args.emit(relax.op.strided_slice(bias, axes=[1], begin=[gh + 2 * hidden], end=[2 * gh])))
    flags["linear_before_reset"] = lbr
    flags["parts"] = [(start, count, register_block(count)) for start, count in parts]
    flags["input_forget"] = input_forget

    outputs = 3 if op == O.LSTM else 2
    kernel = functools.partial(
        recurrence_ir,
        op=op,
        hidden=hidden,
        num_dirs=num_dirs,
        direction=direction,
        layout=layout,
        acts=acts,
        clip=clip,
        flags=flags,
    )

    def compute(*tensors: te.Tensor) -> list[te.Tensor]:
        # xw is [T, B, D*G*H] (layout 0) or [B, T, D*G*H]: the kernel reads T and B from it.
        t_, b_ = tensors[0].shape[:2] if layout == 0 else tensors[0].shape[1::-1]
        ys = [t_, num_dirs, b_, hidden] if layout == 0 else [b_, t_, num_dirs, hidden]
        ss = [num_dirs, b_, hidden] if layout == 0 else [b_, num_dirs, hidden]
        return te.extern(
            [ys] + [ss] * (outputs - 1), list(tensors), kernel, dtype=[F32] * outputs, name=op.name.lower()
        )

    result = args.emit_te(
        compute, xw, *packed, *extra, primfunc_name_hint=op.name.lower(), primfunc_attrs={SCHEDULED: True}
    )
    return [args.emit(relax.TupleGetItem(result, i)) for i in range(args.output_count)]


@converter(O.LSTM)
def lstm(args: OpArgs) -> list[relax.Expr]:
    """input X, weight W [D, 4H, I], recurrence_weight R [D, 4H, H], bias B [D, 8H], sequence_lens [B]
    (INT32), initial_h, initial_c, peephole P [D, 3H], direction (RecurrentDirection), layout, activations
    (RecurrentActivation codes f, g, h per direction), activation_alpha, activation_beta, clip,
    input_forget -> output Y, output_h Y_h, output_c Y_c.

    X is [T, B, I] for layout 0 and [B, T, I] for layout 1; Y is [T, D, B, H] / [B, T, D, H], the
    states [D, B, H] / [B, D, H].  Gates in ONNX's order i, o, f, c:
    i = f(Xt Wi + Ht-1 Ri + Pi . Ct-1 + Wbi + Rbi), f likewise with Pf (1 - i under input_forget),
    c = g(Xt Wc + Ht-1 Rc + Wbc + Rbc), Ct = f . Ct-1 + i . c, o = f(Xt Wo + Ht-1 Ro + Po . Ct + Wbo + Rbo),
    Ht = o . h(Ct).  Steps past a sequence's length leave zeros in Y and keep the state.

    Reference: ONNX LSTM (opset 14) as onnxruntime implements it; an nnadapter-tvm extension operation.
    """
    return _recurrent(args, O.LSTM)


@converter(O.GRU)
def gru(args: OpArgs) -> list[relax.Expr]:
    """input X, weight W [D, 3H, I], recurrence_weight R [D, 3H, H], bias B [D, 6H], sequence_lens,
    initial_h, direction, layout, activations (f, g per direction), activation_alpha, activation_beta,
    clip, linear_before_reset -> output Y, output_h Y_h (shapes as LSTM's).

    Gates z, r, h: z = f(Xt Wz + Ht-1 Rz + Wbz + Rbz), r likewise, h = g(Xt Wh + (r . Ht-1) Rh + Rbh + Wbh)
    or, with linear_before_reset, g(Xt Wh + r . (Ht-1 Rh + Rbh) + Wbh); Ht = (1 - z) . h + z . Ht-1.

    Reference: ONNX GRU (opset 14) as onnxruntime implements it; an nnadapter-tvm extension operation.
    """
    return _recurrent(args, O.GRU)


@converter(O.RNN)
def rnn(args: OpArgs) -> list[relax.Expr]:
    """input X, weight W [D, H, I], recurrence_weight R [D, H, H], bias B [D, 2H], sequence_lens,
    initial_h, direction, layout, activations (f per direction), activation_alpha, activation_beta, clip
    -> output Y, output_h Y_h (shapes as LSTM's).  Ht = f(Xt Wi + Ht-1 Ri + Wbi + Rbi).

    Reference: ONNX RNN (opset 14) as onnxruntime implements it; an nnadapter-tvm extension operation.
    """
    return _recurrent(args, O.RNN)
