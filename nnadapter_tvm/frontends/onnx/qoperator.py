"""onnxruntime's QOperator form as the QDQ form: each quantized operator (``QLinearConv``, ``QLinearMatMul``
and the ``com.microsoft`` ``QGemm``, ``QLinearAdd``, ``QLinearMul``, ``QLinearConcat``, ``QLinearSigmoid``,
``QLinearLeakyRelu``, ``QLinearSoftmax``, ``QLinearAveragePool``, ``QLinearGlobalAveragePool``,
``QLinearReduceMean``, ``QLinearWhere``, and the contrib ``QuantizeLinear`` / ``DequantizeLinear``) becomes
``DequantizeLinear`` of each quantized input, the float operator, and ``QuantizeLinear`` of its result to
the output's scale and zero point.

That is the operator's definition (onnxruntime's ContribOperators.md: each computes on the dequantized
values and quantizes the result), and it is the form the importer already turns into quantized NNAdapter
operands: a Conv / Gemm / MatMul between a DequantizeLinear of an 8-bit activation and of a constant int8
weight sums integer products (``ops/qdq.py``), and element-wise operations, pools and concatenations
between two quantized tensors fuse into one kernel that reads and writes the 8-bit values.  A QOperator
file therefore runs on the same kernels as its QDQ twin.

``QLinearConv`` and ``QLinearMatMul`` are rewritten only when the scales that make the int32 bias's scale
are constants (always, in the files onnxruntime's quantizer writes); otherwise their converters in
``ops/quant.py`` compute them (exact int32 sums, requantized in float64)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from nnadapter_tvm.frontends.onnx.values import Value

MS = "com.microsoft"
# The opset the rewritten nodes are written in: DequantizeLinear's axis needs 13, and 13 still takes
# ReduceMean's axes as an attribute (QLinearReduceMean's form).
OPSET = 13
_EIGHT_BIT = (np.dtype("uint8"), np.dtype("int8"))

Expansion = tuple[list[onnx.NodeProto], int]


class _Writer:
    """Builds the replacement nodes of one quantized node, naming new values after its first output."""

    def __init__(self, node: onnx.NodeProto, index: int, inputs: Sequence[Value | None]) -> None:
        self.node, self.inputs = node, list(inputs) + [None] * (len(node.input) - len(inputs))
        self.prefix = f"{node.output[0]}#q{index}"
        self.nodes: list[onnx.NodeProto] = []
        self.count = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"{self.prefix}/{what}{self.count}"

    def arg(self, i: int) -> str:
        return self.node.input[i] if i < len(self.node.input) else ""

    def value(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) and self.arg(i) else None

    def constant(self, array: np.ndarray, what: str) -> str:
        out = self.name(what)
        self.nodes.append(helper.make_node("Constant", [], [out], value=numpy_helper.from_array(array, out)))
        return out

    def add(self, op_type: str, inputs: Sequence[str], output: str | None = None, **attrs) -> str:
        out = output or self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def dequantize(self, x: int, scale: int, zero: int, axis: int | None = None) -> str:
        """DequantizeLinear of input ``x`` by inputs ``scale`` and ``zero`` (omitted: 0)."""
        inputs = [self.arg(x), self.arg(scale)] + ([self.arg(zero)] if self.arg(zero) else [])
        attrs = {} if axis is None else {"axis": axis}
        return self.add("DequantizeLinear", inputs, **attrs)

    def quantize(self, y: str, scale: int, zero: int, like: int) -> None:
        """QuantizeLinear of ``y`` to the node's output by inputs ``scale`` and ``zero``; an omitted zero
        point is 0 of input ``like``'s type (the contrib operators' output type is their input's)."""
        zp = self.arg(zero)
        if not zp:
            dtype = self.value(like).dtype if self.value(like) is not None else np.dtype("uint8")
            zp = self.constant(np.zeros((), dtype), "zero")
        self.add("QuantizeLinear", [y, self.arg(scale), zp], self.node.output[0])

    def attrs(self, drop: Sequence[str] = ()) -> dict:
        return {a.name: helper.get_attribute_value(a) for a in self.node.attribute if a.name not in drop}


def _const(v: Value | None) -> np.ndarray | None:
    return v.const if v is not None and v.is_const else None


def _eight_bit(w: _Writer, *indices: int) -> bool:
    return all(w.value(i) is not None and w.value(i).dtype in _EIGHT_BIT for i in indices)


def _per_channel_axis(scale: Value | None, axis: int) -> int | None:
    """DequantizeLinear's axis for a scale with one element per index of ``axis`` (None: per tensor)."""
    return (
        axis
        if scale is not None and scale.shape is not None and len(scale.shape) == 1 and scale.shape[0] != 1
        else None
    )


def _bias(w: _Writer, bias: int, x_scale: int, w_scale: int, factor: float = 1.0) -> str | None:
    """The int32 bias dequantized by x_scale * w_scale (* factor): its scale as the operators define it.
    None when the scales are not constants."""
    xs, ws = _const(w.value(x_scale)), _const(w.value(w_scale))
    if xs is None or ws is None:
        return None
    scale = (np.float32(factor) * xs.astype("float32").reshape(-1) * ws.astype("float32").reshape(-1)).astype("float32")
    if scale.size == 1:
        return w.add("DequantizeLinear", [w.arg(bias), w.constant(scale.reshape(()), "bias_scale")])
    return w.add("DequantizeLinear", [w.arg(bias), w.constant(scale, "bias_scale")], axis=0)


def _products(w: _Writer, scales: Sequence[int]) -> bool:
    """QLinearConv / QLinearMatMul take the QDQ form when their input is an 8-bit value quantized by an
    earlier operator (what sums integer products there) and their scales are float32.  A raw 8-bit graph
    input keeps the converter, which requantizes in ONNX's reference order, exactly."""
    x = w.value(0)
    if x is None or x.quant is None or not _eight_bit(w, 0, 3):
        return False
    return all(w.value(i) is not None and w.value(i).dtype == np.float32 for i in scales)


def _qlinear_conv(w: _Writer) -> bool:
    # x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B
    if not _products(w, (1, 4, 6)):
        return False
    x = w.dequantize(0, 1, 2)
    weight = w.dequantize(3, 4, 5, _per_channel_axis(w.value(4), 0))
    inputs = [x, weight]
    if w.arg(8):
        bias = _bias(w, 8, 1, 4)
        if bias is None:
            return False
        inputs.append(bias)
    w.quantize(w.add("Conv", inputs, **w.attrs()), 6, 7, 0)
    return True


def _qlinear_matmul(w: _Writer) -> bool:
    # a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point
    a_scale, b = w.value(1), w.value(3)
    if not _products(w, (1, 4, 6)) or a_scale.shape not in ((), (1,)) or b.rank != 2:
        return False
    a = w.dequantize(0, 1, 2)
    b = w.dequantize(3, 4, 5, _per_channel_axis(w.value(4), 1))
    w.quantize(w.add("MatMul", [a, b]), 6, 7, 0)
    return True


def _qgemm(w: _Writer) -> bool:
    # A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point; alpha, transA, transB.
    # C is int32 with scale alpha * a_scale * b_scale (beta is 1: the quantizer folds it into C).
    attrs = w.attrs()
    alpha = float(attrs.get("alpha", 1.0))
    b = w.dequantize(3, 4, 5, _per_channel_axis(w.value(4), 0 if attrs.get("transB", 0) else 1))
    inputs = [w.dequantize(0, 1, 2), b]
    if w.arg(6):
        bias = _bias(w, 6, 1, 4, alpha)
        if bias is None:
            return False
        inputs.append(bias)
    y = w.add("Gemm", inputs, alpha=alpha, transA=attrs.get("transA", 0), transB=attrs.get("transB", 0))
    if w.arg(7):
        w.quantize(y, 7, 8, 0)
    else:  # no output scale: the output is the float result
        w.add("Identity", [y], w.node.output[0])
    return True


def _binary(op_type: str) -> Callable[[_Writer], bool]:
    def rewrite(w: _Writer) -> bool:
        # A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point
        w.quantize(w.add(op_type, [w.dequantize(0, 1, 2), w.dequantize(3, 4, 5)]), 6, 7, 0)
        return True

    return rewrite


def _unary(op_type: str, drop: Sequence[str] = (), channels_last: bool = False) -> Callable[[_Writer], bool]:
    def rewrite(w: _Writer) -> bool:
        # X, X_scale, X_zero_point, Y_scale, Y_zero_point
        x = w.dequantize(0, 1, 2)
        attrs = w.attrs(drop=(*drop, "channels_last"))
        last = channels_last and w.attrs().get("channels_last", 0)
        rank = w.value(0).rank if w.value(0) is not None else None
        if last and rank is None:
            return False
        if last:  # N, spatial..., C -> N, C, spatial...
            x = w.add("Transpose", [x], perm=[0, rank - 1, *range(1, rank - 1)])
        y = w.add(op_type, [x], **attrs)
        if last:
            y = w.add("Transpose", [y], perm=[0, *range(2, rank), 1])
        w.quantize(y, 3, 4, 0)
        return True

    return rewrite


def _concat(w: _Writer) -> bool:
    # Y_scale, Y_zero_point, then X, X_scale, X_zero_point for each input
    if len(w.node.input) < 5 or (len(w.node.input) - 2) % 3:
        return False
    parts = [w.dequantize(i, i + 1, i + 2) for i in range(2, len(w.node.input), 3)]
    w.quantize(w.add("Concat", parts, **w.attrs()), 0, 1, 2)
    return True


def _where(w: _Writer) -> bool:
    # condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point
    y = w.add("Where", [w.arg(0), w.dequantize(1, 2, 3), w.dequantize(4, 5, 6)])
    w.quantize(y, 7, 8, 1)
    return True


def _contrib(op_type: str) -> Callable[[_Writer], bool]:
    """The contrib QuantizeLinear / DequantizeLinear: the standard operators (axis as they define it)."""

    def rewrite(w: _Writer) -> bool:
        w.add(op_type, [a for a in w.node.input], w.node.output[0], **w.attrs())
        return True

    return rewrite


_REWRITES: dict[tuple[str, str], Callable[[_Writer], bool]] = {
    ("", "QLinearConv"): _qlinear_conv,
    ("", "QLinearMatMul"): _qlinear_matmul,
    (MS, "QGemm"): _qgemm,
    (MS, "QLinearAdd"): _binary("Add"),
    (MS, "QLinearMul"): _binary("Mul"),
    (MS, "QLinearConcat"): _concat,
    (MS, "QLinearWhere"): _where,
    (MS, "QLinearSigmoid"): _unary("Sigmoid"),
    (MS, "QLinearLeakyRelu"): _unary("LeakyRelu"),
    (MS, "QLinearSoftmax"): _unary("Softmax", drop=("opset",)),
    (MS, "QLinearAveragePool"): _unary("AveragePool", channels_last=True),
    (MS, "QLinearGlobalAveragePool"): _unary("GlobalAveragePool", channels_last=True),
    (MS, "QLinearReduceMean"): _unary("ReduceMean"),
    (MS, "QuantizeLinear"): _contrib("QuantizeLinear"),
    (MS, "DequantizeLinear"): _contrib("DequantizeLinear"),
}


# Operators that onnxruntime's QOperator form applies to 8-bit tensors directly (data movement, max, and
# index results): by the indices of their outputs that keep the input's quantization.
_DIRECT = {
    "MaxPool": (0,),
    "GlobalMaxPool": (0,),
    "ArgMax": (),
    "ArgMin": (),
    "ReduceMax": (0,),
    "ReduceMin": (0,),
}
_MOVES = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Split", "Gather", "Slice", "Tile", "Expand")
_MOVES += ("Identity", "DepthToSpace", "SpaceToDepth", "Resize", "Upsample", "Pad")


def _direct(w: _Writer, keeps: Sequence[int] | None) -> bool:
    """An operator on a quantized tensor (input 0): computed on its dequantized values, its outputs in
    ``keeps`` (None: all) quantized again with the input's own scale and zero point.  Max, moves and index
    results give the same integers that onnxruntime computes on the 8-bit values; Resize's interpolation is
    rounded to nearest once, at the end (onnxruntime truncates it: one step lower in up to half the
    elements).  A Pad's constant value is an 8-bit one too."""
    x = w.value(0)
    q = x.quant
    scale = w.constant(np.array(q.scale, "float32"), "scale")
    # The zero point as the file types it (an int8 stored as uint8 is dequantized by its int8 one).
    zero_point = (q.zero_point or 0) - x.shifted
    zero = w.constant(np.array(zero_point, "int8" if x.shifted else x.dtype), "zero")
    inputs = [w.add("DequantizeLinear", [w.arg(0), scale, zero]), *w.node.input[1:]]
    if w.node.op_type == "Pad" and w.arg(2):
        value = _const(w.value(2))
        if value is None:
            return False
        real = (np.float32(value.reshape(-1)[0]) - np.float32(zero_point)) * np.float32(q.scale)
        inputs[2] = w.constant(np.array(real, "float32"), "pad")
    outputs = []
    for k, out in enumerate(w.node.output):
        keep = out and (keeps is None or k in keeps)
        outputs.append(w.name("float") if keep else out)
    w.nodes.append(helper.make_node(w.node.op_type, inputs, outputs, name=w.node.name, **w.attrs()))
    for k, out in enumerate(w.node.output):
        if outputs[k] != out:
            w.add("QuantizeLinear", [outputs[k], scale, zero], out)
    return True


def _domain(node: onnx.NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def _is_direct(node: onnx.NodeProto) -> bool:
    return _domain(node) == "" and (node.op_type in _DIRECT or node.op_type in _MOVES)


def _quantized_input(node: onnx.NodeProto, inputs: Sequence[Value | None]) -> bool:
    """Input 0 is an 8-bit tensor quantized per tensor (what a QOperator file's direct operators read)."""
    x = inputs[0] if inputs else None
    quantized = x is not None and x.quant is not None and not isinstance(x.quant.scale, tuple)
    return quantized and x.dtype in _EIGHT_BIT and _is_direct(node)


def reads_quantized(node: onnx.NodeProto, name: str) -> bool:
    """Whether ``node`` reads ``name`` as a quantized value: a DequantizeLinear or one of the operators that
    read an 8-bit tensor directly, where ``name`` is that tensor (input 0 alone: ``_direct`` rewrites only
    that one), or a QOperator-form operator (which dequantizes its 8-bit inputs)."""
    if node.op_type == "DequantizeLinear" or _is_direct(node):
        return node.input[0] == name and list(node.input).count(name) == 1
    return (_domain(node), node.op_type) in _REWRITES


def expand(node: onnx.NodeProto, index: int, inputs: Sequence[Value | None], opset: int) -> Expansion | None:
    """The QDQ-form nodes that compute ``node`` and the opset they are written in; None when ``node`` is
    not a QOperator-form operator (or one whose parameters need its own converter)."""
    if not node.output or not node.output[0]:
        return None
    if _quantized_input(node, inputs):
        w = _Writer(node, index, inputs)
        return (w.nodes, opset) if _direct(w, _DIRECT.get(node.op_type)) else None
    rewrite = _REWRITES.get((_domain(node), node.op_type))
    if rewrite is None:
        return None
    w = _Writer(node, index, inputs)
    if not rewrite(w):
        return None
    if node.op_type == "QLinearSoftmax":
        # Softmax's meaning changed at opset 13 (the axis alone, not the flattened tail): the node carries
        # the opset of the Softmax it replaced.
        return w.nodes, max(10, int(w.attrs().get("opset", opset)))
    if node.domain == MS and node.op_type in ("QuantizeLinear", "DequantizeLinear"):
        return w.nodes, max(opset, OPSET)
    return w.nodes, OPSET
