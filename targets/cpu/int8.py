"""8-bit integer convolutions (``conv2d`` of uint8 by int8 into int32, what ``op_converters/quant_integer.py``
emits for a quantized CONV_2D) on the CPU's 8-bit dot-product instruction.

``vpdpbusd`` (AVX-512 VNNI, and AVX-VNNI on 256-bit vectors) multiplies 4 unsigned bytes by 4 signed bytes
and adds the 4 products to each 32-bit lane: 4 multiply-adds per lane where float32's FMA does 1.  The
kernel is the float convolution's register tile (``tiled.schedule_conv``) with the multiply-add over the
channel axis replaced by that instruction over groups of 4 input channels:

- the weight is packed once, at compile time, into ``[OC / ob, KH, KW, C / 4, ob, 4]`` (``ob`` output
  channels, a multiple of the lanes; 4 input channels innermost: one 64-byte vector per 16 lanes);
- the input's channels are padded to a multiple of 4 (zeros) when they are not one already;
- each step of the tile broadcasts 4 input bytes of one pixel and adds their products with a vector of
  weights to the pixel's accumulators, which stay in registers through the kernel rows, columns and
  channel groups; the epilogue (the zero-point offset, the scale, the activation, the requantization)
  runs on the tile.

The sums are exact (no intermediate saturation: ``vpdpbusd`` adds the four products in 32 bits).  A target
without the instruction, a signed input, a grouped convolution or a symbolic size takes the float route:
the stored integers converted to float32, whose products and sums are exact while every partial sum stays
below 2^24 (``exact_in_float32``), through the float convolution's kernels; beyond that bound, TVM's own
integer lowering.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te, tirx
from tvm.script import tirx as T

from nnadapter_tvm.targets.cpu.compute import PACK, PAD, _zero_past, out_size
from nnadapter_tvm.targets.cpu.generic import schedule_spatial
from nnadapter_tvm.targets.cpu.loops import child_blocks, loop_extent, parallel
from nnadapter_tvm.targets.cpu.simd import _has, row_tile, tile_budget, vector_registers
from nnadapter_tvm.targets.cpu.tiled import epilogue_blocks, tile_epilogue

INT8_CONV = "nna_conv2d_nhwc_int8"
INT8_DENSE = "nna_dense_int8"
#: Input channels one dot-product instruction sums per lane.
GROUP = 4


def _dot_desc(lanes: int):
    @T.prim_func(s_tir=True)
    def desc(
        a: T.Buffer((4,), "uint8", offset_factor=1),
        b: T.Buffer((lanes, 4), "int8", offset_factor=1),
        c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:4], b[0:lanes, 0:4])
            T.writes(c[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    return desc


def _dot_impl(lanes: int, intrinsic: str):
    @T.prim_func(s_tir=True)
    def impl(
        a: T.Buffer((4,), "uint8", offset_factor=1),
        b: T.Buffer((lanes, 4), "int8", offset_factor=1),
        c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:4], b[0:lanes, 0:4])
            T.writes(c[0:lanes])
            a_i32 = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(intrinsic),
                c.vload([0], dtype=f"int32x{lanes}"),
                T.reinterpret(T.broadcast(a_i32, lanes), dtype=f"uint8x{4 * lanes}"),
                b.vload([0, 0], dtype=f"int8x{4 * lanes}"),
                dtype=f"int32x{lanes}",
            )

    return impl


#: (lanes, tensor intrinsic name, LLVM intrinsic) of vpdpbusd on 512- and 256-bit vectors.
_VNNI = {
    16: ("nna_dot_u8i8_16x4_vnni", "llvm.x86.avx512.vpdpbusd.512"),
    8: ("nna_dot_u8i8_8x4_vnni", "llvm.x86.avx512.vpdpbusd.256"),
}
for _lanes, (_name, _llvm) in _VNNI.items():
    s_tir.TensorIntrin.register(_name, _dot_desc(_lanes), _dot_impl(_lanes, _llvm))


def dot_product(target: tvm.target.Target) -> tuple[int, str] | None:
    """(lanes, tensor intrinsic) of the target's uint8 x int8 dot product, or None: AVX-512 VNNI on 512-bit
    vectors, AVX-VNNI (or AVX-512 VNNI with 256-bit vectors only) on 256."""
    if _has("avx512vnni", target) and _has("avx512bw", target):
        return 16, _VNNI[16][0]
    if _has("avxvnni", target) or (_has("avx512vnni", target) and _has("avx512vl", target)):
        return 8, _VNNI[8][0]
    return None


def exact_in_float32(w: np.ndarray) -> bool:
    """Whether every partial sum of a convolution of 8-bit stored inputs (|x| <= 255) by the integer weight
    ``w`` [OC, ...] is an integer float32 holds exactly (below 2^24), whatever the order of the additions."""
    bound = 255 * np.abs(w.astype("int64")).reshape(w.shape[0], -1).sum(axis=1).max(initial=0)
    return bool(bound < 2**24)


def pack_weight(w: te.Tensor, ocp: int, ob: int) -> te.Tensor:
    """``[OC, C, KH, KW]`` int8 -> ``[OCP / ob, KH, KW, CP / 4, ob, 4]``, zero past OC and past C (``CP``: C
    rounded up to a multiple of 4)."""
    oc, c, kh, kw = (int(d) for d in w.shape)
    cp = -(-c // GROUP) * GROUP

    def body(o, a, b, g, v, i):
        channel = g * GROUP + i
        value = _zero_past(w, (o * ob + v, tirx.min(channel, c - 1), a, b), oc)
        return tirx.Select(channel < c, value, tirx.const(0, "int8"))

    return te.compute((ocp // ob, kh, kw, cp // GROUP, ob, GROUP), body, name=PACK + "int8_conv_weight")


def conv_nhwc(x: te.Tensor, wp: te.Tensor, strides, pads, dilation) -> te.Tensor:
    """out[n, y, x, o] = sum over (kh, kw, c) of int32(pad(x)[n, y * sh + kh * dh, x * sw + kw * dw, c]) *
    int32(wp[o // ob, kh, kw, c // 4, o % ob, c % 4]); the input padded with zeros (spatially, and its
    channels to a multiple of 4)."""
    n, h, w, c = (int(d) for d in x.shape)
    ocb, kh, kw, groups, ob, _ = (int(d) for d in wp.shape)
    (sh, sw), (dh, dw) = strides, dilation
    cp = groups * GROUP
    pad_t, pad_l, pad_b, pad_r = pads
    if any(pads) or cp != c:

        def padded(b, y, xx, ch):
            inside = tirx.all(y >= pad_t, y < h + pad_t, xx >= pad_l, xx < w + pad_l, ch < c)
            at = (
                b,
                tirx.min(tirx.max(y - pad_t, 0), h - 1),
                tirx.min(tirx.max(xx - pad_l, 0), w - 1),
                tirx.min(ch, c - 1),
            )
            return tirx.Select(inside, x[at], tirx.const(0, x.dtype))

        x = te.compute((n, h + pad_t + pad_b, w + pad_l + pad_r, cp), padded, name=PAD)
    oh = out_size(h, pad_t, pad_b, kh, sh, dh)
    ow = out_size(w, pad_l, pad_r, kw, sw, dw)
    rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
    rg, ri = te.reduce_axis((0, groups), "rg"), te.reduce_axis((0, GROUP), "ri")

    def body(b, y, xx, o):
        pixel = x[b, y * sh + rh * dh, xx * sw + rw * dw, rg * GROUP + ri].astype("int32")
        return te.sum(pixel * wp[o // ob, rh, rw, rg, o % ob, ri].astype("int32"), axis=[rh, rw, rg, ri])

    return te.compute((n, oh, ow, ocb * ob), body, name=INT8_CONV)


def pack_dense_weight(w: te.Tensor, npad: int, nb: int) -> te.Tensor:
    """``[K, N]`` int8 -> ``[NPAD / nb, KP / 4, nb, 4]``, zero past N and past K (``KP``: K rounded up to a
    multiple of 4)."""
    k, n = (int(d) for d in w.shape)
    kp = -(-k // GROUP) * GROUP

    def body(o, g, v, i):
        row, col = g * GROUP + i, o * nb + v
        inside = tirx.all(row < k, col < n)
        return tirx.Select(inside, w[tirx.min(row, k - 1), tirx.min(col, n - 1)], tirx.const(0, "int8"))

    return te.compute((npad // nb, kp // GROUP, nb, GROUP), body, name=PACK + "int8_dense_weight")


def dense(a: te.Tensor, bp: te.Tensor) -> te.Tensor:
    """out[..., m, j] = sum over k of int32(a[..., m, k]) * int32(bp[j // nb, k // 4, j % nb, k % 4]); ``a``'s
    K padded with zeros to a multiple of 4 when it is not one."""
    *batch, k = (int(d) for d in a.shape)
    nblocks, groups, nb, _ = (int(d) for d in bp.shape)
    if groups * GROUP != k:

        def padded(*idx):
            *lead, c = idx
            return tirx.Select(c < k, a[(*lead, tirx.min(c, k - 1))], tirx.const(0, a.dtype))

        a = te.compute((*batch, groups * GROUP), padded, name=PAD)
    rg, ri = te.reduce_axis((0, groups), "rg"), te.reduce_axis((0, GROUP), "ri")

    def body(*idx):
        *lead, j = idx
        value = a[(*lead, rg * GROUP + ri)].astype("int32")
        return te.sum(value * bp[j // nb, rg, j % nb, ri].astype("int32"), axis=[rg, ri])

    return te.compute((*batch, nblocks * nb), body, name=INT8_DENSE)


def schedule_dense(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    """Rows x a block of columns per register tile, the channel groups reduced outside it, the (lanes x 4)
    step the tensor intrinsic; column blocks and row tiles in parallel."""
    lanes, intrinsic = _dot_product_or_raise(target)
    regs = vector_registers(target)
    _inline_side_inputs(sch, block)
    epilogue = _inline_epilogue(sch, epilogue_blocks(sch, block))
    for pad in [b for b in sch.get_producers(block) if sch.get(b).name_hint.startswith(PAD)]:
        schedule_spatial(sch, pad, lanes)
    *rows, j, rg, ri = sch.get_loops(block)
    m = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    nb = int(sch.get(block).reads[-1].source.shape[-2])
    jo, ji = sch.split(j, [None, nb])
    mt = row_tile(loop_extent(sch, m), tile_budget(regs, nb // lanes), 1)
    mo, mi = sch.split(m, [None, mt])
    jv, jl = sch.split(ji, [None, lanes])
    sch.reorder(jo, mo, rg, mi, jv, jl, ri)
    tile_epilogue(sch, block, epilogue, mo, lanes)
    parallel(sch, [jo, mo], min_elements=1, work=None)
    init = sch.decompose_reduction(block, rg)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(jl, intrinsic)
    sch.unroll(jv)
    sch.unroll(mi)


def _dot_product_or_raise(target: tvm.target.Target) -> tuple[int, str]:
    found = dot_product(target)
    if found is None:
        raise ValueError("the target has no 8-bit dot product")
    return found


def schedule_conv(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    """The register tile of ``tiled.schedule_conv`` with the dot-product instruction as its step: output
    columns x a block of output channels accumulate while the kernel rows, columns and channel groups are
    reduced outside; the tile's (lanes x 4) inner step is the tensor intrinsic."""
    lanes, intrinsic = _dot_product_or_raise(target)
    regs = vector_registers(target)
    _inline_side_inputs(sch, block)
    epilogue = _inline_epilogue(sch, epilogue_blocks(sch, block))
    for pad in [b for b in sch.get_producers(block) if sch.get(b).name_hint.startswith(PAD)]:
        schedule_spatial(sch, pad, lanes)
    b, y, x, o, rh, rw, rg, ri = sch.get_loops(block)
    ob = int(sch.get(block).reads[-1].source.shape[-2])
    vectors = ob // lanes
    oo, oi = sch.split(o, [None, ob])
    wt = row_tile(loop_extent(sch, x), tile_budget(regs, vectors), 2)
    xo, xi = sch.split(x, [None, wt])
    ov, ol = sch.split(oi, [None, lanes])
    sch.reorder(b, oo, y, xo, rh, rw, rg, xi, ov, ol, ri)
    tile_epilogue(sch, block, epilogue, xo, lanes)
    parallel(sch, [b, oo, y], min_elements=1, work=None)
    init = sch.decompose_reduction(block, rh)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(ol, intrinsic)
    sch.unroll(ov)
    sch.unroll(xi)


def _inline_side_inputs(sch: s_tir.Schedule, main) -> None:
    """Inline the element-wise blocks before ``main`` that it does not read: a residual input dequantized
    in the same kernel (a QDQ ResNet's skip connection, cast and scaled), which the epilogue's addition
    reads.  Computed whole at the root, it kept the epilogue off the register tile (``reverse_compute_at``
    needs every producer under the tile's loop)."""
    feeding = {sch.get(b).name_hint for b in sch.get_producers(main)}
    root = child_blocks(sch)
    names = [sch.get(b).name_hint for b in root]
    for b in reversed(root[: names.index(sch.get(main).name_hint)]):
        if sch.get(b).name_hint not in feeding:
            sch.compute_inline(b)


def _inline_epilogue(sch: s_tir.Schedule, epilogue: list) -> list:
    """The epilogue's stages inlined into its last one, where TVM allows: a requantization, its
    dequantization for the next operation (a residual addition) and the next requantization are some
    twenty element-wise stages; each a buffer of the whole tile, they cost more than the products of a
    1x1 convolution over 64 channels.  Casts and roundings stay as written (inlining changes no
    arithmetic: TVM folds no float operation across them)."""
    kept = []
    for stage in epilogue[:-1]:
        try:
            sch.compute_inline(stage)
        except Exception:  # a stage TVM cannot inline stays one of its own
            kept.append(stage)
    return [*kept, epilogue[-1]] if epilogue else epilogue
