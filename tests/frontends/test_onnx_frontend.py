"""The ONNX frontend around the converters: loading, Predictor, host fallback, partition config,
the model token and cache, bad input, and the CLI (run, info)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import nnadapter_tvm as nna
from nnadapter_tvm.frontends.onnx import PartitionConfig, import_model, load_model
from nnadapter_tvm.tools.cli import main

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def chain_model(batch: int | str = 2) -> onnx.ModelProto:
    """y = relu(x + c); z = sigmoid(y) * det-free ops only: Add, Relu, Sigmoid."""
    c = onnx.numpy_helper.from_array(np.array([1.0, -2.0, 0.5], "float32"), "c")
    nodes = [
        helper.make_node("Add", ["x", "c"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
        helper.make_node("Sigmoid", ["y"], ["z"], name="sigmoid"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, [batch, 3])],
        [helper.make_tensor_value_info("z", F, [batch, 3])],
        [c],
    )


def chain_ref(x: np.ndarray) -> np.ndarray:
    y = np.maximum(x + np.array([1.0, -2.0, 0.5], "float32"), 0)
    return 1 / (1 + np.exp(-y))


def host_model() -> onnx.ModelProto:
    """ai.onnx.ml's FeatureVectorizer has no converter (Det, then ai.onnx.ml's Binarizer and Scaler, used here
    before, became the DET and BINARIZER extensions and a composition): it can only run on the host. One
    input of width 9 with inputdimensions [9] is the identity."""
    ml = {"domain": "ai.onnx.ml", "inputdimensions": [9]}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("FeatureVectorizer", ["r"], ["d"], name="scale", **ml),
        helper.make_node("Sigmoid", ["d"], ["y"], name="sigmoid"),
        helper.make_node("FeatureVectorizer", ["x"], ["d2"], name="scale2", **ml),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 9])],
        [helper.make_tensor_value_info("y", F, [2, 9]), helper.make_tensor_value_info("d2", F, [2, 9])],
    )
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
    # Declare FeatureVectorizer's output, as exporters do.
    model.graph.value_info.append(helper.make_tensor_value_info("d", F, [2, 9]))
    return model


def test_predictor_runs_and_matches_numpy() -> None:
    x = np.random.default_rng(0).standard_normal([2, 3]).astype("float32")
    predictor = nna.Predictor(chain_model())
    (z,) = predictor.run({"x": x})
    np.testing.assert_allclose(z, chain_ref(x), rtol=1e-6, atol=1e-6)
    assert len(predictor.subgraphs) == 1 and len(predictor.token) == 32
    (z2,) = predictor.run([x])  # inputs as a list, in the graph's order
    np.testing.assert_array_equal(z, z2)


def test_symbolic_batch_stays_symbolic() -> None:
    predictor = nna.Predictor(chain_model(batch="N"))
    (input_type,), _ = predictor.compilations[0].query_inputs_and_outputs()
    assert input_type.dimensions[0] == nna.UNKNOWN
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal([n, 3]).astype("float32")
        np.testing.assert_allclose(predictor.run({"x": x})[0], chain_ref(x), rtol=1e-6, atol=1e-6)


def test_import_model_gives_one_nnadapter_model() -> None:
    model = import_model(chain_model())
    assert [op.type for op in model.operations] == [
        nna.OperationType.ADD,
        nna.OperationType.RELU,
        nna.OperationType.SIGMOID,
    ]


def test_unsupported_nodes_are_reported_all_at_once() -> None:
    with pytest.raises(nna.NNAdapterError) as err:
        nna.Predictor(host_model())
    assert err.value.code == nna.ResultCode.FEATURE_NOT_SUPPORTED
    text = str(err.value)
    assert "2 ONNX node(s)" in text and "'scale'" in text and "'scale2'" in text


def test_host_fallback_runs_unsupported_nodes_on_the_host() -> None:
    x = np.random.default_rng(1).standard_normal([2, 9]).astype("float32")
    predictor = nna.Predictor(host_model(), host_fallback=True)
    assert [u.node.name for u in predictor.graph.host_units] == ["scale", "scale2"]
    y, d2 = predictor.run({"x": x})
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-5)
    np.testing.assert_array_equal(d2, x)
    assert len(predictor.subgraphs) == 2  # relu before the host node, sigmoid after it


def test_partition_config_keeps_matching_nodes_on_the_host(tmp_path) -> None:
    config = tmp_path / "partition.txt"
    config.write_text("# keep relu on the CPU\nRelu:s:y\n")
    x = np.random.default_rng(2).standard_normal([2, 3]).astype("float32")
    predictor = nna.Predictor(chain_model(), partition_config=str(config))
    assert [u.node.name for u in predictor.graph.host_units] == ["relu"]
    assert len(predictor.subgraphs) == 2
    np.testing.assert_allclose(predictor.run({"x": x})[0], chain_ref(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("line", "matches"),
    [
        ("Relu", True),  # every node of the type
        ("Relu:s", True),  # that input, any output
        ("Relu::y", True),  # any input, that output
        ("Relu:s:y", True),
        ("Relu:other", False),
        ("Relu::other", False),
        ("Sigmoid", False),
    ],
)
def test_partition_config_rules(line: str, matches: bool) -> None:
    node = helper.make_node("Relu", ["s"], ["y"])
    assert PartitionConfig.parse(line).matches(node) is matches


@pytest.mark.parametrize("text", ["Relu:a:b:c", "Relu:a b:c", ":x:y"])
def test_partition_config_errors_name_the_line(text: str) -> None:
    with pytest.raises(nna.NNAdapterError, match="line 2"):
        PartitionConfig.parse("Sigmoid\n" + text)


def test_cache_is_reused_by_a_second_process(tmp_path) -> None:
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), str(path))
    first = nna.Predictor(str(path), cache_dir=str(tmp_path))
    assert not first.loaded_from_cache
    assert os.path.exists(tmp_path / f"{first.token}.nnc")
    code = (
        "import sys, numpy as np, nnadapter_tvm as nna\n"
        "p = nna.Predictor(sys.argv[1], cache_dir=sys.argv[2])\n"
        "total = p.run({'x': np.ones([2, 3], 'float32')})[0].sum()\n"
        "print(p.loaded_from_cache, p.token, 'onnx' in sys.modules, total)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    loaded, token, imported_onnx, total = out.stdout.split()
    assert loaded == "True" and token == first.token
    assert imported_onnx == "False", "a model found through the index must not import the graph (nor onnx)"
    np.testing.assert_allclose(float(total), chain_ref(np.ones([2, 3], "float32")).sum(), rtol=1e-5)


def nnp_files(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".nnp"))


def test_the_index_serves_only_the_model_it_was_written_for(tmp_path) -> None:
    x = np.random.default_rng(3).standard_normal([2, 3]).astype("float32")
    first = nna.Predictor(chain_model(), cache_dir=str(tmp_path))
    assert len(nnp_files(tmp_path)) == 1
    again = nna.Predictor(chain_model(), cache_dir=str(tmp_path))
    assert again.loaded_from_cache and again._graph is None, "loaded through the index, without importing"
    np.testing.assert_allclose(again.run({"x": x})[0], chain_ref(x), rtol=1e-6)
    assert again.input_names == ["x"] and again.output_names == ["z"]
    assert [u.label for u in again.graph.units] == [u.label for u in first.graph.units], "imported on demand"
    with pytest.raises(nna.NNAdapterError, match="input 'x' dimension 0 must be 2"):
        again.run({"x": np.zeros([3, 3], "float32")})

    other = chain_model()
    other.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.array([0.0, 0.0, 0.0], "float32"), "c"))
    changed = nna.Predictor(other, cache_dir=str(tmp_path))
    assert not changed.loaded_from_cache and changed.token != first.token
    np.testing.assert_allclose(changed.run({"x": x})[0], 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)
    assert len(nnp_files(tmp_path)) == 2
    assert nna.Predictor(chain_model(), cache_dir=str(tmp_path), context_properties="TVM_OPT_LEVEL=2;")._graph
    assert len(nnp_files(tmp_path)) == 3, "codegen properties are part of the index key"


@pytest.mark.parametrize("damage", ["delete the nnc", "corrupt the index"])
def test_a_broken_index_or_model_takes_the_long_way(tmp_path, damage: str) -> None:
    x = np.random.default_rng(4).standard_normal([2, 3]).astype("float32")
    first = nna.Predictor(chain_model(), cache_dir=str(tmp_path))
    (entry,) = nnp_files(tmp_path)
    if damage == "delete the nnc":
        os.remove(tmp_path / f"{first.token}.nnc")
    else:
        data = bytearray((tmp_path / entry).read_bytes())
        data[-3] ^= 0x40
        (tmp_path / entry).write_bytes(bytes(data))
    again = nna.Predictor(chain_model(), cache_dir=str(tmp_path))
    assert again._graph is not None, "the graph was imported"
    assert again.loaded_from_cache == (damage == "corrupt the index")
    np.testing.assert_allclose(again.run({"x": x})[0], chain_ref(x), rtol=1e-6)
    assert nna.Predictor(chain_model(), cache_dir=str(tmp_path))._graph is None, "the index was rewritten"


def test_plans_with_host_steps_are_not_indexed(tmp_path) -> None:
    nna.Predictor(host_model(), host_fallback=True, cache_dir=str(tmp_path))
    assert nnp_files(tmp_path) == []


def test_a_signing_context_refuses_an_unsigned_index(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NNA_TEST_KEY", "k1")
    nna.Predictor(chain_model(), cache_dir=str(tmp_path))  # unsigned index and model
    signed = nna.Predictor(chain_model(), cache_dir=str(tmp_path), context_properties="CACHE_KEY_ENV=NNA_TEST_KEY;")
    assert signed._graph is not None and not signed.loaded_from_cache, "neither unsigned file was trusted"
    again = nna.Predictor(chain_model(), cache_dir=str(tmp_path), context_properties="CACHE_KEY_ENV=NNA_TEST_KEY;")
    assert again._graph is None and again.loaded_from_cache


def test_token_changes_with_the_weights() -> None:
    model = chain_model()
    other = chain_model()
    other.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.array([1.0, -2.0, 0.25], "float32"), "c"))
    assert nna.Predictor(model).token == nna.Predictor(chain_model()).token
    assert nna.Predictor(model).token != nna.Predictor(other).token


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({"y": np.zeros([2, 3], "float32")}, "unknown input name"),
        ({"x": np.zeros([2, 3], "float64")}, "input 'x' must be float32, got float64"),
        ({"x": np.zeros([3, 3], "float32")}, "input 'x' dimension 0 must be 2"),
        ({"x": np.zeros([2, 3, 1], "float32")}, "input 'x' must have rank 2"),
    ],
)
def test_bad_inputs_are_named(feeds, message: str) -> None:
    predictor = nna.Predictor(chain_model())
    with pytest.raises(nna.NNAdapterError, match=message):
        predictor.run(feeds)


def test_the_callers_model_is_left_as_given() -> None:
    """load_model infers shapes into a model of its own: the caller's ModelProto (here with a weight large
    enough to be left out of the checker's copy, and no value_info) is unchanged, and loads again."""
    model = chain_model("n")
    w = onnx.numpy_helper.from_array(np.full((3, 3000), 0.5, "float32"), "w")
    model.graph.initializer.append(w)
    model.graph.node.append(helper.make_node("MatMul", ["z", "w"], ["m"], name="matmul"))
    model.graph.output.append(helper.make_tensor_value_info("m", F, None))
    given = model.SerializeToString()
    loaded = load_model(model)
    assert model.SerializeToString() == given
    assert {v.name for v in loaded.graph.value_info} >= {"s", "y"}
    assert [list(i.dims) for i in loaded.graph.initializer] == [[3], [3, 3000]]
    x = np.array([[0.5, 3.0, -1.0]], "float32")
    _, m = nna.Predictor(model).run({"x": x})
    assert model.SerializeToString() == given
    np.testing.assert_allclose(m, chain_ref(x) @ np.full((3, 3000), 0.5, "float32"), rtol=1e-5)


def test_bad_files_are_named_and_nothing_is_cached(tmp_path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x01garbage that is not protobuf \xff\xff")
    with pytest.raises(nna.NNAdapterError, match=r"junk\.onnx"):
        nna.Predictor(str(junk), cache_dir=str(tmp_path))
    with pytest.raises(nna.NNAdapterError, match="no such file"):
        load_model(str(tmp_path / "missing.onnx"))
    broken = chain_model()
    broken.graph.node[1].input[0] = "nowhere"  # fails onnx.checker: input produced by no node
    path = tmp_path / "broken.onnx"
    onnx.save(broken, str(path))
    with pytest.raises(nna.NNAdapterError, match=r"broken\.onnx fails onnx\.checker"):
        nna.Predictor(str(path), cache_dir=str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["broken.onnx", "junk.onnx"]


def test_backend_interface() -> None:
    from nnadapter_tvm.frontends.onnx import backend

    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    x = np.random.default_rng(3).standard_normal([2, 3]).astype("float32")
    (z,) = backend.prepare(chain_model(), "CPU").run([x])
    np.testing.assert_allclose(z, chain_ref(x), rtol=1e-6, atol=1e-6)


def test_cli_run_and_info(tmp_path, capsys) -> None:
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), str(path))
    x = np.full([2, 3], 0.5, "float32")
    np.save(tmp_path / "x.npy", x)
    argv = ["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--cache-dir", str(tmp_path / "c"), "--repeat", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "token: " in out and "output z: float32[2, 3]" in out
    assert f"{chain_ref(x)[0, 0]:.7f}"[:7] in out  # printed to 6 significant digits
    assert main(["run", str(path), "--cache-dir", str(tmp_path / "c")]) == 0  # random inputs, cached
    assert "loaded from the cache" in capsys.readouterr().out
    assert main(["info", str(path), "--partition-config", "Relu"]) == 0
    out = capsys.readouterr().out
    assert "subgraphs: 2" in out and "host nodes: 1" in out and "matched by the partition config" in out
    assert main(["info", str(path), "--dot"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith("digraph G {") and "fillcolor=lightblue" in dot and '-> n1 [label="s"]' in dot
    assert main(["run", str(tmp_path / "missing.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_reshape_to_a_shape_fed_at_run_time_compiles_once() -> None:
    """Reshape's shape as a graph input is read at execution (0 copies, -1 is inferred there): one
    compilation serves every shape, and a shape that does not fit fails naming the operation."""
    from nnadapter_tvm.frontends.onnx import backend

    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [helper.make_tensor_value_info("x", F, [2, 6]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", F, [None, None])],
    )
    rep = backend.prepare(model, "CPU")
    x = np.arange(12, dtype="float32").reshape(2, 6)
    for shape in ([3, 4], [4, -1], [0, 6], [3, 4]):
        (y,) = rep.run([x, np.array(shape, "int64")])
        np.testing.assert_array_equal(y, x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(shape)]))
    assert rep.specialise == [] and not rep._specialised
    with pytest.raises(nna.NNAdapterError, match="RESHAPE"):
        rep.run([x, np.array([5, 5], "int64")])


def test_backend_specialises_on_parameters_fed_at_run_time() -> None:
    """A reflect Pad's pads as a graph input (PAD reads them at compile time in every mode but constant):
    compiled for the fed pads, and again for new ones."""
    from nnadapter_tvm.frontends.onnx import backend

    model = make_model(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")],
        [helper.make_tensor_value_info("x", F, [3, 4]), helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", F, [None, None])],
    )
    rep = backend.prepare(model, "CPU")
    x = np.arange(12, dtype="float32").reshape(3, 4)
    for pads in ([0, 1, 0, 0], [1, 0, 1, 2], [0, 1, 0, 0]):
        (y,) = rep.run([x, np.array(pads, "int64")])
        np.testing.assert_array_equal(y, np.pad(x, [(pads[0], pads[2]), (pads[1], pads[3])], mode="reflect"))
    assert rep.specialise == ["pads"] and len(rep._specialised) == 2


def test_constant_pad_reads_pads_fed_at_run_time() -> None:
    """A constant Pad's pads as a graph input: one compilation for every value (negative pads crop)."""
    from nnadapter_tvm.frontends.onnx import backend

    model = make_model(
        [helper.make_node("Pad", ["x", "pads"], ["y"])],
        [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", F, [None, None])],
    )
    rep = backend.prepare(model, "CPU")
    x = np.arange(6, dtype="float32").reshape(2, 3)
    for pads in ([0, 1, 0, 0], [1, 0, 1, 2], [0, -1, 0, 1]):
        (y,) = rep.run([x, np.array(pads, "int64")])
        cropped = x[:, 1:] if pads[1] < 0 else x
        want = np.pad(cropped, [(pads[0], pads[2]), (max(pads[1], 0), pads[3])])
        np.testing.assert_array_equal(y, want)
    assert rep.specialise == []
