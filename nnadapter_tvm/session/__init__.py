"""The session runtime for imported ONNX models: the ``Predictor`` (import or load, compile, run), the
runner of a plan (compiled segments, host steps, If/Loop/Scan around their bodies' plans) and the index
that lets a cached load skip the import.

The importer (``nnadapter_tvm.frontends.onnx``) turns an ONNX graph into NNAdapter models and a plan;
nothing here builds either. ``Predictor`` is also ``nnadapter_tvm.Predictor`` and
``nnadapter_tvm.frontends.onnx.Predictor``.
"""

from __future__ import annotations


def __getattr__(name: str) -> object:
    # Loaded when asked for (the Predictor imports the compiler's runtime).
    if name == "Predictor":
        from nnadapter_tvm.session.predictor import Predictor

        return Predictor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Predictor"]
