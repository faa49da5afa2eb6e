"""A ``match_cast`` that binds a symbolic dimension to an expression containing it (issue 17).

TVM 0.27's ``CanonicalizeBindings`` (inside ``KillAfterLastUse``, run by every ``tvm.compile``) recursed
without end on such a binding and the process died (SIGSEGV, a stack overflow ~42,000 frames deep):
ONNX ``Expand(x, s fed)`` then ``Add(x, expanded)`` was enough, ADD's cast of the expanded tensor's size
``select(s0 == 1, N, s0)`` to x's ``N`` being the binding.  ``nnadapter_tvm.runtime.builder`` turns such
a binding into a guard.  Every compile here runs in a child process, so that a crash fails the test
instead of killing pytest; results are compared with onnxruntime.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()

# (producer, consumer): the producer's output size is an expression of N and of a tensor fed at run time.
GRAPHS = [
    ("Expand", "Add"),
    ("Expand", "Sub"),
    ("Expand", "Mul"),
    ("Expand", "Where"),
    ("Tile", "Add"),
    ("Reshape", "Add"),
]


def _model(producer: str, consumer: str):
    """x: float32[N, 3], s: int64[2] fed at run time; producer(x, s) -> e; consumer(x, e) -> u; Relu(u)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node(producer, ["x", "s"], ["e"])]
    if consumer == "Where":
        zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
        nodes += [helper.make_node("Greater", ["x", "zero"], ["c"]), helper.make_node("Where", ["c", "x", "e"], ["u"])]
        inits = [zero]
    else:
        nodes.append(helper.make_node(consumer, ["x", "e"], ["u"]))
        inits = []
    nodes.append(helper.make_node("Relu", ["u"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(producer: str, n: int, rows: int | None = None):
    """Feeds where the producer's output has x's shape [n, 3] (``rows``: ask for another row count)."""
    import numpy as np

    x = np.random.default_rng(n).standard_normal((n, 3)).astype("float32")
    s = {"Expand": [rows or n, 3], "Tile": [1 if rows is None else rows, 1], "Reshape": [-1, 3]}[producer]
    return {"x": x, "s": np.array(s, "int64")}


def _child(producer: str, consumer: str, schedules: str) -> None:
    """Compile and run in this (child) process; print a JSON line of what happened."""
    import os

    os.environ["NNADAPTER_TVM_CPU_SCHEDULES"] = schedules
    import numpy as np
    import onnxruntime as ort

    import nnadapter_tvm as nna

    model = _model(producer, consumer)
    try:
        predictor = nna.Predictor(model)
    except nna.NNAdapterError as err:  # refused at compile time: reported, not a crash
        print(json.dumps({"compile_error": str(err)}))
        return
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    worst = 0.0
    for n in (1, 3, 5):
        feeds = _feeds(producer, n)
        got = predictor.run(feeds)[0]
        want = session.run(None, feeds)[0]
        assert got.shape == want.shape, (n, got.shape, want.shape)
        worst = max(worst, float(np.max(np.abs(got - want))))
    # Sizes the guard refuses: the producer's rows differ from x's (Expand/Tile: 4 rows against 2).
    refused = None
    if producer in ("Expand", "Tile"):
        feeds = _feeds(producer, 2, rows=4 if producer == "Expand" else 2)
        try:
            predictor.run(feeds)
        except nna.NNAdapterError as err:
            refused = str(err)
        try:
            session.run(None, feeds)
            ort_refused = False
        except Exception:  # onnxruntime's own error type: any refusal counts
            ort_refused = True
        print(json.dumps({"worst": worst, "refused": refused, "ort_refused": ort_refused}))
        return
    print(json.dumps({"worst": worst, "refused": refused}))


def _run_child(*argv: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE), *argv], capture_output=True, text=True, timeout=900, cwd=HERE.parents[2]
    )
    assert proc.returncode == 0, (
        f"child {argv} exited with {proc.returncode}"
        + (" (killed by a signal: a crash in the compiler)" if proc.returncode < 0 else "")
        + f"\n{proc.stderr[-3000:]}"
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("producer,consumer", GRAPHS, ids=[f"{p}-{c}" for p, c in GRAPHS])
def test_fed_size_then_binary_compiles_and_matches_onnxruntime(producer: str, consumer: str) -> None:
    """Each graph compiles (no crash), matches onnxruntime for N = 1, 3, 5, and a feed that makes the two
    sizes differ fails the execution with NNAdapterError (INVALID_DIMENSIONS) naming the operation that
    refused it (the guard that replaced the crashing cast names ADD)."""
    result = _run_child("graph", producer, consumer, "1")
    if consumer == "Where":
        # WHERE does not unify two sizes both unknown until execution (ADD and the other binary
        # operations do): it refuses the graph at compile time, cleanly.  Open; see docs/reliability.md.
        assert "FEATURE_NOT_SUPPORTED" in result.get("compile_error", ""), result
        return
    assert result["worst"] <= 1e-6, result
    if producer == "Expand":  # x [2, 3] expanded to [4, 3]: not broadcastable, onnxruntime refuses too
        assert result["ort_refused"], result
        assert result["refused"].startswith("[INVALID_DIMENSIONS] EXPAND"), result
    if producer == "Tile":  # Tile(x, [2, 1]) has 4 rows, x 2: the binary operation's guard names it
        assert result["refused"].startswith(f"[INVALID_DIMENSIONS] {consumer.upper()}"), result
        assert "must equal" in result["refused"], result


def test_default_pipeline_too() -> None:
    """With NNADAPTER_TVM_CPU_SCHEDULES=0 (TVM's own pipeline, which crashed the same way)."""
    result = _run_child("graph", "Expand", "Add", "0")
    assert result["worst"] <= 1e-6, result


def _builder_child(case: str, plain: str = "0") -> None:
    """A Relax function built with ConvertBlockBuilder (``plain`` "1": relax.BlockBuilder), compiled with
    TVM's default pipeline and run: the casts that crashed TVM (n := select(d == 1, n, d); m := n + 1
    then n := m - 1) build, give x + x where the sizes agree and fail where they differ."""
    import numpy as np
    import tvm
    from tvm import relax, tirx

    from nnadapter_tvm.runtime.builder import ConvertBlockBuilder

    n, m, d = (tirx.Var(name, "int64") for name in "nmd")
    bb = relax.BlockBuilder() if plain == "1" else ConvertBlockBuilder()
    if case == "self":  # x: [n, 3] seen as [select(d == 1, n, d), 3] (EXPAND's size), cast back to [n, 3]
        x = relax.Var("x", relax.TensorType([n, 3], "float32"))
        s = relax.Var("s", relax.ShapeType([d]))
        with bb.function("main", [x, s]):
            with bb.dataflow():
                e = bb.match_cast(x, relax.TensorType([tirx.Select(d == 1, n, d), 3], "float32"))
                y = bb.match_cast(e, relax.TensorType([n, 3], "float32"))
                out = bb.emit_output(relax.op.add(x, y))
            bb.emit_func_output(out)
        runs = [((3, 3), 1), ((3, 3), 3), ((4, 3), 4)]
        bad = [((3, 3), 5)]
    else:  # "cycle": x: [n, m] seen as [m + 1, n + 1], cast to [m + 1, m] (m := n + 1), then to [n, m]
        # (n := m + 1, which leads back to n).  Sizes that satisfy both do not exist: every run is refused.
        x = relax.Var("x", relax.TensorType([n, m], "float32"))
        s = relax.Var("s", relax.ShapeType([d]))
        with bb.function("main", [x, s]):
            with bb.dataflow():
                y = bb.match_cast(x, relax.TensorType([m + 1, n + 1], "float32"))
                a = bb.match_cast(y, relax.TensorType([m + 1, m], "float32"))
                z = bb.match_cast(a, relax.TensorType([n, m], "float32"))
                out = bb.emit_output(relax.op.add(x, z))
            bb.emit_func_output(out)
        runs = []
        bad = [((2, 3), 0), ((3, 2), 0)]
    vm = relax.VirtualMachine(tvm.compile(bb.get(), "llvm"), tvm.cpu())
    worst = 0.0
    for shape, dv in runs:
        a = np.random.default_rng(0).standard_normal(shape).astype("float32")
        got = vm["main"](tvm.runtime.tensor(a), tvm.runtime.ShapeTuple([dv])).numpy()
        worst = max(worst, float(np.max(np.abs(got - (a + a)))))
    refused = 0
    for shape, dv in bad:
        try:
            vm["main"](tvm.runtime.tensor(np.ones(shape, "float32")), tvm.runtime.ShapeTuple([dv]))
        except Exception as err:  # TVM's match_cast failure (a TVMError) is what we want to see
            refused += "match_cast" in str(err)
    print(json.dumps({"worst": worst, "refused": refused, "bad": len(bad)}))


@pytest.mark.parametrize("case", ["self", "cycle"])
def test_builder_guards_instead_of_binding(case: str) -> None:
    result = _run_child("builder", case)
    assert result["worst"] == 0.0 and result["refused"] == result["bad"], result


def test_builder_keeps_ordinary_casts() -> None:
    """Casts that bind new variables, or variables to expressions not leading back to them, are emitted as
    single match_casts (no guard, no view): the converters' other casts keep their IR."""
    from tvm import relax, tirx

    from nnadapter_tvm.runtime.builder import ConvertBlockBuilder

    n, k = tirx.Var("n", "int64"), tirx.Var("k", "int64")
    bb = ConvertBlockBuilder()
    x = relax.Var("x", relax.TensorType([n + 1, 3], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.match_cast(x, relax.TensorType([k, 3], "float32"))  # k := n + 1, k new
            z = bb.match_cast(y, relax.TensorType([k, 3], "float32"))  # identity
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    bindings = bb.get()["main"].body.blocks[0].bindings
    assert [type(b).__name__ for b in bindings] == ["MatchCast", "MatchCast", "VarBinding"]


if __name__ == "__main__":
    if sys.argv[1] == "graph":
        _child(*sys.argv[2:5])
    else:
        _builder_child(*sys.argv[2:4])
