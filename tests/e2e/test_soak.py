"""Soak: ``scripts/soak.py`` runs 10,000 executions in one process; RSS stays flat, results identical.

The tolerance is 4 MiB of RSS growth over 10,000 executions, measured after a 500-execution warm-up
and a garbage collection: measured growth is about 0.5 MiB for the tiny model and 0.7 MiB for the
CNN, all of it in the first ~1,000 executions (allocator pools settling), flat afterwards. 4 MiB is
six times that noise, and still catches a leak of 420 bytes per execution, less than what one
execution allocates for its own objects and output array, so any per-execution leak shows.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SOAK = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"
TOLERANCE_MIB = 4.0


def run_soak(*args: str) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, str(SOAK), *args, "--json"], capture_output=True, text=True, timeout=300, cwd=SOAK.parent
    )
    lines = proc.stdout.strip().splitlines()
    figures = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return proc.returncode, figures, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("model", ["add", "builtin"])
def test_10000_executions_keep_rss_flat_and_results_identical(model, record_property):
    rc, figures, output = run_soak("--iterations", "10000", "--model", model, "--tolerance-mib", str(TOLERANCE_MIB))
    assert figures, output
    for key in ("iterations", "rss_before_mib", "rss_after_mib", "rss_growth_mib", "seconds", "identical"):
        record_property(key, figures[key])
    print(f"\nFIGURES soak {json.dumps({k: v for k, v in figures.items() if k != 'rss_trace_mib'})}")
    assert figures["iterations"] == 10_000
    assert figures["identical"], output
    assert figures["rss_growth_mib"] <= TOLERANCE_MIB, output
    assert rc == 0, output
    assert "SOAK PASSED" in output


def load_soak_module():
    spec = importlib.util.spec_from_file_location("soak_script", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# In a fresh process: in this one, memory freed by earlier tests would absorb the leak unseen.
_LEAKY = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("soak_script", sys.argv[1])
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)
real_execute, kept = soak.execute, []

def leaky(compilation, x):
    kept.append(os.urandom(4096))  # written, so resident
    return real_execute(compilation, x)

soak.execute = leaky
sys.exit(soak.main(["--iterations", "2000", "--warmup", "10"]))
"""


def test_soak_catches_a_leak():
    """The measure works: 4 KiB kept per execution over 2,000 executions is 8 MiB, and fails."""
    proc = subprocess.run([sys.executable, "-c", _LEAKY, str(SOAK)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "SOAK FAILED" in proc.stdout and "all identical" in proc.stdout


def test_soak_catches_a_differing_result(monkeypatch, capsys):
    soak = load_soak_module()
    real_execute, calls = soak.execute, []

    def flaky(compilation, x):
        calls.append(1)
        y = real_execute(compilation, x)
        return y + np.float32(1) if len(calls) == 100 else y

    monkeypatch.setattr(soak, "execute", flaky)
    assert soak.main(["--iterations", "200", "--warmup", "0"]) == 1
    out = capsys.readouterr().out
    assert "1 differ" in out and "SOAK FAILED" in out
