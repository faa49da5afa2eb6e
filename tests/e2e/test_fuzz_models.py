"""Fuzzed models: random models built through the public API either run or fail with NNAdapterError.

A hypothesis strategy (``cases()``, tests/fuzz_model_cases.py) draws a JSON description of a model,
biased toward the operand table (``nnadapter_tvm.operations``): mostly the right operand counts and
precisions with random shapes (zero-sized, rank 0, huge, unknown) and attribute values (NaN, inf,
extremes), plus a fraction of deliberately wrong ones (unknown operation, wrong count, precision, byte
length, dtype, cycles...).

``run_case`` (tests/fuzz_models.py) builds the model through the public API, compiles it for llvm, runs
it on random inputs of the declared shapes, reloads it from its cache buffer and runs it again (same bits
expected).  Outcomes: ``ok``, ``nnadapter_error`` (both fine), ``too_big_to_feed`` (it compiled, but its
inputs are too big to make: fine here, tests/runtime/test_resources.py owns that), and the failures:
``bug`` (any other Python exception), ``crash`` (the process died by a signal or exited), ``timeout``,
``harness_error`` (the harness's own fault).  Cases run in a long-lived worker subprocess (the
``fuzz_worker`` fixture of tests/conftest.py; many cases per process, restarted after a crash), so a
segfault or abort is a failure, not the end of pytest.

By default (CI) ``test_fuzz_models`` runs 500 examples, derandomized: the same ones on every run, about
25 s on two cores; the corpus replays (tests/e2e/test_fuzz_corpus.py) in about as much again.
docs/reliability.md has the figures of the longer runs and the bugs they found.

    NNA_FUZZ_EXAMPLES=2000 NNA_FUZZ_SEED=7 pytest tests/e2e/test_fuzz_models.py    a bigger, random run
    NNA_FUZZ_SHRINK=1 ...                               let hypothesis shrink a failing case first
    python tests/fuzz_models.py --explore 2000 --seed 1   generate and run many, save one case per
                                                      distinct failure into tests/fuzz_corpus/
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest
from fuzz_model_cases import cases
from fuzz_models import FINE, describe_failure, save_to_corpus

EXAMPLES = int(os.environ.get("NNA_FUZZ_EXAMPLES", "500"))
SEED = os.environ.get("NNA_FUZZ_SEED")  # unset: the same examples every run (derandomized)
SHRINK = os.environ.get("NNA_FUZZ_SHRINK") == "1"  # off by default: a crash costs seconds per try


def test_worker_tells_fine_from_failing(fuzz_worker):
    """The harness itself: NNAdapterError is fine, a Python exception is a bug, a signal is a crash,
    a hang is a timeout; the worker comes back after each death."""
    assert fuzz_worker.run({"operands": [], "operations": [], "inputs": [], "outputs": []})["outcome"] == (
        "nnadapter_error"
    )
    assert fuzz_worker.run({"selftest": "exception"})["outcome"] == "bug"
    crash = fuzz_worker.run({"selftest": "segfault"})
    assert crash["outcome"] == "crash" and crash["returncode"] == -signal.SIGSEGV, crash
    assert fuzz_worker.run({"selftest": "hang"}, timeout=5)["outcome"] == "timeout"
    relu = {
        "operands": [{"precision": 10, "dims": [2, 3]}, {"precision": 10, "dims": [2, 3]}],
        "operations": [{"type": 65, "inputs": [0], "outputs": [1]}],
        "inputs": [0],
        "outputs": [1],
        "feeds": [{"seed": 1, "special": True}],
    }
    assert fuzz_worker.run(relu) == {"outcome": "ok", "stage": "done", "shapes": [[2, 3]]}


def test_fuzz_models(fuzz_worker, record_property):
    """Random models: each runs or fails with NNAdapterError (NNA_FUZZ_EXAMPLES, NNA_FUZZ_SEED)."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import HealthCheck, Phase, given, settings

    outcomes: Counter = Counter()
    started = time.perf_counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=SEED is None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, *([Phase.shrink] if SHRINK else [])],
        print_blob=False,
    )
    @given(case=cases())
    def check(case):
        result = fuzz_worker.run(case)
        outcomes[result["outcome"]] += 1
        if result["outcome"] not in FINE:
            path = save_to_corpus(case, result, f"test_fuzz_models (seed {SEED or 'derandomized'})")
            raise AssertionError(describe_failure(case, result, path))

    if SEED is not None:
        check = hypothesis.seed(int(SEED))(check)
    try:
        check()
    finally:
        figures = dict(examples=sum(outcomes.values()), seconds=round(time.perf_counter() - started, 1))
        figures.update({f"outcome_{k}": v for k, v in sorted(outcomes.items())})
        for key, value in figures.items():
            record_property(key, value)
        print("\nFIGURES fuzz " + " ".join(f"{k}={v}" for k, v in figures.items()))
