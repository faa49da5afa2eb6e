"""The ONNX fuzzer's corpus, tests/fuzz_corpus_onnx/: one JSON file per minimized case, with its
signature (what makes two findings one bug) and its nodes as a reader sees them (part of
tests/fuzz_onnx/).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from .cases import Case


def _encode(array: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode()


def _decode(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def describe(model: onnx.ModelProto) -> list[str]:
    """The nodes, one line each (op, inputs -> outputs, attributes): what a reader of the corpus sees."""
    lines = []
    for n in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
        lines.append(f"{n.op_type}({', '.join(n.input)}) -> {', '.join(n.output)} {attrs if attrs else ''}".strip())
    return lines


def signature(case: Case, status: str, detail: str) -> str:
    """What makes two findings one bug: the (minimized) case's operators and the outcome's kind."""
    import re

    ops = "+".join(sorted({n.op_type for n in case.model.graph.node}))
    kind = re.sub(r"[^A-Za-z]+", "-", detail.split(":")[0])[:40] if status == "error" else status
    return f"{ops}-{kind}".strip("-")


def save(
    case: Case,
    path: Path,
    why: str,
    bug: str | None = None,
    status: str = "differs",
    oracle_bug: str | None = None,
    expected: dict[str, np.ndarray] | None = None,
) -> None:
    """Write ``case`` as JSON: ``bug`` set marks it an expected failure (the difference is known and
    open, reported to the file's owner; batches that hit its ``signature`` report it as known);
    without it the case must pass.  ``oracle_bug``: the reference is the one that is wrong, and
    ``expected`` (computed from the operator's definition) replaces it when the case is replayed."""
    data = {
        "why": why,
        "bug": bug,
        "oracle_bug": oracle_bug,
        "expected": {k: _encode(v) for k, v in (expected or {}).items()},
        "signature": signature(case, status, why),
        "nodes": describe(case.model),
        "model": base64.b64encode(case.model.SerializeToString()).decode(),
        "feeds": {k: _encode(v) for k, v in case.feeds.items()},
        "depths": case.depths,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def load(path: Path) -> tuple[Case, dict]:
    data = json.loads(path.read_text())
    model = onnx.load_from_string(base64.b64decode(data["model"]))
    case = Case(model, {k: _decode(v) for k, v in data["feeds"].items()}, data.get("depths", {}))
    return case, data
