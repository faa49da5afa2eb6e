"""Exports as today's exporters write them (torch.onnx's TorchScript and dynamo exporters, torchvision's
segmentation models and detectors, skl2onnx, ...), built by ``scripts/make_exports.py`` into
``$NNADAPTER_TVM_EXPORTS`` with the libraries on PyPI: each must compile whole (no host fallback) and
match onnxruntime at the two sizes its ``.json`` names (``scripts/check_exports.py``, run in a child
process of its own).  CI builds the light set (``make_exports.py --light``) in an environment of its own
and runs these; without exports they are skipped, saying how to build them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXPORTS = os.environ.get("NNADAPTER_TVM_EXPORTS")
FILES = sorted(p for p in Path(EXPORTS).glob("*.onnx") if p.with_suffix(".json").exists()) if EXPORTS else []
NONE_BUILT = "no exports: build them with scripts/make_exports.py and point NNADAPTER_TVM_EXPORTS at them"


def test_exports_were_built_where_promised() -> None:
    """NNADAPTER_TVM_EXPORTS set (as CI sets it) must name a folder with exports in it: a failed build
    must not pass as nothing to check."""
    if not EXPORTS:
        pytest.skip(NONE_BUILT)
    assert FILES, f"NNADAPTER_TVM_EXPORTS={EXPORTS} holds no <model>.<exporter>.onnx with its .json"


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES or [pytest.param(None, marks=pytest.mark.skip(reason=NONE_BUILT))], ids=str)
def test_export_matches_onnxruntime(path: Path) -> None:
    child = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_exports.py"), str(path)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert child.returncode == 0, (child.stdout + child.stderr)[-4000:]
