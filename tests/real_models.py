"""Real applications' ONNX models, taken from the wheels that ship them (pip download, no hub).

Where the application is installed (the test extra installs rapidocr_onnxruntime and ddddocr), its
own files are used. Otherwise each wheel is downloaded once with ``pip download --no-deps`` (PyPI is
the only place they come from) into ``$NNADAPTER_TVM_MODELS`` (default ``.models/`` in the
repository, git-ignored) and the ONNX files are extracted beside it. Nothing else is fetched and
nothing runs the applications' own code.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# package -> (pinned version, the ONNX members of its wheel we use)
PACKAGES = {
    "rapidocr_onnxruntime": (
        "1.4.4",
        [
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        ],
    ),
    "ddddocr": ("1.6.1", ["ddddocr/common.onnx", "ddddocr/common_det.onnx", "ddddocr/common_old.onnx"]),
    "silero-vad": (
        "6.2.3",
        [
            "silero_vad/data/silero_vad.onnx",
            "silero_vad/data/silero_vad_16k_op15.onnx",
            "silero_vad/data/silero_vad_16k_sequence.onnx",
            "silero_vad/data/silero_vad_half.onnx",
            "silero_vad/data/silero_vad_op18_ifless.onnx",
            "silero_vad/data/silero_vad_openvino_16k.onnx",
        ],
    ),
}


def models_dir() -> Path:
    default = Path(__file__).resolve().parent.parent / ".models"
    return Path(os.environ.get("NNADAPTER_TVM_MODELS", default))


def model_path(package: str, name: str) -> Path:
    """The path of ``name`` (a file name such as ``silero_vad.onnx``) from ``package``'s wheel."""
    version, members = PACKAGES[package]
    member = next(m for m in members if m.endswith("/" + name))
    installed = _installed(member)
    if installed is not None:  # the application itself is installed (the test extra has some): its own file
        return installed
    target = models_dir() / package / name
    if target.exists():
        return target
    wheels = models_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    with open(wheels / ".lock", "w") as lock:  # pytest-xdist workers fetch the same wheel at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            _extract(package, version, member, wheels, target)
    return target


def _installed(member: str) -> Path | None:
    spec = importlib.util.find_spec(member.split("/", 1)[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / member.split("/", 1)[1]
    return path if path.exists() else None


def _extract(package: str, version: str, member: str, wheels: Path, target: Path) -> None:
    wheel = next(wheels.glob(f"{package.replace('-', '_')}-{version}-*.whl"), None)
    if wheel is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"{package}=={version}", "-d", str(wheels)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wheel = next(wheels.glob(f"{package.replace('-', '_')}-{version}-*.whl"), None)
        if wheel is None:
            pytest.fail(f"pip download {package}=={version} failed: {result.stderr.strip()[-500:]}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        partial = target.with_suffix(".part")
        partial.write_bytes(z.read(member))
        partial.replace(target)
