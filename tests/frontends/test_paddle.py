"""Paddle inference models and Paddle Lite's API (``nnadapter_tvm.paddle_lite``), against Paddle's own predictor.

The models are made at test time by paddle itself (``tests/paddle_reference.py``, in a child process: paddle stays
out of this one): a CNN (conv, batch norm, relu, max pool, fc, softmax) saved as Paddle 3's ``.json`` program and as
the older ``.pdmodel``, and a fully convolutional model with open height and width, run at two sizes. Every answer
is compared with ``paddle.inference`` on the same inputs. The tests that need paddle skip, saying so, when it is
not installed (``pip install -e ".[paddle]" && pip install --no-deps paddle2onnx==2.1.0``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from nnadapter_tvm import NNAdapterError
from nnadapter_tvm.frontends import paddle as paddle_frontend
from nnadapter_tvm.paddle_lite import (
    CxxConfig,
    MobileConfig,
    Place,
    PrecisionType,
    TargetType,
    UnsupportedCall,
    create_paddle_predictor,
)
from nnadapter_tvm.tools.cli import main

HERE = Path(__file__).resolve().parent
HAS_PADDLE = importlib.util.find_spec("paddle") is not None
needs_paddle = pytest.mark.skipif(
    not HAS_PADDLE,
    reason="paddlepaddle is not installed: pip install -e '.[paddle]' && pip install --no-deps paddle2onnx==2.1.0",
)
RTOL, ATOL = 1e-4, 1e-5


def _child(*args: str, env: dict | None = None) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE.parent / "paddle_reference.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "GLOG_minloglevel": "2", **(env or {})},
    )
    assert done.returncode == 0, f"paddle_reference.py {args[0]} failed:\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The test models, saved by paddle: ``cnn`` and ``dyn`` (.json programs), ``cnn_pdmodel`` (.pdmodel)."""
    if not HAS_PADDLE:
        pytest.skip("paddlepaddle is not installed")
    root = tmp_path_factory.mktemp("paddle_models")
    _child("export", str(root / "pir"))
    _child("export", str(root / "old"), "cnn", env={"FLAGS_enable_pir_api": "0"})
    found = {name: root / "pir" / name for name in ("cnn", "dyn", "mobilenet_v3_small")}
    found["cnn_pdmodel"] = root / "old" / "cnn"
    assert (found["cnn"] / "inference.json").is_file() and (found["cnn"] / "inference.pdiparams").is_file()
    assert (found["cnn_pdmodel"] / "inference.pdmodel").is_file()
    return found


def paddle_outputs(model_dir: Path, inputs: dict[str, np.ndarray], tmp: Path) -> tuple[list[str], dict]:
    """Paddle's own predictor on each input: (input and output names, {key: [outputs]})."""
    program = next(p for p in sorted(model_dir.iterdir()) if p.suffix in (".json", ".pdmodel"))
    np.savez(tmp / "in.npz", **inputs)
    _child("infer", str(program), str(model_dir / "inference.pdiparams"), str(tmp / "in.npz"), str(tmp / "out.npz"))
    with np.load(tmp / "out.npz") as out:
        names = [str(n) for n in out["__names__"]]
        results = {key: [out[f"{key}/{k}"] for k in range(len(names) - 1)] for key in inputs}
    return names, results


def _run(predictor, x: np.ndarray) -> list[np.ndarray]:
    predictor.get_input(0).from_numpy(x)
    predictor.run()
    return [predictor.get_output(k).numpy() for k in range(len(predictor.get_output_names()))]


def _rng_input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@needs_paddle
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["cnn", "cnn_pdmodel"])
def test_cxx_config_model_dir_matches_paddle(models: dict[str, Path], variant: str, tmp_path: Path) -> None:
    """A model directory through CxxConfig on llvm: the names and the answers are Paddle's (both program formats)."""
    x = _rng_input((2, 3, 16, 16))
    names, expected = paddle_outputs(models[variant], {"x": x}, tmp_path)
    config = CxxConfig()
    config.set_model_dir(str(models[variant]))
    config.set_valid_places([Place(TargetType.NNAdapter, PrecisionType.FP32), Place(TargetType.X86)])
    config.set_nnadapter_device_names(["llvm"])
    predictor = create_paddle_predictor(config)
    assert predictor.get_input_names() == names[:1]
    assert predictor.get_output_names() == names[1:]
    (y,) = _run(predictor, x)
    assert predictor.get_output(0).shape() == list(expected["x"][0].shape) == [2, 10]
    np.testing.assert_allclose(y, expected["x"][0], rtol=RTOL, atol=ATOL)
    assert predictor.get_output(0).precision() == PrecisionType.FP32


@needs_paddle
@pytest.mark.slow
def test_dynamic_height_and_width_two_sizes(models: dict[str, Path], tmp_path: Path) -> None:
    """Model and params files (set_model_file / set_param_file), open H and W: one predictor, two input sizes;
    resize + set_float_data as Paddle Lite's examples feed it."""
    small, large = _rng_input((1, 3, 16, 16), 1), _rng_input((1, 3, 24, 20), 2)
    _, expected = paddle_outputs(models["dyn"], {"small": small, "large": large}, tmp_path)
    config = CxxConfig()
    config.set_model_file(str(models["dyn"] / "inference.json"))
    config.set_param_file(str(models["dyn"] / "inference.pdiparams"))
    config.set_threads(2)
    predictor = create_paddle_predictor(config)
    assert "TVM_NUM_THREADS=2;" in predictor.predictor.context.properties_text
    for key, x in (("small", small), ("large", large)):
        tensor = predictor.get_input_by_name("x")
        tensor.resize(list(x.shape))
        tensor.set_float_data(x.ravel().tolist())
        predictor.run()
        feature, score = predictor.get_output(0), predictor.get_output(1)
        assert feature.shape() == list(expected[key][0].shape) == [1, 4, x.shape[2] // 2, x.shape[3] // 2]
        np.testing.assert_allclose(feature.numpy(), expected[key][0], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(np.array(score.float_data()), expected[key][1].ravel(), rtol=RTOL, atol=ATOL)


@needs_paddle
@pytest.mark.slow
def test_mobilenet_v3_small_matches_paddle(models: dict[str, Path], tmp_path: Path) -> None:
    """paddle.vision's MobileNetV3-small (depthwise convs, hardswish, hardsigmoid, squeeze-excitation, adaptive
    pooling), random weights, at 64x64: Paddle's logits (their scale is small with random weights: the tolerance
    is relative to it)."""
    x = _rng_input((1, 3, 64, 64), 6)
    _, expected = paddle_outputs(models["mobilenet_v3_small"], {"x": x}, tmp_path)
    config = CxxConfig()
    config.set_model_dir(str(models["mobilenet_v3_small"]))
    predictor = create_paddle_predictor(config)
    assert predictor.predictor.host_node_count == 0
    (y,) = _run(predictor, x)
    reference = expected["x"][0]
    assert y.shape == reference.shape == (1, 10)
    np.testing.assert_allclose(y, reference, rtol=1e-3, atol=1e-4 * float(np.abs(reference).max()))


@needs_paddle
@pytest.mark.slow
def test_cli_runs_a_paddle_model_directory(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``nnadapter-tvm run MODEL_DIR``: exported, compiled, run; the printed values are Paddle's. A second run
    loads the exported model and the compiled subgraph from the cache."""
    x = _rng_input((1, 3, 16, 16), 3)
    np.save(tmp_path / "x.npy", x)
    _, expected = paddle_outputs(models["cnn"], {"x": x}, tmp_path)
    argv = ["run", str(models["cnn"]), "--cache-dir", str(tmp_path / "cache"), "--input", f"x={tmp_path / 'x.npy'}"]
    for attempt in ("compiled", "loaded from the cache"):
        assert main([*argv, "--repeat", "1"]) == 0
        out = capsys.readouterr().out
        assert f"paddle model: {models['cnn']}" in out
        assert f"({attempt})" in out
        line = re.search(r"output fetch_name_0: float32\[1, 10\] \[([^\]]*)\]", out)
        assert line is not None, out
        printed = [float(v) for v in line.group(1).split(", ") if v != "..."]
        np.testing.assert_allclose(printed, expected["x"][0].ravel()[: len(printed)], rtol=1e-4, atol=1e-5)
    assert len(list((tmp_path / "cache" / "paddle2onnx").glob("*.onnx"))) == 1


@needs_paddle
@pytest.mark.slow
def test_model_cache_dir_and_cache_buffers(models: dict[str, Path], tmp_path: Path) -> None:
    """set_nnadapter_model_cache_dir: a second predictor loads the .nnc; set_nnadapter_model_cache_buffers: a
    predictor given the program, the parameters (set_model_buffer) and the .nnc's bytes under its token, all from
    memory (no cache directory), loads them instead of compiling."""
    x = _rng_input((2, 3, 16, 16), 4)
    config = CxxConfig()
    config.set_model_dir(str(models["cnn"]))
    config.set_nnadapter_model_cache_dir(str(tmp_path / "cache"))
    first = create_paddle_predictor(config)
    assert not first.predictor.loaded_from_cache
    (y_first,) = _run(first, x)
    second = create_paddle_predictor(config)
    assert second.predictor.loaded_from_cache
    np.testing.assert_array_equal(_run(second, x)[0], y_first)

    (token,) = first.tokens
    buffer = (tmp_path / "cache" / f"{token}.nnc").read_bytes()
    from_memory = CxxConfig()
    from_memory.set_model_buffer(
        (models["cnn"] / "inference.json").read_bytes(), (models["cnn"] / "inference.pdiparams").read_bytes()
    )
    assert from_memory.is_model_from_memory()
    from_memory.set_nnadapter_model_cache_buffers(token, buffer)
    third = create_paddle_predictor(from_memory)
    assert third.predictor.loaded_from_cache
    np.testing.assert_array_equal(_run(third, x)[0], y_first)


@needs_paddle
@pytest.mark.slow
def test_partition_config_with_paddle_op_types(models: dict[str, Path], tmp_path: Path) -> None:
    """Paddle Lite partition configs name Paddle op types: by path, ``relu`` (inside the graph), ``flatten`` (four
    ONNX nodes, its computed target shape included) and ``softmax`` (the graph's output, told by its ONNX type), with
    Paddle Lite's ``fetch`` line (ignored); by buffer, ``softmax``. Three subgraphs around the host nodes; the
    answers stay Paddle's."""
    x = _rng_input((2, 3, 16, 16), 5)
    _, expected = paddle_outputs(models["cnn"], {"x": x}, tmp_path)
    path = tmp_path / "partition.txt"
    path.write_text("# Paddle Lite's form\nrelu\nflatten\nsoftmax\nfetch::fetch_name_0\n")
    for how in ("path", "buffer"):
        config = CxxConfig()
        config.set_model_dir(str(models["cnn"]))
        if how == "path":
            config.set_nnadapter_subgraph_partition_config_path(str(path))
        else:
            config.set_nnadapter_subgraph_partition_config_buffer("softmax")
        predictor = create_paddle_predictor(config)
        host = {u.node.op_type for u in predictor.predictor.graph.host_units}
        if how == "path":
            assert host == {"Relu", "Shape", "Slice", "Concat", "Reshape", "Softmax"}
            assert len(predictor.predictor.compilations) == 3
        else:
            assert host == {"Softmax"}
        np.testing.assert_allclose(_run(predictor, x)[0], expected["x"][0], rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------- without paddle


def _relu_onnx(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_config_calls_and_refusals() -> None:
    """The spec's NNAdapter calls keep what they are given; unknown devices and calls with no meaning here are
    NNAdapterErrors naming the call."""
    config = CxxConfig()
    assert config.check_nnadapter_device_name("llvm")
    assert not config.check_nnadapter_device_name("huawei_ascend_npu")
    config.set_nnadapter_device_names(["llvm"])
    config.set_nnadapter_context_properties("TVM_NUM_THREADS=1;")
    config.set_nnadapter_model_cache_dir("/tmp/somewhere")
    config.set_nnadapter_subgraph_partition_config_path("/tmp/partition.txt")
    assert config.nnadapter_device_names() == ["llvm"]
    assert config.nnadapter_context_properties() == "TVM_NUM_THREADS=1;"
    assert config.nnadapter_model_cache_dir() == "/tmp/somewhere"
    assert config.nnadapter_subgraph_partition_config_path() == "/tmp/partition.txt"
    with pytest.raises(NNAdapterError, match="set_nnadapter_device_names: no NNAdapter device named 'npu'"):
        config.set_nnadapter_device_names(["llvm", "npu"])
    with pytest.raises(NNAdapterError, match="model_cache_token 'abc' is not a model token"):
        config.set_nnadapter_model_cache_buffers("abc", b"x")
    with pytest.raises(UnsupportedCall, match=r"CxxConfig\.set_opencl_tune is not supported"):
        config.set_opencl_tune(1)
    with pytest.raises(UnsupportedCall, match=r"CxxConfig\.set_model_from_file: no such call"):
        config.set_model_from_file("m.nb")
    assert not hasattr(config, "set_metal_lib_path")
    mobile = MobileConfig()
    with pytest.raises(UnsupportedCall, match=r"\.nb models are Paddle Lite's own optimized format"):
        mobile.set_model_from_file("model.nb")
    with pytest.raises(NNAdapterError, match="CxxConfig names no model"):
        create_paddle_predictor(CxxConfig())
    with pytest.raises(NNAdapterError, match="config is a dict"):
        create_paddle_predictor({})


@pytest.mark.slow
def test_mobile_config_onnx_model_and_tensor_calls(tmp_path: Path) -> None:
    """MobileConfig with an .onnx model: the tensor calls (resize, set_float_data, from_numpy, numpy, shape) and
    their errors, against numpy's relu."""
    config = MobileConfig()
    config.set_model_from_file(str(_relu_onnx(tmp_path / "relu.onnx")))
    predictor = create_paddle_predictor(config)
    assert predictor.get_input_names() == ["x"] and predictor.get_output_names() == ["y"]
    with pytest.raises(NNAdapterError, match=r"input 0 \('x'\) holds no data"):
        predictor.run()
    x = predictor.get_input(0)
    with pytest.raises(NNAdapterError, match=r"5 values given, shape \[2, 4\] holds 8"):
        x.resize([2, 4])
        x.set_float_data([1, 2, 3, 4, 5])
    data = np.linspace(-1, 1, 8, dtype=np.float32)
    x.set_float_data(data.tolist())
    predictor.run()
    np.testing.assert_array_equal(predictor.get_output_by_name("y").numpy(), np.maximum(data, 0).reshape(2, 4))
    x.from_numpy(-data[:4].reshape(1, 4))
    predictor.run()
    assert predictor.get_output(0).shape() == [1, 4]
    np.testing.assert_array_equal(predictor.get_output(0).numpy(), np.maximum(-data[:4], 0).reshape(1, 4))
    with pytest.raises(NNAdapterError, match="get_output: index 1 out of range, the model has 1 outputs"):
        predictor.get_output(1)
    with pytest.raises(NNAdapterError, match=r"no input named 'z'; the inputs are \['x'\]"):
        predictor.get_input_by_name("z")
    with pytest.raises(UnsupportedCall, match="save_optimized_model"):
        predictor.save_optimized_model(str(tmp_path))


def test_stands_in_for_paddlelite_lite(monkeypatch: pytest.MonkeyPatch) -> None:
    """An application's ``from paddlelite.lite import *`` gets this module once it is registered under that name
    (docs/paddle.md); Opt, the .nb optimizer, is refused by name."""
    import types

    import nnadapter_tvm.paddle_lite as lite

    package = types.ModuleType("paddlelite")
    package.lite = lite
    monkeypatch.setitem(sys.modules, "paddlelite", package)
    monkeypatch.setitem(sys.modules, "paddlelite.lite", lite)
    namespace: dict = {}
    exec("from paddlelite.lite import *", namespace)
    assert namespace["CxxConfig"] is CxxConfig and namespace["create_paddle_predictor"] is create_paddle_predictor
    assert namespace["CxxPredictor"] is namespace["LightPredictor"] is lite.PaddlePredictor
    with pytest.raises(UnsupportedCall, match=r"Opt: Paddle Lite's \.nb optimizer"):
        namespace["Opt"]()


def test_locate_finds_and_refuses(tmp_path: Path) -> None:
    """Model directories: the program with params beside it, preferring inference.* and .json; the old layout
    and directories without a program are refused by name."""
    pir = b'{"base_code":{"magic":"pir","trainable":true,"version":4},"program":{}}'
    d = tmp_path / "m"
    d.mkdir()
    (d / "inference.json").write_bytes(pir)
    (d / "inference.pdiparams").write_bytes(b"")
    (d / "config.json").write_text('{"not": "a program"}')
    found = paddle_frontend.locate(d)
    assert found == paddle_frontend.PaddleModel(str(d / "inference.json"), str(d / "inference.pdiparams"))
    assert paddle_frontend.is_paddle_model(d) and not paddle_frontend.is_paddle_model(d / "config.json")
    old = tmp_path / "old"
    old.mkdir()
    (old / "__model__").write_bytes(b"")
    with pytest.raises(NNAdapterError, match=r"pre-2\.0 layout"):
        paddle_frontend.locate(old)
    with pytest.raises(NNAdapterError, match="holds no program file"):
        paddle_frontend.locate(tmp_path)
    with pytest.raises(NNAdapterError, match="is not a Paddle program"):
        paddle_frontend.locate(d / "config.json")


def test_missing_paddle2onnx_names_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter without paddle2onnx (this one with no site-packages): the error says what to install."""
    python = tmp_path / "python-without-site"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv(paddle_frontend.PYTHON_ENV, str(python))
    program = tmp_path / "inference.json"
    program.write_bytes(b'{"base_code":{"magic":"pir"},"program":{}}')
    with pytest.raises(NNAdapterError, match=r"paddle2onnx is not importable.*pip install --no-deps paddle2onnx"):
        paddle_frontend.to_onnx(paddle_frontend.locate(program))
