"""Converters from NNAdapter standard operations to TVM Relax, one file per family.

Importing this package registers every converter.
"""

from nnadapter_tvm.op_converters import (  # noqa: F401  (imported for registration)
    activation,
    bitwise,
    conv,
    conv3d,
    detection,
    elementwise,
    generate,
    grid_sample,
    grid_sample_onnx,
    indexing,
    logical,
    math_functions,
    matmul,
    ml,
    norm,
    pool,
    quant,
    quant_dynamic,
    recurrent,
    reduce,
    resize,
    resize_onnx,
    roi_align,
    roi_align_onnx,
    scatter,
    selection,
    shape,
    spectral,
    stacking,
    tensor_ops,
    text,
    tiling,
    unary,
)
from nnadapter_tvm.op_converters.registry import converter, get_converter, supported_operations

__all__ = ["converter", "get_converter", "supported_operations"]
