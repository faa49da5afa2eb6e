"""The element type and shape an ONNX ``ValueInfoProto`` declares, as the importer reads them."""

from __future__ import annotations

import numpy as np
import onnx

from nnadapter_tvm.frontends.onnx.values import PRECISIONS, Shape


def type_of(info: onnx.ValueInfoProto) -> tuple[np.dtype | None, Shape | None]:
    t = info.type
    if not t.HasField("tensor_type"):
        return None, None
    elem = t.tensor_type.elem_type
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else None
    except (KeyError, TypeError, ValueError):
        dtype = None
    if dtype is not None and dtype not in PRECISIONS:
        dtype = None if dtype.kind in "OUSV" else dtype
    if not t.tensor_type.HasField("shape"):
        return dtype, None
    # A negative dim_value is how some exporters (paddle2onnx) write "unknown".
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in t.tensor_type.shape.dim)
    return dtype, dims


def dim_names(info: onnx.ValueInfoProto) -> tuple | None:
    """Each dimension's ONNX dim_param (None where it has a value or no name).  "?" is how exporters
    (paddle2onnx among them) write "unknown" rather than a name, so it names nothing."""
    t = info.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    names = tuple(
        d.dim_param if d.HasField("dim_param") and d.dim_param not in ("", "?") else None
        for d in t.tensor_type.shape.dim
    )
    return names if any(names) else None
