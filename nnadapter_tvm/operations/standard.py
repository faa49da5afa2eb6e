"""Upstream's operations: the codes of ``nnadapter.h``'s enum and the operand list of each, from the spec's
appendix (``NNAdapter 标准算子``) and, where the spec is silent, the header.

Each schema says, in the spec's order, which operands an operation takes and gives, which precisions
each accepts, and which are optional (trailing optional operands may be omitted; the converter then uses
the default). ``table.py`` makes ``OperationType`` from this file: upstream's codes are positions in its enum.
"""

from __future__ import annotations

import dataclasses

from nnadapter_tvm.operations.schema import (
    ANY,
    BIAS,
    BOOL,
    CASTABLE,
    COMPARABLE,
    F32,
    F32_INT32,
    F32_INT32_Q8,
    F32_INT_Q8,
    F32_Q8,
    F32_Q8_U8,
    FILL_VALUE,
    FILTER,
    FLOAT_SCALAR,
    INT32,
    INT32_64,
    QUANT8,
    Arg,
    OpSchema,
)
from nnadapter_tvm.precision import Precision as P

# Upstream's enum, in its order: an operation's code is its position.
UPSTREAM_ORDER = (
    "ABS", "ADAPTIVE_AVERAGE_POOL_2D", "ADAPTIVE_MAX_POOL_2D", "ADD", "AND", "ARG_MAX", "ARG_MIN", "ASSIGN",
    "AVERAGE_POOL_2D", "BATCH_NORMALIZATION", "CAST", "CHANNEL_SHUFFLE", "CLIP", "CONCAT", "CONV_2D",
    "CONV_2D_TRANSPOSE", "COS", "CUM_SUM", "DEFORMABLE_CONV_2D", "DEQUANTIZE", "DIV", "EQUAL", "EXP", "EXPAND",
    "FILL", "FILL_LIKE", "FLATTEN", "FLOOR", "FLOOR_DIV", "FULLY_CONNECTED", "GATHER", "GELU", "GREATER",
    "GREATER_EQUAL", "GRID_SAMPLE", "GROUP_NORMALIZATION", "HARD_SIGMOID", "HARD_SWISH",
    "INSTANCE_NORMALIZATION", "LAYER_NORMALIZATION", "LEAKY_RELU", "LESS", "LESS_EQUAL", "LOG", "LOG_SOFTMAX",
    "LP_NORMALIZATION", "LRN", "MAT_MUL", "MAX", "MAX_POOL_2D", "MESHGRID", "MIN", "MUL", "NOT", "NOT_EQUAL",
    "OR", "PAD", "POW", "PRIOR_BOX", "PRELU", "QUANTIZE", "RANGE", "REDUCE_MEAN", "REDUCE_MAX", "REDUCE_SUM",
    "RELU", "RELU6", "RESHAPE", "RESIZE_NEAREST", "RESIZE_LINEAR", "ROI_ALIGN", "ROLL", "RSQRT", "SHAPE",
    "SIGMOID", "SIN", "SLICE", "SOFTMAX", "SOFTPLUS", "SPLIT", "SQUARE", "SQUEEZE", "STACK", "SUB", "SUM",
    "SWISH", "TANH", "TILE", "TOP_K", "TRANSPOSE", "UNSQUEEZE", "UNSTACK", "WHERE", "XOR",
    "NON_MAX_SUPPRESSION", "YOLO_BOX",
)  # fmt: skip

# The 93 operations of the spec's appendix; upstream's enum also has UNSTACK, XOR and NON_MAX_SUPPRESSION,
# which the spec does not list.
STANDARD = frozenset(UPSTREAM_ORDER) - {"UNSTACK", "XOR", "NON_MAX_SUPPRESSION"}


def _fuse() -> Arg:
    return Arg("fuse_code", INT32)


def _binary(precisions=F32_Q8, fuse=True, out=None) -> OpSchema:
    ins = [Arg("input0", precisions), Arg("input1", precisions, same_as="input0")]
    if fuse:
        ins.append(_fuse())
    return OpSchema(tuple(ins), (Arg("output", out or precisions),))


def _compare() -> OpSchema:
    return _binary(COMPARABLE, fuse=False, out=BOOL)


def _logical() -> OpSchema:
    return _binary(BOOL, fuse=False)


def _unary(*args: Arg, precisions=F32_Q8) -> OpSchema:
    """``input`` followed by ``args``; one ``output`` of the same precision as ``input``."""
    return OpSchema((Arg("input", precisions), *args), (Arg("output", precisions),))


def _reduce() -> OpSchema:
    # The spec gives `keepdim` no type; the header: a BOOL8 of shape [1], defaulting to true.
    return _unary(Arg("axes", INT32), Arg("keepdim", BOOL, optional=True))


def _conv_2d(*args: Arg) -> OpSchema:
    """CONV_2D's operands, with ``args`` inserted before ``fuse_code``."""
    return OpSchema(
        (
            Arg("input", F32_Q8_U8),
            Arg("filter", FILTER),
            Arg("bias", BIAS),
            Arg("auto_pad", INT32),
            Arg("pads", INT32),  # "optional" in the spec, but not trailing: may be given empty
            Arg("strides", INT32),
            Arg("group", INT32),
            Arg("dilations", INT32),
            *args,
            _fuse(),
        ),
        (Arg("output", F32_Q8_U8),),
    )


def _pool_2d(*args: Arg, outputs: tuple[Arg, ...] = (Arg("output", F32_Q8),)) -> OpSchema:
    """AVERAGE/MAX_POOL_2D's common operands, with ``args`` inserted before ``fuse_code``."""
    ins = (Arg("input", F32_Q8), Arg("auto_pad", INT32), Arg("pads", INT32), Arg("kernel_shape", INT32))
    return OpSchema((*ins, Arg("strides", INT32), Arg("ceil_mode", BOOL), *args, _fuse()), outputs)


# Max poolings give `indices` only when `return_indices` is true.
_WITH_INDICES = (Arg("output", F32_Q8), Arg("indices", INT32_64, optional=True))
_NORM_SCALE_BIAS = (Arg("scale", F32), Arg("bias", F32))
_EPSILON = Arg("epsilon", FLOAT_SCALAR, optional=True)


# The schemas by name; table.py makes OperationType and the entries from this module.
SCHEMAS: dict[str, OpSchema] = {
    "ABS": _unary(),
    "ADAPTIVE_AVERAGE_POOL_2D": _unary(Arg("output_shape", INT32_64)),
    "ADAPTIVE_MAX_POOL_2D": OpSchema(
        (
            Arg("input", F32_Q8),
            Arg("output_shape", INT32_64),
            # return_indices defaults to false; the indices dtype then follows the declared output.
            Arg("return_indices", BOOL, optional=True),
            Arg("return_indices_dtype", INT32, optional=True),
        ),
        _WITH_INDICES,
    ),
    "ADD": _binary(),
    "AND": _logical(),
    "ARG_MAX": OpSchema(
        (Arg("input", F32_Q8), Arg("axis", INT32), Arg("keepdim", BOOL), Arg("dtype", INT32, optional=True)),
        (Arg("output", INT32_64),),
    ),
    "ARG_MIN": OpSchema(
        (Arg("input", F32_Q8), Arg("axis", INT32), Arg("keepdim", BOOL), Arg("dtype", INT32, optional=True)),
        (Arg("output", INT32_64),),
    ),
    "ASSIGN": _unary(),
    "AVERAGE_POOL_2D": _pool_2d(Arg("count_include_pad", BOOL)),
    "BATCH_NORMALIZATION": _unary(*_NORM_SCALE_BIAS, Arg("mean", F32), Arg("variance", F32), _EPSILON),
    "CAST": OpSchema((Arg("input", CASTABLE), Arg("dtype", INT32)), (Arg("output", ANY),)),
    # The spec types `group` NNADAPTER_FLOAT32, the header INT32: both are accepted (a FLOAT32 one must
    # hold an integer; the converter checks).
    "CHANNEL_SHUFFLE": _unary(Arg("group", F32_INT32)),
    "CLIP": _unary(Arg("min", F32_Q8, same_as="input"), Arg("max", F32_Q8, same_as="input")),
    "CONCAT": OpSchema((Arg("inputs", F32_Q8, variadic=True), Arg("axis", INT32)), (Arg("output", F32_Q8),)),
    "CONV_2D": _conv_2d(),
    # `output_padding` and `output_shape` are "optional" but not trailing: may be given empty.
    "CONV_2D_TRANSPOSE": _conv_2d(Arg("output_padding", INT32), Arg("output_shape", INT32_64)),
    "COS": _unary(),
    "CUM_SUM": _unary(
        Arg("axis", INT32, optional=True), Arg("exclusive", BOOL, optional=True), Arg("reverse", BOOL, optional=True)
    ),
    "DEFORMABLE_CONV_2D": OpSchema(
        (
            Arg("input", F32_Q8),
            Arg("offset", F32_Q8, same_as="input"),
            Arg("mask", F32_Q8, same_as="input"),
            Arg("filter", FILTER),
            Arg("bias", BIAS),
            Arg("pads", INT32),
            Arg("strides", INT32),
            Arg("group", INT32),
            Arg("deformable_group", INT32),
            Arg("dilations", INT32),
            _fuse(),
        ),
        (Arg("output", F32_Q8),),
    ),
    "DEQUANTIZE": OpSchema((Arg("input", QUANT8),), (Arg("output", F32),)),
    "DIV": _binary(),
    "EQUAL": _compare(),
    "EXP": _unary(),
    "EXPAND": _unary(Arg("shape", INT32_64)),
    "FILL": OpSchema((Arg("shape", INT32_64), Arg("value", FILL_VALUE)), (Arg("output", FILL_VALUE),)),
    "FILL_LIKE": OpSchema((Arg("input", F32_Q8), Arg("value", FILL_VALUE)), (Arg("output", FILL_VALUE),)),
    "FLATTEN": _unary(Arg("start_axis", INT32), Arg("end_axis", INT32)),
    "FLOOR": _unary(),
    "FLOOR_DIV": _binary(),
    "FULLY_CONNECTED": OpSchema(
        (Arg("input", F32_Q8_U8), Arg("weight", FILTER), Arg("bias", BIAS), _fuse()), (Arg("output", F32_Q8_U8),)
    ),
    "GATHER": _unary(Arg("indices", INT32_64), Arg("axis", INT32, optional=True), precisions=F32_INT_Q8),  # axis: -1
    "GELU": _unary(Arg("approximate", BOOL)),
    "GREATER": _compare(),
    "GREATER_EQUAL": _compare(),  # the spec heads this entry NNADAPTER_GREATER by mistake
    "GRID_SAMPLE": _unary(Arg("grid", F32), Arg("align_corners", BOOL), Arg("mode", INT32), Arg("pad_mode", INT32)),
    "GROUP_NORMALIZATION": _unary(*_NORM_SCALE_BIAS, Arg("epsilon", FLOAT_SCALAR), Arg("groups", INT32)),
    "HARD_SIGMOID": _unary(Arg("alpha", FLOAT_SCALAR), Arg("beta", FLOAT_SCALAR)),
    "HARD_SWISH": _unary(Arg("alpha", FLOAT_SCALAR), Arg("beta", FLOAT_SCALAR)),
    "INSTANCE_NORMALIZATION": _unary(*_NORM_SCALE_BIAS, _EPSILON),
    # begin_norm_axis defaults to 1 in the header.
    "LAYER_NORMALIZATION": _unary(*_NORM_SCALE_BIAS, Arg("begin_norm_axis", INT32, optional=True), _EPSILON),
    "LEAKY_RELU": _unary(Arg("alpha", FLOAT_SCALAR)),
    "LESS": _compare(),
    "LESS_EQUAL": _compare(),
    "LOG": _unary(),
    "LOG_SOFTMAX": _unary(Arg("axis", INT32, optional=True)),
    "LP_NORMALIZATION": _unary(Arg("axis", INT32, optional=True), Arg("p", INT32, optional=True), _EPSILON),
    "LRN": _unary(
        Arg("size", INT32, optional=True),  # defaults to 5 in the spec, to 1 in the header
        Arg("bias", FLOAT_SCALAR, optional=True),
        Arg("alpha", FLOAT_SCALAR, optional=True),
        Arg("beta", FLOAT_SCALAR, optional=True),
        precisions=F32,
    ),
    "MAT_MUL": OpSchema(
        (
            Arg("x", F32_Q8),
            Arg("y", F32_Q8, same_as="x"),
            Arg("transpose_x", BOOL, optional=True),
            Arg("transpose_y", BOOL, optional=True),
        ),
        (Arg("output", F32_Q8),),
    ),
    "MAX": _binary(),
    "MAX_POOL_2D": _pool_2d(Arg("return_indices", BOOL), Arg("return_indices_dtype", INT32), outputs=_WITH_INDICES),
    "MESHGRID": OpSchema((Arg("inputs", F32_Q8, variadic=True),), (Arg("outputs", F32_Q8, variadic=True),)),
    "MIN": _binary(),
    "MUL": _binary(),
    # Not in the spec; from the header.  `rois_num` is "optional" there but not trailing: may be given empty.
    "NON_MAX_SUPPRESSION": OpSchema(
        (
            Arg("bboxes", F32),
            Arg("scores", F32),
            Arg("rois_num", INT32),
            Arg("background_label", INT32),
            Arg("score_threshold", FLOAT_SCALAR),
            Arg("nms_top_k", INT32),
            Arg("nms_threshold", FLOAT_SCALAR),
            Arg("nms_eta", FLOAT_SCALAR),
            Arg("keep_top_k", INT32),
            Arg("normalized", BOOL),
            Arg("return_index", BOOL),
        ),
        (Arg("output", F32), Arg("out_rois_num", INT32), Arg("index", INT32, optional=True)),
    ),
    "NOT": _unary(precisions=BOOL),
    "NOT_EQUAL": _compare(),
    "OR": _logical(),
    "PAD": _unary(
        Arg("pads", INT32),
        Arg("mode", INT32),
        Arg("value", F32_INT_Q8),
        precisions=F32_INT_Q8,  # Paddle-Lite passes a FLOAT32 value for any input
    ),
    "POW": _binary(),
    "PRELU": _unary(Arg("alpha", F32)),  # the header calls it `slope`
    "PRIOR_BOX": OpSchema(
        (
            Arg("input", F32),
            Arg("image", F32),
            Arg("min_sizes", F32),
            Arg("max_sizes", F32),
            Arg("aspect_ratios", F32),
            Arg("variances", F32),
            # Defaults from the header: flip/clip false, steps 0 (computed from the image size).
            Arg("flip", BOOL, optional=True),
            Arg("clip", BOOL, optional=True),
            Arg("step_w", FLOAT_SCALAR, optional=True),
            Arg("step_h", FLOAT_SCALAR, optional=True),
            Arg("offset", FLOAT_SCALAR, optional=True),
            Arg("min_max_aspect_ratios_order", BOOL, optional=True),
        ),
        (Arg("boxes", F32), Arg("variances", F32)),
    ),
    # The spec types `input` "FLOAT32, FLOAT32" and `zero_point` FLOAT32; the header: FLOAT32/INT32 and INT32.
    "QUANTIZE": OpSchema(
        (Arg("input", F32_INT32), Arg("axis", INT32), Arg("scale", F32), Arg("zero_point", F32_INT32, optional=True)),
        (Arg("output", QUANT8),),
    ),
    "RANGE": OpSchema(
        (Arg("start", F32_INT32), Arg("end", F32_INT32, same_as="start"), Arg("step", F32_INT32, same_as="start")),
        (Arg("output", F32_INT32),),
    ),
    "REDUCE_MAX": _reduce(),
    "REDUCE_MEAN": _reduce(),
    "REDUCE_SUM": _reduce(),
    "RELU": _unary(),
    "RELU6": _unary(),
    "RESHAPE": _unary(Arg("shape", INT32_64)),
    # At least one of `shape` and `scales` is set; the other may be given empty.
    "RESIZE_LINEAR": _unary(
        Arg("shape", INT32_64),
        Arg("scales", F32),
        Arg("align_corners", BOOL),
        Arg("align_mode", INT32, optional=True),  # default 1 (header)
    ),
    "RESIZE_NEAREST": _unary(Arg("shape", INT32_64), Arg("scales", F32), Arg("align_corners", BOOL)),
    "ROI_ALIGN": _unary(
        Arg("rois", F32),
        Arg("batch_indices", INT32),
        Arg("output_height", INT32),
        Arg("output_width", INT32),
        Arg("sampling_ratio", INT32),
        Arg("spatial_scale", FLOAT_SCALAR),
        Arg("aligned", BOOL),
    ),
    # "If `axes` is not set, the input is flattened before rolling."
    "ROLL": _unary(Arg("shifts", INT32), Arg("axes", INT32, optional=True)),
    "RSQRT": _unary(),
    "SHAPE": OpSchema((Arg("input", F32_Q8), Arg("dtype", INT32)), (Arg("output", INT32_64),)),
    "SIGMOID": _unary(),
    "SIN": _unary(),
    # `axes` is "optional" but not trailing: may be given empty.
    "SLICE": _unary(Arg("axes", INT32), Arg("starts", INT32), Arg("ends", INT32), Arg("steps", INT32, optional=True)),
    "SOFTMAX": _unary(Arg("axis", INT32, optional=True)),
    # The spec lists one operand `alpha` (taken as beta); the header has two, `beta` and `threshold`.
    # The spec's formula has beta (operand 1, named alpha there) and a threshold; the header passes it as operand 2.
    "SOFTPLUS": _unary(Arg("alpha", FLOAT_SCALAR), Arg("threshold", FLOAT_SCALAR, optional=True)),
    "SPLIT": OpSchema(
        (Arg("input", F32_Q8), Arg("axis", INT32), Arg("split", INT32)), (Arg("outputs", F32_Q8, variadic=True),)
    ),
    "SQUARE": _unary(),
    # Empty `axes` squeezes every dimension of size 1; the header says it may be left out.
    "SQUEEZE": _unary(Arg("axes", INT32, optional=True)),
    "STACK": OpSchema((Arg("inputs", F32_Q8, variadic=True), Arg("axis", INT32)), (Arg("output", F32_Q8),)),
    "SUB": _binary(),
    "SUM": OpSchema((Arg("inputs", F32_Q8, variadic=True),), (Arg("output", F32_Q8),)),
    "SWISH": _unary(),
    "TANH": _unary(),
    "TILE": _unary(Arg("repeats", INT32)),
    "TOP_K": OpSchema(
        (
            Arg("input", F32_INT_Q8),
            Arg("k", INT32_64),
            Arg("axis", INT32),
            Arg("largest", BOOL),
            Arg("sorted", BOOL),
            Arg("return_indices_dtype", INT32),
        ),
        (Arg("output", F32_INT_Q8), Arg("indices", INT32_64)),
    ),
    "TRANSPOSE": _unary(Arg("perm", INT32)),
    "UNSQUEEZE": _unary(Arg("axes", INT32)),
    # Not in the spec; from the header.
    "UNSTACK": OpSchema(
        (Arg("input", F32_Q8), Arg("axis", INT32), Arg("num", INT32)), (Arg("outputs", F32_Q8, variadic=True),)
    ),
    "WHERE": OpSchema(
        (
            Arg("condition", BOOL),
            Arg("input0", F32_INT32_Q8),
            Arg("input1", F32_INT32_Q8, same_as="input0"),
        ),
        (Arg("output", F32_INT32_Q8),),
    ),
    "XOR": _logical(),  # not in the spec; from the header
    # The header calls the first output `boxes` and gives `iou_aware`/`iou_aware_factor` defaults; the spec does not.
    "YOLO_BOX": OpSchema(
        (
            Arg("input", F32),
            Arg("imgsize", INT32),
            Arg("anchors", INT32),
            Arg("class_num", INT32),
            Arg("conf_thresh", FLOAT_SCALAR),
            Arg("downsample_ratio", INT32),
            # Defaults from the header: true, 1.0, false, 0.5.
            Arg("clip_bbox", BOOL, optional=True),
            Arg("scale_x_y", FLOAT_SCALAR, optional=True),
            Arg("iou_aware", BOOL, optional=True),
            Arg("iou_aware_factor", FLOAT_SCALAR, optional=True),
        ),
        (Arg("output", F32), Arg("scores", F32)),
    ),
}


# Extension beyond the spec: operations whose math is the same for every element type also take
# integer, FLOAT16 and FLOAT64 tensors (the spec lists FLOAT32 and QUANT_INT8 only). Paddle Lite's
# own converters emit integer shape arithmetic this way, and ONNX models need it. Only the data
# slots that accept FLOAT32 widen; attribute operands keep their spec types.
EXTRA_INTS = (P.INT8, P.UINT8, P.INT16, P.UINT16, P.INT32, P.UINT32, P.INT64, P.UINT64)
EXTRA_FLOATS = (P.FLOAT16, P.FLOAT64)
_ATTRIBUTE_NAMES = frozenset({"epsilon", "alpha", "beta", "threshold", "value", "conf_thresh", "scale_x_y"})
WIDENED_NUMERIC = (
    "ADD", "SUB", "MUL", "MAX", "MIN", "ABS", "EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS",
    "LESS_EQUAL", "REDUCE_SUM", "REDUCE_MAX", "ARG_MAX", "ARG_MIN", "CUM_SUM", "TOP_K",
    # ONNX's integer Div and Mod compose on FLOOR_DIV; Cast takes and gives unsigned types; integer Pow.
    "FLOOR_DIV", "CAST", "POW",
)  # fmt: skip
# Data movement: any element type, booleans included.
WIDENED_ANY_TYPE = (
    "CONCAT", "RESHAPE", "TRANSPOSE", "SQUEEZE", "UNSQUEEZE", "FLATTEN", "SLICE", "GATHER", "EXPAND", "TILE",
    "SPLIT", "STACK", "UNSTACK", "WHERE", "SHAPE", "ASSIGN", "PAD", "FILL_LIKE",
)  # fmt: skip
WIDENED_FLOAT_TYPES = (
    "DIV", "EXP", "LOG", "SIN", "COS", "TANH", "SIGMOID", "RELU", "SOFTMAX", "LOG_SOFTMAX", "FLOOR",
    "SQUARE", "RSQRT", "REDUCE_MEAN", "LEAKY_RELU", "SOFTPLUS", "HARD_SIGMOID", "GELU", "CLIP", "PRELU",
    "MAT_MUL",
)  # fmt: skip


def _widen(arg: Arg, extra: tuple[P, ...]) -> Arg:
    if P.FLOAT32 not in arg.precisions or arg.name in _ATTRIBUTE_NAMES:
        return arg
    return dataclasses.replace(arg, precisions=arg.precisions + tuple(p for p in extra if p not in arg.precisions))


def _widen_schemas() -> None:
    numeric = EXTRA_INTS + EXTRA_FLOATS
    for ops, extra in (
        (WIDENED_NUMERIC, numeric),
        (WIDENED_ANY_TYPE, (P.BOOL8, *numeric)),
        (WIDENED_FLOAT_TYPES, EXTRA_FLOATS),
    ):
        for op in ops:
            s = SCHEMAS[op]
            SCHEMAS[op] = OpSchema(
                tuple(_widen(a, extra) for a in s.inputs), tuple(_widen(a, extra) for a in s.outputs)
            )


_widen_schemas()
