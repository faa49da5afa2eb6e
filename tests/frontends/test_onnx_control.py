"""Control flow in the ONNX frontend: If on a condition known only at run time, Loop and Scan run on
the host around their bodies' own compiled NNAdapter subgraphs. Every model is built with onnx.helper
and compared with onnxruntime; a cached load compiles nothing."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnadapter_tvm as nna
from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.frontends.onnx.control import free_names
from nnadapter_tvm.frontends.onnx.control_unit import ControlUnit

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def make_model(nodes, inputs, outputs, initializers=(), opset=17, full_check=True, domains=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.checker.check_model(model, full_check=full_check)
    return model


def tensor(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, array) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(array), name)


def check(model: onnx.ModelProto, feeds: dict, predictor: nna.Predictor | None = None, rtol=1e-5, atol=1e-6):
    """Run ``feeds`` through the Predictor and onnxruntime; every output must agree."""
    predictor = predictor or nna.Predictor(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = predictor.run(feeds)
    want = session.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


# -- If --------------------------------------------------------------------------------------


def if_model() -> onnx.ModelProto:
    """c = sum(x) > 0 (known only at run time); then: x * w + t (t computed in the outer graph);
    else: the first row of x - w, another shape (so the If's output dims are unknown); then Relu."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "t"], ["then_out"])],
        "then",
        [],
        [tensor("then_out", F, [2, 3])],
    )
    else_g = helper.make_graph(
        [
            helper.make_node("Sub", ["x", "w"], ["d"]),
            helper.make_node("Slice", ["d", "zero1", "one1"], ["else_out"]),
        ],
        "else",
        [],
        [tensor("else_out", F, [1, 3])],
    )
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["t"]),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    inits = [
        const("w", np.array([1.0, -2.0, 3.0], "float32")),
        const("zero", np.array(0.0, "float32")),
        const("zero1", np.array([0], "int64")),
        const("one1", np.array([1], "int64")),
    ]
    return make_model(nodes, [tensor("x", F, [2, 3])], [tensor("z", F, [None, 3])], inits)


def test_if_on_a_run_time_condition_takes_both_branches() -> None:
    model = if_model()
    predictor = nna.Predictor(model)
    (unit,) = [u for u in predictor.graph.units if isinstance(u, ControlUnit)]
    assert set(unit.bodies) == {"then_branch", "else_branch"}
    # The branches read x and the outer graph's computed t as extra inputs; w is a constant in them.
    values = predictor.graph.values
    assert [id(v) for v in unit.inputs] == [id(values[n]) for n in ("c", "x", "t")]
    assert unit.outputs[0].shape == (None, 3)  # [2, 3] in one branch, [1, 3] in the other
    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 1.0, (2, 3)).astype("float32")
    assert check(model, {"x": x}, predictor)[0].shape == (2, 3)
    assert check(model, {"x": -x}, predictor)[0].shape == (1, 3)


def test_an_if_on_a_constant_is_still_inlined() -> None:
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["a"])], "then", [], [tensor("a", F, [3])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["b"])], "else", [], [tensor("b", F, [3])])
    model = make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [tensor("x", F, [3])],
        [tensor("y", F, [3])],
        [const("c", np.array(False))],
    )
    predictor = nna.Predictor(model)
    assert not predictor.graph.host_units and predictor.single_subgraph
    check(model, {"x": np.array([-1.0, 2.0, -3.0], "float32")}, predictor)


# -- Loop ------------------------------------------------------------------------------------


def loop_model(with_trip_count: bool = True) -> onnx.ModelProto:
    """Up to M iterations while cond: acc = acc * a + x[i % 2] (x read from the outer graph), a count
    carried along, cond_out = sum(acc) < limit; scan outputs: acc each iteration and i as float."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc_in", "a"], ["scaled"]),
            helper.make_node("Mod", ["i", "two"], ["row"]),
            helper.make_node("Gather", ["x", "row"], ["xi"], axis=0),
            helper.make_node("Add", ["scaled", "xi"], ["acc_out"]),
            helper.make_node("Add", ["n_in", "one"], ["n_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Identity", ["acc_out"], ["acc_scan"]),
        ],
        "body",
        [tensor("i", I64, []), tensor("cond_in", B, []), tensor("acc_in", F, [3]), tensor("n_in", I64, [])],
        [
            tensor("cond_out", B, []),
            tensor("acc_out", F, [3]),
            tensor("n_out", I64, []),
            tensor("acc_scan", F, [3]),
            tensor("i_f", F, []),
        ],
    )
    nodes = [
        helper.make_node("Relu", ["x0"], ["x"]),
        helper.make_node(
            "Loop", ["M" if with_trip_count else "", "cond", "acc0", "n0"], ["acc", "n", "accs", "iters"], body=body
        ),
    ]
    inits = [
        const("a", np.array([0.5, 1.0, 1.5], "float32")),
        const("two", np.array(2, "int64")),
        const("one", np.array(1, "int64")),
        const("limit", np.array(40.0, "float32")),
        const("n0", np.array(0, "int64")),
    ]
    inputs = [tensor("x0", F, [2, 3]), tensor("cond", B, []), tensor("acc0", F, [3])]
    if with_trip_count:
        inputs.insert(0, tensor("M", I64, []))
    outputs = [tensor("acc", F, [3]), tensor("n", I64, []), tensor("accs", F, [None, 3]), tensor("iters", F, [None])]
    return make_model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize("trip, cond", [(5, True), (50, True), (0, True), (5, False)])
def test_loop_with_a_trip_count_and_a_condition(trip: int, cond: bool) -> None:
    model = loop_model()
    x0 = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], "float32")
    feeds = {"M": np.array(trip, "int64"), "cond": np.array(cond), "x0": x0, "acc0": np.ones(3, "float32")}
    check(model, feeds)


def test_loop_without_a_trip_count_runs_while_the_condition_holds() -> None:
    model = loop_model(with_trip_count=False)
    x0 = np.array([[1.0, 2.0, 3.0], [0.5, 1.0, 2.0]], "float32")
    outputs = check(model, {"cond": np.array(True), "x0": x0, "acc0": np.zeros(3, "float32")})
    assert outputs[0].sum() >= 40.0 and 1 < outputs[1] < 40


def growing_model(scan_too: bool = False) -> onnx.ModelProto:
    """s = concat(s, s[-1:] + 1) each iteration (and, with ``scan_too``, s as a scan output too)."""
    body = helper.make_graph(
        [
            helper.make_node("Slice", ["s_in", "minus1", "big"], ["last"]),
            helper.make_node("Add", ["last", "one"], ["next"]),
            helper.make_node("Concat", ["s_in", "next"], ["s_out"], axis=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["s_out"], ["s_scan"]),
        ],
        "body",
        [tensor("i", I64, []), tensor("cond_in", B, []), tensor("s_in", F, [None])],
        [tensor("cond_out", B, []), tensor("s_out", F, [None])] + ([tensor("s_scan", F, [None])] if scan_too else []),
    )
    return make_model(
        [helper.make_node("Loop", ["M", "", "s0"], ["s", "scans"] if scan_too else ["s"], body=body)],
        [tensor("M", I64, []), tensor("s0", F, [2])],
        [tensor("s", F, [None])] + ([tensor("scans", F, [None, None])] if scan_too else []),
        [
            const("minus1", np.array([-1], "int64")),
            const("big", np.array([2**31 - 1], "int64")),
            const("one", np.array(1.0, "float32")),
        ],
    )


def test_a_scan_output_that_changes_shape_is_an_error() -> None:
    """Iterations of different shapes cannot be stacked: an NNAdapterError naming the Loop (onnxruntime
    refuses it too)."""
    model = growing_model(scan_too=True)
    feeds = {"M": np.array(3, "int64"), "s0": np.array([3.0, 5.0], "float32")}
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error type
        ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    with pytest.raises(nna.NNAdapterError, match=r"Loop.*scan output 1 \('scans'\) changes shape across iterations"):
        nna.Predictor(model).run(feeds)


def test_loop_carried_value_that_grows() -> None:
    """The body is compiled once, with an unknown dim for the growing value."""
    model = growing_model()
    predictor = nna.Predictor(model)
    (unit,) = [u for u in predictor.graph.units if isinstance(u, ControlUnit)]
    assert unit.bodies["body"].graph.inputs[2].shape == (None,)
    for trip in (0, 1, 4):
        out = check(model, {"M": np.array(trip, "int64"), "s0": np.array([3.0, 5.0], "float32")}, predictor)
        assert out[0].shape == (2 + trip,)


def test_nested_if_in_a_loop_body() -> None:
    """The If's condition is the iteration number's parity; its branches read the loop body's value
    and the top graph's input."""
    then_g = helper.make_graph([helper.make_node("Add", ["v_in", "x"], ["t"])], "then", [], [tensor("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Mul", ["v_in", "half"], ["e"])], "else", [], [tensor("e", F, [3])])
    body = helper.make_graph(
        [
            helper.make_node("Mod", ["i", "two"], ["r"]),
            helper.make_node("Equal", ["r", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["v_out"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Tanh", ["v_out"], ["trace"]),
        ],
        "body",
        [tensor("i", I64, []), tensor("cond_in", B, []), tensor("v_in", F, [3])],
        [tensor("cond_out", B, []), tensor("v_out", F, [3]), tensor("trace", F, [3])],
    )
    inits = [
        const("two", np.array(2, "int64")),
        const("zero", np.array(0, "int64")),
        const("half", np.array(0.5, "float32")),
    ]
    model = make_model(
        [helper.make_node("Loop", ["M", "", "v0"], ["v", "traces"], body=body)],
        [tensor("M", I64, []), tensor("x", F, [3]), tensor("v0", F, [3])],
        [tensor("v", F, [3]), tensor("traces", F, [None, 3])],
        inits,
    )
    predictor = nna.Predictor(model)
    (loop,) = [u for u in predictor.graph.units if isinstance(u, ControlUnit)]
    (inner,) = [u for u in loop.bodies["body"].graph.units if isinstance(u, ControlUnit)]
    assert inner.node.op_type == "If"
    # x is read two scopes down (in the If's branch) and passed in by the Loop; v_in is the body's own.
    assert free_names(loop.node.attribute[0].g) == ["two", "zero", "half", "x"]
    feeds = {"M": np.array(5, "int64"), "x": np.array([1.0, -2.0, 0.25], "float32"), "v0": np.ones(3, "float32")}
    check(model, feeds, predictor)


def test_an_unsupported_body_node_is_listed_and_runs_under_host_fallback() -> None:
    """ai.onnx.ml's FeatureVectorizer has no converter: without host fallback the error names the Loop and
    the node."""
    body = helper.make_graph(
        [
            helper.make_node("FeatureVectorizer", ["m_in"], ["d"], domain="ai.onnx.ml", inputdimensions=[2]),
            helper.make_node("Mul", ["m_in", "d"], ["m_out"]),
            helper.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [tensor("i", I64, []), tensor("c", B, []), tensor("m_in", F, [2, 2])],
        [tensor("c_out", B, []), tensor("m_out", F, [2, 2])],
    )
    model = make_model(
        [helper.make_node("Loop", ["M", "", "m0"], ["m"], body=body)],
        [tensor("M", I64, []), tensor("m0", F, [2, 2])],
        [tensor("m", F, [2, 2])],
        domains=["ai.onnx.ml"],
    )
    with pytest.raises(nna.NNAdapterError, match=r"Loop.*in its body.*FeatureVectorizer") as err:
        nna.Predictor(model)
    assert err.value.code == nna.ResultCode.FEATURE_NOT_SUPPORTED
    feeds = {"M": np.array(3, "int64"), "m0": np.array([[1.0, 0.5], [0.25, 1.0]], "float32")}
    check(model, feeds, nna.Predictor(model, host_fallback=True))


# -- Scan ------------------------------------------------------------------------------------


def scan_model() -> onnx.ModelProto:
    """Two states (a running sum and a running max) over x scanned along axis 1 in reverse and y along
    axis 0 forwards; scan outputs stacked along axis 1 in reverse and along axis 0 forwards."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["sum_in", "xt"], ["s1"]),
            helper.make_node("Mul", ["s1", "yt"], ["sum_out"]),
            helper.make_node("Max", ["max_in", "xt"], ["max_out"]),
            helper.make_node("Sub", ["sum_out", "bias"], ["out1"]),
            helper.make_node("Neg", ["max_out"], ["out2"]),
        ],
        "body",
        [tensor("sum_in", F, [2]), tensor("max_in", F, [2]), tensor("xt", F, [2]), tensor("yt", F, [2])],
        [tensor("sum_out", F, [2]), tensor("max_out", F, [2]), tensor("out1", F, [2]), tensor("out2", F, [2])],
    )
    scan = helper.make_node(
        "Scan",
        ["s0", "m0", "x", "y"],
        ["s", "m", "o1", "o2"],
        body=body,
        num_scan_inputs=2,
        scan_input_axes=[1, 0],
        scan_input_directions=[1, 0],
        scan_output_axes=[1, -2],
        scan_output_directions=[1, 0],
    )
    nodes = [helper.make_node("Relu", ["x_raw"], ["x"]), scan]
    return make_model(
        nodes,
        [tensor("s0", F, [2]), tensor("m0", F, [2]), tensor("x_raw", F, [2, 4]), tensor("y", F, [4, 2])],
        [tensor("s", F, [2]), tensor("m", F, [2]), tensor("o1", F, [2, 4]), tensor("o2", F, [4, 2])],
        [const("bias", np.array([0.5, -0.5], "float32"))],
    )


def test_scan_with_axes_and_reverse_directions() -> None:
    model = scan_model()
    rng = np.random.default_rng(1)
    feeds = {
        "s0": np.array([0.1, -0.2], "float32"),
        "m0": np.array([0.0, 5.0], "float32"),
        "x_raw": rng.normal(size=(2, 4)).astype("float32"),
        "y": rng.uniform(0.5, 1.5, (4, 2)).astype("float32"),
    }
    check(model, feeds)


@pytest.mark.parametrize("lengths", [None, [4, 2, 3]])
def test_scan8_with_a_batch_axis(lengths: list[int] | None) -> None:
    """Scan-8: a batch axis 0 on states and scan inputs, each entry scanned (in reverse here) over its
    own sequence_lens; outputs past an entry's length are zeros."""
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["a_out"]), helper.make_node("Mul", ["a_out", "b"], ["c"])],
        "body",
        [tensor("a", F, [2]), tensor("b", F, [2])],
        [tensor("a_out", F, [2]), tensor("c", F, [2])],
    )
    inputs = [tensor("a0", F, [3, 2]), tensor("xs", F, [3, 4, 2])]
    if lengths is not None:
        inputs.insert(0, tensor("lens", I64, [3]))
    model = make_model(
        [
            helper.make_node(
                "Scan",
                ["lens" if lengths else "", "a0", "xs"],
                ["a", "cs"],
                body=body,
                num_scan_inputs=1,
                directions=[1],
            )
        ],
        inputs,
        [tensor("a", F, [3, 2]), tensor("cs", F, [3, 4, 2])],
        opset=8,
    )
    rng = np.random.default_rng(2)
    feeds = {"a0": rng.normal(size=(3, 2)).astype("float32"), "xs": rng.normal(size=(3, 4, 2)).astype("float32")}
    if lengths is not None:
        feeds["lens"] = np.array(lengths, "int64")
    check(model, feeds)


# -- the cache -----------------------------------------------------------------------------


def test_a_cached_load_compiles_nothing(tmp_path, monkeypatch) -> None:
    """Every branch and body is a .nnc under the cache dir, keyed by its model token: a second
    Predictor on the same cache dir loads them all and never calls the compiler."""
    model = loop_model()
    first = nna.Predictor(model, cache_dir=tmp_path)
    body_subgraphs = [s for u in first.graph.units if isinstance(u, ControlUnit) for s in u.bodies["body"].plan]
    assert body_subgraphs, "the loop body has its own compiled subgraph"
    assert len(first.compilations) >= 2 and not first.loaded_from_cache
    files = sorted(f for f in os.listdir(tmp_path) if f.endswith(".nnc"))
    assert files == sorted(f"{t}.nnc" for t in set(first.tokens))

    def refuse(self: Compilation) -> None:
        raise AssertionError("a cached load must not compile")

    monkeypatch.setattr(Compilation, "_compile", refuse)
    second = nna.Predictor(model, cache_dir=tmp_path)
    assert second.loaded_from_cache and all(c.loaded_from_cache for c in second.compilations)
    assert second.tokens == first.tokens and second.token == first.token
    x0 = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], "float32")
    feeds = {"M": np.array(6, "int64"), "cond": np.array(True), "x0": x0, "acc0": np.ones(3, "float32")}
    check(model, feeds, second)


def batch_squeeze_model() -> onnx.ModelProto:
    """As PyTorch exports ``if x.shape[0] == 1: x = x.squeeze(0)`` (silero-vad's decoder): the first If's
    output is [3] in one branch and [batch, 3] in the other, so the rest of the graph runs inside each
    branch. The second If, on the same condition, unsqueezes back; then a Transpose that takes rank 2
    only. Two of the four branch combinations are never reached (rank 1 or 3 at the Transpose): they
    fail to import and are kept as branches that fail if taken, not as import errors."""

    def batch_if(src: str, dst: str, then_op: str) -> list:
        then_g = helper.make_graph(
            [helper.make_node(then_op, [src, "axis0"], [f"{dst}_t"])], f"{dst}_then", [], [tensor(f"{dst}_t", F, None)]
        )
        else_g = helper.make_graph(
            [helper.make_node("Identity", [src], [f"{dst}_e"])], f"{dst}_else", [], [tensor(f"{dst}_e", F, None)]
        )
        return [helper.make_node("If", ["is_one"], [dst], then_branch=then_g, else_branch=else_g)]

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Equal", ["n", "one"], ["is_one"]),
        helper.make_node("Relu", ["x"], ["r"]),
        *batch_if("r", "a", "Squeeze"),
        helper.make_node("Mul", ["a", "w"], ["b"]),
        *batch_if("b", "c", "Unsqueeze"),
        helper.make_node("Transpose", ["c"], ["y"], perm=[1, 0]),
    ]
    inits = [
        const("axis0", np.array([0], "int64")),
        const("zero", np.array(0, "int64")),
        const("one", np.array(1, "int64")),
        const("w", np.array([2.0, -1.0, 0.5], "float32")),
    ]
    # Not full_check: the branches' outputs have no static shape (their ranks differ).
    return make_model(nodes, [tensor("x", F, ["batch", 3])], [tensor("y", F, [3, "batch"])], inits, full_check=False)


def test_if_outputs_whose_rank_depends_on_the_branch() -> None:
    model = batch_squeeze_model()
    predictor = nna.Predictor(model)
    (unit,) = [u for u in predictor.graph.units if isinstance(u, ControlUnit)]
    # The rest of the graph went into the first If's branches: its outputs are the graph's.
    assert [v.name for v in unit.outputs] == ["y"] and predictor.graph.units[-1] is unit
    # After the squeeze, the second If's else branch leaves rank 1 for the Transpose; without it, its
    # then branch makes rank 3: each is kept as a branch that fails if taken.
    for first, never in (("then_branch", "else_branch"), ("else_branch", "then_branch")):
        (inner,) = [u for u in unit.bodies[first].graph.units if isinstance(u, ControlUnit)]
        assert inner.bodies[never].graph is None and "Transpose" in inner.bodies[never].error
        assert inner.bodies[first].graph is not None
    rng = np.random.default_rng(3)
    for batch in (1, 2, 3):
        out = check(model, {"x": rng.normal(size=(batch, 3)).astype("float32")}, predictor)
        assert out[0].shape == (3, batch)


def test_an_inlined_branch_ignores_the_output_shape_its_graph_declares() -> None:
    """Exporters declare a branch's output shape as traced on one path: here [3, 1] for an Unsqueeze
    that gives [1, 3]. The If is inlined (Size of a static shape is known at import) and the shape
    comes from the branch's nodes."""
    then_g = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x", "axis0"], ["u"])], "then", [], [tensor("u", F, [3, 1])]
    )
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["i"])], "else", [], [tensor("i", F, [3])])
    nodes = [
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Equal", ["n", "three"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Neg", ["y"], ["z"]),
    ]
    inits = [const("axis0", np.array([0], "int64")), const("three", np.array(3, "int64"))]
    model = make_model(nodes, [tensor("x", F, [3])], [tensor("z", F, [1, 3])], inits, full_check=False)
    predictor = nna.Predictor(model)
    assert not predictor.graph.host_units
    assert check(model, {"x": np.array([5.0, 6.0, 7.0], "float32")}, predictor)[0].shape == (1, 3)


def top_k_loop_model(trip: int | None) -> onnx.ModelProto:
    """acc += sum(top i + 1 of x) * i for i < M while acc < 100: a TopK of the iteration number, which
    TOP_K takes only as a constant or computed from dimensions. ``trip``: M as a constant, or None for a
    graph input."""
    body = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["i", "axis0"], ["start"]),
            helper.make_node("Add", ["start", "one"], ["k"]),
            helper.make_node("TopK", ["x", "k"], ["xi", "where"]),
            helper.make_node("ReduceSum", ["xi"], ["picked"], keepdims=1),
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Mul", ["picked", "i_f"], ["scaled"]),
            helper.make_node("Add", ["acc_in", "scaled"], ["acc_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["cond_out"]),
        ],
        "body",
        [tensor("i", I64, []), tensor("cond_in", B, []), tensor("acc_in", F, [1])],
        [tensor("cond_out", B, []), tensor("acc_out", F, [1])],
    )
    inits = [
        const("axis0", np.array([0], "int64")),
        const("one", np.array([1], "int64")),
        const("limit", np.array(100.0, "float32")),
    ]
    inputs = [tensor("x", F, [8]), tensor("cond", B, []), tensor("acc0", F, [1])]
    if trip is None:
        inputs.insert(0, tensor("M", I64, []))
    else:
        inits.append(const("M", np.array(trip, "int64")))
    nodes = [helper.make_node("Loop", ["M", "cond", "acc0"], ["acc"], body=body)]
    return make_model(nodes, inputs, [tensor("acc", F, [1])], inits)


def test_a_loop_body_that_needs_its_iteration_number_at_import_is_unrolled() -> None:
    model = top_k_loop_model(trip=6)
    predictor = nna.Predictor(model)
    (unit,) = [u for u in predictor.graph.units if isinstance(u, ControlUnit)]
    assert unit.unrolled == 6 and sorted(unit.bodies) == [f"body#{i}" for i in range(6)]
    x = np.arange(8, dtype="float32") * 3
    for cond in (True, False):
        check(model, {"x": x, "cond": np.array(cond), "acc0": np.zeros(1, "float32")}, predictor)
    check(model, {"x": x * 10, "cond": np.array(True), "acc0": np.ones(1, "float32")}, predictor)  # stops early
    # With M fed at run time, the error names the Loop and the TopK, and M as the input to bind.
    with pytest.raises(nna.NNAdapterError, match=r"Loop.*in its body.*TopK") as err:
        nna.Predictor(top_k_loop_model(trip=None))
    assert "M" in err.value.needs_constant
