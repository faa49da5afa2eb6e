"""``nnadapter_tvm.onnxruntime`` against the real onnxruntime: metadata, answers and error messages must match.

Small models are built with onnx.helper; every expectation is what onnxruntime itself says for the same model
and the same call.
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import nnadapter_tvm.onnxruntime as nort
from nnadapter_tvm import NNAdapterError

ort = pytest.importorskip("onnxruntime")


def _model(with_meta: bool = True) -> onnx.ModelProto:
    """y = relu(x) * 2 (float, dims N, 3, open, 4); s = Shape(x) (int64); i = idx + 1 (int64)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, None, 4])
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, None, 4])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [4])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Mul", ["r", "two"], ["y"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Add", ["idx", "one"], ["i"]),
    ]
    inits = [
        helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("one", TensorProto.INT64, [], [1]),
    ]
    graph = helper.make_graph(nodes, "tiny", [x, idx], [y, s, i], inits, doc_string="a tiny graph")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if with_meta:
        model.producer_name, model.producer_version, model.domain = "unit-test", "1.0", "org.example"
        model.doc_string, model.model_version = "for the drop-in tests", 7
        helper.set_model_props(model, {"character": "a\nb\nc", "author": "nnadapter-tvm"})
    return model


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Sessions cache by default: keep every test's cache out of the user's home.
    monkeypatch.setenv("NNADAPTER_TVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NNADAPTER_TVM_CACHE", raising=False)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    path = tmp_path_factory.mktemp("model") / "tiny.onnx"
    onnx.save(_model(), path)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ours = nort.InferenceSession(
        str(path),
        providers=[("NNAdapterExecutionProvider", {"cache_dir": str(tmp_path_factory.mktemp("cache"))})],
    )
    return ref, ours


def _feed(n: int = 2, h: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((n, 3, h, 4)).astype(np.float32), "idx": np.array([4, -9], np.int64)}


def _args(args: list) -> list[tuple]:
    return [(a.name, a.shape, a.type) for a in args]


def test_inputs_outputs_and_metadata_match_onnxruntime(sessions: tuple) -> None:
    ref, ours = sessions
    assert _args(ours.get_inputs()) == _args(ref.get_inputs())
    assert _args(ours.get_outputs()) == _args(ref.get_outputs())
    assert ours.get_inputs()[0].shape == ["N", 3, None, 4]  # dim_param strings, None where unknown
    mine, theirs = ours.get_modelmeta(), ref.get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description", "version"):
        assert getattr(mine, field) == getattr(theirs, field), field
    assert mine.custom_metadata_map == theirs.custom_metadata_map


def test_metadata_of_a_model_without_any_matches_onnxruntime() -> None:
    data = _model(with_meta=False).SerializeToString()
    mine = nort.InferenceSession(data).get_modelmeta()
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).get_modelmeta()
    assert (mine.version, mine.producer_name, mine.custom_metadata_map) == (
        theirs.version,
        theirs.producer_name,
        theirs.custom_metadata_map,
    )


def test_run_matches_onnxruntime_all_and_subsets(sessions: tuple) -> None:
    ref, ours = sessions
    for n, h in [(2, 5), (1, 7)]:  # symbolic N and an open dim, fed two sizes
        feed = _feed(n, h)
        for names in (None, [], ["i", "y"], ["s"]):
            got, want = ours.run(names, feed), ref.run(names, feed)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    # A list (not an array) takes the input's type, as in onnxruntime.
    feed = {"x": _feed()["x"].tolist(), "idx": [1, 2]}
    np.testing.assert_array_equal(ours.run(["i"], feed, nort.RunOptions())[0], ref.run(["i"], feed)[0])


@pytest.mark.parametrize(
    "case",
    ["unknown name", "float64", "int32 index", "rank", "dimension", "missing", "output name"],
)
def test_errors_read_like_onnxruntime(sessions: tuple, case: str) -> None:
    ref, ours = sessions
    feed, names = _feed(), None
    if case == "unknown name":
        feed["q"] = feed["x"]
    elif case == "float64":
        feed["x"] = feed["x"].astype(np.float64)
    elif case == "int32 index":
        feed["idx"] = feed["idx"].astype(np.int32)
    elif case == "rank":
        feed["x"] = feed["x"][0]
    elif case == "dimension":
        feed["x"] = np.zeros((2, 2, 5, 4), np.float32)
    elif case == "missing":
        del feed["idx"]
    elif case == "output name":
        names = ["nope"]
    with pytest.raises(Exception) as theirs:
        ref.run(names, feed)
    with pytest.raises(NNAdapterError) as mine:
        ours.run(names, feed)
    assert str(mine.value) == str(theirs.value)
    if isinstance(theirs.value, ValueError):  # onnxruntime's missing-input error is a ValueError
        assert isinstance(mine.value, ValueError)
    else:
        assert type(mine.value).__name__ == type(theirs.value).__name__  # InvalidArgument ...


def test_providers_cpu_means_llvm_and_options_are_reported() -> None:
    data = _model().SerializeToString()
    cpu = nort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert cpu.devices == ["llvm"] and cpu.get_providers() == ["CPUExecutionProvider"]
    assert cpu.get_provider_options() == {"CPUExecutionProvider": {}}
    both = nort.InferenceSession(
        data,
        providers=["NNAdapterExecutionProvider", "CPUExecutionProvider"],
        provider_options=[{"devices": "llvm", "context_properties": "TVM_OPT_LEVEL=2;"}, {}],
    )
    assert both.get_providers() == ["NNAdapterExecutionProvider", "CPUExecutionProvider"]
    assert both.devices == ["llvm"] and both.context_properties == "TVM_OPT_LEVEL=2;"
    assert both.get_provider_options()["NNAdapterExecutionProvider"]["devices"] == "llvm"
    assert set(nort.get_available_providers()) == {"NNAdapterExecutionProvider", "CPUExecutionProvider"}
    assert nort.get_device() == ort.get_device() == "CPU"
    major, minor = (int(p) for p in nort.__version__.split(".")[:2])
    assert (major, minor) >= (1, 17)


def test_unavailable_providers_are_skipped_with_onnxruntimes_warning() -> None:
    data = _model().SerializeToString()
    with pytest.warns(UserWarning, match="Specified provider 'CUDAExecutionProvider' is not in available provider"):
        session = nort.InferenceSession(data, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ort.InferenceSession(data, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert session.get_providers() == ref.get_providers() == ["CPUExecutionProvider"]


def test_unknown_nnadapter_option_and_missing_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(nort.InvalidArgument, match=r"unknown option\(s\) \['device_names'\]"):
        nort.InferenceSession(
            _model().SerializeToString(), providers=[("NNAdapterExecutionProvider", {"device_names": "llvm"})]
        )
    missing = tmp_path / "absent.onnx"
    with pytest.raises(Exception) as theirs:
        ort.InferenceSession(str(missing))
    with pytest.raises(nort.NoSuchFile) as mine:
        nort.InferenceSession(str(missing))
    assert str(mine.value) == str(theirs.value)


def test_session_options_threads_and_refusals() -> None:
    data = _model().SerializeToString()
    options = nort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = nort.GraphOptimizationLevel.ORT_DISABLE_ALL  # accepted, no effect
    options.enable_cpu_mem_arena = False
    options.log_severity_level = 3
    options.add_session_config_entry("session.load_model_format", "ONNX")
    assert options.get_session_config_entry("session.load_model_format") == "ONNX"
    session = nort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
    assert "TVM_NUM_THREADS=1;" in session.context_properties
    assert session.get_session_options() is options
    assert int(nort.GraphOptimizationLevel.ORT_ENABLE_ALL) == int(ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    with pytest.raises(AttributeError, match="no attribute 'intra_op_threads'"):
        options.intra_op_threads = 2  # misspelt: an error, as in onnxruntime
    refused = nort.SessionOptions()
    refused.enable_profiling = True
    refused.register_custom_ops_library("libcustom.so")
    with pytest.raises(nort.InvalidArgument, match="register_custom_ops_library, enable_profiling=True"):
        nort.InferenceSession(data, sess_options=refused)


def test_caching_by_default_and_its_switches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    cache = tmp_path / "cache"  # the autouse fixture's NNADAPTER_TVM_CACHE_DIR
    first = nort.InferenceSession(str(path))
    assert first.cache_dir == str(cache) and not first.predictor.loaded_from_cache
    assert list(cache.glob("*.nnc"))
    again = nort.InferenceSession(path)  # a PathLike too
    assert again.predictor.loaded_from_cache
    assert _args(again.get_inputs()) == _args(first.get_inputs())
    assert _args(again.get_outputs()) == _args(first.get_outputs())
    feed = _feed()
    np.testing.assert_array_equal(again.run(None, feed)[0], first.run(None, feed)[0])

    moved = tmp_path / "moved"
    session = nort.InferenceSession(str(path), providers=[("NNAdapterExecutionProvider", {"cache_dir": str(moved)})])
    assert not session.predictor.loaded_from_cache and list(moved.glob("*.nnc"))

    monkeypatch.setenv("NNADAPTER_TVM_CACHE", "0")
    monkeypatch.setenv("NNADAPTER_TVM_CACHE_DIR", str(tmp_path / "off"))
    off = nort.InferenceSession(str(path))
    assert off.cache_dir is None and not off.predictor.loaded_from_cache
    assert not (tmp_path / "off").exists()
    monkeypatch.delenv("NNADAPTER_TVM_CACHE")
    none = nort.InferenceSession(str(path), providers=[("NNAdapterExecutionProvider", {"cache_dir": None})])
    assert none.cache_dir is None and not (tmp_path / "off").exists()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_only_while_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _model().SerializeToString()
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    nort.InferenceSession(data)
    assert "nnadapter-tvm: compiling" in terminal.getvalue()
    loaded = _Terminal()
    monkeypatch.setattr(sys, "stderr", loaded)
    assert nort.InferenceSession(data).predictor.loaded_from_cache
    assert loaded.getvalue() == ""
    piped = io.StringIO()  # not a terminal: nothing drawn
    monkeypatch.setattr(sys, "stderr", piped)
    nort.InferenceSession(data, providers=[("NNAdapterExecutionProvider", {"cache_dir": None})])
    assert piped.getvalue() == ""


def test_swapped_in_for_onnxruntime_an_application_runs_unchanged(tmp_path: Path) -> None:
    """An application module that does ``import onnxruntime`` gets this module when it is put in its place."""
    import subprocess

    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    app = (
        "import sys, numpy as np, nnadapter_tvm.onnxruntime as m; sys.modules['onnxruntime'] = m\n"
        "import onnxruntime\n"
        f"s = onnxruntime.InferenceSession({str(path)!r}, providers=onnxruntime.get_available_providers())\n"
        "x = np.ones((1, 3, 2, 4), np.float32); i = np.zeros(2, np.int64)\n"
        "print(onnxruntime.__name__, s.get_providers()[0], s.run(None, {'x': x, 'idx': i})[0].sum())\n"
    )
    out = subprocess.run([sys.executable, "-c", app], capture_output=True, text=True, timeout=600, check=True)
    assert out.stdout.split() == ["nnadapter_tvm.onnxruntime", "NNAdapterExecutionProvider", str(np.float32(48.0))]


def test_partition_config_option_keeps_nodes_on_the_host_with_the_same_answers(sessions: tuple) -> None:
    ref, _ = sessions
    data = _model().SerializeToString()
    session = nort.InferenceSession(
        data, providers=[("NNAdapterExecutionProvider", {"partition_config": "Relu", "cache_dir": None})]
    )
    assert session.predictor.host_node_count == 1
    feed = _feed()
    for got, want in zip(session.run(None, feed), ref.run(None, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
