"""The cached load's cheaper passes (issue 13, item 5): the Predictor finds a file model's entry by
the file's identity (``.nnf``: device, inode, size, times) instead of hashing its bytes, and a load
copies the module out of the ``.nnc`` in the kernel (``cache.copy_out``). What must hold: a file
changed in place or replaced is never served another file's compiled model, a damaged, forged or
unsigned identity entry is ignored (the long way round, same answers), an entry is written only for a
file whose last change had settled, and the staged module is the checksummed blob byte for byte."""

from __future__ import annotations

import os
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.session import index

X = np.array([[-2.0, 0.5, 3.0], [1.0, -0.25, -4.0]], "float32")


def model(c: list[float]) -> onnx.ModelProto:
    """z = sigmoid(relu(x + c)): a change of ``c`` keeps the file's size."""
    nodes = [
        helper.make_node("Add", ["x", "c"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
        helper.make_node("Sigmoid", ["y"], ["z"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(c, "float32"), "c")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reference(c: list[float]) -> np.ndarray:
    return 1 / (1 + np.exp(-np.maximum(X + np.array(c, "float32"), 0)))


def identity_files(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(index.IDENTITY_SUFFIX))


@pytest.fixture
def settled_now(monkeypatch):
    """Files count as settled at once (the 60 s wait is what the real margin adds; tested apart)."""
    monkeypatch.setattr(index, "SETTLED_SECONDS", 0.0)


def no_hashing(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the model's bytes were hashed")

    monkeypatch.setattr(index, "key", refuse)


def test_a_settled_file_is_found_by_its_identity_without_hashing(tmp_path, settled_now, monkeypatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model([1.0, -2.0, 0.5]), str(path))
    time.sleep(0.05)  # past the file system's timestamp granularity
    first = nna.Predictor(str(path), cache_dir=str(tmp_path))
    assert not first.loaded_from_cache
    assert len(identity_files(tmp_path)) == 1, "a compile of a settled file indexes its identity"
    with monkeypatch.context() as m:
        no_hashing(m)
        again = nna.Predictor(str(path), cache_dir=str(tmp_path))
    assert again.loaded_from_cache and again._graph is None and again.token == first.token
    np.testing.assert_allclose(again.run({"x": X})[0], reference([1.0, -2.0, 0.5]), rtol=1e-6)


def test_a_fresh_file_gets_no_identity_entry(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model([1.0, -2.0, 0.5]), str(path))
    nna.Predictor(str(path), cache_dir=str(tmp_path))
    again = nna.Predictor(str(path), cache_dir=str(tmp_path))
    assert again.loaded_from_cache and again._graph is None, "found by its bytes' hash"
    assert identity_files(tmp_path) == [], f"changed less than {index.SETTLED_SECONDS} s ago: not trusted"
    ident = index.identity(os.stat(path))
    assert index.settled(ident, ident["ctime_ns"] + int(index.SETTLED_SECONDS * 1e9))
    assert not index.settled(ident, ident["ctime_ns"] + int(index.SETTLED_SECONDS * 1e9) - 1)


@pytest.mark.parametrize("how", ["in place, times restored", "replaced by rename"])
def test_a_changed_file_is_not_served_the_old_model(tmp_path, settled_now, how: str) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model([1.0, -2.0, 0.5]), str(path))
    time.sleep(0.05)
    first = nna.Predictor(str(path), cache_dir=str(tmp_path))
    assert len(identity_files(tmp_path)) == 1
    old = os.stat(path)
    data = model([0.0, 3.0, -1.0]).SerializeToString()
    assert len(data) == old.st_size
    time.sleep(0.05)
    if how == "replaced by rename":
        (tmp_path / "new.onnx").write_bytes(data)
        os.replace(tmp_path / "new.onnx", path)
    else:
        with open(path, "r+b") as f:
            f.write(data)
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))  # what cp -p or a careless tool leaves
    changed = nna.Predictor(str(path), cache_dir=str(tmp_path))
    assert changed.token != first.token and not changed.loaded_from_cache
    np.testing.assert_allclose(changed.run({"x": X})[0], reference([0.0, 3.0, -1.0]), rtol=1e-6)


@pytest.mark.parametrize("damage", ["flip a byte", "forge another identity", "unsigned for a signing context"])
def test_a_bad_identity_entry_takes_the_long_way(tmp_path, settled_now, monkeypatch, damage: str) -> None:
    monkeypatch.setenv("NNA_TEST_KEY", "k1")
    properties = "CACHE_KEY_ENV=NNA_TEST_KEY;" if damage == "unsigned for a signing context" else ""
    path = tmp_path / "m.onnx"
    onnx.save(model([1.0, -2.0, 0.5]), str(path))
    time.sleep(0.05)
    first = nna.Predictor(str(path), cache_dir=str(tmp_path))  # unsigned entries
    (name,) = identity_files(tmp_path)
    entry = tmp_path / name
    if damage == "flip a byte":
        data = bytearray(entry.read_bytes())
        data[-3] ^= 0x40
        entry.write_bytes(bytes(data))
    elif damage == "forge another identity":
        # A well-formed entry whose record is another file's: its checksum holds, its identity does not.
        meta = cache.unpack(entry.read_bytes(), name).meta
        meta["identity"] = dict(meta["identity"], ino=meta["identity"]["ino"] + 1)
        meta["token"] = "Z" * 32
        entry.write_bytes(cache.pack(meta, []))
    again = nna.Predictor(str(path), cache_dir=str(tmp_path), context_properties=properties)
    if damage == "unsigned for a signing context":
        assert again._graph is not None and not again.loaded_from_cache, "no unsigned file was trusted"
    else:
        assert again.loaded_from_cache and again.token == first.token, "found by its bytes' hash"
    np.testing.assert_allclose(again.run({"x": X})[0], reference([1.0, -2.0, 0.5]), rtol=1e-6)
    with monkeypatch.context() as m:
        no_hashing(m)
        rewritten = nna.Predictor(str(path), cache_dir=str(tmp_path), context_properties=properties)
    assert rewritten.loaded_from_cache and rewritten._graph is None, "the identity entry was rewritten"


def test_copy_out_stages_the_blob_of_the_mapped_file(tmp_path) -> None:
    blobs = [os.urandom(1000), os.urandom(3 << 20), b"tail"]
    path = tmp_path / "c.nnc"
    path.write_bytes(cache.pack({"k": 1}, blobs))
    mapped = cache.map_file(str(path))
    assert isinstance(mapped, cache.MappedFile) and mapped.fd is not None
    container = cache.unpack(mapped, str(path))
    for i, blob in enumerate(blobs):
        assert bytes(mapped[container.offsets[i] : container.offsets[i] + len(blob)]) == blob
        cache.copy_out(mapped, container.offsets[i], len(blob), str(tmp_path / f"k{i}.so"))
        assert (tmp_path / f"k{i}.so").read_bytes() == blob, "kernel copy"
    fd = mapped.fd
    mapped.release()
    assert mapped.fd is None
    with pytest.raises(OSError):
        os.fstat(fd)
    cache.copy_out(mapped, container.offsets[1], len(blobs[1]), str(tmp_path / "w.so"))
    assert (tmp_path / "w.so").read_bytes() == blobs[1], "written from the mapping once released"
    with pytest.raises(FileExistsError):
        cache.copy_out(mapped, 0, 4, str(tmp_path / "w.so"))  # never through an existing file (or link)
    assert (tmp_path / "w.so").stat().st_mode & 0o777 == 0o600


def test_a_loaded_compilation_keeps_no_descriptor(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model([1.0, -2.0, 0.5]), str(path))
    nna.Predictor(str(path), cache_dir=str(tmp_path))
    again = nna.Predictor(str(path), cache_dir=str(tmp_path))
    (compilation,) = again.compilations
    assert compilation.loaded_from_cache and compilation._buffer.fd is None, "released once staged"
    np.testing.assert_allclose(again.run({"x": X})[0], reference([1.0, -2.0, 0.5]), rtol=1e-6)


def test_copy_out_finishes_with_a_write_where_the_kernel_copy_stops(tmp_path, monkeypatch) -> None:
    blob = os.urandom(1 << 20)
    path = tmp_path / "c.nnc"
    path.write_bytes(cache.pack({}, [blob]))
    mapped = cache.map_file(str(path))
    container = cache.unpack(mapped, str(path))
    real = os.copy_file_range
    calls = []

    def partial(src, dst, count, offset_src=None, offset_dst=None):
        calls.append(count)
        if len(calls) > 1:  # another file system (EXDEV) half way through
            raise OSError(18, "Invalid cross-device link")
        return real(src, dst, min(count, 12345), offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", partial)
    cache.copy_out(mapped, container.offsets[0], len(blob), str(tmp_path / "m.so"))
    assert len(calls) == 2
    assert (tmp_path / "m.so").read_bytes() == blob
