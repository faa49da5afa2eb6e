"""The benchmark's method (tools/benchmark.py): the rewrite that lets every runner fold constants, the
alternating blocks and their ratios, the peer checked against itself alone, and the table."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nnadapter_tvm.tools import benchmark

ort = pytest.importorskip("onnxruntime")


def test_tuning_db_specs_apply_per_model_or_to_all():
    dbs = benchmark.tuning_dbs(["squeezenet=/t/sq", "/t/all"])
    assert dbs == {"squeezenet": "/t/sq", None: "/t/all"}
    assert benchmark.tuning_dbs(["squeezenet=/t/sq"]).get("vgg19") is None
    assert benchmark.model_name("/x/light_squeezenet.onnx") == "squeezenet"


def _as_shipped() -> onnx.ModelProto:
    """An IR-3 model like onnx's light models: a Conv + BatchNormalization whose weights ConstantOfShape
    builds from initializers that are also listed as graph inputs."""
    shapes = {"w": [4, 3, 3, 3], "b": [4], "scale": [4], "bias": [4], "mean": [4], "var": [4]}
    nodes, inits, inputs = [], [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    for name, shape in shapes.items():
        inits.append(numpy_helper.from_array(np.array(shape, np.int64), f"{name}__SHAPE"))
        inputs.append(helper.make_tensor_value_info(f"{name}__SHAPE", TensorProto.INT64, [len(shape)]))
        value = helper.make_tensor("value", TensorProto.FLOAT, [1], [0.02])
        nodes.append(helper.make_node("ConstantOfShape", [f"{name}__SHAPE"], [name], value=value))
    nodes.append(helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"]))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    model = helper.make_model(
        helper.make_graph(nodes, "shipped", inputs, [y], initializer=inits), opset_imports=[helper.make_opsetid("", 9)]
    )
    model.ir_version = 3
    return model


def test_rewrite_leaves_no_initializer_among_inputs_and_seeds_the_weights():
    shipped = _as_shipped()
    model, notes = benchmark.optimizable(shipped)
    graph = model.graph
    assert [x.name for x in graph.input] == ["x"]
    assert not [n for n in graph.node if n.op_type == "ConstantOfShape"]
    assert notes == ["6 ConstantOfShape weights became seeded random initializers",
                     "6 initializers no longer listed as graph inputs"]  # fmt: skip
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    assert weights["w"].shape == (4, 3, 3, 3) and np.abs(weights["w"]).max() <= 1 / math.sqrt(27)
    assert (weights["var"] >= 0.5).all(), "variances stay positive"
    again, _ = benchmark.optimizable(shipped)
    np.testing.assert_array_equal(numpy_helper.to_array(again.graph.initializer[-1]), weights["var"])
    # The rewrite is the same network: onnxruntime gives what numpy computes from the seeded weights.
    x = benchmark.model_inputs(model)["x"]
    (got,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("nchwij,ocij->nohw", windows, weights["w"]) + weights["b"][:, None, None]
    per_channel = [(weights[k])[:, None, None] for k in ("scale", "bias", "mean", "var")]
    scale, bias, mean, var = per_channel
    np.testing.assert_allclose(got[0], (scale * (conv - mean) / np.sqrt(var + 1e-5) + bias)[0], rtol=1e-4, atol=1e-5)


def test_rounds_give_median_and_range_of_per_round_ratios():
    samples = {
        "onnxruntime": [[2.0, 2.0, 9.0], [4.0, 4.0, 4.0], [1.0, 1.0, 1.0]],
        "nnadapter-tvm": [[3.0, 3.0, 3.0], [4.0, 5.0, 5.0], [2.0, 2.0, 0.0]],
    }
    summary = benchmark.summarize(samples)
    # Per-round ratios of block medians: 3/2, 5/4, 2/1.
    assert summary["nnadapter-tvm"]["ratio"] == pytest.approx(1.5)
    assert (summary["nnadapter-tvm"]["ratio_min"], summary["nnadapter-tvm"]["ratio_max"]) == (1.25, 2.0)
    assert summary["onnxruntime"]["ms"] == 2.0 and "ratio" not in summary["onnxruntime"]


def _row(model: str, peer_ms: float, alone_ms: float, ratio: float) -> dict:
    agrees = abs(peer_ms / alone_ms - 1) <= benchmark.PEER_AGREEMENT
    return {
        "model": model,
        "onnxruntime": {"ms": peer_ms, "alone_ms": alone_ms, "agrees": agrees},
        "nnadapter-tvm": {"ms": peer_ms * ratio, "ratio": ratio, "ratio_min": ratio, "ratio_max": ratio,
                          "compile_s": 1.0, "cached_load_first_run_s": 0.5},
    }  # fmt: skip


def test_a_peer_slower_inside_than_alone_does_not_count():
    rows = [_row("a", 2.0, 2.05, 2.0), _row("b", 10.0, 10.2, 0.5), _row("c", 10.0, 7.0, 0.1)]
    assert benchmark.ratios(rows, "nnadapter-tvm") == [2.0, 0.5]
    text = benchmark.report(rows, threads=2)
    assert "geometric mean ratio, nnadapter-tvm: 1.00x over 2 models (worst 2.00x)" in text
    assert "not counted" in next(line for line in text.splitlines() if line.startswith("c "))


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "b.png"
    benchmark.plot([_row("a", 2.0, 2.0, 2.0)], str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_runs_each_runner_in_its_own_process(tmp_path):
    path = tmp_path / "light_tiny.onnx"
    onnx.save(_as_shipped(), path)
    out = tmp_path / "b.json"
    argv = [str(path), "--block", "2", "--rounds", "2", "--json", str(out), "--png", str(tmp_path / "b.png")]
    assert benchmark.main(argv) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["model"] == "tiny" and len(row["rewritten"]) == 2
    assert row["onnxruntime"]["alone_ms"] > 0 and row["nnadapter-tvm"]["ratio_min"] <= row["nnadapter-tvm"]["ratio"]
    assert row["nnadapter-tvm"]["cached_load_first_run_s"] > 0
    assert row["nnadapter-tvm"]["max_error"] < 1e-4, "the same network gives the same answer"


def test_a_runner_with_other_answers_does_not_count():
    rows = [_row("a", 2.0, 2.0, 0.5), _row("b", 2.0, 2.0, 2.0)]
    rows[0]["nnadapter-tvm"]["max_error"] = 0.3
    assert benchmark.ratios(rows, "nnadapter-tvm") == [2.0]
    assert "differ from onnxruntime's by 3.0e-01: not counted" in benchmark.report(rows, threads=2)
    assert benchmark.max_error([np.ones(3)], [np.ones(3) * 1.001]) < 2e-3
    assert benchmark.max_error([np.ones(3)], [np.ones(4)]) == math.inf


def _symbolic_conv() -> onnx.ModelProto:
    """One convolution of an input with unknown height and width."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "symbolic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "h", "w"])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_shapes_fill_unknown_dims_and_must_fit_the_fixed_ones():
    model = _symbolic_conv()
    assert benchmark.model_inputs(model)["x"].shape == (1, 3, 1, 1)
    assert benchmark.model_inputs(model, benchmark.parse_shapes(["1x3x20x36"]))["x"].shape == (1, 3, 20, 36)
    assert benchmark.model_inputs(model, benchmark.parse_shapes(["x=1x3x8x8"]))["x"].shape == (1, 3, 8, 8)
    with pytest.raises(SystemExit, match=r"input 'x'.*does not fit its dims 1x3x\?x\?"):
        benchmark.model_inputs(model, benchmark.parse_shapes(["1x4x8x8"]))
    with pytest.raises(SystemExit, match=r"expected \[INPUT=\]DIMS"):
        benchmark.parse_shapes(["x=1x3xhx8"])


@pytest.mark.slow
def test_bench_feeds_a_symbolic_model_the_given_shape(tmp_path):
    """Both runners keep the model's unknown dims and are fed --shape; the answers agree."""
    path = tmp_path / "dyn.onnx"
    onnx.save(_symbolic_conv(), path)
    out = tmp_path / "b.json"
    argv = [str(path), "--shape", "1x3x24x40", "--block", "2", "--rounds", "1", "--json", str(out)]
    assert benchmark.main([*argv, "--png", str(tmp_path / "b.png")]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["nnadapter-tvm"]["max_error"] < 1e-4 and row["nnadapter-tvm"]["cached_load_first_run_s"] > 0


def test_properties_reach_our_runners_only(tmp_path, monkeypatch):
    """``--properties`` builds our side with those context properties (an AVX2 build: "LLVM_MATTR=-avx512f;");
    onnxruntime keeps its defaults.  (Before, the only such flag was the workers' own, which the benchmark
    accepted and ignored: a documented AVX2 command measured the AVX-512 build.)"""
    seen = []

    class Recording:
        def __init__(self, kind, path, threads, props="", cache_dir="", shapes=()):
            seen.append((kind, props))
            self.info = {}

        def outputs(self, path):
            raise RuntimeError("stop after the runners started")

        def close(self):
            pass

    monkeypatch.setattr(benchmark, "Worker", Recording)
    path = tmp_path / "tiny.onnx"
    onnx.save(_as_shipped(), path)
    args = argparse.Namespace(
        as_shipped=True, tuning_db=[], tvm_frontend=False, threads=1, shape=[], properties="LLVM_MATTR=-avx512f"
    )
    with pytest.raises(RuntimeError, match="stop after"):
        benchmark.bench_model(str(path), args, str(tmp_path))
    assert ("nnadapter-tvm", "LLVM_MATTR=-avx512f;") in seen
    assert all(props == "" for kind, props in seen if kind == "onnxruntime")
