"""The benchmark's table: per-model tuning databases, runners missing from some rows, the geometric mean."""

from __future__ import annotations

import math

from nnadapter_tvm.tools import benchmark


def test_tuning_db_specs_apply_per_model_or_to_all():
    dbs = benchmark.tuning_dbs(["squeezenet=/t/sq", "/t/all"])
    assert dbs == {"squeezenet": "/t/sq", None: "/t/all"}
    assert benchmark.tuning_dbs(["squeezenet=/t/sq"]).get("vgg19") is None
    assert benchmark.model_name("/x/light_squeezenet.onnx") == "squeezenet"


def rows() -> list[dict]:
    return [
        {"model": "a", "onnxruntime": {"ms": 2.0}, "nnadapter-tvm": {"ms": 4.0, "compile_s": 1.0,
                                                                     "cached_load_first_run_s": 0.5}},
        {"model": "b", "onnxruntime": {"ms": 10.0}, "nnadapter-tvm": {"ms": 5.0, "compile_s": 2.0,
                                                                      "cached_load_first_run_s": 0.7},
         "nnadapter-tvm tuned": {"ms": 4.0}},
        {"model": "c", "onnxruntime": {"ms": 1.0}, "nnadapter-tvm": {"error": "RuntimeError: boom"}},
    ]  # fmt: skip


def test_report_takes_runners_from_every_row_and_skips_missing_cells():
    text = benchmark.report(rows(), threads=2)
    assert benchmark.runner_names(rows()) == ["onnxruntime", "nnadapter-tvm", "nnadapter-tvm tuned"]
    # untuned: ratios 2.0 and 0.5 (c failed) -> geometric mean 1.0; tuned: b only, 0.4
    assert "geometric mean ratio, nnadapter-tvm: 1.00x over 2 models (worst 2.00x)" in text
    assert "geometric mean ratio, nnadapter-tvm tuned: 0.40x over 1 models (worst 0.40x)" in text
    line_a = next(line for line in text.splitlines() if line.startswith("a "))
    assert line_a.split()[-1] == "-", "a has no tuned run"
    assert "error" in next(line for line in text.splitlines() if line.startswith("c "))


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "b.png"
    benchmark.plot(rows(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert math.isclose(benchmark.ratios(rows(), "nnadapter-tvm tuned")[0], 0.4)
