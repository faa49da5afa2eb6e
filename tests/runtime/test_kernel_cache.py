"""The kernel cache (``runtime/kernel_cache.py``): a kernel built by one compile is read by the next, in a
fresh ``cache_dir`` or another model; entries follow the ``.nnc`` cache's trust rules (checksummed,
signed with the context's key, no symlink, equal kernel or a miss); it can be turned off and cleared."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import kernel_cache
from nnadapter_tvm.tools import cli

RNG = np.random.default_rng(3)


def _blocks(count: int, channels: int = 6, seed: int = 0):
    """x [N, C, 7, 9] (N unknown) -> (Conv 3x3 pad 1 + bias, Relu) ``count`` times, weights from ``seed``."""
    rng = np.random.default_rng(seed)
    nodes, inits, name = [], [], "x"
    for k in range(count):
        w = rng.uniform(-0.3, 0.3, (channels, channels, 3, 3)).astype("float32")
        b = rng.uniform(-0.3, 0.3, channels).astype("float32")
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes.append(helper.make_node("Conv", [name, f"w{k}", f"b{k}"], [f"c{k}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        name = f"r{k}"
    dims = ["N", channels, 7, 9]
    graph = helper.make_graph(
        nodes,
        "blocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reference(model, x: np.ndarray) -> np.ndarray:
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    y = x.astype("float64")
    for k in range(sum(1 for n in model.graph.node if n.op_type == "Conv")):
        w, b = weights[f"w{k}"], weights[f"b{k}"]
        p = np.pad(y, [(0, 0), (0, 0), (1, 1), (1, 1)])
        out = np.zeros_like(y)
        for i in range(3):
            for j in range(3):
                out += np.einsum("nchw,oc->nohw", p[:, :, i : i + 7, j : j + 9], w[:, :, i, j])
        y = np.maximum(out + b[None, :, None, None], 0)
    return y


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """An empty kernel cache of the test's own."""
    directory = tmp_path / "kernels"
    monkeypatch.setenv(kernel_cache.ENV, str(directory))
    return directory


def _compile(model, tmp_path, name: str, properties: str = "") -> tuple[nna.Predictor, kernel_cache.Stats]:
    predictor = nna.Predictor(model, cache_dir=tmp_path / name, context_properties=properties)
    (compilation,) = predictor.compilations
    stats = compilation.kernel_stats
    return predictor, (stats[0] if stats else None)


def _check(predictor, model) -> np.ndarray:
    x = RNG.standard_normal((2, 6, 7, 9)).astype("float32")
    y = predictor.run({"x": x})[0]
    np.testing.assert_allclose(y, _reference(model, x), rtol=1e-4, atol=1e-4)
    return y


def test_a_fresh_cache_dir_and_another_model_find_the_kernels(kernels, tmp_path):
    model = _blocks(2)
    first, stats = _compile(model, tmp_path, "a")
    assert stats.hits == 0 and stats.misses >= 1
    assert len(kernel_cache.entries()) == stats.misses
    _check(first, model)
    # The same model into a fresh cache_dir: every kernel found, none built; the answers bit for bit.
    again, stats = _compile(model, tmp_path, "b")
    assert stats.misses == 0 and stats.hits == len(kernel_cache.entries())
    x = RNG.standard_normal((1, 6, 7, 9)).astype("float32")
    np.testing.assert_array_equal(again.run({"x": x})[0], first.run({"x": x})[0])
    # Another model made of the same blocks (other weights, three of them): found too.
    other = _blocks(3, seed=5)
    third, stats = _compile(other, tmp_path, "c")
    assert stats.misses == 0 and stats.hits >= 1
    _check(third, other)


def test_a_damaged_or_foreign_entry_is_rebuilt(kernels, tmp_path):
    model = _blocks(1)
    _compile(model, tmp_path, "a")
    entries = kernel_cache.entries()
    damaged = entries[0]
    with open(damaged, "rb") as f:
        data = bytearray(f.read())
    data[-5] ^= 0xFF
    with open(damaged, "wb") as f:
        f.write(bytes(data))
    # A symlink where an entry should be is not followed.
    if len(entries) > 1:
        target = tmp_path / "elsewhere.nnk"
        os.replace(entries[-1], target)
        os.symlink(target, entries[-1])
    predictor, stats = _compile(model, tmp_path, "b")
    assert len(stats.refused) == len(set(entries[:1] + entries[-1:]))
    _check(predictor, model)
    # The damaged entry was written again, whole.
    again, stats = _compile(model, tmp_path, "c")
    assert damaged not in stats.refused
    _check(again, model)


def test_entries_are_signed_with_the_contexts_key(kernels, tmp_path, monkeypatch):
    model = _blocks(1)
    _, unsigned = _compile(model, tmp_path, "a")
    monkeypatch.setenv("KERNEL_TEST_KEY", "secret-one")
    # With a key, an unsigned entry is refused (and rebuilt, signed).
    signed, stats = _compile(model, tmp_path, "b", "CACHE_KEY_ENV=KERNEL_TEST_KEY;")
    assert stats.hits == 0 and len(stats.refused) == unsigned.misses
    _check(signed, model)
    _, stats = _compile(model, tmp_path, "c", "CACHE_KEY_ENV=KERNEL_TEST_KEY;")
    assert stats.misses == 0
    monkeypatch.setenv("KERNEL_TEST_KEY", "secret-two")
    _, stats = _compile(model, tmp_path, "d", "CACHE_KEY_ENV=KERNEL_TEST_KEY;")
    assert stats.hits == 0 and stats.refused


def test_two_kernels_under_one_name_are_told_apart(kernels, tmp_path, monkeypatch):
    """The entry's name is a hash: a kernel found under its name must also equal the one wanted."""
    monkeypatch.setattr(kernel_cache.KernelCache, "name", lambda self, func: "0" * 32)
    first = _blocks(1)
    _compile(first, tmp_path, "a")
    other = _blocks(1, channels=6)
    other.graph.node[1].op_type = "Sigmoid"  # another kernel (Conv + Sigmoid)
    predictor, stats = _compile(other, tmp_path, "b")
    assert stats.hits == 0
    x = RNG.standard_normal((1, 6, 7, 9)).astype("float32")
    weights = {t.name: numpy_helper.to_array(t) for t in other.graph.initializer}
    p = np.pad(x.astype("float64"), [(0, 0), (0, 0), (1, 1), (1, 1)])
    conv = sum(
        np.einsum("nchw,oc->nohw", p[:, :, i : i + 7, j : j + 9], weights["w0"][:, :, i, j])
        for i in range(3)
        for j in range(3)
    )
    expected = 1 / (1 + np.exp(-(conv + weights["b0"][None, :, None, None])))
    np.testing.assert_allclose(predictor.run({"x": x})[0], expected, rtol=1e-4, atol=1e-5)


def test_turned_off_and_cleared(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(kernel_cache.ENV, "0")
    predictor, stats = _compile(_blocks(1), tmp_path, "a")
    assert stats is None
    _check(predictor, _blocks(1))
    assert cli.main(["kernels"]) == 0 and "off" in capsys.readouterr().out
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path / "kernels"))
    _compile(_blocks(1), tmp_path, "b")
    count = len(kernel_cache.entries())
    assert count >= 1
    assert cli.main(["kernels"]) == 0 and f"{count} kernel(s)" in capsys.readouterr().out
    assert cli.main(["kernels", "--clear"]) == 0 and f"{count} kernel(s) deleted" in capsys.readouterr().out
    assert kernel_cache.entries() == []


def test_the_default_place_follows_the_cache_dir_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(kernel_cache.ENV, raising=False)
    monkeypatch.setenv("NNADAPTER_TVM_CACHE_DIR", str(tmp_path))
    assert kernel_cache.default_dir() == os.path.join(str(tmp_path), "kernels")


_PROCESS = """
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import nnadapter_tvm as nna

w = numpy_helper.from_array(np.linspace(-1, 1, 4 * 3 * 9, dtype="float32").reshape(4, 3, 3, 3), "w")
nodes = [
    helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
    helper.make_node("Relu", ["c"], ["r"]),
    helper.make_node("GlobalAveragePool", ["r"], ["p"]),
    helper.make_node("Flatten", ["p"], ["y"]),
]
x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
model = helper.make_model(
    helper.make_graph(nodes, "g", [x_info], [y_info], initializer=[w]), opset_imports=[helper.make_opsetid("", 17)]
)
(compilation,) = nna.Predictor(model, cache_dir=sys.argv[1]).compilations
stats = compilation.kernel_stats[0]
print(stats.hits, stats.misses)
"""


def test_another_process_finds_every_kernel(kernels, tmp_path):
    """Kernels taking symbolic sizes as scalars (a pooling over unknown H and W, whose order FuseTIR picks
    anew in each process: kernel_identity.order_scalar_params) are found by the next process's compile."""
    import subprocess
    import sys

    counts = []
    for name in ("a", "b"):
        done = subprocess.run(
            [sys.executable, "-c", _PROCESS, str(tmp_path / name)], capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-2000:]
        counts.append([int(v) for v in done.stdout.split()[-2:]])
    (hits_a, misses_a), (hits_b, misses_b) = counts
    assert hits_a == 0 and misses_a >= 2
    assert (hits_b, misses_b) == (misses_a, 0)
