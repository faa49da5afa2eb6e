"""Shared fixtures: small models compiled once per test module; each test's own empty kernel cache; the
model fuzzer's worker subprocess (tests/e2e/test_fuzz_models.py, tests/e2e/test_fuzz_corpus.py)."""

from __future__ import annotations

import os
import tempfile

import pytest

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import kernel_cache
from nnadapter_tvm.tools import builtin_model

# The kernel cache as the runner set it: turned off, it stays off for every test.
_KERNELS_OFF = kernel_cache.default_dir() is None


def pytest_configure(config) -> None:
    # Compiles outside a test (module fixtures) use a cache of the session's, never the user's.
    if not _KERNELS_OFF:
        os.environ[kernel_cache.ENV] = tempfile.mkdtemp(prefix="nnadapter-tvm-test-kernels-")


@pytest.fixture(autouse=True)
def _own_kernel_cache(tmp_path_factory, monkeypatch) -> None:
    """Each test compiles with an empty kernel cache: a test that patches a schedule or a lowering must
    build its kernels with the patch, not find those an earlier test built."""
    if not _KERNELS_OFF:
        monkeypatch.setenv(kernel_cache.ENV, str(tmp_path_factory.mktemp("kernels")))


P = nna.Precision


# out = relu(x + c) with x: [batch, 3] input, c: constant [3].
build_add_relu = builtin_model.build_tiny
add_relu_ref = builtin_model.tiny_reference


@pytest.fixture
def llvm_context() -> nna.Context:
    return nna.Context([nna.Device.acquire("llvm")])


@pytest.fixture(scope="module")
def add_relu_compilation() -> nna.Compilation:
    compilation = nna.Compilation(build_add_relu(), nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    return compilation


@pytest.fixture(scope="module")
def fuzz_worker():
    """The model fuzzer's worker subprocess (tests/fuzz_models.py), one per test module."""
    from fuzz_models import Worker

    worker = Worker()
    yield worker
    worker.close()


def pytest_terminal_summary(terminalreporter) -> None:
    """The ONNX backend suite's counts, as issue 4 asks: passed, failed, excluded."""
    stats = terminalreporter.stats

    def count(outcome: str) -> int:
        return sum(
            1
            for r in stats.get(outcome, [])
            if "OnnxBackendNodeModelTest" in getattr(r, "nodeid", "")
            and getattr(r, "when", "call") in ("call", "setup")
        )

    passed, failed, excluded = count("passed"), count("failed") + count("error"), count("skipped")
    if passed or failed or excluded:
        terminalreporter.write_sep("-", "onnx backend node cases")
        terminalreporter.write_line(
            f"{passed} passed, {failed} failed, {excluded} excluded (tests/onnx/excludes*.txt, each with its reason)"
        )
