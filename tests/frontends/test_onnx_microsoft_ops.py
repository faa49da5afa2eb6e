"""onnxruntime's com.microsoft operators (what its transformer optimizer fuses, MatMulNBits, DynamicQuantizeLSTM)
on the compiled path, against onnxruntime 1.32 itself.

Each group of cases is one model built with onnx.helper, one output per case (the nodes read the same inputs,
batch and sequence symbolic), compiled once and run at two sizes; each parametrized case then compares its
own output at both.  Tolerance: onnxruntime's own float32 one (rtol 1e-4, atol 1e-5): sums and products in
another order.  No case masks a whole row of scores: there every score is -10000 + s, whose float32 rounding
(ulp 1e-3) decides the result in both runtimes.  DynamicQuantizeLSTM is compared with onnxruntime's float LSTM
on the dequantized weights (exact semantics) and, loosely, with its own kernel, which also quantizes the
input and the hidden state at run time (docs/onnx.md, "com.microsoft").
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
RTOL, ATOL = 1e-4, 1e-5
H = 8  # hidden size of the small models


def make_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8  # onnxruntime's supported range
    return model


def ms(op_type: str, inputs: list[str], outputs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op_type, inputs, outputs, domain="com.microsoft", **attrs)


def info(name: str, elem: int, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def floats(rng, *shape, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype("float32")


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


# -- the groups: (model, output names, [feeds at each size]) --------------------------------------------------------
def activations():
    rng = np.random.default_rng(0)
    nodes = [
        ms("Gelu", ["x"], ["gelu"]),
        ms("BiasGelu", ["x", "b"], ["bias_gelu"]),
        ms("FastGelu", ["x", "b"], ["fast_gelu_bias"]),
        ms("FastGelu", ["x"], ["fast_gelu"]),
        ms("QuickGelu", ["x"], ["quick_gelu"]),
        ms("QuickGelu", ["x"], ["quick_gelu_alpha1"], alpha=1.0),
    ]
    outs = [n.output[0] for n in nodes]
    model = make_model(nodes, [info("x", F, ["B", "S", H])], [info(n, F, None) for n in outs], [("b", floats(rng, H))])
    feeds = [{"x": floats(rng, b, s, H, scale=3)} for b, s in ((1, 5), (3, 7))]
    return model, feeds


def norms():
    rng = np.random.default_rng(1)
    gamma, beta, bias = floats(rng, H), floats(rng, H), floats(rng, H)
    nodes = [
        ms(
            "SkipLayerNormalization",
            ["x", "s", "g", "be", "bi"],
            ["sln", "sln_mean", "sln_inv", "sln_sum"],
            epsilon=1e-5,
        ),
        ms("SkipLayerNormalization", ["x", "s1", "g"], ["sln_skip_1sh"]),
        ms("SkipLayerNormalization", ["x", "s2", "g", "be"], ["sln_skip_sh", "", "", "sln_skip_sh_sum"]),
        ms("SkipSimplifiedLayerNormalization", ["x", "s", "g", "bi"], ["ssln", "ssln_mean", "ssln_inv", "ssln_sum"]),
        ms("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["ssln_plain"], epsilon=1e-6),
        # onnxruntime registers SimplifiedLayerNormalization in ONNX's domain, where its optimizer writes it.
        helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["rms", "rms_inv"], epsilon=1e-6),
        helper.make_node("SimplifiedLayerNormalization", ["x5", "g2"], ["rms_axis1"], axis=1),
    ]
    outs = [o for n in nodes for o in n.output if o]
    inputs = [info("x", F, ["B", "S", H]), info("s", F, ["B", "S", H]), info("s1", F, [1, "S", H])]
    inputs += [info("s2", F, ["S", H]), info("x5", F, ["B", 5, H])]
    inits = [("g", gamma), ("be", beta), ("bi", bias), ("g2", floats(rng, 5, H))]
    model = make_model(nodes, inputs, [info(n, F, None) for n in outs], inits)

    def feeds(b: int, s: int) -> dict:
        return {
            "x": floats(rng, b, s, H, scale=3) + 1,
            "s": floats(rng, b, s, H),
            "s1": floats(rng, 1, s, H),
            "s2": floats(rng, s, H),
            "x5": floats(rng, b, 5, H),
        }

    return model, [feeds(1, 5), feeds(3, 7)]


def embeddings():
    rng = np.random.default_rng(2)
    vocab, positions = 30, 16
    inits = [("we", floats(rng, vocab, H)), ("pe", floats(rng, positions, H)), ("se", floats(rng, 2, H))]
    inits += [("g", floats(rng, H)), ("be", floats(rng, H))]
    nodes = [
        ms(
            "EmbedLayerNormalization",
            ["ids", "seg", "we", "pe", "se", "g", "be", "mask"],
            ["eln", "eln_mask", "eln_sum"],
        ),
        ms(
            "EmbedLayerNormalization",
            ["ids", "", "we", "pe", "", "g", "be", "", "pid"],
            ["eln_pos", "eln_pos_mask"],
            epsilon=1e-5,
        ),
        ms("EmbedLayerNormalization", ["ids", "", "we", "pe", "", "g", "be"], ["eln_plain", "eln_plain_mask"]),
    ]
    outs = [(o, I32 if o.endswith("mask") else F) for n in nodes for o in n.output]
    inputs = [info(n, I32, ["B", "S"]) for n in ("ids", "seg", "mask", "pid")]
    model = make_model(nodes, inputs, [info(n, t, None) for n, t in outs], inits)

    def feeds(b: int, s: int) -> dict:
        mask = (rng.random((b, s)) < 0.7).astype("int32")
        mask[0, -1] = 2  # counted as onnxruntime counts: only the 1s
        return {
            "ids": rng.integers(0, vocab, (b, s)).astype("int32"),
            "seg": rng.integers(0, 2, (b, s)).astype("int32"),
            "mask": mask,
            "pid": rng.integers(0, positions, (b, s)).astype("int32"),
        }

    return model, [feeds(1, 5), feeds(3, 7)]


def attention():
    rng = np.random.default_rng(3)
    heads = 2
    kw = {"num_heads": heads}

    def weights(n: int) -> np.ndarray:
        return floats(rng, H, n, scale=0.5)

    nodes = [
        ms("Attention", ["x", "w", "b", "mask2d"], ["att_mask2d"], **kw),
        ms("Attention", ["x", "w", "b", "lengths"], ["att_lengths_causal"], unidirectional=1, **kw),
        ms("Attention", ["x", "w", "b", "ends_starts"], ["att_ends_starts"], **kw),
        ms(
            "Attention",
            ["x", "w_v4", "b_v4", "mask3d", "", "ab"],
            ["att_sizes_3d_bias"],
            qkv_hidden_sizes=[8, 8, 4],
            scale=0.3,
            **kw,
        ),
        ms("Attention", ["x", "w", "b", "mask_total", "past"], ["att_past", "att_present"], unidirectional=1, **kw),
        ms("Attention", ["x", "w"], ["att_causal_no_bias"], unidirectional=1, mask_filter_value=-1e4, **kw),
        ms("Attention", ["x", "w_fed", "", "lengths"], ["att_fed_weights"], **kw),
    ]
    outs = [o for n in nodes for o in n.output]
    inputs = [
        info("x", F, ["B", "S", H]),
        info("mask2d", I32, ["B", "S"]),
        info("lengths", I32, ["B"]),
        info("ends_starts", I32, ["B2"]),
        info("mask3d", I32, ["B", "S", "S"]),
        info("ab", F, [1, heads, "S", "S"]),
        info("mask_total", I32, ["B", "T"]),
        info("past", F, [2, "B", heads, "P", 4]),
        info("w_fed", F, [H, 24]),
    ]
    inits = [("w", weights(24)), ("b", floats(rng, 24)), ("w_v4", weights(20)), ("b_v4", floats(rng, 20))]
    model = make_model(nodes, inputs, [info(n, F, None) for n in outs], inits)

    def mask(*shape: int) -> np.ndarray:
        m = (rng.random(shape) < 0.7).astype("int32")
        m[..., 0] = 1  # no row wholly masked
        return m

    def feeds(b: int, s: int, p: int) -> dict:
        ends, starts = rng.integers(2, s + 1, b), rng.integers(0, 2, b)
        return {
            "x": floats(rng, b, s, H),
            "mask2d": mask(b, s),
            "lengths": rng.integers(1, s + 2, b).astype("int32"),
            "ends_starts": np.concatenate([ends, starts]).astype("int32"),
            "mask3d": mask(b, s, s),
            "ab": floats(rng, 1, heads, s, s),
            "mask_total": mask(b, s + p),
            "past": floats(rng, 2, b, heads, p, 4),
            "w_fed": weights(24),
        }

    return model, [feeds(1, 5, 3), feeds(3, 7, 2)]


def multi_head_attention():
    rng = np.random.default_rng(4)
    heads = 2
    kw = {"num_heads": heads}
    nodes = [
        ms("MultiHeadAttention", ["q", "k", "v", "bias"], ["mha_cross"], **kw),
        ms("MultiHeadAttention", ["q", "k", "v", "", "key_mask"], ["mha_key_mask"], **kw),
        ms("MultiHeadAttention", ["q", "k", "v4", "bias_v4", "key_lengths"], ["mha_v_size_lengths"], **kw),
        ms(
            "MultiHeadAttention",
            ["q", "q", "q", "bias", "", "ab"],
            ["mha_self_causal_bias"],
            unidirectional=1,
            scale=0.5,
            **kw,
        ),
        ms(
            "MultiHeadAttention",
            ["q", "q", "q", "bias", "mask_total", "", "past_k", "past_v"],
            ["mha_past", "mha_present_key", "mha_present_value"],
            unidirectional=1,
            **kw,
        ),
        ms("MultiHeadAttention", ["q", "k_heads", "v_heads", "bias"], ["mha_kv_in_heads"], **kw),
    ]
    outs = [o for n in nodes for o in n.output]
    inputs = [
        info("q", F, ["B", "S", H]),
        info("k", F, ["B", "L", H]),
        info("v", F, ["B", "L", H]),
        info("v4", F, ["B", "L", 4]),
        info("key_mask", I32, ["B", "L"]),
        info("key_lengths", I32, ["B"]),
        info("ab", F, ["B", 1, "S", "S"]),
        info("mask_total", I32, ["B", "T"]),
        info("past_k", F, ["B", heads, "P", 4]),
        info("past_v", F, ["B", heads, "P", 4]),
        info("k_heads", F, ["B", heads, "L", 4]),
        info("v_heads", F, ["B", heads, "L", 4]),
    ]
    inits = [("bias", floats(rng, 3 * H)), ("bias_v4", floats(rng, 2 * H + 4))]
    model = make_model(nodes, inputs, [info(n, F, None) for n in outs], inits)

    def mask(*shape: int) -> np.ndarray:
        m = (rng.random(shape) < 0.7).astype("int32")
        m[..., 0] = 1
        return m

    def feeds(b: int, s: int, kv: int, p: int) -> dict:
        return {
            "q": floats(rng, b, s, H),
            "k": floats(rng, b, kv, H),
            "v": floats(rng, b, kv, H),
            "v4": floats(rng, b, kv, 4),
            "key_mask": mask(b, kv),
            "key_lengths": rng.integers(1, kv + 1, b).astype("int32"),
            "ab": floats(rng, b, 1, s, s),
            "mask_total": mask(b, s + p),
            "past_k": floats(rng, b, heads, p, 4),
            "past_v": floats(rng, b, heads, p, 4),
            "k_heads": floats(rng, b, heads, kv, 4),
            "v_heads": floats(rng, b, heads, kv, 4),
        }

    return model, [feeds(1, 5, 6, 3), feeds(3, 7, 4, 2)]


def rotary():
    rng = np.random.default_rng(5)
    heads, size, cached = 2, 8, 32
    inits = [("cos8", floats(rng, cached, 4)), ("sin8", floats(rng, cached, 4))]
    inits += [("cos4", floats(rng, cached, 2)), ("sin4", floats(rng, cached, 2))]
    nodes = [
        ms("RotaryEmbedding", ["x3", "pid", "cos8", "sin8"], ["rope_3d"]),
        ms("RotaryEmbedding", ["x3", "pid", "cos8", "sin8"], ["rope_3d_interleaved"], interleaved=1),
        ms("RotaryEmbedding", ["x4", "pid", "cos8", "sin8"], ["rope_4d"]),
        ms("RotaryEmbedding", ["x4", "start", "cos8", "sin8"], ["rope_4d_start_interleaved"], interleaved=1),
        ms(
            "RotaryEmbedding",
            ["x3", "start", "cos4", "sin4"],
            ["rope_3d_partial"],
            rotary_embedding_dim=4,
            num_heads=heads,
        ),
        ms(
            "RotaryEmbedding",
            ["x4", "pid", "cos4", "sin4"],
            ["rope_4d_partial_interleaved"],
            rotary_embedding_dim=4,
            num_heads=heads,
            interleaved=1,
        ),
    ]
    outs = [n.output[0] for n in nodes]
    inputs = [info("x3", F, ["B", "S", heads * size]), info("x4", F, ["B", heads, "S", size])]
    inputs += [info("pid", I64, ["B", "S"]), info("start", I64, [1])]
    model = make_model(nodes, inputs, [info(n, F, None) for n in outs], inits)

    def feeds(b: int, s: int) -> dict:
        return {
            "x3": floats(rng, b, s, heads * size),
            "x4": floats(rng, b, heads, s, size),
            "pid": rng.integers(0, cached, (b, s)).astype("int64"),
            "start": np.array([rng.integers(0, cached - s)], "int64"),
        }

    return model, [feeds(1, 5), feeds(3, 7)]


def _pack(values: np.ndarray, bits: int) -> np.ndarray:
    """``bits``-bit values into bytes, the first value in the low bits (MatMulNBits' layout)."""
    per = 8 // bits
    grouped = values.reshape(*values.shape[:-1], -1, per).astype(np.uint16)
    packed = np.zeros(grouped.shape[:-1], np.uint16)
    for i in range(per):
        packed |= grouped[..., i] << (bits * i)
    return packed.astype(np.uint8)


# (K, N, block_size, bits, zero points, bias): the cases of the MatMulNBits group.
NBITS = {
    "nbits_4": (64, 8, 32, 4, "packed", False),
    "nbits_4_ragged_default_zero": (40, 6, 16, 4, None, True),
    "nbits_4_float_zero": (96, 8, 32, 4, "float", False),
    "nbits_8_bias": (64, 8, 16, 8, "packed", True),
    "nbits_2": (64, 5, 32, 2, "packed", False),
}


def nbits():
    rng = np.random.default_rng(6)
    nodes, inits = [], []
    for name, (k, n, block, bits, zero, bias) in NBITS.items():
        blocks = -(-k // block)
        q = rng.integers(0, 2**bits, (n, blocks * block))
        inits += [(f"{name}_B", _pack(q, bits).reshape(n, blocks, -1))]
        inits += [(f"{name}_scales", rng.uniform(0.01, 0.1, (n, blocks)).astype("float32"))]
        ins = [f"a{k}", f"{name}_B", f"{name}_scales", f"{name}_zero" if zero else ""]
        if zero == "packed":
            zeros = np.zeros((n, -(-blocks * bits // 8) * 8 // bits), int)
            zeros[:, :blocks] = rng.integers(0, 2**bits, (n, blocks))
            inits.append((f"{name}_zero", _pack(zeros, bits)))
        elif zero == "float":
            inits.append((f"{name}_zero", rng.uniform(0, 2**bits - 1, (n, blocks)).astype("float32")))
        if bias:
            inits.append((f"{name}_bias", floats(rng, n)))
            ins += ["", f"{name}_bias"]
        nodes.append(ms("MatMulNBits", ins, [name], K=k, N=n, bits=bits, block_size=block))
    inputs = [info("a64", F, ["B", "S", 64]), info("a40", F, ["B", 40]), info("a96", F, ["B", "S", 96])]
    model = make_model(nodes, inputs, [info(n, F, None) for n in NBITS], inits)
    feeds = [
        {"a64": floats(rng, b, s, 64), "a40": floats(rng, b, 40), "a96": floats(rng, b, s, 96)}
        for b, s in ((1, 5), (3, 7))
    ]
    return model, feeds


GROUPS = {
    "activations": activations,
    "norms": norms,
    "embeddings": embeddings,
    "attention": attention,
    "multi_head_attention": multi_head_attention,
    "rotary": rotary,
    "nbits": nbits,
}


@functools.cache
def results(group: str) -> tuple[dict, list[dict], list[dict]]:
    """The group's model compiled once (no host node), and its outputs by name, ours and onnxruntime's, at
    each size."""
    model, feeds = GROUPS[group]()
    predictor = nna.Predictor(model)
    assert predictor.host_node_count == 0
    session = ort_session(model)
    names = [o.name for o in model.graph.output]
    ours = [dict(zip(names, predictor.run(f))) for f in feeds]
    theirs = [dict(zip(names, session.run(None, f))) for f in feeds]
    return feeds, ours, theirs


# Building a group's model is cheap (no compile): done at collection for the output names.
CASES = [(group, output.name) for group, build in GROUPS.items() for output in build()[0].graph.output]


@pytest.mark.parametrize("group, output", CASES, ids=[name for _, name in CASES])
def test_matches_onnxruntime(group: str, output: str) -> None:
    feeds, ours, theirs = results(group)
    for f, got, want in zip(feeds, ours, theirs):
        sizes = {k: v.shape for k, v in f.items()}
        assert got[output].shape == want[output].shape, f"{output} at {sizes}"
        assert got[output].dtype == want[output].dtype, f"{output} at {sizes}"
        np.testing.assert_allclose(got[output], want[output], rtol=RTOL, atol=ATOL, err_msg=f"{output} at {sizes}")


# -- DynamicQuantizeLSTM -------------------------------------------------------------------------------------------
def _quantized(rng, shape, per_column: bool, dtype: str):
    """Weights quantized as onnxruntime's quantize_dynamic does (symmetric; one zero point per tensor, which its
    kernel requires), with per-direction or per-column scales."""
    w = floats(rng, *shape, scale=0.4)
    axes = (1,) if per_column else (1, 2)
    scale = np.abs(w).max(axis=axes, keepdims=True) / 127
    zero = 0 if dtype == "int8" else 128
    q = (np.clip(np.round(w / scale), -127, 127) + zero).astype(dtype)
    lead = (shape[0], shape[2]) if per_column else (shape[0],)
    return q, scale.reshape(lead).astype("float32"), np.full(lead, zero, dtype)


@pytest.mark.parametrize("directions, per_column, dtype", [(1, False, "int8"), (2, True, "uint8")])
def test_dynamic_quantize_lstm(directions: int, per_column: bool, dtype: str) -> None:
    """Against onnxruntime's float LSTM on the dequantized weights (the same math), and against its
    DynamicQuantizeLSTM within the rounding of the input and state that kernel quantizes at run time."""
    rng = np.random.default_rng(7)
    size, hidden = 6, 5
    w, w_scale, w_zero = _quantized(rng, (directions, size, 4 * hidden), per_column, dtype)
    r, r_scale, r_zero = _quantized(rng, (directions, hidden, 4 * hidden), per_column, dtype)
    bias = floats(rng, directions, 8 * hidden, scale=0.1)
    direction = "bidirectional" if directions == 2 else "forward"
    inputs = [info("x", F, ["T", "B", size]), info("h0", F, [directions, "B", hidden])]
    outputs = [info(n, F, None) for n in ("y", "y_h", "y_c")]
    names = ["x", "W", "R", "bias", "", "h0", "", "", "w_scale", "w_zero", "r_scale", "r_zero"]
    quantized = make_model(
        [ms("DynamicQuantizeLSTM", names, ["y", "y_h", "y_c"], hidden_size=hidden, direction=direction)],
        inputs,
        outputs,
        [
            ("W", w),
            ("R", r),
            ("bias", bias),
            ("w_scale", w_scale),
            ("w_zero", w_zero),
            ("r_scale", r_scale),
            ("r_zero", r_zero),
        ],
    )

    def real(q, scale, zero):
        lead = (q.shape[0], 1, -1)
        return ((q.astype("float32") - zero.astype("float32").reshape(lead)) * scale.reshape(lead)).transpose(0, 2, 1)

    lstm = helper.make_node(
        "LSTM", ["x", "W", "R", "bias", "", "h0"], ["y", "y_h", "y_c"], hidden_size=hidden, direction=direction
    )
    floating = make_model(
        [lstm], inputs, outputs, [("W", real(w, w_scale, w_zero)), ("R", real(r, r_scale, r_zero)), ("bias", bias)]
    )
    predictor = nna.Predictor(quantized)
    assert predictor.host_node_count == 0
    exact, approximate = ort_session(floating), ort_session(quantized)
    for t, b in ((5, 1), (9, 3)):
        feeds = {"x": floats(rng, t, b, size), "h0": floats(rng, directions, b, hidden, scale=0.5)}
        got = predictor.run(feeds)
        for name, mine, want, near in zip(
            ("y", "y_h", "y_c"), got, exact.run(None, feeds), approximate.run(None, feeds)
        ):
            np.testing.assert_allclose(mine, want, rtol=RTOL, atol=ATOL, err_msg=f"{name} at T={t}, B={b}")
            np.testing.assert_allclose(mine, near, rtol=0, atol=5e-2, err_msg=f"{name} at T={t}, B={b}")


# -- refusals ------------------------------------------------------------------------------------------------------
def _one_node(node: onnx.NodeProto, inputs, initializers=()) -> onnx.ModelProto:
    outputs = [info(o, F, None) for o in node.output if o]
    return make_model([node], inputs, outputs, initializers)


def _refusals():
    x3 = info("x", F, ["B", "S", H])
    w = ("w", np.zeros((H, 3 * H), "float32"))
    cos = [("c", np.zeros((16, 4), "float32")), ("s", np.zeros((16, 4), "float32"))]
    packed = [("B", np.zeros((4, 2, 16), "uint8")), ("sc", np.ones((4, 2), "float32")), ("g", np.zeros(64, "int32"))]
    return {
        "attention_do_rotary": (
            _one_node(ms("Attention", ["x", "w"], ["y"], num_heads=2, do_rotary=1), [x3], [w]),
            "'do_rotary'",
        ),
        "attention_past_sequence_length": (
            _one_node(
                ms("Attention", ["x", "w", "", "", "", "", "n"], ["y"], num_heads=2, past_present_share_buffer=0),
                [x3, info("n", I32, [1])],
                [w],
            ),
            "'past_sequence_length'",
        ),
        "attention_mask_4d": (
            _one_node(
                ms("Attention", ["x", "w", "", "m"], ["y"], num_heads=2), [x3, info("m", I32, ["B", 1, 4, 4])], [w]
            ),
            "rank 4",
        ),
        "mha_packed_qkv": (
            _one_node(ms("MultiHeadAttention", ["q"], ["y"], num_heads=2), [info("q", F, ["B", "S", 2, 3, 4])]),
            "packed Q, K and V",
        ),
        "mha_qk_output": (
            _one_node(ms("MultiHeadAttention", ["x", "x", "x"], ["y", "", "", "qk"], num_heads=2), [x3]),
            "'qk'",
        ),
        "rotary_packed_batching": (
            _one_node(
                ms("RotaryEmbedding", ["x", "p", "c", "s"], ["y"], is_packed_batching=1),
                [x3, info("p", I64, ["B", "S"])],
                cos,
            ),
            "'is_packed_batching'",
        ),
        "nbits_g_idx": (
            _one_node(
                ms("MatMulNBits", ["a", "B", "sc", "", "g"], ["y"], K=64, N=4, bits=4, block_size=32),
                [info("a", F, ["B", 64])],
                packed,
            ),
            "'g_idx'",
        ),
        "skip_layer_norm_float16": (
            _one_node(
                ms("SkipLayerNormalization", ["x", "x", "g"], ["y"]),
                [info("x", TensorProto.FLOAT16, ["B", "S", H])],
                [("g", np.ones(H, "float16"))],
            ),
            "float32 only",
        ),
    }


REFUSALS = _refusals()


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refused_variants_name_what_is_refused(case: str) -> None:
    model, named = REFUSALS[case]
    with pytest.raises(nna.NNAdapterError) as err:
        nna.Predictor(model)
    assert err.value.code == nna.ResultCode.FEATURE_NOT_SUPPORTED
    assert named in str(err.value)
