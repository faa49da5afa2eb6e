"""The operand lists of every NNAdapter standard operation, from the spec's appendix.

Each entry says, in the spec's order, which operands an operation takes and gives, which
precisions each accepts, and which are optional (trailing optional operands may be
omitted; the converter then uses the default).  ``Model.add_operation`` validates against
this table; converters read operands in the same order.
"""

from __future__ import annotations

import dataclasses

from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision as P

F32 = (P.FLOAT32,)
F32_Q8 = (P.FLOAT32, P.QUANT_INT8_SYMM_PER_LAYER)
# Extension beyond the spec's CONV_2D and FULLY_CONNECTED: activations quantized to uint8 with a zero point
# as well (QDQ models' activations, Paddle Lite's ASYMM_QUANT_UINT8 drivers), computed on integers
# (op_converters/quant_integer.py).
F32_Q8_U8 = (P.FLOAT32, P.QUANT_INT8_SYMM_PER_LAYER, P.QUANT_UINT8_ASYMM_PER_LAYER)
F32_INT32 = (P.FLOAT32, P.INT32)
F32_INT32_Q8 = (P.FLOAT32, P.INT32, P.QUANT_INT8_SYMM_PER_LAYER)
F32_INT_Q8 = (P.FLOAT32, P.INT32, P.INT64, P.QUANT_INT8_SYMM_PER_LAYER)
INT32 = (P.INT32,)
INT32_64 = (P.INT32, P.INT64)
BOOL = (P.BOOL8,)
FLOAT_SCALAR = (P.FLOAT32,)
# Filters of CONV_2D-like operations may also be quantized per channel.
FILTER = (P.FLOAT32, P.QUANT_INT8_SYMM_PER_LAYER, P.QUANT_INT8_SYMM_PER_CHANNEL)
BIAS = (P.FLOAT32, P.QUANT_INT32_SYMM_PER_LAYER, P.QUANT_INT32_SYMM_PER_CHANNEL)
# Inputs of the comparisons (EQUAL, GREATER, ...), which all give BOOL8.
COMPARABLE = (P.FLOAT32, P.BOOL8, P.INT32, P.INT64, P.QUANT_INT8_SYMM_PER_LAYER)
CASTABLE = (P.BOOL8, P.INT8, P.UINT8, P.INT16, P.INT32, P.INT64, P.FLOAT16, P.FLOAT32, P.FLOAT64)
FILL_VALUE = (P.FLOAT32, P.INT32, P.INT64, P.BOOL8)
# The spec also names QUANT_UINT8_ASYMM_PER_CHANNEL, which the precision enum does not have.
QUANT8 = (P.QUANT_INT8_SYMM_PER_LAYER, P.QUANT_INT8_SYMM_PER_CHANNEL, P.QUANT_UINT8_ASYMM_PER_LAYER)
ANY = ()  # no precision restriction beyond what the converter checks
INT8_UINT8 = (P.INT8, P.UINT8)  # the integer operands of CONV_2D_INTEGER and MAT_MUL_INTEGER


@dataclasses.dataclass(frozen=True)
class Arg:
    """One operand slot.  ``precisions`` empty means any precision."""

    name: str
    precisions: tuple[P, ...] = ANY
    optional: bool = False
    variadic: bool = False  # this slot takes 1..n operands (e.g. CONCAT's inputs)
    same_as: str | None = None  # must have the same precision as the named input


@dataclasses.dataclass(frozen=True)
class OpSchema:
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]

    def input_index(self, name: str) -> int:
        return [a.name for a in self.inputs].index(name)


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

# LSTM / GRU / RNN (extension operations): ONNX's operands, in its order, attributes as operands.
_RECURRENT_ATTRS = (
    Arg("direction", INT32, optional=True),
    Arg("layout", INT32, optional=True),
    Arg("activations", INT32, optional=True),
    Arg("activation_alpha", F32, optional=True),
    Arg("activation_beta", F32, optional=True),
    Arg("clip", FLOAT_SCALAR, optional=True),
)


def _recurrent(*args: str | Arg) -> OpSchema:
    """input, weight, recurrence_weight, then optional bias, sequence_lens and ``args`` (names are
    optional FLOAT32 tensors) -> output, output_h (LSTM: and output_c)."""
    ins = [Arg("input", F32), Arg("weight", F32), Arg("recurrence_weight", F32), Arg("bias", F32, optional=True)]
    ins.append(Arg("sequence_lens", INT32, optional=True))
    ins += [a if isinstance(a, Arg) else Arg(a, F32, optional=True) for a in args]
    outs = [Arg("output", F32), Arg("output_h", F32, optional=True)]
    if "initial_c" in args:
        outs.append(Arg("output_c", F32, optional=True))
    return OpSchema(tuple(ins), tuple(outs))


SCHEMAS: dict[O, OpSchema] = {
    O.ABS: _unary(),
    O.ADAPTIVE_AVERAGE_POOL_2D: _unary(Arg("output_shape", INT32_64)),
    O.ADAPTIVE_MAX_POOL_2D: OpSchema(
        (
            Arg("input", F32_Q8),
            Arg("output_shape", INT32_64),
            # return_indices defaults to false; the indices dtype then follows the declared output.
            Arg("return_indices", BOOL, optional=True),
            Arg("return_indices_dtype", INT32, optional=True),
        ),
        _WITH_INDICES,
    ),
    O.ADD: _binary(),
    O.AND: _logical(),
    O.ARG_MAX: OpSchema(
        (Arg("input", F32_Q8), Arg("axis", INT32), Arg("keepdim", BOOL), Arg("dtype", INT32, optional=True)),
        (Arg("output", INT32_64),),
    ),
    O.ARG_MIN: OpSchema(
        (Arg("input", F32_Q8), Arg("axis", INT32), Arg("keepdim", BOOL), Arg("dtype", INT32, optional=True)),
        (Arg("output", INT32_64),),
    ),
    O.ASSIGN: _unary(),
    O.AVERAGE_POOL_2D: _pool_2d(Arg("count_include_pad", BOOL)),
    O.BATCH_NORMALIZATION: _unary(*_NORM_SCALE_BIAS, Arg("mean", F32), Arg("variance", F32), _EPSILON),
    O.CAST: OpSchema((Arg("input", CASTABLE), Arg("dtype", INT32)), (Arg("output", ANY),)),
    # The spec types `group` NNADAPTER_FLOAT32, the header INT32: both are accepted (a FLOAT32 one must
    # hold an integer; the converter checks).
    O.CHANNEL_SHUFFLE: _unary(Arg("group", F32_INT32)),
    O.CLIP: _unary(Arg("min", F32_Q8, same_as="input"), Arg("max", F32_Q8, same_as="input")),
    O.CONCAT: OpSchema((Arg("inputs", F32_Q8, variadic=True), Arg("axis", INT32)), (Arg("output", F32_Q8),)),
    O.CONV_2D: _conv_2d(),
    # `output_padding` and `output_shape` are "optional" but not trailing: may be given empty.
    O.CONV_2D_TRANSPOSE: _conv_2d(Arg("output_padding", INT32), Arg("output_shape", INT32_64)),
    O.COS: _unary(),
    O.CUM_SUM: _unary(
        Arg("axis", INT32, optional=True), Arg("exclusive", BOOL, optional=True), Arg("reverse", BOOL, optional=True)
    ),
    O.DEFORMABLE_CONV_2D: OpSchema(
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
    O.DEQUANTIZE: OpSchema((Arg("input", QUANT8),), (Arg("output", F32),)),
    O.DIV: _binary(),
    O.EQUAL: _compare(),
    O.EXP: _unary(),
    O.EXPAND: _unary(Arg("shape", INT32_64)),
    O.FILL: OpSchema((Arg("shape", INT32_64), Arg("value", FILL_VALUE)), (Arg("output", FILL_VALUE),)),
    O.FILL_LIKE: OpSchema((Arg("input", F32_Q8), Arg("value", FILL_VALUE)), (Arg("output", FILL_VALUE),)),
    O.FLATTEN: _unary(Arg("start_axis", INT32), Arg("end_axis", INT32)),
    O.FLOOR: _unary(),
    O.FLOOR_DIV: _binary(),
    O.FULLY_CONNECTED: OpSchema(
        (Arg("input", F32_Q8_U8), Arg("weight", FILTER), Arg("bias", BIAS), _fuse()), (Arg("output", F32_Q8_U8),)
    ),
    O.GATHER: _unary(Arg("indices", INT32_64), Arg("axis", INT32, optional=True), precisions=F32_INT_Q8),  # axis: -1
    O.GELU: _unary(Arg("approximate", BOOL)),
    O.GREATER: _compare(),
    O.GREATER_EQUAL: _compare(),  # the spec heads this entry NNADAPTER_GREATER by mistake
    O.GRID_SAMPLE: _unary(Arg("grid", F32), Arg("align_corners", BOOL), Arg("mode", INT32), Arg("pad_mode", INT32)),
    O.GROUP_NORMALIZATION: _unary(*_NORM_SCALE_BIAS, Arg("epsilon", FLOAT_SCALAR), Arg("groups", INT32)),
    O.HARD_SIGMOID: _unary(Arg("alpha", FLOAT_SCALAR), Arg("beta", FLOAT_SCALAR)),
    O.HARD_SWISH: _unary(Arg("alpha", FLOAT_SCALAR), Arg("beta", FLOAT_SCALAR)),
    O.INSTANCE_NORMALIZATION: _unary(*_NORM_SCALE_BIAS, _EPSILON),
    # begin_norm_axis defaults to 1 in the header.
    O.LAYER_NORMALIZATION: _unary(*_NORM_SCALE_BIAS, Arg("begin_norm_axis", INT32, optional=True), _EPSILON),
    O.LEAKY_RELU: _unary(Arg("alpha", FLOAT_SCALAR)),
    O.LESS: _compare(),
    O.LESS_EQUAL: _compare(),
    O.LOG: _unary(),
    O.LOG_SOFTMAX: _unary(Arg("axis", INT32, optional=True)),
    O.LP_NORMALIZATION: _unary(Arg("axis", INT32, optional=True), Arg("p", INT32, optional=True), _EPSILON),
    O.LRN: _unary(
        Arg("size", INT32, optional=True),  # defaults to 5 in the spec, to 1 in the header
        Arg("bias", FLOAT_SCALAR, optional=True),
        Arg("alpha", FLOAT_SCALAR, optional=True),
        Arg("beta", FLOAT_SCALAR, optional=True),
        precisions=F32,
    ),
    O.MAT_MUL: OpSchema(
        (
            Arg("x", F32_Q8),
            Arg("y", F32_Q8, same_as="x"),
            Arg("transpose_x", BOOL, optional=True),
            Arg("transpose_y", BOOL, optional=True),
        ),
        (Arg("output", F32_Q8),),
    ),
    O.MAX: _binary(),
    O.MAX_POOL_2D: _pool_2d(Arg("return_indices", BOOL), Arg("return_indices_dtype", INT32), outputs=_WITH_INDICES),
    O.MESHGRID: OpSchema((Arg("inputs", F32_Q8, variadic=True),), (Arg("outputs", F32_Q8, variadic=True),)),
    O.MIN: _binary(),
    O.MUL: _binary(),
    # Not in the spec; from the header.  `rois_num` is "optional" there but not trailing: may be given empty.
    O.NON_MAX_SUPPRESSION: OpSchema(
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
    O.NOT: _unary(precisions=BOOL),
    O.NOT_EQUAL: _compare(),
    O.OR: _logical(),
    O.PAD: _unary(
        Arg("pads", INT32),
        Arg("mode", INT32),
        Arg("value", F32_INT_Q8),
        precisions=F32_INT_Q8,  # Paddle-Lite passes a FLOAT32 value for any input
    ),
    O.POW: _binary(),
    O.PRELU: _unary(Arg("alpha", F32)),  # the header calls it `slope`
    O.PRIOR_BOX: OpSchema(
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
    O.QUANTIZE: OpSchema(
        (Arg("input", F32_INT32), Arg("axis", INT32), Arg("scale", F32), Arg("zero_point", F32_INT32, optional=True)),
        (Arg("output", QUANT8),),
    ),
    O.RANGE: OpSchema(
        (Arg("start", F32_INT32), Arg("end", F32_INT32, same_as="start"), Arg("step", F32_INT32, same_as="start")),
        (Arg("output", F32_INT32),),
    ),
    O.REDUCE_MAX: _reduce(),
    O.REDUCE_MEAN: _reduce(),
    O.REDUCE_SUM: _reduce(),
    O.RELU: _unary(),
    O.RELU6: _unary(),
    O.RESHAPE: _unary(Arg("shape", INT32_64)),
    # At least one of `shape` and `scales` is set; the other may be given empty.
    O.RESIZE_LINEAR: _unary(
        Arg("shape", INT32_64),
        Arg("scales", F32),
        Arg("align_corners", BOOL),
        Arg("align_mode", INT32, optional=True),  # default 1 (header)
    ),
    O.RESIZE_NEAREST: _unary(Arg("shape", INT32_64), Arg("scales", F32), Arg("align_corners", BOOL)),
    O.ROI_ALIGN: _unary(
        Arg("rois", F32),
        Arg("batch_indices", INT32),
        Arg("output_height", INT32),
        Arg("output_width", INT32),
        Arg("sampling_ratio", INT32),
        Arg("spatial_scale", FLOAT_SCALAR),
        Arg("aligned", BOOL),
    ),
    # "If `axes` is not set, the input is flattened before rolling."
    O.ROLL: _unary(Arg("shifts", INT32), Arg("axes", INT32, optional=True)),
    O.RSQRT: _unary(),
    O.SHAPE: OpSchema((Arg("input", F32_Q8), Arg("dtype", INT32)), (Arg("output", INT32_64),)),
    O.SIGMOID: _unary(),
    O.SIN: _unary(),
    # `axes` is "optional" but not trailing: may be given empty.
    O.SLICE: _unary(Arg("axes", INT32), Arg("starts", INT32), Arg("ends", INT32), Arg("steps", INT32, optional=True)),
    O.SOFTMAX: _unary(Arg("axis", INT32, optional=True)),
    # The spec lists one operand `alpha` (taken as beta); the header has two, `beta` and `threshold`.
    # The spec's formula has beta (operand 1, named alpha there) and a threshold; the header passes it as operand 2.
    O.SOFTPLUS: _unary(Arg("alpha", FLOAT_SCALAR), Arg("threshold", FLOAT_SCALAR, optional=True)),
    O.SPLIT: OpSchema(
        (Arg("input", F32_Q8), Arg("axis", INT32), Arg("split", INT32)), (Arg("outputs", F32_Q8, variadic=True),)
    ),
    O.SQUARE: _unary(),
    # Empty `axes` squeezes every dimension of size 1; the header says it may be left out.
    O.SQUEEZE: _unary(Arg("axes", INT32, optional=True)),
    O.STACK: OpSchema((Arg("inputs", F32_Q8, variadic=True), Arg("axis", INT32)), (Arg("output", F32_Q8),)),
    O.SUB: _binary(),
    O.SUM: OpSchema((Arg("inputs", F32_Q8, variadic=True),), (Arg("output", F32_Q8),)),
    O.SWISH: _unary(),
    O.TANH: _unary(),
    O.TILE: _unary(Arg("repeats", INT32)),
    O.TOP_K: OpSchema(
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
    O.TRANSPOSE: _unary(Arg("perm", INT32)),
    O.UNSQUEEZE: _unary(Arg("axes", INT32)),
    # Not in the spec; from the header.
    O.UNSTACK: OpSchema(
        (Arg("input", F32_Q8), Arg("axis", INT32), Arg("num", INT32)), (Arg("outputs", F32_Q8, variadic=True),)
    ),
    O.WHERE: OpSchema(
        (
            Arg("condition", BOOL),
            Arg("input0", F32_INT32_Q8),
            Arg("input1", F32_INT32_Q8, same_as="input0"),
        ),
        (Arg("output", F32_INT32_Q8),),
    ),
    O.XOR: _logical(),  # not in the spec; from the header
    # The header calls the first output `boxes` and gives `iou_aware`/`iou_aware_factor` defaults; the spec does not.
    O.YOLO_BOX: OpSchema(
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
    # nnadapter-tvm's extension operations for recurrent layers (see op_converters/recurrent.py).
    O.LSTM: _recurrent(
        "initial_h", "initial_c", "peephole", *_RECURRENT_ATTRS, Arg("input_forget", BOOL, optional=True)
    ),
    O.GRU: _recurrent("initial_h", *_RECURRENT_ATTRS, Arg("linear_before_reset", BOOL, optional=True)),
    O.RNN: _recurrent("initial_h", *_RECURRENT_ATTRS),
    # nnadapter-tvm's extension operations for dynamic quantization (see op_converters/quant_dynamic.py):
    # plain INT8/UINT8 tensors whose zero points are operands (run-time tensors allowed), INT32 results.
    O.DYNAMIC_QUANTIZE_LINEAR: OpSchema(
        (Arg("input", F32),), (Arg("output", (P.UINT8,)), Arg("scale", F32), Arg("zero_point", (P.UINT8,)))
    ),
    # The zero points are "optional" but not trailing: may be given empty (zero).
    O.CONV_2D_INTEGER: OpSchema(
        (
            Arg("input", INT8_UINT8),
            Arg("filter", INT8_UINT8),
            Arg("input_zero_point", INT8_UINT8, same_as="input"),
            Arg("filter_zero_point", INT8_UINT8, same_as="filter"),
            Arg("auto_pad", INT32),
            Arg("pads", INT32),
            Arg("strides", INT32),
            Arg("group", INT32),
            Arg("dilations", INT32),
        ),
        (Arg("output", INT32),),
    ),
    O.MAT_MUL_INTEGER: OpSchema(
        (
            Arg("x", INT8_UINT8),
            Arg("y", INT8_UINT8),
            Arg("x_zero_point", INT8_UINT8, optional=True, same_as="x"),
            Arg("y_zero_point", INT8_UINT8, optional=True, same_as="y"),
        ),
        (Arg("output", INT32),),
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
    O.ADD, O.SUB, O.MUL, O.MAX, O.MIN, O.ABS, O.EQUAL, O.NOT_EQUAL, O.GREATER, O.GREATER_EQUAL, O.LESS,
    O.LESS_EQUAL, O.REDUCE_SUM, O.REDUCE_MAX, O.ARG_MAX, O.ARG_MIN, O.CUM_SUM, O.TOP_K,
    # ONNX's integer Div and Mod compose on FLOOR_DIV; Cast takes and gives unsigned types; integer Pow.
    O.FLOOR_DIV, O.CAST, O.POW,
)  # fmt: skip
# Data movement: any element type, booleans included.
WIDENED_ANY_TYPE = (
    O.CONCAT, O.RESHAPE, O.TRANSPOSE, O.SQUEEZE, O.UNSQUEEZE, O.FLATTEN, O.SLICE, O.GATHER, O.EXPAND, O.TILE,
    O.SPLIT, O.STACK, O.UNSTACK, O.WHERE, O.SHAPE, O.ASSIGN, O.PAD, O.FILL_LIKE,
)  # fmt: skip
WIDENED_FLOAT_TYPES = (
    O.DIV, O.EXP, O.LOG, O.SIN, O.COS, O.TANH, O.SIGMOID, O.RELU, O.SOFTMAX, O.LOG_SOFTMAX, O.FLOOR,
    O.SQUARE, O.RSQRT, O.REDUCE_MEAN, O.LEAKY_RELU, O.SOFTPLUS, O.HARD_SIGMOID, O.GELU, O.CLIP, O.PRELU,
    O.MAT_MUL,
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
