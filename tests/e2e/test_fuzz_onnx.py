"""Differential fuzzing against onnxruntime: random valid ONNX graphs must give the reference's outputs.

The generator, runner, comparison and minimizer are in tests/fuzz_onnx/ (docs/reliability.md says how
they work and what the campaigns found).  CI runs ``BATCHES`` derandomized batches of ``GRAPHS``
graphs each (every batch one compilation) and replays every case of tests/fuzz_corpus_onnx/.  A corpus
case with a ``bug`` is a known, open difference in a file this fuzzer's owner does not own: its replay
is an expected failure, and the batches report a matching outcome as known instead of failing.

    NNA_ONNX_FUZZ_BATCHES=20 NNA_ONNX_FUZZ_SEED=7 pytest tests/e2e/test_fuzz_onnx.py     a bigger, random run
    python scripts/fuzz_onnx.py --graphs 2000 --seed 1                               a campaign
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fuzz_onnx

import fuzz_onnx

BATCHES = int(os.environ.get("NNA_ONNX_FUZZ_BATCHES", "12"))
GRAPHS = int(os.environ.get("NNA_ONNX_FUZZ_GRAPHS", "8"))
MAX_NODES = int(os.environ.get("NNA_ONNX_FUZZ_NODES", "10"))
SEED = os.environ.get("NNA_ONNX_FUZZ_SEED")  # unset: the same graphs on every run
CORPUS_FILES = sorted(fuzz_onnx.CORPUS.glob("*.json"))
FAILURES = ("differs", "error")


def known_bugs() -> dict[str, str]:
    """signature -> bug, of every open corpus case."""
    bugs = {}
    for path in CORPUS_FILES:
        _, data = fuzz_onnx.load(path)
        if data.get("signature") and (data.get("bug") or data.get("oracle_bug")):
            bugs[data["signature"]] = data.get("bug") or f"onnxruntime's: {data['oracle_bug']}"
    return bugs


def test_generator_draws_valid_graphs_of_the_vocabulary() -> None:
    """The graphs are valid ONNX (checker and strict shape inference), use many operators of the
    vocabulary, and carry symbolic input dimensions and special values in some feeds."""
    import numpy as np
    import onnx
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    seen_ops, symbolic, special = set(), 0, 0

    @settings(max_examples=60, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data) -> None:
        nonlocal symbolic, special
        case = fuzz_onnx.draw_graph(fuzz_onnx.Draw(data), "g_", 8)
        onnx.checker.check_model(case.model, full_check=True)
        seen_ops.update(n.op_type for n in case.model.graph.node)
        dims = [d for i in case.model.graph.input for d in i.type.tensor_type.shape.dim]
        symbolic += any(d.HasField("dim_param") for d in dims)
        special += any(not np.isfinite(a).all() for a in case.feeds.values())

    draw()
    assert len(seen_ops) >= 30, sorted(seen_ops)
    assert symbolic >= 5 and special >= 5, (symbolic, special)


def test_differences_are_detected() -> None:
    """The comparison itself: NaN placement, infinities, values beyond the depth's tolerance, shapes."""
    import numpy as np

    ref = np.array([1.0, np.nan, np.inf, -2.0], "float32")
    assert fuzz_onnx.differs(ref, ref.copy(), 3) is None
    assert fuzz_onnx.differs(ref, np.array([1.0, 0.0, np.inf, -2.0], "float32"), 3)  # a dropped NaN
    assert fuzz_onnx.differs(ref, np.array([1.0, np.nan, 3e38, -2.0], "float32"), 3)  # a finite inf
    assert fuzz_onnx.differs(ref, np.array([1.0, np.nan, np.inf, -2.001], "float32"), 3)
    assert fuzz_onnx.differs(ref, np.array([1.0 + 1e-6, np.nan, np.inf, -2.0], "float32"), 3) is None
    assert fuzz_onnx.differs(ref, ref[:3], 3)
    assert fuzz_onnx.differs(np.array([1, 2]), np.array([1, 3]), 1)


def test_onnx_fuzz_batches(record_property, tmp_path) -> None:
    """``BATCHES`` batches of ``GRAPHS`` random graphs, each batch one multi-output model: every
    output equal to onnxruntime's (or refused with NNAdapterError, or a known open bug).  A failure's
    minimized case is saved (the message says where) in the corpus format."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    bugs = known_bugs()
    tally: dict[str, int] = {}
    failures: list[str] = []

    @settings(
        max_examples=BATCHES,
        derandomize=SEED is None,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def batch(data) -> None:
        draw = fuzz_onnx.Draw(data)
        cases = [fuzz_onnx.draw_graph(draw, f"g{k}_", MAX_NODES) for k in range(GRAPHS)]
        for case, outcomes in fuzz_onnx.run_graphs(cases):
            if any(o.status == "error" for o in outcomes.values()):  # the compilation's: one per graph
                outcomes = {n: o for n, o in outcomes.items() if o.status == "error"}
                outcomes = dict([next(iter(outcomes.items()))])
            for name, outcome in outcomes.items():
                status = outcome.status
                if status in FAILURES:
                    small = fuzz_onnx.minimize(case, name, status)
                    bug = bugs.get(fuzz_onnx.signature(small, status, outcome.detail))
                    why = fuzz_onnx.explain(small) if status == "differs" and bug is None else None
                    if why:  # float32's range, an ill-conditioned sum, an amplified rounding: not wrong
                        tally[why] = tally.get(why, 0) + 1
                        continue
                    if bug is None:
                        saved = tmp_path / f"{len(failures)}-{fuzz_onnx.signature(small, status, outcome.detail)}.json"
                        fuzz_onnx.save(small, saved, outcome.detail, status=status)
                        failures.append(
                            f"{saved}: "
                            + f"{name}: {status}: {outcome.detail}\n  "
                            + "\n  ".join(fuzz_onnx.describe(case.model))
                        )
                    status = f"known ({bug})" if bug else status
                tally[status] = tally.get(status, 0) + 1

    if SEED is not None:
        from hypothesis import seed

        batch = seed(int(SEED))(batch)
    batch()
    record_property("outcomes", tally)
    print("onnx fuzz outcomes:", tally)
    assert not failures, "\n".join(failures[:5])
    assert tally.get("ok", 0) >= BATCHES * GRAPHS // 2, tally


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.stem for p in CORPUS_FILES])
def test_onnx_corpus_case(path: Path) -> None:
    """A minimized case from a campaign: fixed ones must match the reference; an open one (``bug``)
    must still show its difference (else the bug is fixed: clear ``bug`` so that it guards the fix);
    one where onnxruntime is wrong (``oracle_bug``) must match the operator's definition (``expected``);
    one a campaign counted apart (``explained``: float32_range, ill_conditioned, amplified) must still be
    explained so (fuzz_onnx.explain), and not as anything looser."""
    case, data = fuzz_onnx.load(path)
    if data.get("explained"):
        assert fuzz_onnx.explain(case) == data["explained"], (path.name, data["why"])
        return
    if data.get("expected"):  # the reference is wrong here: compare with the operator's definition
        import nnadapter_tvm as nna

        got = nna.Predictor(case.model).run(case.feeds)
        names = [o.name for o in case.model.graph.output]
        for name, value in zip(names, got):
            want = fuzz_onnx._decode(data["expected"][name])
            assert fuzz_onnx.differs(want, value, case.depths.get(name, 1)) is None, (name, data["oracle_bug"])
        return
    outcomes = fuzz_onnx.run_case(case)
    bad = {n: o for n, o in outcomes.items() if o.status in FAILURES or o.status == "invalid"}
    if data.get("bug"):
        # An open bug may be one the spec decides where the two oracles disagree (Clip's default
        # bounds): "ambiguous" still shows it.
        if not bad and all(o.status == "ok" for o in outcomes.values()):
            pytest.fail(f"{path.name} now matches the reference: {data['bug']} is fixed, clear its 'bug'")
        pytest.xfail(f"open: {data['bug']}")
    assert not bad, {n: f"{o.status}: {o.detail}" for n, o in bad.items()}


# -- the third opinion: the definition, onnx's evaluator in float64 with the max family propagating NaN --
def _model(nodes, inputs, outputs, inits=(), opset: int = 17):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def test_float64_conversion_computes_in_float64() -> None:
    """Every float32 type, initializer, Constant (tensor and value_float), ConstantOfShape value and Cast
    target, in the graph and in a Loop body, becomes float64: the evaluator's outputs are float64 and
    equal numpy's float64 arithmetic, where float32 loses the 1e-8 (1 + 1e-8 == 1)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, "float32"))),
            helper.make_node("Mul", ["v", "two"], ["twice"]),
            helper.make_node("Add", ["twice", "b"], ["v_out"]),  # b from the outer scope
            helper.make_node("Identity", ["v_out"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", f32, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", f32, [3]),
            helper.make_tensor_value_info("scan", f32, None),
        ],
    )
    half = numpy_helper.from_array(np.array([0.5], "float32"))
    nodes = [
        helper.make_node("Constant", [], ["eps"], value_float=1e-8),
        helper.make_node("Add", ["x", "eps"], ["a"]),
        helper.make_node("Sub", ["a", "one"], ["b"]),  # 1e-8 in float64, 0 in float32
        helper.make_node("ConstantOfShape", ["shape"], ["half"], value=half),
        helper.make_node("Mul", ["b", "half"], ["c"]),
        helper.make_node("Cast", ["c"], ["d"], to=f32),
        helper.make_node("Loop", ["trips", "true", "d"], ["v_final", "v_all"], body=body),
    ]  # fmt: skip
    inits = [
        numpy_helper.from_array(np.ones(3, "float32"), "one"),
        numpy_helper.from_array(np.array([3], "int64"), "shape"),
        numpy_helper.from_array(np.array(2, "int64"), "trips"),
        numpy_helper.from_array(np.array(True), "true"),
    ]
    outs = [helper.make_tensor_value_info(n, f32, s) for n, s in (("d", [3]), ("v_final", [3]), ("v_all", [2, 3]))]
    model = _model(nodes, [helper.make_tensor_value_info("x", f32, [3])], outs, inits)
    onnx.checker.check_model(model, full_check=True)
    x = np.array([1.0, 2.0, -1.0], "float32")

    wide = fuzz_onnx.to_float64(model)
    assert all(t.data_type != f32 for t in wide.graph.initializer)
    loop_body = wide.graph.node[-1].attribute[0].g
    assert loop_body.input[2].type.tensor_type.elem_type == TensorProto.DOUBLE
    assert loop_body.node[1].attribute[0].t.data_type == TensorProto.DOUBLE
    d, v_final, v_all = ReferenceEvaluator(wide).run(None, {"x": x.astype("float64")})
    assert d.dtype == v_final.dtype == v_all.dtype == np.float64

    x64 = x.astype("float64")
    d_ref = (x64 + 1e-8 - 1.0) * 0.5
    b_ref = x64 + 1e-8 - 1.0
    steps = [d_ref * 2 + b_ref]
    steps.append(steps[0] * 2 + b_ref)
    np.testing.assert_allclose(d, d_ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(v_final, steps[-1], rtol=1e-12, atol=0)
    np.testing.assert_allclose(v_all, np.stack(steps), rtol=1e-12, atol=0)
    # In float32 the 1e-8 is lost: what the definition adds over the second opinion.
    assert ReferenceEvaluator(model).run(None, {"x": x})[0][0] == 0 and d[0] > 0

    case = fuzz_onnx.Case(model, {"x": x}, {"d": 1, "v_final": 1, "v_all": 1})
    definition = fuzz_onnx.definition(case)
    assert [v.dtype for v in definition] == [np.float32] * 3
    np.testing.assert_array_equal(definition[0], d_ref.astype("float32"))


def _numpy_max_pool(x, kernel, pads, strides):
    """NaN-propagating max pool (numpy's max over each window; pads are outside every window)."""
    import numpy as np

    n, c, h, w = x.shape
    padded = np.full((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), -np.inf, x.dtype)
    padded[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + w] = x
    oh = (padded.shape[2] - kernel[0]) // strides[0] + 1
    ow = (padded.shape[3] - kernel[1]) // strides[1] + 1
    y = np.empty((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            window = padded[
                :, :, i * strides[0] : i * strides[0] + kernel[0], j * strides[1] : j * strides[1] + kernel[1]
            ]
            y[:, :, i, j] = np.max(window, axis=(2, 3))
    return y


MAX_POOL = {"kernel_shape": [2, 3], "pads": [1, 0, 1, 1], "strides": [2, 1]}


def _max_pool_case():
    import numpy as np
    from onnx import TensorProto, helper

    x = np.random.default_rng(0).uniform(-3, 3, (1, 2, 5, 6)).astype("float32")
    x[0, 0, 1, 2] = np.nan  # not first in its windows
    x[0, 1, 3, 4] = np.nan
    node = helper.make_node("MaxPool", ["x"], ["y"], **MAX_POOL)
    model = _model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return fuzz_onnx.Case(model, {"x": x}, {"y": 1})


def test_nan_propagating_max_family_matches_numpy() -> None:
    """The definition's MaxPool, GlobalMaxPool, ReduceMax and ReduceMin give numpy's NaN wherever a window
    or row holds a NaN (onnx's own evaluator skips a NaN that is not first in a MaxPool window)."""
    import numpy as np
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    case = _max_pool_case()
    x = case.feeds["x"]
    new_ops = fuzz_onnx.nan_propagating_ops(17)
    want = _numpy_max_pool(x, MAX_POOL["kernel_shape"], MAX_POOL["pads"], MAX_POOL["strides"])
    assert np.isnan(want).any()
    np.testing.assert_array_equal(ReferenceEvaluator(case.model, new_ops=new_ops).run(None, case.feeds)[0], want)
    assert not np.isnan(ReferenceEvaluator(case.model).run(None, case.feeds)[0]).all(where=np.isnan(want))

    rows = np.array([[1.0, np.nan, 3.0], [2.0, -1.0, 0.5], [np.nan, np.inf, -np.inf]], "float32")
    for op, ref in (("ReduceMax", np.max), ("ReduceMin", np.min)):
        node = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)
        model = _model(
            [node],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
        np.testing.assert_array_equal(
            ReferenceEvaluator(model, new_ops=new_ops).run(None, {"x": rows})[0], ref(rows, 1)
        )
    node = helper.make_node("GlobalMaxPool", ["x"], ["y"])
    model = _model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    got = ReferenceEvaluator(model, new_ops=new_ops).run(None, case.feeds)[0]
    np.testing.assert_array_equal(got, np.max(x, axis=(2, 3), keepdims=True))


def test_max_pool_nan_anywhere_in_window_is_ambiguous() -> None:
    """Ours NaN, onnxruntime and onnx's float32 evaluator a number (NaN not first in the window): the
    definition sides with us at every differing element, so the outcome is ambiguous and says so."""
    outcome = fuzz_onnx.run_case(_max_pool_case())["y"]
    assert outcome.status == "ambiguous", outcome
    assert "the definition" in outcome.detail and "agrees with us" in outcome.detail


def _wrong_at(monkeypatch, index: int, delta: float) -> None:
    """Our Predictor, with element ``index`` of the first output moved by ``delta``."""
    import nnadapter_tvm as nna

    real = nna.Predictor

    class Wrong:
        def __init__(self, *args, **kwargs):
            self._predictor = real(*args, **kwargs)

        def run(self, feeds):
            out = [o.copy() for o in self._predictor.run(feeds)]
            out[0].flat[index] += delta
            return out

    monkeypatch.setattr(nna, "Predictor", Wrong)


def test_a_genuine_difference_still_differs(monkeypatch) -> None:
    """Where neither opinion sides with us (our output moved off at a NaN-free element of the max pool;
    an Add off by a half) the outcome stays a difference."""
    import numpy as np
    from onnx import TensorProto, helper

    case = _max_pool_case()
    _wrong_at(monkeypatch, 0, 0.5)  # y[0, 0, 0, 0]: a window without NaN
    assert fuzz_onnx.run_case(case)["y"].status == "differs"

    x = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")
    model = _model(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    outcome = fuzz_onnx.run_case(fuzz_onnx.Case(model, {"x": x}, {"y": 1}))["y"]
    assert outcome.status == "differs" and "got np.float32(2.5)" in outcome.detail, outcome


def _one_float_node(op: str, shape: tuple, **attrs):
    """A model of one ``op`` node from float input x of ``shape`` to y."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


POOLS = [
    {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "strides": [1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0], "strides": [1, 2], "dilations": [2, 1]},
    {"kernel_shape": [3], "pads": [2, 2], "strides": [3], "ceil_mode": 1},
]


@pytest.mark.parametrize("attrs", POOLS, ids=str)
def test_definition_max_pool_matches_onnxruntime_without_nan(attrs: dict) -> None:
    """The definition's own MaxPool (the evaluator's fails on some windows) agrees with onnxruntime where
    no NaN is involved: window sizes, padding, dilations and ceil_mode's dropped last window."""
    import numpy as np
    import onnxruntime as ort

    rank = len(attrs["kernel_shape"])
    x = np.random.default_rng(0).uniform(-3, 3, (2, 3, *(7, 8)[:rank])).astype("float32")
    model = _one_float_node("MaxPool", x.shape, **attrs)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(fuzz_onnx.max_pool(x, **attrs), want)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_definition_lrn_matches_onnxruntime_on_finite_values(size: int) -> None:
    """The definition's LRN (onnx's evaluator loops over the batch instead of the channels) agrees with
    onnxruntime on finite values, with more channels than the batch."""
    import numpy as np
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(1).uniform(-3, 3, (1, 5, 3, 4)).astype("float32")
    model = _one_float_node("LRN", x.shape, size=size, alpha=0.01, beta=0.75, bias=1.0)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (got,) = ReferenceEvaluator(model, new_ops=fuzz_onnx.nan_propagating_ops(17)).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_dynamic_quantize_of_nan_is_ambiguous_by_our_documented_rule() -> None:
    """DynamicQuantizeLinear of a row holding NaN: onnxruntime's range depends on the SIMD lane the NaN
    falls in, onnx's evaluator gives a NaN scale; ours leaves NaN out of the range (documented), which
    the definition opinion encodes, so the case is ambiguous, not a difference."""
    import numpy as np
    from onnx import TensorProto, helper

    x = np.linspace(-3, 5, 32).astype("float32")
    x[31] = np.nan
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32])],
        [
            helper.make_tensor_value_info("y", TensorProto.UINT8, [32]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("z", TensorProto.UINT8, []),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    outcomes = fuzz_onnx.run_case(fuzz_onnx.Case(model, {"x": x}, {"y": 1, "s": 1, "z": 1}))
    assert {o.status for o in outcomes.values()} <= {"ok", "ambiguous"}, outcomes
    assert any(o.status == "ambiguous" for o in outcomes.values()), outcomes


def test_float32_only_operators_stay_float32_in_the_float64_model() -> None:
    """DynamicQuantizeLinear (float32 input only) and DequantizeLinear (float32 scale and output before
    opset 19) run in float32 between casts, so the definition quantizes as the float32 model does (a
    float64 scale rounds some values to the other step), while a Mul after them computes in float64."""
    import numpy as np
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    f32 = TensorProto.FLOAT
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zero"]),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["dq"]),
        helper.make_node("Mul", ["dq", "x"], ["y"]),
    ]
    model = _model(
        nodes, [helper.make_tensor_value_info("x", f32, [64])], [helper.make_tensor_value_info("y", f32, [64])]
    )
    x = np.random.default_rng(3).uniform(-3, 3, 64).astype("float32")
    wide = fuzz_onnx.to_float64(model)
    ops = [(n.op_type, [a.i for a in n.attribute if a.name == "to"]) for n in wide.graph.node]
    assert ops[:2] == [("Cast", [TensorProto.FLOAT]), ("DynamicQuantizeLinear", [])], ops
    assert ("Cast", [TensorProto.DOUBLE]) in ops and ops[-1] == ("Mul", [])
    new_ops = fuzz_onnx.nan_propagating_ops(17)  # DequantizeLinear below opset 19 among them
    (y,) = ReferenceEvaluator(wide, new_ops=new_ops).run(None, {"x": x.astype("float64")})
    assert y.dtype == np.float64
    outs = [("q", TensorProto.UINT8), ("scale", f32), ("zero", TensorProto.UINT8)]
    alone = _model(nodes[:1], model.graph.input, [helper.make_tensor_value_info(n, t, None) for n, t in outs])
    q, scale, zero = ReferenceEvaluator(alone).run(None, {"x": x})
    dequantized = (q.astype("float32") - np.float32(zero)) * scale  # float32, as the operator defines it
    np.testing.assert_array_equal(y, dequantized.astype("float64") * x.astype("float64"))
