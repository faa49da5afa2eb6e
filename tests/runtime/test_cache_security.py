"""Hostile or damaged caches: signatures, bit flips, truncation, swapped names, replays, symlinks."""

import os

import numpy as np
import pytest
from conftest import add_relu_ref, build_add_relu
from oputil import expect_error

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache

TOKEN_A = "A" * 32
TOKEN_B = "B" * 32
X = np.array([[0.5, -1.0, 2.0]], "float32")


def context(properties=""):
    return nna.Context([nna.Device.acquire("llvm")], properties)


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "cache.key"
    path.write_bytes(b"correct horse battery staple\n")
    return path


def compile_(model, ctx, **kw):
    c = nna.Compilation(model, ctx, **kw)
    c.finish()
    return c


def run(c):
    y = np.empty((1, 3), "float32")
    e = nna.Execution(c)
    e.set_input(0, X)
    e.set_output(0, y)
    e.compute()
    return y


def test_signed_cache_round_trip(tmp_path, key_file):
    ctx = context(f"CACHE_KEY_FILE={key_file}")
    d = tmp_path / "cache"
    compile_(build_add_relu(), ctx, cache_token=TOKEN_A, cache_dir=d)
    data = (d / f"{TOKEN_A}.nnc").read_bytes()
    assert data[-40:-32] == cache.SIGNATURE_MAGIC
    loaded = compile_(None, ctx, cache_token=TOKEN_A, cache_dir=d)
    assert loaded.loaded_from_cache
    np.testing.assert_array_equal(run(loaded), add_relu_ref(X))


def test_key_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NNA_TEST_KEY", "s3cret")
    ctx = context("CACHE_KEY_ENV=NNA_TEST_KEY")
    assert "s3cret" not in repr(ctx.properties)  # the key never prints
    data = compile_(build_add_relu(), ctx).serialize()
    assert compile_(None, ctx, cache_buffer=data).loaded_from_cache
    expect_error(lambda: context("CACHE_KEY_ENV=NNA_TEST_MISSING"), "NNA_TEST_MISSING is unset")


def test_unsigned_and_mis_signed_caches_are_refused(tmp_path, key_file):
    unsigned = compile_(build_add_relu(), context()).serialize()
    other_key = tmp_path / "other.key"
    other_key.write_bytes(b"another key")
    mis_signed = compile_(build_add_relu(), context(f"CACHE_KEY_FILE={other_key}")).serialize()
    ctx = context(f"CACHE_KEY_FILE={key_file}")
    expect_error(lambda: compile_(None, ctx, cache_buffer=unsigned), "unsigned")
    expect_error(lambda: compile_(None, ctx, cache_buffer=mis_signed), "signature mismatch")
    # With a model at hand, an unsigned file is recompiled and rewritten signed.
    d = tmp_path / "cache"
    d.mkdir()
    (d / f"{TOKEN_A}.nnc").write_bytes(unsigned)
    c = compile_(build_add_relu(), ctx, cache_token=TOKEN_A, cache_dir=d)
    assert not c.loaded_from_cache
    cache.unpack((d / f"{TOKEN_A}.nnc").read_bytes(), "rewritten", key=ctx.cache_key)


def test_every_flipped_bit_is_refused(key_file):
    ctx = context(f"CACHE_KEY_FILE={key_file}")
    data = compile_(build_add_relu(), ctx).serialize()
    positions = np.unique(np.linspace(0, len(data) - 1, 256).astype(int))
    for pos in positions:
        flipped = bytearray(data)
        flipped[pos] ^= 1 << (pos % 8)
        with pytest.raises(cache.CacheError):
            compile_(None, ctx, cache_buffer=bytes(flipped))
    print(f"\nflipped one bit at {len(positions)} positions of a {len(data)}-byte .nnc: all refused")


@pytest.mark.parametrize("keep", [0, 10, 60, 0.5, -1])
def test_truncated_files_are_refused(tmp_path, keep):
    data = compile_(build_add_relu(), context()).serialize()
    n = int(len(data) * keep) if isinstance(keep, float) else (keep if keep >= 0 else len(data) + keep)
    expect_error(lambda: compile_(None, context(), cache_buffer=data[:n]), "cache buffer")


def test_swapped_file_names_are_refused(tmp_path):
    d = tmp_path / "cache"
    compile_(build_add_relu(), context(), cache_token=TOKEN_A, cache_dir=d)
    compile_(build_add_relu(batch=1), context(), cache_token=TOKEN_B, cache_dir=d)
    a, b = d / f"{TOKEN_A}.nnc", d / f"{TOKEN_B}.nnc"
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    expect_error(
        lambda: compile_(None, context(), cache_token=TOKEN_A, cache_dir=d), f"token {TOKEN_B}", "not " + TOKEN_A
    )


def test_replay_for_another_target_or_library_is_refused(monkeypatch):
    data = compile_(build_add_relu(), context()).serialize()
    expect_error(lambda: compile_(None, context("LLVM_MCPU=cortex-a72"), cache_buffer=data), "built for target")
    real = cache.library_versions()
    monkeypatch.setattr(cache, "library_versions", lambda: dict(real, nnadapter_tvm="9.9.9"))
    expect_error(lambda: compile_(None, context(), cache_buffer=data), "built with")


def test_symlink_out_of_the_directory_is_refused(tmp_path):
    outside = tmp_path / "outside.nnc"
    outside.write_bytes(compile_(build_add_relu(), context()).serialize())
    before = (outside.read_bytes(), outside.stat().st_mtime_ns)
    d = tmp_path / "cache"
    d.mkdir()
    link = d / f"{TOKEN_A}.nnc"
    link.symlink_to(outside)
    expect_error(lambda: compile_(None, context(), cache_token=TOKEN_A, cache_dir=d), "symlinks are refused")
    # With a model, the entry is recompiled: the link is replaced by a regular file, the target untouched.
    compile_(build_add_relu(), context(), cache_token=TOKEN_A, cache_dir=d)
    assert not link.is_symlink() and link.is_file()
    assert (outside.read_bytes(), outside.stat().st_mtime_ns) == before
    assert sorted(os.listdir(d)) == [f"{TOKEN_A}.nnc"]
