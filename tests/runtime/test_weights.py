"""Weights kept out of the compiled module (runtime/weights.py, relax_passes.lift_weights): stored beside it
in the .nnc at 64-byte aligned offsets, used in place from the mapped cache file, refused when their
records do not fit."""

import hashlib
import json
import re
import struct

import numpy as np
import pytest
import tvm
from oputil import In, Out, build_model, f32, fuse, rand
from tvm import relax

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime import weights as weights_layout
from nnadapter_tvm.targets.cpu import pipeline

OP = nna.OperationType
TOKEN = "w" * 32
W = rand(160, 128, seed=1)  # FULLY_CONNECTED's weight [num_units, input size]: 80 KB, lifted
B = rand(160, seed=2)  # 640 bytes: stays in the module
X = rand(2, 128, seed=3)


def _model() -> nna.Model:
    return build_model(OP.FULLY_CONNECTED, [In(X), f32(W), f32(B), fuse(0)], [Out()], [(2, 160)])


def _reference() -> np.ndarray:
    return (X.astype("float64") @ W.T.astype("float64") + B).astype("float32")


def _compile(model: nna.Model | None, properties: str = "", **kw) -> nna.Compilation:
    compilation = nna.Compilation(model, nna.Context([nna.Device.acquire("llvm")], properties), **kw)
    compilation.finish()
    return compilation


def _run(compilation: nna.Compilation) -> np.ndarray:
    return compilation.run([X])[0].numpy()


def _cached(tmp_path, properties: str = "") -> tuple[nna.Compilation, bytes]:
    compiled = _compile(_model(), properties, cache_token=TOKEN, cache_dir=tmp_path)
    data = (tmp_path / f"{TOKEN}.nnc").read_bytes()
    return compiled, data


def _lifted_tensors(compilation: nna.Compilation) -> list:
    (program,) = compilation.programs
    (tensors,) = program._weights
    return list(tensors)


def test_weights_are_stored_beside_the_module(tmp_path):
    compiled, data = _cached(tmp_path)
    np.testing.assert_allclose(_run(compiled), _reference(), rtol=1e-5, atol=1e-5)
    container = cache.unpack(data, "test")
    (record,) = cache.Manifest.from_json(container.meta, "test").subgraphs
    assert record.weights_blob is not None and record.weights_blob != record.blob
    module, lifted = container.blobs[record.blob], container.blobs[record.weights_blob]
    assert container.offsets[record.weights_blob] % weights_layout.ALIGNMENT == 0
    arrays = weights_layout.views(lifted, weights_layout.check_records(record.weights, len(lifted)))
    # The packed weight holds W's values (in its own layout, zero-padded to whole blocks); the bias is
    # under MIN_BYTES and stays in the module.
    values = np.concatenate([a.ravel() for a in arrays])
    np.testing.assert_array_equal(np.sort(values[values != 0]), np.sort(W.ravel()))
    assert len(module) < len(data) and all(a.nbytes >= weights_layout.MIN_BYTES for a in arrays)


def test_a_cached_load_uses_the_weights_in_place(tmp_path):
    compiled, data = _cached(tmp_path)
    loaded = _compile(None, cache_token=TOKEN, cache_dir=tmp_path)
    assert loaded.loaded_from_cache
    placed = _in_mapping(loaded)
    assert placed and all(placed)
    assert all(t.data_ptr() % 64 == 0 for t in _lifted_tensors(loaded))
    for _ in range(3):
        np.testing.assert_array_equal(_run(loaded), _run(compiled))
    # Nothing wrote through the mapping: the file and what the compilation serializes are unchanged.
    after = (tmp_path / f"{TOKEN}.nnc").read_bytes()
    assert hashlib.sha256(after).digest() == hashlib.sha256(data).digest()
    assert loaded.serialize() == data


def _in_mapping(compilation: nna.Compilation) -> list[bool]:
    mapped = np.frombuffer(compilation._buffer, np.uint8)
    start, end = mapped.ctypes.data, mapped.ctypes.data + mapped.nbytes
    return [start <= t.data_ptr() < end for t in _lifted_tensors(compilation)]


@pytest.mark.parametrize(
    "properties, signed, in_place",
    [
        ("CACHE_WEIGHTS_IN_PLACE=0;", False, False),
        ("", True, False),  # a signature is checked at load: the weights are copied then, by default
        ("CACHE_WEIGHTS_IN_PLACE=1;", True, True),
    ],
)
def test_weights_copied_at_load_where_asked_or_signed(tmp_path, monkeypatch, properties, signed, in_place):
    if signed:
        monkeypatch.setenv("NNA_TEST_WEIGHTS_KEY", "k" * 32)
        properties += "CACHE_KEY_ENV=NNA_TEST_WEIGHTS_KEY;"
    compiled, _ = _cached(tmp_path, properties)
    loaded = _compile(None, properties, cache_token=TOKEN, cache_dir=tmp_path)
    assert loaded.loaded_from_cache
    placed = _in_mapping(loaded)
    assert placed and all(p == in_place for p in placed)
    assert all(t.data_ptr() % 64 == 0 for t in _lifted_tensors(loaded))
    np.testing.assert_array_equal(_run(loaded), _run(compiled))


def test_a_cache_buffer_loads_its_weights_by_copy(tmp_path):
    compiled, data = _cached(tmp_path)
    loaded = _compile(None, cache_buffer=data)
    assert loaded.loaded_from_cache
    assert all(t.data_ptr() % 64 == 0 for t in _lifted_tensors(loaded))
    np.testing.assert_array_equal(_run(loaded), _run(compiled))


def _with_record(data: bytes, **changes) -> bytes:
    container = cache.unpack(data, "test")
    meta = dict(container.meta)
    meta["subgraphs"] = [dict(meta["subgraphs"][0], **changes)]
    return cache.pack(meta, [bytes(b) for b in container.blobs])


@pytest.mark.parametrize(
    "how, fragment",
    [
        ("misaligned", "misaligned offset"),
        ("past the end", "ends past"),
        ("element type", "unknown element type"),
        ("not a record", "is not [dtype, shape, offset]"),
        ("no blob", "no weights blob"),
    ],
)
def test_weight_records_that_do_not_fit_are_refused(tmp_path, how, fragment):
    _, data = _cached(tmp_path)
    record = cache.unpack(data, "test").meta["subgraphs"][0]
    first = list(record["weights"][0])
    changes = {
        "misaligned": {"weights": [[first[0], first[1], first[2] + 4]]},
        "past the end": {"weights": [[first[0], [10**6], first[2]]]},
        "element type": {"weights": [["object", first[1], first[2]]]},
        "not a record": {"weights": [first[:2]]},
        "no blob": {"weights_blob": 7},
    }[how]
    with pytest.raises(cache.CacheError, match=re.escape(fragment)):
        _compile(None, cache_buffer=_with_record(data, **changes))


def test_a_version_1_container_is_still_read(tmp_path):
    """Version 1 had no pads before its blobs."""
    _, data = _cached(tmp_path)
    container = cache.unpack(data, "test")
    meta = dict(container.meta, format_version=1)
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    payload = b"".join([struct.pack("<I", len(meta_bytes)), meta_bytes, *(bytes(b) for b in container.blobs)])
    old = struct.pack("<8sIQ32s", cache.MAGIC, 1, len(payload), hashlib.sha256(payload).digest()) + payload
    again = cache.unpack(old, "test")
    assert [bytes(b) for b in again.blobs] == [bytes(b) for b in container.blobs]


def test_lift_takes_large_constants_once_each():
    """One large constant read twice is one weight; a small one stays in the module; the results are
    those of the build that keeps every constant."""
    big = rand(32, 1024, seed=4)  # 128 KB
    small = rand(32, 8, seed=5)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([32, 1024], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = relax.const(big)
            y = bb.emit(relax.op.add(x, c))
            y = bb.emit(relax.op.multiply(y, c))
            z = bb.emit(relax.op.sum(y, axis=[1], keepdims=True))
            out = bb.emit_output(relax.op.add(z, relax.const(small)))
        bb.emit_func_output(out)
    target = tvm.target.Target({"kind": "llvm"})
    kept, _ = pipeline.build(bb.get(), target)
    lifted, _ = pipeline.build(bb.get(), target, lift=True)
    assert not hasattr(kept, "weights")
    assert len(lifted.weights) == 1 and np.array_equal(lifted.weights[0], big)
    xv = rand(32, 1024, seed=6)
    want = relax.VirtualMachine(kept, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    tensors = weights_layout.host_tensors(lifted.weights)
    got = relax.VirtualMachine(lifted, tvm.cpu())["main"](tvm.runtime.tensor(xv), tensors).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, ((xv + big) * big).sum(1, keepdims=True) + small, rtol=1e-5)
