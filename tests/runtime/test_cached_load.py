"""A cached load needs only TVM's runtime library (issue 13, item 5): a fresh process that loads a
compiled model from its cache imports neither TVM's Python package (its compiler library, Relax,
``tvm.target``) nor onnx nor the converters, and computes what the compiling process computed; a
process that loads and then compiles still compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.tools import builtin_model

TOKEN = "L" * 32
OTHER = "M" * 32
X = np.array([[-2.0, 0.5, 3.0], [1.0, -0.25, -4.0]], "float32")

# The modules a cached load must not import: TVM's Python package (whose import loads the compiler
# library and Relax), onnx, the converters.
FORBIDDEN = ("tvm", "tvm.relax", "tvm.target", "onnx", "nnadapter_tvm.op_converters")

LOAD = """
import json, sys
import numpy as np
import nnadapter_tvm as nna
context = nna.Context([nna.Device.acquire("llvm")], "TVM_NUM_THREADS=1")
c = nna.Compilation(None, context, cache_token=sys.argv[2], cache_dir=sys.argv[1])
c.finish()
x = np.array(json.loads(sys.argv[3]), "float32")
e = nna.Execution(c)
out = e.use_arrays([x])
e.compute()
report = {"loaded": c.loaded_from_cache, "out": out[0].tolist(),
          "imported": [m for m in json.loads(sys.argv[4]) if m in sys.modules]}
print(json.dumps(report))
"""


def _python(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


PREDICT = """
import json, sys, numpy as np, nnadapter_tvm as nna
p = nna.Predictor(sys.argv[1], cache_dir=sys.argv[2])
feeds = {name: np.array(value, "float32") for name, value in json.loads(sys.argv[3]).items()}
outputs = p.run(feeds)
print(json.dumps({"loaded": p.loaded_from_cache, "outputs": [y.tolist() for y in outputs],
                  "imported": [m for m in json.loads(sys.argv[4]) if m in sys.modules]}))
"""


def _predict_in_a_fresh_process(path: str, cache_dir: str, feeds: dict) -> tuple[list[np.ndarray], dict]:
    """A new process's Predictor on ``path`` from ``cache_dir``: its outputs for ``feeds`` (float32 arrays
    by name), and its report (loaded from the cache, the FORBIDDEN modules it imported)."""
    feeds_json = json.dumps({name: np.asarray(value).tolist() for name, value in feeds.items()})
    got = _python(PREDICT, path, cache_dir, feeds_json, json.dumps(FORBIDDEN))
    return [np.array(y) for y in got["outputs"]], got


def _compile(cache_dir: str, token: str = TOKEN) -> np.ndarray:
    """Compile the tiny model into ``cache_dir`` here; what it computes for ``X``."""
    context = nna.Context([nna.Device.acquire("llvm")], "TVM_NUM_THREADS=1")
    compilation = nna.Compilation(builtin_model.build_tiny(), context, cache_token=token, cache_dir=cache_dir)
    compilation.finish()
    execution = nna.Execution(compilation)
    out = execution.use_arrays([X])
    execution.compute()
    return out[0]


def test_a_cached_load_imports_only_the_runtime(tmp_path) -> None:
    here = _compile(str(tmp_path))
    np.testing.assert_allclose(here, builtin_model.tiny_reference(X), rtol=1e-6)
    got = _python(LOAD, str(tmp_path), TOKEN, json.dumps(X.tolist()), json.dumps(FORBIDDEN))
    assert got["loaded"] is True
    assert got["imported"] == [], f"a cached load imported {got['imported']}"
    np.testing.assert_array_equal(np.array(got["out"], "float32"), here)


def _onnx_model() -> onnx.ModelProto:
    w = np.random.default_rng(5).standard_normal([3, 4]).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_predictor_cached_load_imports_only_the_runtime(tmp_path) -> None:
    model = _onnx_model()
    path = str(tmp_path / "mm.onnx")
    onnx.save(model, path)
    first = nna.Predictor(path, cache_dir=str(tmp_path))
    assert not first.loaded_from_cache
    want = np.maximum(X @ numpy_helper.to_array(model.graph.initializer[0]), 0)
    (y,), got = _predict_in_a_fresh_process(path, str(tmp_path), {"x": X})
    assert got["loaded"] is True and got["imported"] == []
    np.testing.assert_allclose(y.astype("float32"), want, rtol=1e-5, atol=1e-6)


def test_a_cached_load_runs_kernels_that_call_the_runtimes_sort(tmp_path) -> None:
    """TopK, argsort and NonMaxSuppression call ``tvm.contrib.sort.*``, which TVM registers from
    ``libtvm_runtime_extra``, not ``libtvm_runtime``: a fresh process that only loads the cache must load
    it too (it once failed with "Cannot find function tvm.contrib.sort.argsort")."""
    k = helper.make_tensor("k", TensorProto.INT64, [1], [2])
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1)],
        "topk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, [2, 2]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, [2, 2]),
        ],
        [k],
    )
    path = str(tmp_path / "topk.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert not nna.Predictor(path, cache_dir=str(tmp_path)).loaded_from_cache
    (values, indices), got = _predict_in_a_fresh_process(path, str(tmp_path), {"x": X})
    assert got["loaded"] is True and got["imported"] == []
    order = np.argsort(-X, axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values.astype("float32"), np.take_along_axis(X, order, axis=1))


def test_a_subgraph_that_orders_the_graphs_inputs_otherwise_is_indexed(tmp_path) -> None:
    """The partitioner orders a subgraph's inputs as its nodes first read them and its outputs as they are
    computed (a BERT export's input_ids, token_type_ids, attention_mask against the graph's input_ids,
    attention_mask, token_type_ids): such a model is still one subgraph, indexed, and a fresh process loads
    it without importing onnx, feeding each input to its place and returning the outputs in the graph's
    order."""
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["b", "a"], ["d"]),  # b read first
            helper.make_node("Mul", ["d", "a"], ["p"]),
            helper.make_node("Relu", ["p"], ["r"]),
        ],
        "orders",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("r", "d")],  # d computed first
    )
    path = str(tmp_path / "orders.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    a, b = X, X[::-1] * 2.0
    first = nna.Predictor(path, cache_dir=str(tmp_path))
    assert not first.loaded_from_cache and first.single_subgraph and first.host_node_count == 0
    want = [np.maximum((b - a) * a, 0), b - a]
    for got, expected in zip(first.run({"a": a, "b": b}), want):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    (r, d), got = _predict_in_a_fresh_process(path, str(tmp_path), {"b": b, "a": a})
    assert got["loaded"] is True and got["imported"] == [], got["imported"]
    np.testing.assert_allclose(r.astype("float32"), want[0], rtol=1e-6)
    np.testing.assert_allclose(d.astype("float32"), want[1], rtol=1e-6)


def test_load_then_compile_in_one_process(tmp_path) -> None:
    """The runtime library loaded first does not stand in the compiler's way: the process loads two
    cached models (each runs its own code), then compiles a third, and all three run."""
    _compile(str(tmp_path), TOKEN)
    context = nna.Context([nna.Device.acquire("llvm")])
    scaled = builtin_model.build(seed=7, batch=1)
    other = nna.Compilation(scaled, context, cache_token=OTHER, cache_dir=str(tmp_path))
    other.finish()
    image = np.random.default_rng(1).standard_normal([1, *builtin_model.INPUT_SHAPE]).astype("float32")
    want_other = nna.Compilation(scaled, context)
    want_other.finish()
    code = """
import json, sys
import numpy as np
import nnadapter_tvm as nna
from nnadapter_tvm.execution import run_arrays
from nnadapter_tvm.tools import builtin_model
context = nna.Context([nna.Device.acquire("llvm")])
def load(token):
    c = nna.Compilation(None, context, cache_token=token, cache_dir=sys.argv[1])
    c.finish()
    return c
tiny, conv = load(sys.argv[2]), load(sys.argv[3])
x = np.array(json.loads(sys.argv[4]), "float32")
image = np.load(sys.argv[5])
before = "tvm" in sys.modules
fresh = nna.Compilation(builtin_model.build_tiny(), context)
fresh.finish()
print(json.dumps({"tvm_before_compile": before, "tiny": run_arrays(tiny, [x])[0].tolist(),
                  "conv": run_arrays(conv, [image])[0].tolist(), "fresh": run_arrays(fresh, [x])[0].tolist()}))
"""
    np.save(tmp_path / "image.npy", image)
    got = _python(code, str(tmp_path), TOKEN, OTHER, json.dumps(X.tolist()), str(tmp_path / "image.npy"))
    assert got["tvm_before_compile"] is False
    np.testing.assert_allclose(np.array(got["tiny"]), builtin_model.tiny_reference(X), rtol=1e-6)
    np.testing.assert_allclose(np.array(got["fresh"]), builtin_model.tiny_reference(X), rtol=1e-6)
    from nnadapter_tvm.execution import run_arrays

    np.testing.assert_allclose(np.array(got["conv"]), run_arrays(want_other, [image])[0], rtol=1e-5, atol=1e-6)


def _rewrite_records(path: str, change) -> None:
    with open(path, "rb") as f:
        container = cache.unpack(f.read(), path)
    meta = dict(container.meta)
    meta["subgraphs"] = [change(dict(s)) for s in meta["subgraphs"]]
    cache.write_atomic(path, cache.pack(meta, [bytes(b) for b in container.blobs]))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: {k: v for k, v in s.items() if k != "target_key"}, id="recorded-before-keys"),
        pytest.param(lambda s: {**s, "target_key": ["llvm", {}, "another host"]}, id="other-key-same-target"),
    ],
)
def test_a_cache_without_a_matching_key_is_checked_by_its_target(tmp_path, change) -> None:
    """The recorded target key is a shortcut: where it is missing (older caches) or differs, the target
    string decides, as before, and a cache built for another target is still refused."""
    here = _compile(str(tmp_path))
    _rewrite_records(cache.cache_path(str(tmp_path), TOKEN), change)
    context = nna.Context([nna.Device.acquire("llvm")], "TVM_NUM_THREADS=1")
    loaded = nna.Compilation(None, context, cache_token=TOKEN, cache_dir=str(tmp_path))
    loaded.finish()
    assert loaded.loaded_from_cache
    execution = nna.Execution(loaded)
    out = execution.use_arrays([X])
    execution.compute()
    np.testing.assert_array_equal(out[0], here)
    _rewrite_records(cache.cache_path(str(tmp_path), TOKEN), lambda s: {**s, "target": "llvm -mcpu=other"})
    with pytest.raises(nna.NNAdapterError, match="built for target"):
        nna.Compilation(None, context, cache_token=TOKEN, cache_dir=str(tmp_path)).finish()


def test_the_recorded_key_is_what_the_driver_computes(tmp_path) -> None:
    _compile(str(tmp_path))
    with open(cache.cache_path(str(tmp_path), TOKEN), "rb") as f:
        meta = cache.unpack(f.read(), "test").meta
    driver = nna.Device.acquire("llvm").driver
    want = json.loads(json.dumps(driver.target_key(nna.Context([nna.Device.acquire("llvm")]).properties)))
    assert [s["target_key"] for s in meta["subgraphs"]] == [want]
    assert want[0] == "llvm"
    if os.path.exists("/proc/cpuinfo"):
        assert any(str(part).startswith("flags=") or str(part).startswith("Features=") for part in want[-1])
