"""LSTM, GRU and RNN (nnadapter-tvm's extension operations 1001-1003) against a numpy reference
written from ONNX's formulas (LSTM/GRU/RNN, opset 14), with onnxruntime's reading of the points ONNX
leaves open: steps past ``sequence_lens`` leave zeros in Y and keep the state, reverse reads each
sequence backwards within its own length, ``clip`` bounds every activation's input.  The gate order
is ONNX's (LSTM i, o, f, c; GRU z, r, h).  Each model is compiled once; models whose sequence length
(and batch) is UNKNOWN run at three lengths.
"""

from __future__ import annotations

import numpy as np
import pytest
from oputil import UNKNOWN, Const, In, P, b8, expect_error, f32, i32, rand, run_model

import nnadapter_tvm as nna
from nnadapter_tvm.types import RecurrentActivation as A
from nnadapter_tvm.types import RecurrentDirection as D

OP = nna.OperationType
F = np.float32
# Sums of I + H float32 products per gate, and a rational tanh/sigmoid (|error| ~1e-7).
TOL = {"rtol": 1e-4, "atol": 1e-5}
EMPTY_F32 = Const(None, P.FLOAT32)
EMPTY_I32 = Const(None, P.INT32)
GATES = {OP.LSTM: 4, OP.GRU: 3, OP.RNN: 1}
DEFAULTS = {OP.LSTM: [A.SIGMOID, A.TANH, A.TANH], OP.GRU: [A.SIGMOID, A.TANH], OP.RNN: [A.TANH]}


def act_ref(code: int, x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    x = x.astype(np.float64)
    if code == A.RELU:
        return np.maximum(x, 0)
    if code == A.TANH:
        return np.tanh(x)
    if code == A.SIGMOID:
        return 1 / (1 + np.exp(-x))
    if code == A.AFFINE:
        return alpha * x + beta
    if code == A.LEAKY_RELU:
        return np.where(x >= 0, x, alpha * x)
    if code == A.THRESHOLDED_RELU:
        return np.where(x > alpha, x, 0)
    if code == A.SCALED_TANH:
        return alpha * np.tanh(beta * x)
    if code == A.HARD_SIGMOID:
        return np.clip(alpha * x + beta, 0, 1)
    if code == A.ELU:
        return np.where(x >= 0, x, alpha * (np.exp(x) - 1))
    if code == A.SOFTSIGN:
        return x / (1 + np.abs(x))
    if code == A.SOFTPLUS:
        return np.log1p(np.exp(x))
    raise ValueError(code)


def recurrent_ref(
    op,
    x,
    w,
    r,
    b=None,
    seq=None,
    h0=None,
    c0=None,
    p=None,
    direction=D.FORWARD,
    layout=0,
    acts=None,
    clip=None,
    input_forget=False,
    lbr=False,
):
    """Y, Y_h (, Y_c) of ONNX's LSTM / GRU / RNN, one step at a time in float64.  ``acts``: one
    (code, alpha, beta) per activation of every direction."""
    if layout == 1:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    steps, batch, _ = x.shape
    dirs = 2 if direction == D.BIDIRECTIONAL else 1
    hidden = r.shape[2]
    g = GATES[op]
    per = len(DEFAULTS[op])
    if acts is None:
        acts = [(int(c), 0.0, 0.0) for c in DEFAULTS[op]] * dirs
    b = np.zeros([dirs, 2 * g * hidden], F) if b is None else b
    seq = np.full([batch], steps) if seq is None else np.asarray(seq)
    y = np.zeros([steps, dirs, batch, hidden])
    yh = np.zeros([dirs, batch, hidden])
    yc = np.zeros([dirs, batch, hidden])
    for d in range(dirs):
        reverse = direction == D.REVERSE or d == 1

        def f(k, v, d=d):
            v = np.clip(v, -clip, clip) if clip is not None else v
            code, alpha, beta = acts[d * per + k]
            return act_ref(code, v, alpha, beta)

        wd, rd = w[d].astype(np.float64), r[d].astype(np.float64)
        wb, rb = b[d, : g * hidden].astype(np.float64), b[d, g * hidden :].astype(np.float64)
        for n in range(batch):
            h = np.zeros(hidden) if h0 is None else h0[d, n].astype(np.float64)
            c = np.zeros(hidden) if c0 is None else c0[d, n].astype(np.float64)
            length = int(seq[n])
            for s in range(length):
                t = length - 1 - s if reverse else s
                xt = x[t, n].astype(np.float64)
                if op == OP.RNN:
                    h = f(0, xt @ wd.T + h @ rd.T + wb + rb)
                elif op == OP.LSTM:
                    gates = xt @ wd.T + h @ rd.T + wb + rb
                    gi, go, gf, gc = np.split(gates, 4)
                    pi, po, pf = np.split(p[d].astype(np.float64), 3) if p is not None else (0, 0, 0)
                    i = f(0, gi + pi * c)
                    fg = 1 - i if input_forget else f(0, gf + pf * c)
                    c = fg * c + i * f(1, gc)
                    o = f(0, go + po * c)
                    h = o * f(2, c)
                else:
                    wz, wr, wh = np.split(wd, 3)
                    rz, rr, rh = np.split(rd, 3)
                    wbz, wbr, wbh = np.split(wb, 3)
                    rbz, rbr, rbh = np.split(rb, 3)
                    z = f(0, xt @ wz.T + h @ rz.T + wbz + rbz)
                    rg = f(0, xt @ wr.T + h @ rr.T + wbr + rbr)
                    if lbr:
                        cand = f(1, xt @ wh.T + rg * (h @ rh.T + rbh) + wbh)
                    else:
                        cand = f(1, xt @ wh.T + (rg * h) @ rh.T + rbh + wbh)
                    h = (1 - z) * cand + z * h
                y[t, d, n] = h
            yh[d, n], yc[d, n] = h, c
    outs = [y, yh, yc][: 3 if op == OP.LSTM else 2]
    if layout == 1:
        outs = [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
    return [o.astype(F) for o in outs]


def make_case(op, steps=5, batch=2, size=3, hidden=4, direction=D.FORWARD, seed=0, **opts):
    """Random weights (and the optional operands ``opts`` asks for) for one layer."""
    dirs = 2 if direction == D.BIDIRECTIONAL else 1
    g = GATES[op]
    rng = np.random.default_rng(seed)

    def u(*shape, scale=0.5):
        return rng.uniform(-scale, scale, shape).astype(F)

    layout = opts.get("layout", 0)
    case = {
        "x": u(steps, batch, size, scale=1.0) if layout == 0 else u(batch, steps, size, scale=1.0),
        "w": u(dirs, g * hidden, size),
        "r": u(dirs, g * hidden, hidden),
        "direction": direction,
        "layout": layout,
    }
    state = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    if opts.get("bias", True):
        case["b"] = u(dirs, 2 * g * hidden)
    if opts.get("seq"):
        case["seq"] = np.asarray(opts["seq"], "int32")
    if opts.get("h0"):
        case["h0"] = u(*state)
    if opts.get("c0") and op == OP.LSTM:
        case["c0"] = u(*state)
    if opts.get("peephole") and op == OP.LSTM:
        case["p"] = u(dirs, 3 * hidden)
    for key in ("acts", "clip", "input_forget", "lbr"):
        if key in opts:
            case[key] = opts[key]
    return case


def operands(op, case, x_dims=None, seq_input=False) -> list:
    """The operation's operands in schema order (X a model input; sequence_lens one when asked)."""
    empty = EMPTY_F32
    ins = [In(case["x"], dims=x_dims), f32(case["w"]), f32(case["r"]), f32(case["b"]) if "b" in case else empty]
    if "seq" in case:
        ins.append(In(case["seq"], P.INT32, dims=[UNKNOWN]) if seq_input else i32(case["seq"]))
    else:
        ins.append(EMPTY_I32)
    ins.append(f32(case["h0"]) if "h0" in case else empty)
    if op == OP.LSTM:
        ins += [f32(case["c0"]) if "c0" in case else empty, f32(case["p"]) if "p" in case else empty]
    ins += [i32([int(case["direction"])]), i32([case["layout"]])]
    acts = case.get("acts")
    if acts is not None:
        ins += [i32([a[0] for a in acts]), f32([a[1] for a in acts]), f32([a[2] for a in acts])]
    else:
        ins += [EMPTY_I32, empty, empty]
    ins.append(f32([case["clip"]]) if case.get("clip") is not None else empty)
    if op == OP.LSTM:
        ins.append(b8([case.get("input_forget", False)]))
    if op == OP.GRU:
        ins.append(b8([case.get("lbr", False)]))
    return ins


def reference(op, case):
    return recurrent_ref(
        op,
        case["x"],
        case["w"],
        case["r"],
        case.get("b"),
        case.get("seq"),
        case.get("h0"),
        case.get("c0"),
        case.get("p"),
        case["direction"],
        case["layout"],
        case.get("acts"),
        case.get("clip"),
        case.get("input_forget", False),
        case.get("lbr", False),
    )


def make_model(op, ins: list, out_dims, outputs=None) -> nna.Model:
    """A one-operation model of ``ins`` (In: model inputs; Const: constants, None for empty)."""
    model = nna.Model()
    operands_, inputs = [], []
    for arg in ins:
        if isinstance(arg, In):
            dims = list(arg.value.shape) if arg.dims is None else list(arg.dims)
            operand = model.add_operand(nna.OperandType(arg.precision, dims))
            inputs.append(operand)
        else:
            dtype = nna.OperandType(arg.precision, [0]).dtype
            value = np.zeros([0], dtype) if arg.value is None else np.asarray(arg.value, dtype)
            operand = model.add_operand(nna.OperandType(arg.precision, list(value.shape)))
            model.set_operand_value(operand, np.ascontiguousarray(value))
        operands_.append(operand)
    count = outputs or (3 if op == OP.LSTM else 2)
    outs = [model.add_operand(nna.OperandType(P.FLOAT32, list(d))) for d in out_dims[:count]]
    model.add_operation(op, operands_, outs)
    model.identify_inputs_and_outputs(inputs, outs)
    model.finish()
    return model


def build(op, case, out_dims, x_dims=None, seq_input=False, outputs=None) -> nna.Model:
    """The model of ``case``; ``out_dims`` per output (UNKNOWN where the length is open)."""
    return make_model(op, operands(op, case, x_dims, seq_input), out_dims, outputs)


def feeds(op, case, seq_input=False) -> list[np.ndarray]:
    return [case["x"]] + ([case["seq"]] if seq_input else [])


def check(op, case, x_dims=None, seq_input=False, outputs=None):
    expected = reference(op, case)
    out_dims = [e.shape for e in expected]
    got = run_model(build(op, case, out_dims, x_dims, seq_input, outputs), feeds(op, case, seq_input))
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"output {i}: {g.shape} != {e.shape}"
        np.testing.assert_allclose(g, e, err_msg=f"output {i}", **TOL)
    return got


OPS = [OP.LSTM, OP.GRU, OP.RNN]
DIRECTIONS = [D.FORWARD, D.REVERSE, D.BIDIRECTIONAL]


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: d.name)
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_layouts(op, direction, layout):
    check(op, make_case(op, direction=direction, layout=layout, h0=True, c0=True, seed=layout))


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: d.name)
def test_sequence_lens(op, direction):
    """Lengths 5, 2, 0, 3 of 5: zeros past each length, the state kept (the initial one for 0)."""
    check(op, make_case(op, batch=4, direction=direction, seq=[5, 2, 0, 3], h0=True, c0=True, seed=3))


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_no_bias_no_initial_state(op):
    check(op, make_case(op, bias=False))


def test_lstm_peepholes_input_forget_clip():
    case = make_case(OP.LSTM, direction=D.BIDIRECTIONAL, peephole=True, h0=True, c0=True, clip=0.3, input_forget=True)
    check(OP.LSTM, case)
    check(OP.LSTM, make_case(OP.LSTM, peephole=True, layout=1, seed=5))


@pytest.mark.parametrize("lbr", [False, True])
@pytest.mark.parametrize("direction", [D.FORWARD, D.BIDIRECTIONAL], ids=lambda d: d.name)
def test_gru_linear_before_reset(lbr, direction):
    check(OP.GRU, make_case(OP.GRU, direction=direction, lbr=lbr, h0=True, seq=[4, 5], seed=7))


ALL_ACTS = [
    (A.RELU, 0.0, 0.0),
    (A.TANH, 0.0, 0.0),
    (A.SIGMOID, 0.0, 0.0),
    (A.AFFINE, 0.7, 0.1),
    (A.LEAKY_RELU, 0.2, 0.0),
    (A.THRESHOLDED_RELU, 0.1, 0.0),
    (A.SCALED_TANH, 1.5, 0.8),
    (A.HARD_SIGMOID, 0.3, 0.4),
    (A.ELU, 0.9, 0.0),
    (A.SOFTSIGN, 0.0, 0.0),
    (A.SOFTPLUS, 0.0, 0.0),
]


@pytest.mark.parametrize("act", ALL_ACTS, ids=lambda a: a[0].name)
def test_activations(act):
    """Each activation as RNN's f, GRU's g and LSTM's h; bidirectional with the other direction at
    its default, so the kernel picks per direction; and clip on the inputs."""
    cases = [
        (OP.RNN, [act, (A.TANH, 0.0, 0.0)]),
        (OP.GRU, [(A.SIGMOID, 0.0, 0.0), act, (A.SIGMOID, 0.0, 0.0), (A.TANH, 0.0, 0.0)]),
        (OP.LSTM, [(A.SIGMOID, 0.0, 0.0), (A.TANH, 0.0, 0.0), act] * 2),
    ]
    for op, acts in cases:
        check(op, make_case(op, direction=D.BIDIRECTIONAL, acts=acts, h0=True, c0=True, seed=int(act[0])))
    check(OP.RNN, make_case(OP.RNN, acts=[act], clip=0.4, seed=11))


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("layout", [0, 1])
def test_unknown_sequence_length(op, layout):
    """One compilation with T and B UNKNOWN serves three lengths (and batch sizes)."""
    dims = [UNKNOWN, UNKNOWN, 3]
    base = make_case(op, steps=1, direction=D.BIDIRECTIONAL, layout=layout)
    out_dims = [[UNKNOWN] * 4, [UNKNOWN] * 3, [UNKNOWN] * 3] if layout == 1 else None
    if layout == 0:
        out_dims = [[UNKNOWN, 2, UNKNOWN, 4], [2, UNKNOWN, 4], [2, UNKNOWN, 4]]
    context = nna.Context([nna.Device.acquire("llvm")])
    compilation = nna.Compilation(build(op, base, out_dims, x_dims=dims), context)
    compilation.finish()
    for steps, batch in ((1, 1), (7, 2), (30, 3)):
        x = rand(steps, batch, 3, seed=steps) if layout == 0 else rand(batch, steps, 3, seed=steps)
        case = dict(base, x=x)
        expected = reference(op, case)
        execution = nna.Execution(compilation)
        execution.set_input(0, x)
        got = [None] * len(expected)

        def access(i, got=got):
            def fn(memory, t):
                got[i] = np.empty(t.dimensions, t.dtype)
                return got[i]

            return fn

        for i in range(len(expected)):
            execution.set_output(i, None, access(i))
        execution.compute()
        for i, (g, e) in enumerate(zip(got, expected)):
            np.testing.assert_allclose(g, e, err_msg=f"T={steps} B={batch} output {i}", **TOL)


def test_sequence_lens_as_input():
    """sequence_lens fed at run time, longer than T in one row (clamped to T, as onnxruntime reads it)."""
    case = make_case(OP.LSTM, batch=3, seq=[3, 5, 1], direction=D.REVERSE, h0=True)
    check(OP.LSTM, case, seq_input=True)


def test_only_y():
    """Trailing outputs may be omitted."""
    check(OP.LSTM, make_case(OP.LSTM), outputs=1)
    check(OP.GRU, make_case(OP.GRU), outputs=1)


def test_larger_hidden():
    """Hidden sizes that are not multiples of the vector width, and more gates than one register block."""
    check(OP.LSTM, make_case(OP.LSTM, steps=6, batch=3, size=10, hidden=37, direction=D.BIDIRECTIONAL, h0=True))
    check(OP.GRU, make_case(OP.GRU, steps=4, batch=1, size=20, hidden=70, h0=True, seed=2))


@pytest.mark.parametrize(
    ("index", "shape", "fragment"),
    [
        (1, [1, 12, 3], "input 1 'weight': must have shape [directions, gates * hidden, input] = [1, 16, 3]"),
        (2, [1, 16, 5], "input 2 'recurrence_weight'"),
        (3, [1, 16], "input 3 'bias': must have shape [directions, 2 * gates * hidden] = [1, 32]"),
        (5, [1, 3, 4], "input 5 'initial_h': must have shape [directions, batch, hidden] = [1, 2, 4]"),
        (7, [1, 8], "input 7 'peephole': must have shape [directions, 3 * hidden] = [1, 12]"),
    ],
)
def test_wrong_shapes(index, shape, fragment):
    case = make_case(OP.LSTM, h0=True, peephole=True)
    ins = operands(OP.LSTM, case)
    ins[index] = f32(rand(*shape))
    model = make_model(OP.LSTM, ins, [e.shape for e in reference(OP.LSTM, case)])
    err = expect_error(lambda: run_model(model, [case["x"]]), "LSTM", fragment)
    assert err.code == nna.ResultCode.INVALID_PARAMETER


def test_wrong_attributes():
    case = make_case(OP.GRU)
    for index, value, fragment in (
        (6, i32([3]), "'direction'"),
        (7, i32([2]), "'layout'"),
        (8, i32([1]), "must hold 2 activation(s) per direction"),
        (11, f32([-1.0]), "'clip': must be positive"),
    ):
        ins = operands(OP.GRU, case)
        ins[index] = value
        model = make_model(OP.GRU, ins, [e.shape for e in reference(OP.GRU, case)])
        expect_error(lambda m=model: run_model(m, [case["x"]]), "GRU", fragment)


def test_wrong_precision_at_add_operation():
    model = nna.Model()
    x = model.add_operand(nna.OperandType(P.INT32, [2, 1, 3]))
    w = model.add_operand(nna.OperandType(P.FLOAT32, [1, 4, 3]))
    r = model.add_operand(nna.OperandType(P.FLOAT32, [1, 4, 4]))
    y = model.add_operand(nna.OperandType(P.FLOAT32, [2, 1, 1, 4]))
    expect_error(lambda: model.add_operation(OP.RNN, [x, w, r], [y]), "RNN input 0 'input'", "FLOAT32")


# -- through the ONNX importer, against onnxruntime --------------------------------------------------


def onnx_layer(op_type: str, hidden: int, size: int, dirs: int, outputs, inputs=("X", "W", "R", "B"), **attrs):
    """An ONNX model of one recurrent node, X [seq, batch, size] with symbolic seq and batch."""
    from onnx import TensorProto, helper

    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]
    rng = np.random.default_rng(1)
    layout = attrs.get("layout", 0)
    x_dims = ["seq", "batch", size] if layout == 0 else ["batch", "seq", size]
    inits = [
        helper.make_tensor(
            "W", TensorProto.FLOAT, [dirs, g * hidden, size], rng.uniform(-0.5, 0.5, dirs * g * hidden * size)
        ),
        helper.make_tensor(
            "R", TensorProto.FLOAT, [dirs, g * hidden, hidden], rng.uniform(-0.5, 0.5, dirs * g * hidden**2)
        ),
        helper.make_tensor(
            "B", TensorProto.FLOAT, [dirs, 2 * g * hidden], rng.uniform(-0.5, 0.5, dirs * 2 * g * hidden)
        ),
    ]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_dims)]
    if "sequence_lens" in inputs:
        graph_inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, ["batch"]))
    node = helper.make_node(op_type, list(inputs), list(outputs), hidden_size=hidden, **attrs)
    y_dims = ["seq", dirs, "batch", hidden] if layout == 0 else ["batch", "seq", dirs, hidden]
    s_dims = [dirs, "batch", hidden] if layout == 0 else ["batch", dirs, hidden]
    outs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, y_dims if k == 0 else s_dims)
        for k, name in enumerate(outputs)
        if name
    ]
    graph = helper.make_graph([node], "rnn", graph_inputs, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def compare_with_onnxruntime(model, sizes, tmp_path, with_lens=False, layout=0):
    """One Predictor (compiled once, cached) and a second one loaded from its cache, against onnxruntime."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    first = nna.Predictor(model, cache_dir=str(tmp_path))
    again = nna.Predictor(model, cache_dir=str(tmp_path))
    assert again.loaded_from_cache
    size = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    for steps, batch in sizes:
        rng = np.random.default_rng(steps)
        x = rng.uniform(-1, 1, [steps, batch, size] if layout == 0 else [batch, steps, size]).astype(F)
        feeds = {"X": x}
        if with_lens:
            feeds["sequence_lens"] = rng.integers(0, steps + 1, [batch]).astype("int32")
        expected = session.run(None, feeds)
        for predictor in (first, again):
            got = predictor.run(feeds)
            for i, (g, e) in enumerate(zip(got, expected)):
                np.testing.assert_allclose(g, e, err_msg=f"T={steps} B={batch} output {i}", **TOL)


def test_onnx_lstm_dynamic_length_cached(tmp_path):
    """Bidirectional LSTM with symbolic seq and batch and sequence_lens fed at run time: compiled once,
    cached, run at three lengths; a second Predictor loads the cache and matches too."""
    model = onnx_layer(
        "LSTM", 8, 5, 2, ["Y", "Y_h", "Y_c"], inputs=("X", "W", "R", "B", "sequence_lens"), direction="bidirectional"
    )
    compare_with_onnxruntime(model, [(1, 1), (6, 3), (17, 2)], tmp_path, with_lens=True)


def test_onnx_activation_alpha_beta(tmp_path):
    """activation_alpha/beta are consumed in order by the activations that take them; the rest default
    (LeakyRelu 0.01, HardSigmoid 0.2/0.5), as onnxruntime reads them."""
    model = onnx_layer(
        "GRU",
        6,
        4,
        2,
        ["Y", "Y_h"],
        direction="bidirectional",
        activations=["HardSigmoid", "Affine", "Sigmoid", "LeakyRelu"],
        activation_alpha=[0.3, 0.8],
        activation_beta=[0.45, 0.1],
        linear_before_reset=1,
    )
    compare_with_onnxruntime(model, [(3, 2), (9, 1)], tmp_path)


def test_onnx_omitted_output_and_clip(tmp_path):
    """Y omitted (only Y_h asked for), reverse, clip.  (Layout 1 through ONNX is onnx's batchwise node
    cases: onnxruntime refuses it.)"""
    model = onnx_layer("RNN", 5, 3, 1, ["", "Y_h"], direction="reverse", clip=0.7)
    compare_with_onnxruntime(model, [(4, 2), (11, 3)], tmp_path)


@pytest.mark.parametrize(
    ("op", "opts"),
    [(OP.LSTM, {"peephole": True}), (OP.GRU, {}), (OP.GRU, {"lbr": True}), (OP.RNN, {})],
    ids=["LSTM", "GRU", "GRU-lbr", "RNN"],
)
@pytest.mark.parametrize("direction", [D.FORWARD, D.REVERSE], ids=lambda d: d.name)
def test_one_row_split_over_threads(op, opts, direction, monkeypatch):
    """Batch 1, one direction, H = 40, with SPLIT_ONE_ROW: the kernel splits each step over the threads
    (barriers between phases); a sequence length shorter than T, so the threads agree on skipped steps."""
    from nnadapter_tvm.op_converters import recurrent_kernel

    monkeypatch.setattr(recurrent_kernel, "SPLIT_ONE_ROW", True)
    case = make_case(op, steps=6, batch=1, size=5, hidden=40, direction=direction, seq=[4], h0=True, c0=True, **opts)
    check(op, case)


@pytest.mark.parametrize(
    ("op", "opts"),
    [(OP.LSTM, {"peephole": True}), (OP.GRU, {}), (OP.GRU, {"lbr": True}), (OP.RNN, {})],
    ids=["LSTM", "GRU", "GRU-lbr", "RNN"],
)
@pytest.mark.parametrize("layout", [0, 1])
def test_batch_tiles(op, opts, layout):
    """Batch 6: a tile of four rows sharing the weight loads, then a tile of two (its missing rows
    write nothing); rows at different lengths (reverse reads each within its own), both directions."""
    case = make_case(
        op,
        steps=5,
        batch=6,
        size=4,
        hidden=20,
        direction=D.BIDIRECTIONAL,
        layout=layout,
        seq=[5, 2, 0, 3, 4, 1],
        h0=True,
        c0=True,
        seed=9,
        **opts,
    )
    check(op, case)


def test_onnx_hidden_size_must_match_r():
    model = onnx_layer("RNN", 5, 3, 1, ["Y"])
    for attr in model.graph.node[0].attribute:
        if attr.name == "hidden_size":
            attr.i = 6
    err = expect_error(lambda: nna.Predictor(model), "hidden_size 6 differs from R")
    assert "RNN" in str(err)
