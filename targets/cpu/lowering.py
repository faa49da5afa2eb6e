"""``LegalizeOps`` overrides that lower float32 ``conv2d`` and ``matmul`` through the packed computes.

A convolution (NHWC after ``layout.to_nhwc``; an NCHW one converts its own input and output) becomes a
weight-packing kernel and ``compute.conv_nhwc`` or ``compute.depthwise_nhwc``, or, stride-1 3x3 with a
constant weight and an input of static or plainly symbolic size (``winograd.applies``), a weight-transforming
kernel and ``winograd.conv_nhwc``; a product with
a 2-D right operand a weight-packing kernel and ``compute.dense_packed``; a product of two run-time tensors
(attention's Q K^T and P V) a run-time packing kernel and ``compute.batch_matmul_packed``.  The block and
tile sizes come from the target (``simd``).  Anything else, or any surprise, keeps TVM's own lowering.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax, te, tirx, topi

from nnadapter_tvm.targets import relax_passes
from nnadapter_tvm.targets.cpu import compute, int8, softmax, vmath, winograd
from nnadapter_tvm.targets.cpu.concat import legalize_concat
from nnadapter_tvm.targets.cpu.simd import (
    channel_block,
    has_fma,
    symbolic_tile,
    tile_budget,
    vector_lanes,
    vector_padded,
    vector_registers,
)
from nnadapter_tvm.targets.relax_passes import static_shape

log = logging.getLogger("nnadapter_tvm")

#: A Relax constant's class (``relax.const`` builds one).
_CONSTANT = tvm.ir.expr.Constant


def _shape(expr: relax.Expr) -> list | None:
    """``expr``'s shape, static dims as ints, symbolic ones as expressions; None when unknown."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    return [int(d.value) if isinstance(d, tirx.IntImm) else d for d in shape.values]


def _out_dtype(attrs, default: str) -> str:
    """An op's ``out_dtype`` attribute; unset (None, void, empty) means ``default``."""
    text = str(getattr(attrs, "out_dtype", None) or "")
    return default if text in ("", "None", "void") else text


def _unshifted(bb: relax.BlockBuilder, y: relax.Expr, shift: int, weight_sums: np.ndarray) -> relax.Expr:
    """An integer kernel's sums of ``(x - shift) * w`` (``int8.DotProduct.shift``) made sums of ``x * w``: plus
    ``shift * sum(w[o])`` per output channel (the last axis), fused into the kernel's epilogue."""
    if not shift:
        return y
    return relax.op.add(bb.emit(y), relax.const((shift * weight_sums).astype("int32"), "int32"))


#: TVM's ``OpPatternKind`` of a reduction whose output an element-wise epilogue may join (kOutEWiseFusable).
_OUT_ELEMWISE_FUSABLE = 4


def _fusable_epilogue(bb: relax.BlockBuilder, call: relax.Call) -> None:
    """Mark the kernel ``call`` calls as one whose element-wise consumers FuseOps may fuse into it.
    ``AnnotateTIROpPattern`` calls a product with a padding stage before it (rows copied to whole tiles,
    K to whole groups) opaque, and its dequantization then ran as a kernel of its own per layer."""
    gvar = call.args[0]
    bb.update_func(gvar, bb.get()[gvar].with_attr("op_pattern", _OUT_ELEMWISE_FUSABLE))


class Lowering:
    """``LegalizeOps`` overrides for ``relax.nn.conv2d`` and ``relax.matmul`` (see the module docstring)."""

    def __init__(self, target: tvm.target.Target, winograd: bool = True):
        self.winograd = winograd
        self.target = target
        self.lanes = vector_lanes(target)
        self.registers = vector_registers(target)
        self._default = {
            name: tvm.ir.Op.get(name).get_attr("FLegalize") for name in ("relax.nn.conv2d", "relax.matmul")
        }

    def legalize_map(self) -> dict[str, Callable]:
        return {
            "relax.nn.conv2d": self.conv2d,
            "relax.matmul": self.matmul,
            "relax.concat": legalize_concat,
            **vmath.legalize_map(relax_passes.legalize_map()["relax.divide"], fma=has_fma(self.target)),
            **softmax.legalize_map(self.lanes),
        }

    def conv2d(self, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        return self._or_default("relax.nn.conv2d", self._conv2d, bb, call)

    def matmul(self, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        return self._or_default("relax.matmul", self._matmul, bb, call)

    def _or_default(self, op: str, lower: Callable, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        """``lower(bb, call)``, or TVM's own lowering of ``op`` when it declines (None) or raises."""
        try:
            lowered = lower(bb, call)
        except Exception as err:  # any surprise: TVM's own lowering
            log.debug("cpu schedules: %s keeps the default lowering (%s)", op, err)
            lowered = None
        return lowered if lowered is not None else self._default[op](bb, call)

    def _tile(self, block: int) -> tuple[int, int]:
        """Register-tile rows for a tile ``block`` channels (columns) wide: the rows a symbolic axis is
        padded to a multiple of, and the most rows the registers hold (a static axis no tile within it
        divides is padded to suit one)."""
        vectors = max(block // self.lanes, 1)
        return symbolic_tile(self.registers, vectors), tile_budget(self.registers, vectors)

    # conv2d ---------------------------------------------------------------------------

    def _conv2d(self, bb: relax.BlockBuilder, call: relax.Call, integer_winograd: bool = False) -> relax.Expr | None:
        attrs = call.attrs
        x, w = call.args
        layouts = (attrs.data_layout, attrs.kernel_layout, attrs.out_layout)
        if layouts not in (("NHWC", "OIHW", "NHWC"), ("NCHW", "OIHW", "NCHW")):
            return None
        nchw = layouts[0] == "NCHW"
        if x.ty.dtype in ("uint8", "int8") and w.ty.dtype == "int8" and _out_dtype(attrs, "") == "int32":
            return self._conv2d_int8(bb, call, nchw)
        if x.ty.dtype != "float32" or w.ty.dtype != "float32" or _out_dtype(attrs, "float32") != "float32":
            return None
        w_shape, x_shape = static_shape(w.ty), _shape(x)
        if w_shape is None or x_shape is None or len(x_shape) != 4:
            return None
        oc, icg, _, _ = w_shape
        c = x_shape[1] if nchw else x_shape[3]
        groups = int(attrs.groups)
        if not isinstance(c, int) or groups <= 0 or c % groups or oc % groups or icg * groups != c:
            return None
        strides = [int(v) for v in attrs.strides]
        dilation = [int(v) for v in attrs.dilation]
        pads = tuple(int(v) for v in attrs.padding)  # top, left, bottom, right
        ocg = oc // groups
        if nchw:
            # ConvertLayout did not run (it rejects some graphs): NHWC around this convolution only.
            x_shape = [x_shape[0], x_shape[2], x_shape[3], x_shape[1]]
            x = bb.emit_te(topi.transpose, x, [0, 2, 3, 1], primfunc_name_hint="transpose")
        if icg == 1 and groups > 1:  # depthwise (with a channel multiplier when ocg > 1)
            name = compute.PACK + "depthwise_weight"
            wp = bb.emit_te(compute.pack_depthwise_weight, w, primfunc_name_hint=name)
            tile = self._tile(channel_block(oc, self.lanes))
            y = bb.call_te(
                compute.depthwise_nhwc, x, wp, strides, pads, dilation, ocg, *tile, primfunc_name_hint=compute.DEPTHWISE
            )
        elif self._by_winograd(w, x_shape, strides, dilation, groups, pads, integer_winograd):
            y = self._winograd(bb, x, w, pads)
        else:
            # Output channels pad to whole vectors (zero weights) when that is all a block lacks; the
            # extra channels are sliced off (a channel count like 1000 would otherwise get 8-wide blocks).
            ocp = vector_padded(oc, self.lanes) if groups == 1 else oc
            ob = channel_block(ocp // groups, self.lanes)
            name = compute.PACK + "conv_weight"
            wp = bb.emit_te(compute.pack_conv_weight, w, ocp, ob, primfunc_name_hint=name)
            tile = self._tile(ob)
            y = bb.call_te(
                compute.conv_nhwc, x, wp, ocp, strides, pads, dilation, groups, *tile, primfunc_name_hint=compute.CONV
            )
            if ocp != oc:
                y = relax.op.strided_slice(bb.emit(y), axes=[3], begin=[0], end=[oc])
        if nchw:
            y = bb.call_te(topi.transpose, bb.emit(y), [0, 3, 1, 2], primfunc_name_hint="transpose")
        return y

    def _conv2d_int8(self, bb: relax.BlockBuilder, call: relax.Call, nchw: bool) -> relax.Expr | None:
        """An 8-bit convolution into int32 with a constant filter (``int8``): the target's dot-product
        kernel for a uint8 NHWC input of static size and one group, else the float route (the integers as
        float32, exact below 2^24, through the float kernels), else None (TVM's own lowering)."""
        x, w = call.args
        attrs = call.attrs
        if not isinstance(w, _CONSTANT):
            return None
        weight = w.value.numpy()
        x_shape = _shape(x)
        dot = int8.dot_product(self.target, str(x.ty.dtype))
        static = x_shape is not None and all(isinstance(d, int) for d in x_shape)
        strides, dilation = [int(v) for v in attrs.strides], [int(v) for v in attrs.dilation]
        pads = tuple(int(v) for v in attrs.padding)
        # Without vpdpbusd a 16-bit multiply-add does no more products an instruction than float32's FMA, and
        # Winograd's float32 3x3 convolution does a quarter of the products: there, its sums (as close as a
        # float32 convolution's of the dequantized values, what a QDQ graph means) are worth more than
        # exact ones (ResNet-50 QDQ on an AVX2 build: 99 ms with pmaddwd for every convolution, float32 75).
        by_winograd = dot is not None and dot.group == 2 and x_shape is not None and len(x_shape) == 4
        if by_winograd:
            nhwc = [x_shape[0], x_shape[2], x_shape[3], x_shape[1]] if nchw else x_shape
            by_winograd = self._by_winograd(w, nhwc, strides, dilation, int(attrs.groups), pads, integer_ok=True)
        if dot is not None and not nchw and static and int(attrs.groups) == 1 and not by_winograd:
            oc = weight.shape[0]
            ocp, ob = self._int8_block(oc, dot.lanes)
            name = compute.PACK + "int8_conv_weight"
            wp = bb.emit_te(int8.pack_weight, w, ocp, ob, dot.group, dot.weight_dtype, primfunc_name_hint=name)
            y = bb.call_te(
                int8.conv_nhwc,
                x,
                wp,
                strides,
                pads,
                dilation,
                dot.input_dtype,
                dot.shift,
                primfunc_name_hint=int8.INT8_CONV,
            )
            if ocp != oc:
                y = relax.op.strided_slice(bb.emit(y), axes=[3], begin=[0], end=[oc])
            return _unshifted(bb, y, dot.shift, weight.astype("int64").reshape(oc, -1).sum(axis=1))
        if not by_winograd and not int8.exact_in_float32(weight):
            return None
        xf = bb.emit_te(topi.cast, x, "float32", primfunc_name_hint="cast")
        as_float = relax.op.nn.conv2d(
            xf,
            relax.const(weight.astype("float32")),
            strides=attrs.strides,
            padding=attrs.padding,
            dilation=attrs.dilation,
            groups=attrs.groups,
            data_layout=attrs.data_layout,
            kernel_layout=attrs.kernel_layout,
            out_layout=attrs.out_layout,
            out_dtype="float32",
        )
        y = self._conv2d(bb, as_float, integer_winograd=by_winograd)
        # Winograd's sums are not integers: rounded to the nearest (a cast would truncate 2.9999 to 2).
        y = None if y is None else bb.emit(relax.op.round(bb.emit(y)) if by_winograd else y)
        return None if y is None else relax.op.astype(y, "int32")

    @staticmethod
    def _int8_block(channels: int, lanes: int) -> tuple[int, int]:
        """An integer kernel's output channels padded (zero weights) and its channel block: two vectors when
        the channels span more than two (the tile then loads each input group once for twice the outputs;
        1000 classes become 1024, not 63 blocks of one vector), else one."""
        if channels > 2 * lanes:
            padded = -(-channels // (2 * lanes)) * 2 * lanes
            return padded, 2 * lanes
        padded = -(-channels // lanes) * lanes
        return padded, lanes

    def _by_winograd(
        self, w: relax.Expr, x_shape: list, strides: list, dilation: list, groups: int, pads, integer_ok: bool = False
    ) -> bool:
        """Whether ``_winograd`` lowers a convolution: enabled (``CPU_WINOGRAD``), a constant weight (its
        transform runs at compile time) and a convolution ``winograd.applies`` to.

        Not a weight of whole numbers: that is an integer convolution computed in float32 because its
        sums of integers are exact there (``CONV_2D_INTEGER``'s and the quantized operations' float
        routes, ``op_converters/quant_dynamic.py``), and the transforms' fractions (1/6, 1/24) would round
        them."""
        if not self.winograd or not isinstance(w, _CONSTANT):
            return False
        if not winograd.applies(x_shape, static_shape(w.ty), strides, dilation, groups, pads):
            return False
        weight = w.value.numpy()
        return integer_ok or not np.array_equal(weight, np.round(weight))

    def _winograd(self, bb: relax.BlockBuilder, x: relax.Expr, w: relax.Expr, pads: tuple) -> relax.Expr:
        """An NHWC 3x3 convolution by F(4x4, 3x3) (``winograd``): the weight transformed (and packed in
        channel blocks) by a kernel that ``FoldConstant`` runs at compile time; the weight itself is kept
        too, for the direct sums of non-finite outputs."""
        k = int(w.ty.shape[0])
        kp = vector_padded(k, self.lanes)
        kb = channel_block(kp, self.lanes)
        budget = tile_budget(self.registers, max(kb // self.lanes, 1))
        name = compute.PACK + "winograd_weight"
        u = bb.emit_te(winograd.pack_weight, w, kp, kb, primfunc_name_hint=name)
        return bb.call_te(winograd.conv_nhwc, x, u, w, pads, budget, primfunc_name_hint=winograd.WINOGRAD)

    # matmul ---------------------------------------------------------------------------

    def _matmul(self, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr | None:
        a, b = call.args
        if a.ty.dtype in ("uint8", "int8") and b.ty.dtype == "int8" and _out_dtype(call.attrs, "") == "int32":
            return self._matmul_int8(bb, a, b)
        if _out_dtype(call.attrs, "float32") != "float32":
            return None
        if a.ty.dtype != "float32" or b.ty.dtype != "float32":
            return None
        b_shape, a_shape = static_shape(b.ty), _shape(a)
        if b_shape is None or len(b_shape) != 2:
            return self._batch_matmul(bb, a, b)
        if a_shape is None or len(a_shape) < 2:
            return None
        k, n = b_shape
        if not isinstance(a_shape[-1], int) or a_shape[-1] != k:
            return None
        npad = vector_padded(n, self.lanes)
        nb = channel_block(npad, self.lanes)
        name = compute.PACK + "dense_weight"
        bp = bb.emit_te(compute.pack_dense_weight, b, npad, nb, primfunc_name_hint=name)
        y = bb.call_te(compute.dense_packed, a, bp, npad, *self._tile(nb), primfunc_name_hint=compute.DENSE)
        if npad != n:
            y = relax.op.strided_slice(bb.emit(y), axes=[len(a_shape) - 1], begin=[0], end=[n])
        return y

    def _matmul_int8(self, bb: relax.BlockBuilder, a: relax.Expr, b: relax.Expr) -> relax.Expr | None:
        """An 8-bit product into int32 with a constant 2-D right operand (``int8``): the target's dot-product
        kernel for a uint8 left operand of static shape, else the float route, else TVM's own lowering."""
        if not isinstance(b, _CONSTANT) or len(b.ty.shape.values) != 2:
            return None
        weight = b.value.numpy()
        a_shape = _shape(a)
        dot = int8.dot_product(self.target, str(a.ty.dtype))
        known_k = a_shape is not None and len(a_shape) >= 2 and isinstance(a_shape[-1], int)
        if dot is not None and known_k:
            n = weight.shape[1]
            npad, nb = self._int8_block(n, dot.lanes)
            name = compute.PACK + "int8_dense_weight"
            bp = bb.emit_te(int8.pack_dense_weight, b, npad, nb, dot.group, dot.weight_dtype, primfunc_name_hint=name)
            # Batch axes kept (the schedule fuses static ones with the rows): a reshape to rows and back
            # kept the epilogue (the dequantization) out of the kernel, a kernel of its own per layer.
            # Rows known only at execution (a sequence) run whole tiles (``int8.dense``).
            tile = symbolic_tile(self.registers, max(nb // dot.lanes, 1))
            y = bb.call_te(int8.dense, a, bp, dot.input_dtype, dot.shift, tile, primfunc_name_hint=int8.INT8_DENSE)
            _fusable_epilogue(bb, y)
            if npad != n:
                y = relax.op.strided_slice(bb.emit(y), axes=[len(a_shape) - 1], begin=[0], end=[n])
            return _unshifted(bb, y, dot.shift, weight.astype("int64").sum(axis=0))
        if int8.exact_in_float32(weight.T):
            af = bb.emit_te(topi.cast, a, "float32", primfunc_name_hint="cast")
            y = self._matmul(bb, relax.op.matmul(af, relax.const(weight.astype("float32")), out_dtype="float32"))
            return None if y is None else relax.op.astype(bb.emit(y), "int32")
        return self._split_int8_product(bb, a, weight)

    def _split_int8_product(self, bb: relax.BlockBuilder, a: relax.Expr, weight: np.ndarray) -> relax.Expr | None:
        """``a @ weight`` of an 8-bit ``a`` as ``16 * (a >> 4) @ w + (a & 15) @ w``: two float32 products
        whose partial sums (at most 16 * sum|w| of a column) stay integers float32 holds, where one
        product of ``a`` (255 * sum|w|) would not; None where even these would not (TVM's lowering)."""
        if str(a.ty.dtype) not in ("uint8", "int8"):
            return None
        if 16 * np.abs(weight.astype("int64")).sum(axis=0).max(initial=0) >= 2**24:
            return None
        w = relax.const(weight.astype("float32"))
        wide = bb.emit_te(topi.cast, a, "int32", primfunc_name_hint="cast")

        def high(t: te.Tensor) -> te.Tensor:  # floor(a / 16): arithmetic for int8
            return topi.cast(topi.right_shift(t, tirx.const(4, "int32")), "float32")

        def low(t: te.Tensor) -> te.Tensor:
            return topi.cast(topi.bitwise_and(t, tirx.const(15, "int32")), "float32")

        parts = []
        for half in (high, low):
            y = self._matmul(bb, relax.op.matmul(bb.emit_te(half, wide), w, out_dtype="float32"))
            if y is None:
                return None
            parts.append(bb.emit(relax.op.astype(bb.emit(y), "int32")))
        return relax.op.add(relax.op.multiply(parts[0], relax.const(np.int32(16), "int32")), parts[1])

    def _batch_matmul(self, bb: relax.BlockBuilder, a: relax.Expr, b: relax.Expr) -> relax.Expr | None:
        """A product of two run-time tensors with the same batch dims (attention's Q K^T and P V): the
        right operand is packed at run time into ``[..., N / nb, K, nb]`` blocks (zero past N), and the
        product runs under the dense rule; rows and a symbolic N are padded to whole tiles and cropped."""
        a_shape, b_shape = _shape(a), _shape(b)
        if a_shape is None or b_shape is None or len(a_shape) != len(b_shape) or len(a_shape) < 3:
            return None
        analyzer = tvm.sym.Analyzer()
        same = [
            (x == y) if isinstance(x, int) and isinstance(y, int) else analyzer.can_prove_equal(x, y)
            for x, y in zip([*a_shape[:-2], a_shape[-1]], [*b_shape[:-2], b_shape[-2]])
        ]
        if not all(same):  # broadcast batch dims, or K not provably equal: TVM's lowering
            return None
        n = b_shape[-1]
        if isinstance(n, int):
            npad = vector_padded(n, self.lanes)
            nb = channel_block(npad, self.lanes)
        else:
            nb = 2 * self.lanes if self.registers >= 32 else self.lanes
            npad = (n + nb - 1) // nb * nb
        name = compute.PACK + "batch_matmul"
        # The sizes reach the compute through the closure, not as arguments of emit_te: the kernel then
        # takes a symbolic N as a parameter of its own (emit_te leaves an argument's vars out of it).
        bp = bb.emit_te(lambda t: compute.pack_batch_operand(t, b_shape, npad, nb), b, primfunc_name_hint=name)
        return bb.call_te(compute.batch_matmul_packed, a, bp, n, *self._tile(nb), primfunc_name_hint=compute.DENSE)
