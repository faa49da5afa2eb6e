"""The model fuzzer's corpus: every failure once found (tests/fuzz_corpus/, one JSON file each) is
replayed by ``test_corpus_case`` in the fuzzer's worker subprocess (tests/fuzz_models.py, the
``fuzz_worker`` fixture of tests/conftest.py): it must now run or fail with NNAdapterError.

    python tests/fuzz_models.py --run tests/fuzz_corpus/NAME.json    replay one in this process
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_models import CORPUS, FINE, describe_failure

CORPUS_TIMEOUT = 30.0  # a corpus case is one small model: compiled and run in a few seconds


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_case(path, fuzz_worker):
    """Every failure once found: it must now run or fail with NNAdapterError. An entry may narrow
    that: ``expect`` lists the outcomes allowed, ``expect_values`` the outputs (NaN as null)."""
    entry = json.loads(path.read_text())
    case = dict(entry["case"], return_values="expect_values" in entry)
    result = fuzz_worker.run(case, timeout=CORPUS_TIMEOUT)
    assert result["outcome"] in entry.get("expect", FINE), describe_failure(case, result)
    if "expect_values" in entry and result["outcome"] == "ok":
        assert result["values"] == entry["expect_values"], describe_failure(case, result)
