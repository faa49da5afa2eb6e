"""The spec's three cache cases, the .nnc container's defences, and the model token."""

import os

import numpy as np
import pytest
from conftest import add_relu_ref, build_add_relu

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache, weights
from nnadapter_tvm.runtime.token import model_token

TOKEN = "0123456789abcdefABCDEF0123456789"


def run(compilation, x):
    y = np.empty(x.shape, "float32")
    e = nna.Execution(compilation)
    e.set_input(0, x)
    e.set_output(0, y)
    e.compute()
    return y


X = np.array([[0.5, 1.0, -1.0], [-3.0, 4.0, 0.25]], "float32")


def compile_(model, ctx, **kw):
    c = nna.Compilation(model, ctx, **kw)
    c.finish()
    return c


def test_case1_buffer_is_loaded_and_model_ignored(llvm_context, add_relu_compilation):
    buf = add_relu_compilation.serialize()
    c = compile_(None, llvm_context, cache_token=TOKEN, cache_buffer=buf)
    assert c.loaded_from_cache
    np.testing.assert_array_equal(run(c, X), add_relu_ref(X))
    # A model given alongside a buffer is ignored: the buffer wins.
    c2 = compile_(build_add_relu(), llvm_context, cache_buffer=buf)
    assert c2.loaded_from_cache


def test_case2_dir_writes_then_loads(tmp_path, llvm_context):
    c = compile_(build_add_relu(), llvm_context, cache_token=TOKEN, cache_dir=tmp_path)
    assert not c.loaded_from_cache
    assert sorted(os.listdir(tmp_path)) == [TOKEN + ".nnc"]  # no temporary left behind
    again = compile_(None, llvm_context, cache_token=TOKEN, cache_dir=tmp_path)
    assert again.loaded_from_cache
    np.testing.assert_array_equal(run(again, X), add_relu_ref(X))
    assert again.serialize() == c.serialize()
    assert again.query_inputs_and_outputs()[1][0].dimensions == [nna.UNKNOWN, 3]


def test_case3_neither_writes_nothing(tmp_path, llvm_context, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = compile_(build_add_relu(), llvm_context)
    assert os.listdir(tmp_path) == []
    assert len(c.serialize()) > 0
    # A token without a directory (or a directory without a token) writes nothing either.
    compile_(build_add_relu(), llvm_context, cache_token=TOKEN)
    compile_(build_add_relu(), llvm_context, cache_dir=tmp_path / "d")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("token", ["../" + "a" * 29, "a" * 31, "a" * 33, "a/b" + "c" * 29, "a" * 31 + "-", 12, ""])
def test_bad_token_rejected_before_touching_files(tmp_path, llvm_context, token):
    target = tmp_path / "dir"
    with pytest.raises(nna.NNAdapterError) as err:
        nna.Compilation(build_add_relu(), llvm_context, cache_token=token, cache_dir=target)
    assert err.value.code == nna.ResultCode.INVALID_PARAMETER
    assert "32 characters" in str(err.value)
    assert not target.exists()


def damage(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[: len(data) // 2]
    if how == "bitflip":
        mid = len(data) // 2
        return data[:mid] + bytes([data[mid] ^ 0x40]) + data[mid + 1 :]
    if how == "foreign":
        return b"\x7fELF" + os.urandom(200)
    if how == "empty":
        return b""
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "bitflip", "foreign", "empty"])
def test_damaged_file_without_model_is_a_clear_error(tmp_path, llvm_context, add_relu_compilation, how):
    path = tmp_path / (TOKEN + ".nnc")
    path.write_bytes(damage(add_relu_compilation.serialize(), how))
    with pytest.raises(nna.NNAdapterError) as err:
        compile_(None, llvm_context, cache_token=TOKEN, cache_dir=tmp_path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("how", ["truncated", "bitflip", "foreign"])
def test_damaged_file_with_model_is_recompiled_and_rewritten(tmp_path, llvm_context, add_relu_compilation, how, caplog):
    path = tmp_path / (TOKEN + ".nnc")
    path.write_bytes(damage(add_relu_compilation.serialize(), how))
    c = compile_(build_add_relu(), llvm_context, cache_token=TOKEN, cache_dir=tmp_path)
    assert not c.loaded_from_cache
    assert "recompiling" in caplog.text
    np.testing.assert_array_equal(run(c, X), add_relu_ref(X))
    cache.unpack(path.read_bytes(), str(path))  # the rewritten file is valid
    assert sorted(os.listdir(tmp_path)) == [TOKEN + ".nnc"]


def test_damaged_buffer_without_model(llvm_context, add_relu_compilation):
    with pytest.raises(nna.NNAdapterError, match="checksum mismatch"):
        compile_(None, llvm_context, cache_buffer=damage(add_relu_compilation.serialize(), "bitflip"))


def test_cache_from_another_library_version_is_refused(llvm_context, add_relu_compilation, monkeypatch):
    data = add_relu_compilation.serialize()
    real = cache.library_versions()
    monkeypatch.setattr(cache, "library_versions", lambda: dict(real, tvm="0.0.0"))
    with pytest.raises(nna.NNAdapterError, match="built with"):
        compile_(None, llvm_context, cache_buffer=data)


def test_missing_file_and_no_model(tmp_path, llvm_context):
    with pytest.raises(nna.NNAdapterError, match="no cache file"):
        compile_(None, llvm_context, cache_token=TOKEN, cache_dir=tmp_path)


def test_failed_compile_writes_nothing(tmp_path, llvm_context):
    m = nna.Model()
    x = m.add_operand(nna.OperandType(nna.Precision.FLOAT32, [2, 3]))
    out = m.add_operand(nna.OperandType(nna.Precision.FLOAT32, [2, 5]))  # wrong on purpose
    m.add_operation(nna.OperationType.RELU, [x], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    with pytest.raises(nna.NNAdapterError):
        compile_(m, llvm_context, cache_token=TOKEN, cache_dir=tmp_path)
    assert not tmp_path.exists() or os.listdir(tmp_path) == []


def test_token_changes_with_what_changes_code(llvm_context):
    base = model_token(build_add_relu(), llvm_context)
    assert len(base) == 32 and base == model_token(build_add_relu(), llvm_context)
    assert model_token(build_add_relu(batch=4), llvm_context) != base
    m = build_add_relu()
    m.operands[1]._value = np.array([1.0, -2.0, 0.75], "float32")  # another constant value
    assert model_token(m, llvm_context) != base
    opt1 = nna.Context([nna.Device.acquire("llvm")], "TVM_OPT_LEVEL=1")
    assert model_token(build_add_relu(), opt1) != base
    threads = nna.Context([nna.Device.acquire("llvm")], "TVM_NUM_THREADS=1;")
    assert model_token(build_add_relu(), threads) == base  # runtime-only property


def test_format_2_signs_the_header_whose_digest_covers_the_payload():
    """The signature is the HMAC of the header (magic, version, length, the payload's SHA-256), computed
    here from its definition; a byte changed anywhere in the payload is refused by the digest."""
    import hashlib
    import hmac
    import struct

    key = b"k" * 32
    blobs = [bytes(range(256)) * 20, b"x" * 3333]
    data = cache.pack({"k": 1}, blobs, key=key)
    header = data[: struct.calcsize("<8sIQ32s")]
    _, version, length, digest = struct.unpack("<8sIQ32s", header)
    payload = data[len(header) : len(header) + length]
    assert version == 2 and digest == hashlib.sha256(payload).digest()
    assert data[len(header) + length :] == cache.SIGNATURE_MAGIC + hmac.new(key, header, hashlib.sha256).digest()
    assert [bytes(b) for b in cache.unpack(data, "test", key=key).blobs] == blobs
    for position in (len(header) + 10, len(header) + length // 2, len(header) + length - 1):
        damaged = bytearray(data)
        damaged[position] ^= 1
        with pytest.raises(cache.CacheError, match="checksum mismatch"):
            cache.unpack(bytes(damaged), "test", key=key)
    damaged = bytearray(data)
    damaged[20] ^= 1  # in the header's digest: the signature no longer matches
    with pytest.raises(cache.CacheError, match="signature mismatch"):
        cache.unpack(bytes(damaged), "test", key=key)


def test_a_container_in_pieces_is_written_as_its_joined_bytes(tmp_path):
    """A compile's container stays in pieces (its weights blob a list of arrays and their padding): hashed
    and written piece by piece, it must be byte for byte the container of the joined blobs, and unpack to
    them."""
    arrays = [np.arange(5000, dtype="float32"), np.arange(77, dtype="int8"), np.ones((130, 7), "float64")]
    pieces, records = weights.pack(arrays)
    joined = b"".join(bytes(memoryview(p)) for p in pieces)
    assert len(joined) == weights.layout(arrays)[0]
    for key in (None, b"k" * 32):
        split = cache.pack_pieces({"k": 1}, [b"module", pieces], key=key)
        whole = cache.pack({"k": 1}, [b"module", joined], key=key)
        assert bytes(split) == whole and split.nbytes == len(whole)
        path = str(tmp_path / f"{key is None}.nnc")
        cache.write_atomic(path, split)
        with open(path, "rb") as f:
            assert f.read() == whole
        blob = cache.unpack(whole, "test", key=key).blobs[1]
        for got, want in zip(weights.views(blob, records), arrays):
            np.testing.assert_array_equal(got, want)


def _rss_file_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the resident set from Linux's /proc")
def test_a_checksum_through_a_mapping_leaves_its_pages_out_of_the_resident_set(tmp_path, monkeypatch):
    """A cached load verifies the whole file through its mapping; the pages it read must not stay resident
    (only those the kernels read later should), and a damaged byte must still be found."""
    monkeypatch.setattr(cache, "RELEASE_CHUNK", 1 << 20)
    blob = np.random.default_rng(0).integers(0, 255, 48 << 20, dtype=np.uint8)
    path = str(tmp_path / "big.nnc")
    cache.write_atomic(path, cache.pack_pieces({"k": 1}, [[blob]]))
    mapped = cache.map_file(path)
    before = _rss_file_kb()
    cache.verify(mapped, path)
    assert _rss_file_kb() - before < 16 << 10  # KB: 48 MB were read
    assert bytes(cache.unpack(mapped, path).blobs[0][:4096]) == blob[:4096].tobytes()  # read again from the file
    with open(path, "r+b") as f:
        f.seek(30 << 20)
        byte = f.read(1)[0]
        f.seek(30 << 20)
        f.write(bytes([byte ^ 1]))
    with pytest.raises(cache.CacheError, match="checksum mismatch"):
        cache.verify(cache.map_file(path), path)
