#!/usr/bin/env python3
"""ONNX files as today's exporters write them, from the libraries on PyPI with random weights (nothing is
downloaded from a model hub): torch.onnx's TorchScript (``ts``) and dynamo exporters on transformers
(BERT, a MiniLM-sized BERT, a GPT-2 decoder step with its past, ViT, an encoder of Whisper-tiny's sizes)
and torchvision classifiers; torchvision's segmentation models and detectors (TorchScript, as their
documentation exports them); ultralytics' YOLOv8n; scikit-learn through skl2onnx; a Keras classifier
through tf2onnx.  The list is in ``scripts/exports/__init__.py``.

    python scripts/make_exports.py [--out DIR] [--models vit,minilm,...] [--light] [--exporters ts,dynamo,...]

The libraries are not the project's dependencies: install those you want in an environment of their own
(``pip install torch torchvision transformers onnxscript onnx scikit-learn skl2onnx``, optionally
``ultralytics`` and ``tensorflow tf2onnx``) and run this script there; a model whose library is missing
is skipped, saying so.  The files go to ``--out`` (``$NNADAPTER_TVM_EXPORTS`` or
``~/.cache/nnadapter-tvm/exports``), never into the repository.  Each file is
``<model>.<exporter>.onnx`` with its batch (and sequence, image size) axes symbolic, and a
``<model>.<exporter>.json`` beside it names two input sizes to feed it at (``sizes``: a list of
``--shape`` option lists for ``nnadapter-tvm bench`` / ``profile``) and how its outputs compare with
onnxruntime's (``scripts/check_exports.py``).  ``--light``: a small set for a quick local run of
tests/frontends/test_exports.py (CI builds and checks the whole set).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from exports import MODELS, Export


def _out_dir() -> Path:
    default = os.environ.get("NNADAPTER_TVM_EXPORTS") or Path.home() / ".cache" / "nnadapter-tvm" / "exports"
    return Path(default)


def export(name: str, exporter: str, out: Path) -> Path:
    """Write ``name`` by ``exporter`` as ``<name>.<exporter>.onnx`` in ``out`` (by rename: never half a
    file), with ``<name>.<exporter>.json`` beside it (its two input sizes and how its outputs compare)."""
    spec = MODELS[name]
    path = out / f"{name}.{exporter}.onnx"
    tmp = path.with_suffix(".onnx.part")
    spec.write(tmp, exporter)
    os.replace(tmp, path)
    meta = {"model": name, "exporter": exporter, "sizes": spec.sizes, "compare": spec.compare}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1))
    return path


def _available(spec: Export) -> str | None:
    """The first library ``spec`` needs that is not installed, else None."""
    return next((m for m in spec.needs if importlib.util.find_spec(m) is None), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=_out_dir(), help="where the files go (%(default)s)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated (%(default)s)")
    parser.add_argument("--light", action="store_true", help="only a small set, for a quick local run")
    parser.add_argument("--exporters", default="ts,dynamo,skl2onnx,tf2onnx,ultralytics", help="those to use")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.models.split(","):
        spec = MODELS[name]
        if args.light and not spec.light:
            continue
        missing = _available(spec)
        if missing:
            print(f"{name}: skipped, {missing} is not installed", file=sys.stderr)
            continue
        for exporter in [e for e in spec.exporters if e in args.exporters.split(",")]:
            start = time.perf_counter()
            try:
                path = export(name, exporter, args.out)
            except Exception as err:  # one model's exporter failure should not stop the others
                failed.append(f"{name}.{exporter}")
                print(f"{name}.{exporter}: failed: {type(err).__name__}: {str(err)[:300]}", file=sys.stderr)
                continue
            print(f"{path} ({time.perf_counter() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
