"""Differential fuzzing against onnxruntime: random valid ONNX graphs must give the reference's outputs.

The generator, runner, comparison and minimizer are in tests/fuzz_onnx.py (docs/reliability.md says how
they work and what the campaigns found).  CI runs ``BATCHES`` derandomized batches of ``GRAPHS``
graphs each (every batch one compilation) and replays every case of tests/fuzz_corpus_onnx/.  A corpus
case with a ``bug`` is a known, open difference in a file this fuzzer's owner does not own: its replay
is an expected failure, and the batches report a matching outcome as known instead of failing.

    NNA_ONNX_FUZZ_BATCHES=20 NNA_ONNX_FUZZ_SEED=7 pytest tests/test_fuzz_onnx.py     a bigger, random run
    python scripts/fuzz_onnx.py --graphs 2000 --seed 1                               a campaign
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_onnx

BATCHES = int(os.environ.get("NNA_ONNX_FUZZ_BATCHES", "12"))
GRAPHS = int(os.environ.get("NNA_ONNX_FUZZ_GRAPHS", "8"))
MAX_NODES = int(os.environ.get("NNA_ONNX_FUZZ_NODES", "10"))
SEED = os.environ.get("NNA_ONNX_FUZZ_SEED")  # unset: the same graphs on every run
CORPUS_FILES = sorted(fuzz_onnx.CORPUS.glob("*.json"))
FAILURES = ("differs", "error")


def known_bugs() -> dict[str, str]:
    """signature -> bug, of every open corpus case."""
    bugs = {}
    for path in CORPUS_FILES:
        _, data = fuzz_onnx.load(path)
        if data.get("signature") and (data.get("bug") or data.get("oracle_bug")):
            bugs[data["signature"]] = data.get("bug") or f"onnxruntime's: {data['oracle_bug']}"
    return bugs


def test_generator_draws_valid_graphs_of_the_vocabulary() -> None:
    """The graphs are valid ONNX (checker and strict shape inference), use many operators of the
    vocabulary, and carry symbolic input dimensions and special values in some feeds."""
    import numpy as np
    import onnx
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    seen_ops, symbolic, special = set(), 0, 0

    @settings(max_examples=60, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data) -> None:
        nonlocal symbolic, special
        case = fuzz_onnx.draw_graph(fuzz_onnx.Draw(data), "g_", 8)
        onnx.checker.check_model(case.model, full_check=True)
        seen_ops.update(n.op_type for n in case.model.graph.node)
        dims = [d for i in case.model.graph.input for d in i.type.tensor_type.shape.dim]
        symbolic += any(d.HasField("dim_param") for d in dims)
        special += any(not np.isfinite(a).all() for a in case.feeds.values())

    draw()
    assert len(seen_ops) >= 30, sorted(seen_ops)
    assert symbolic >= 5 and special >= 5, (symbolic, special)


def test_differences_are_detected() -> None:
    """The comparison itself: NaN placement, infinities, values beyond the depth's tolerance, shapes."""
    import numpy as np

    ref = np.array([1.0, np.nan, np.inf, -2.0], "float32")
    assert fuzz_onnx.differs(ref, ref.copy(), 3) is None
    assert fuzz_onnx.differs(ref, np.array([1.0, 0.0, np.inf, -2.0], "float32"), 3)  # a dropped NaN
    assert fuzz_onnx.differs(ref, np.array([1.0, np.nan, 3e38, -2.0], "float32"), 3)  # a finite inf
    assert fuzz_onnx.differs(ref, np.array([1.0, np.nan, np.inf, -2.001], "float32"), 3)
    assert fuzz_onnx.differs(ref, np.array([1.0 + 1e-6, np.nan, np.inf, -2.0], "float32"), 3) is None
    assert fuzz_onnx.differs(ref, ref[:3], 3)
    assert fuzz_onnx.differs(np.array([1, 2]), np.array([1, 3]), 1)


def test_onnx_fuzz_batches(record_property, tmp_path) -> None:
    """``BATCHES`` batches of ``GRAPHS`` random graphs, each batch one multi-output model: every
    output equal to onnxruntime's (or refused with NNAdapterError, or a known open bug).  A failure's
    minimized case is saved (the message says where) in the corpus format."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    bugs = known_bugs()
    tally: dict[str, int] = {}
    failures: list[str] = []

    @settings(
        max_examples=BATCHES,
        derandomize=SEED is None,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def batch(data) -> None:
        draw = fuzz_onnx.Draw(data)
        cases = [fuzz_onnx.draw_graph(draw, f"g{k}_", MAX_NODES) for k in range(GRAPHS)]
        for case, outcomes in fuzz_onnx.run_graphs(cases):
            if any(o.status == "error" for o in outcomes.values()):  # the compilation's: one per graph
                outcomes = {n: o for n, o in outcomes.items() if o.status == "error"}
                outcomes = dict([next(iter(outcomes.items()))])
            for name, outcome in outcomes.items():
                status = outcome.status
                if status in FAILURES:
                    small = fuzz_onnx.minimize(case, name, status)
                    bug = bugs.get(fuzz_onnx.signature(small, status, outcome.detail))
                    if bug is None:
                        saved = tmp_path / f"{len(failures)}-{fuzz_onnx.signature(small, status, outcome.detail)}.json"
                        fuzz_onnx.save(small, saved, outcome.detail, status=status)
                        failures.append(
                            f"{saved}: "
                            + f"{name}: {status}: {outcome.detail}\n  "
                            + "\n  ".join(fuzz_onnx.describe(case.model))
                        )
                    status = f"known ({bug})" if bug else status
                tally[status] = tally.get(status, 0) + 1

    if SEED is not None:
        from hypothesis import seed

        batch = seed(int(SEED))(batch)
    batch()
    record_property("outcomes", tally)
    print("onnx fuzz outcomes:", tally)
    assert not failures, "\n".join(failures[:5])
    assert tally.get("ok", 0) >= BATCHES * GRAPHS // 2, tally


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.stem for p in CORPUS_FILES])
def test_onnx_corpus_case(path: Path) -> None:
    """A minimized case from a campaign: fixed ones must match the reference; an open one (``bug``)
    must still show its difference (else the bug is fixed: clear ``bug`` so that it guards the fix);
    one where onnxruntime is wrong (``oracle_bug``) must match the operator's definition (``expected``)."""
    case, data = fuzz_onnx.load(path)
    if data.get("expected"):  # the reference is wrong here: compare with the operator's definition
        import nnadapter_tvm as nna

        got = nna.Predictor(case.model).run(case.feeds)
        names = [o.name for o in case.model.graph.output]
        for name, value in zip(names, got):
            want = fuzz_onnx._decode(data["expected"][name])
            assert fuzz_onnx.differs(want, value, case.depths.get(name, 1)) is None, (name, data["oracle_bug"])
        return
    outcomes = fuzz_onnx.run_case(case)
    bad = {n: o for n, o in outcomes.items() if o.status in FAILURES or o.status == "invalid"}
    if data.get("bug"):
        # An open bug may be one the spec decides where the two oracles disagree (Clip's default
        # bounds): "ambiguous" still shows it.
        if not bad and all(o.status == "ok" for o in outcomes.values()):
            pytest.fail(f"{path.name} now matches the reference: {data['bug']} is fixed, clear its 'bug'")
        pytest.xfail(f"open: {data['bug']}")
    assert not bad, {n: f"{o.status}: {o.detail}" for n, o in bad.items()}
