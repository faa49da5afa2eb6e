#!/usr/bin/env python3
"""Check exports against onnxruntime: each ``<model>.<exporter>.onnx`` that ``scripts/make_exports.py``
wrote is compiled once (a ``Predictor``, every node on the device: no host fallback) and run at the two
sizes its ``.json`` names, and its outputs are compared with onnxruntime's on the same random inputs:
element by element (rtol 1e-3, atol 1e-4; integers exactly), or for detectors as a set of boxes (each of
onnxruntime's detections matched by one of ours with the same label, each box coordinate within
1e-2 + 1e-3 x its value and the score within 1e-4 + 1e-3 x its value: near-equal scores may come in
another order).  The relative part is the issue's rtol 1e-3: Mask R-CNN moves its scores by 1.7e-4 and its
boxes by 0.018 px when onnxruntime itself is fed its first resize computed exactly rather than in float32
(docs/onnx.md), so an absolute bound alone would judge float rounding, not the model.

    python scripts/check_exports.py [FILE.onnx | DIR] ...   (default: $NNADAPTER_TVM_EXPORTS)

Prints one line per size and exits 1 if any file fails to import, compile or match.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from nnadapter_tvm import Predictor

RTOL, ATOL = 1e-3, 1e-4


def feeds_for(model: onnx.ModelProto, size: list[str], seed: int) -> dict[str, np.ndarray]:
    """Random inputs of the shapes ``size`` names (``NAME=AxBxC``): images uniform in [0, 1), other floats
    normal, token ids in [0, 100), attention masks of ones with a padded tail on the last row, token
    types and other integers 0 or 1."""
    types = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in model.graph.input}
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in size:
        name, dims = spec.split("=")
        shape = [int(d) for d in dims.split("x")]
        dtype = types[name]
        if dtype.kind == "f":
            value = rng.random(shape) if name in ("images", "input") and len(shape) >= 3 else rng.standard_normal(shape)
        elif "mask" in name:
            value = np.ones(shape)
            if len(shape) == 2 and shape[1] > 3:
                value[-1, -3:] = 0
        elif "ids" in name and "type" not in name:
            value = rng.integers(0, 100, shape)
        else:
            value = rng.integers(0, 2, shape)
        feeds[name] = value.astype(dtype)
    return feeds


def compare_tensors(ours: list, theirs: list, names: list[str]) -> list[str]:
    problems = []
    for name, got, want in zip(names, ours, theirs):
        got = np.asarray(got)
        if got.shape != want.shape:
            problems.append(f"{name}: shape {got.shape}, onnxruntime {want.shape}")
        elif want.dtype.kind in "iub":
            if not np.array_equal(got, want):
                problems.append(f"{name}: {np.count_nonzero(got != want)} of {want.size} elements differ")
        elif not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
            error = np.nanmax(np.abs(got.astype(np.float64) - want))
            problems.append(f"{name}: max abs error {error:.3g}")
    return problems


def compare_detections(ours: list, theirs: list, names: list[str]) -> list[str]:
    got = dict(zip(names, ours))
    want = dict(zip(names, theirs))
    boxes, labels, scores = (np.asarray(got[n]) for n in ("boxes", "labels", "scores"))
    if len(boxes) != len(want["boxes"]):
        return [f"{len(boxes)} detections, onnxruntime {len(want['boxes'])}"]
    used = np.zeros(len(boxes), bool)
    unmatched = 0
    for box, label, score in zip(want["boxes"], want["labels"], want["scores"]):
        candidates = (~used) & (labels == label) & (np.abs(scores - score) <= 1e-4 + 1e-3 * abs(score))
        # Each box's largest coordinate error over its tolerance: a match is <= 1.
        excess = (np.abs(boxes - box) / (1e-2 + 1e-3 * np.abs(box))).max(axis=1) if len(boxes) else np.zeros(0)
        distance = np.where(candidates, excess, np.inf)
        k = int(np.argmin(distance)) if len(distance) else -1
        if k < 0 or distance[k] > 1:
            unmatched += 1
        else:
            used[k] = True
    return [f"{unmatched} of onnxruntime's {len(boxes)} detections unmatched"] if unmatched else []


def check(path: Path) -> bool:
    meta = json.loads(path.with_suffix(".json").read_text())
    model = onnx.load(str(path))
    names = [o.name for o in model.graph.output]
    start = time.perf_counter()
    try:
        predictor = Predictor(str(path))
    except Exception as err:  # report and go on with the next file
        print(f"{path.name}: FAILED to compile: {type(err).__name__}: {str(err)[:500]}")
        return False
    print(f"{path.name}: compiled in {time.perf_counter() - start:.1f} s")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    compare = compare_detections if meta.get("compare") == "detections" else compare_tensors
    ok = True
    for k, size in enumerate(meta["sizes"]):
        feeds = feeds_for(model, size, seed=k)
        try:
            ours = predictor.run(feeds)
        except Exception as err:
            print(f"  {' '.join(size)}: FAILED to run: {type(err).__name__}: {str(err)[:500]}")
            ok = False
            continue
        problems = compare(ours, session.run(None, feeds), names)
        print(f"  {' '.join(size)}: {'MISMATCH: ' + '; '.join(problems) if problems else 'matches onnxruntime'}")
        ok = ok and not problems
    return ok


def main(argv: list[str]) -> int:
    targets = [Path(a) for a in argv] or [Path(os.environ.get("NNADAPTER_TVM_EXPORTS", ""))]
    files = []
    for target in targets:
        files += sorted(target.glob("*.onnx")) if target.is_dir() else [target]
    files = [f for f in files if f.with_suffix(".json").exists()]
    if not files:
        print("no exports found (scripts/make_exports.py writes them)", file=sys.stderr)
        return 1
    failed = [f.name for f in files if not check(f)]
    print(
        f"{len(files) - len(failed)} of {len(files)} exports match onnxruntime"
        + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
