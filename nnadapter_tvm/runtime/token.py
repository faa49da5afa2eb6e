"""The framework-level model token: MD5 of everything that changes the compiled code."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from nnadapter_tvm import extensions
from nnadapter_tvm.context import Context
from nnadapter_tvm.model import Model
from nnadapter_tvm.runtime.cache import FORMAT_VERSION, library_versions


def model_token(model: Model, context: Context, extra: dict | None = None) -> str:
    """32 hex characters over the model's operations (with the name, code and version of each custom
    operation among them), operand types and constant values, the devices and their targets, the
    codegen-relevant context properties, the library versions and ``extra`` (e.g. the fingerprint of
    tuning records).  Nothing else enters it."""
    h = hashlib.md5(usedforsecurity=False)

    def put(obj: object) -> None:
        h.update(json.dumps(obj, sort_keys=True, default=str).encode())
        h.update(b"\0")

    for operand in model.operands:
        t = operand.type
        put(
            [
                "operand",
                operand.index,
                int(t.precision),
                list(t.dimensions),
                int(t.layout),
                t.scale,
                t.zero_point,
                t.channel_dim,
                operand.is_constant,
                *([list(t.dimension_names)] if t.dimension_names else []),
            ]
        )
        if operand.is_constant:
            h.update(np.ascontiguousarray(operand.value()))  # its buffer: tobytes() copied it
    for op in model.operations:
        put(["operation", int(op.type), [o.index for o in op.inputs], [o.index for o in op.outputs]])
    used = extensions.used_by([op.type for op in model.operations])
    if used:  # (models of standard operations keep their tokens)
        put(["extensions", used])
    put(["io", [o.index for o in model.inputs], [o.index for o in model.outputs]])
    for part in codegen_setup(context):
        put(part)
    put(["extra", extra or {}])
    return h.hexdigest()


def codegen_setup(context: Context) -> list[list]:
    """What besides the model changes the compiled code: the devices and their targets, the codegen
    properties, the library versions and the cache format (the ONNX Predictor's index keys on it too).
    A target enters as what determines it (``Driver.target_key``: the driver's properties and, where
    the target is the host's, the host CPU's identity), not as a ``tvm.target.Target``: a cached load
    computes this without importing TVM's compiler."""
    props = context.properties
    return [
        ["devices", [(d.name, d.driver.target_key(props)) for d in context.devices]],
        ["properties", context.codegen_properties()],
        ["library", library_versions(), FORMAT_VERSION],
    ]
