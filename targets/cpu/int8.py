"""8-bit integer convolutions and products (``conv2d`` / ``matmul`` of uint8 or int8 by a constant int8
weight into int32, what ``op_converters/quant_integer.py`` emits for a quantized CONV_2D or FULLY_CONNECTED)
on the CPU's integer multiply-add instructions (``DotProduct``, chosen from the target's features):

- ``vpdpbusd`` (AVX-512 VNNI on 512-bit vectors, AVX-VNNI on 256): 4 uint8 x int8 products added to each
  32-bit lane, 4 multiply-adds per lane where float32's FMA does 1; an int8 input is shifted by +128 into
  uint8 and ``128 * sum(w[o])`` taken off in the epilogue;
- ``sdot`` (aarch64 ``+dotprod``): 4 int8 x int8 products a lane, 4 lanes; a uint8 input is shifted by 128
  in the kernel's input stage and ``128 * sum(w[o])`` added back in the epilogue;
- ``pmaddwd`` on 16-bit values (AVX-512BW, AVX2): 2 products a lane, exact (vpmaddubsw's uint8 x int8
  pairs would saturate at int16); no more products an instruction than FMA, so stride-1 3x3
  convolutions there run float32 Winograd instead (``lowering``).

The kernel is the float kernel's register tile (``tiled``) with the multiply-add over the channel axis
replaced by that instruction over groups of ``group`` input channels (a tensor intrinsic):

- the weight is packed once, at compile time: ``[OC / ob, KH, KW, C / group, ob, group]`` for a
  convolution, ``[N / nb, K / group, nb, group]`` for a product (``ob``, ``nb``: one or two vectors);
- the input's channels are padded to a multiple of the group (zeros), widened or shifted, in a stage of
  its own;
- each step of the tile broadcasts one group of a pixel's (row's) inputs and adds their products with a
  vector of weights to the accumulators, which stay in registers through the reduction; the epilogue
  (the zero-point offset, the scale, the activation, the requantization) is inlined into one stage on the
  tile.

The sums are exact (the instructions add in 32 bits).  A target without an instruction, a grouped
convolution or a symbolic size takes the float route: the stored integers converted to float32, whose
products and sums are exact while every partial sum stays below 2^24 (``exact_in_float32``), through the
float kernels; beyond that bound, TVM's own integer lowering.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import tvm
from tvm import s_tir, te, tirx
from tvm.script import tirx as T

from nnadapter_tvm.targets.cpu.compute import CROP, PACK, PAD, _zero_past, crop, out_size, padded, row_axis
from nnadapter_tvm.targets.cpu.generic import schedule_spatial
from nnadapter_tvm.targets.cpu.loops import loop_extent, parallel
from nnadapter_tvm.targets.cpu.simd import _has, row_tile, tile_budget, vector_registers
from nnadapter_tvm.targets.cpu.tiled import (
    epilogue_blocks,
    inline_epilogue,
    inline_side_inputs,
    tile_epilogue,
    tile_rows,
)

INT8_CONV = "nna_conv2d_nhwc_int8"
INT8_DENSE = "nna_dense_int8"


@dataclasses.dataclass(frozen=True)
class DotProduct:
    """A target's integer multiply-add over a group of input channels: each 32-bit lane of the result adds
    ``group`` products of ``input_dtype`` by ``weight_dtype`` elements, ``lanes`` lanes per instruction."""

    lanes: int
    group: int
    input_dtype: str
    weight_dtype: str
    intrinsic: str  # the registered tensor intrinsic
    # Subtracted from a uint8 input to make it the instruction's int8 (sdot multiplies signed bytes); the
    # lowering adds ``shift * sum(w[o])`` back.
    shift: int = 0


def _intrinsic(lanes: int, group: int, a_dtype: str, b_dtype: str, llvm: str, accumulates: bool):
    """desc and impl of ``c[i] += sum_k a[k] * b[i, k]`` (k < group, i < lanes) as one LLVM intrinsic: the
    group of ``a`` broadcast to every lane as one 32-bit word.  ``accumulates``: the intrinsic adds to c
    (vpdpbusd), else its result is added (pmaddwd)."""
    width = lanes * group

    @T.prim_func(s_tir=True)
    def desc(
        a: T.Buffer((group,), a_dtype, offset_factor=1),
        b: T.Buffer((lanes, group), b_dtype, offset_factor=1),
        c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:group], b[0:lanes, 0:group])
            T.writes(c[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, group):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(
        a: T.Buffer((group,), a_dtype, offset_factor=1),
        b: T.Buffer((lanes, group), b_dtype, offset_factor=1),
        c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:group], b[0:lanes, 0:group])
            T.writes(c[0:lanes])
            word = T.reinterpret(a.vload([0], f"{a_dtype}x{group}"), dtype="int32")
            a_all = T.reinterpret(T.broadcast(word, lanes), dtype=f"{a_dtype}x{width}")
            b_all = b.vload([0, 0], dtype=f"{b_dtype}x{width}")
            acc = c.vload([0], dtype=f"int32x{lanes}")
            if accumulates:
                c[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id(llvm), acc, a_all, b_all, dtype=f"int32x{lanes}"
                )
            else:
                c[T.ramp(T.int32(0), 1, lanes)] = acc + T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id(llvm), a_all, b_all, dtype=f"int32x{lanes}"
                )

    return desc, impl


# vpdpbusd (AVX-512 VNNI, AVX-VNNI): 4 uint8 x int8 products a lane.  pmaddwd (AVX2, AVX-512BW): 2 int16 x
# int16 products a lane, exact for 8-bit values widened to 16 bits (vpmaddubsw's uint8 x int8 pairs would
# saturate at int16: 255 x 127 x 2 > 32767).
_KINDS = {
    "vnni512": (DotProduct(16, 4, "uint8", "int8", "nna_dot_u8i8_16x4_vnni"), "llvm.x86.avx512.vpdpbusd.512", True),
    "vnni256": (DotProduct(8, 4, "uint8", "int8", "nna_dot_u8i8_8x4_vnni"), "llvm.x86.avx512.vpdpbusd.256", True),
    "pmaddwd512": (
        DotProduct(16, 2, "int16", "int16", "nna_dot_i16_16x2_pmaddwd"),
        "llvm.x86.avx512.pmaddw.d.512",
        False,
    ),
    "pmaddwd256": (DotProduct(8, 2, "int16", "int16", "nna_dot_i16_8x2_pmaddwd"), "llvm.x86.avx2.pmadd.wd", False),
    # sdot (ARMv8.2 dot product): 4 int8 x int8 products a lane, 4 lanes; a uint8 input shifted by 128.
    "sdot": (DotProduct(4, 4, "int8", "int8", "nna_dot_i8i8_4x4_sdot"), "llvm.aarch64.neon.sdot.v4i32.v16i8", True),
}
_REGISTERED: set[str] = set()
_REGISTERING = threading.Lock()


def _tensor_intrinsic(dot: DotProduct) -> str:
    """``dot``'s tensor intrinsic, registered on first use: parsing the ten TVMScript functions took 1.2 s
    of every process's first compile (TVMScript's parser walks the caller's stack, and every frame's
    module lookup scans ``sys.modules``), float models included."""
    with _REGISTERING:
        if dot.intrinsic not in _REGISTERED:
            llvm, accumulates = next((k[1], k[2]) for k in _KINDS.values() if k[0].intrinsic == dot.intrinsic)
            desc_impl = _intrinsic(dot.lanes, dot.group, dot.input_dtype, dot.weight_dtype, llvm, accumulates)
            s_tir.TensorIntrin.register(dot.intrinsic, *desc_impl)
            _REGISTERED.add(dot.intrinsic)
    return dot.intrinsic


def dot_product(target: tvm.target.Target, input_dtype: str = "uint8") -> DotProduct | None:
    """The target's integer multiply-add for 8-bit inputs of ``input_dtype`` by int8 weights, or None:
    vpdpbusd on 512-bit vectors (AVX-512 VNNI) or 256 (AVX-VNNI), whose first operand is unsigned (an int8
    input shifted by +128 into uint8), else pmaddwd on 16-bit values (AVX-512BW, AVX2)."""
    vnni = None
    if _has("avx512vnni", target) and _has("avx512bw", target):
        vnni = _KINDS["vnni512"][0]
    elif _has("avxvnni", target) or (_has("avx512vnni", target) and _has("avx512vl", target)):
        vnni = _KINDS["vnni256"][0]
    if vnni is not None and input_dtype in ("uint8", "int8"):
        # onnxruntime's quantize_static writes int8 activations by default (S8S8): x + 128 is the uint8 the
        # instruction multiplies, and 128 * sum(w[o]) comes off in the epilogue.
        return vnni if input_dtype == "uint8" else dataclasses.replace(vnni, shift=-128)
    if _has("dotprod", target):
        sdot = _KINDS["sdot"][0]
        return dataclasses.replace(sdot, shift=128) if input_dtype == "uint8" else sdot
    if _has("avx512bw", target):
        return _KINDS["pmaddwd512"][0]
    if _has("avx2", target):
        return _KINDS["pmaddwd256"][0]
    return None


def exact_in_float32(w: np.ndarray) -> bool:
    """Whether every partial sum of a convolution of 8-bit stored inputs (|x| <= 255) by the integer weight
    ``w`` [OC, ...] is an integer float32 holds exactly (below 2^24), whatever the order of the additions."""
    bound = 255 * np.abs(w.astype("int64")).reshape(w.shape[0], -1).sum(axis=1).max(initial=0)
    return bool(bound < 2**24)


def pack_weight(w: te.Tensor, ocp: int, ob: int, group: int, dtype: str) -> te.Tensor:
    """``[OC, C, KH, KW]`` int8 -> ``[OCP / ob, KH, KW, CP / group, ob, group]`` of ``dtype``, zero past OC
    and past C (``CP``: C rounded up to a multiple of ``group``)."""
    oc, c, kh, kw = (int(d) for d in w.shape)
    cp = -(-c // group) * group

    def body(o, a, b, g, v, i):
        channel = g * group + i
        value = _zero_past(w, (o * ob + v, tirx.min(channel, c - 1), a, b), oc)
        return tirx.Select(channel < c, value, tirx.const(0, "int8")).astype(dtype)

    return te.compute((ocp // ob, kh, kw, cp // group, ob, group), body, name=PACK + "int8_conv_weight")


def _widened(value, dtype: str, shift: int):
    """A stored input element as the kernel reads it: ``dtype``, minus ``shift`` (a uint8 made int8)."""
    if shift:
        return (value.astype("int16") - shift).astype(dtype)
    return value.astype(dtype)


def conv_nhwc(x: te.Tensor, wp: te.Tensor, strides, pads, dilation, input_dtype: str, shift: int = 0) -> te.Tensor:
    """out[n, y, x, o] = sum over (kh, kw, c) of int32(pad(x)[n, y * sh + kh * dh, x * sw + kw * dw, c]) *
    int32(wp[o // ob, kh, kw, c // group, o % ob, c % group]); the input padded with zeros (spatially, and its
    channels to a multiple of the group) and widened to ``input_dtype`` by a stage of its own."""
    n, h, w, c = (int(d) for d in x.shape)
    ocb, kh, kw, groups, ob, group = (int(d) for d in wp.shape)
    (sh, sw), (dh, dw) = strides, dilation
    cp = groups * group
    pad_t, pad_l, pad_b, pad_r = pads
    if any(pads) or cp != c or x.dtype != input_dtype or shift:

        def padded(b, y, xx, ch):
            inside = tirx.all(y >= pad_t, y < h + pad_t, xx >= pad_l, xx < w + pad_l, ch < c)
            at = (
                b,
                tirx.min(tirx.max(y - pad_t, 0), h - 1),
                tirx.min(tirx.max(xx - pad_l, 0), w - 1),
                tirx.min(ch, c - 1),
            )
            return tirx.Select(inside, _widened(x[at], input_dtype, shift), tirx.const(-shift, input_dtype))

        x = te.compute((n, h + pad_t + pad_b, w + pad_l + pad_r, cp), padded, name=PAD)
    oh = out_size(h, pad_t, pad_b, kh, sh, dh)
    ow = out_size(w, pad_l, pad_r, kw, sw, dw)
    rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
    rg, ri = te.reduce_axis((0, groups), "rg"), te.reduce_axis((0, group), "ri")

    def body(b, y, xx, o):
        pixel = x[b, y * sh + rh * dh, xx * sw + rw * dw, rg * group + ri].astype("int32")
        return te.sum(pixel * wp[o // ob, rh, rw, rg, o % ob, ri].astype("int32"), axis=[rh, rw, rg, ri])

    return te.compute((n, oh, ow, ocb * ob), body, name=INT8_CONV)


def pack_dense_weight(w: te.Tensor, npad: int, nb: int, group: int, dtype: str) -> te.Tensor:
    """``[K, N]`` int8 -> ``[NPAD / nb, KP / group, nb, group]`` of ``dtype``, zero past N and past K (``KP``:
    K rounded up to a multiple of ``group``)."""
    k, n = (int(d) for d in w.shape)
    kp = -(-k // group) * group

    def body(o, g, v, i):
        row, col = g * group + i, o * nb + v
        inside = tirx.all(row < k, col < n)
        value = tirx.Select(inside, w[tirx.min(row, k - 1), tirx.min(col, n - 1)], tirx.const(0, "int8"))
        return value.astype(dtype)

    return te.compute((npad // nb, kp // group, nb, group), body, name=PACK + "int8_dense_weight")


def dense(a: te.Tensor, bp: te.Tensor, input_dtype: str, shift: int = 0, tile: int = 1) -> te.Tensor:
    """out[..., m, j] = sum over k of int32(a[..., m, k]) * int32(bp[j // nb, k // group, j % nb, k % group]);
    ``a``'s K padded with zeros to a multiple of the group and widened to ``input_dtype`` where needed.
    Rows (the last axis before K) known only at execution (a sequence) run whole tiles of ``tile`` rows
    past the end and a crop keeps the valid ones (``compute.padded``: a guarded tile stays in memory); the
    rows past the end are copies of the last one, made in the padding stage (a clamped row index in the
    product's loop made it 2x slower).  Batch axes stay axes (a reshape to rows would keep the epilogue
    out of the kernel)."""
    *batch, rows, k = a.shape
    k = int(k)
    nblocks, groups, nb, group = (int(d) for d in bp.shape)
    padded_rows = padded(rows, tile)
    if groups * group != k or a.dtype != input_dtype or shift or padded_rows is not rows:

        def widened(*idx):
            *lead, m, c = idx
            row = m if padded_rows is rows else tirx.min(m, rows - 1)
            value = _widened(a[(*lead, row, tirx.min(c, k - 1))], input_dtype, shift)
            return tirx.Select(c < k, value, tirx.const(-shift, input_dtype))

        a = te.compute((*batch, padded_rows, groups * group), widened, name=PAD)
    rg, ri = te.reduce_axis((0, groups), "rg"), te.reduce_axis((0, group), "ri")

    def body(*idx):
        *lead, j = idx
        value = a[(*lead, rg * group + ri)].astype("int32")
        return te.sum(value * bp[j // nb, rg, j % nb, ri].astype("int32"), axis=[rg, ri])

    full = te.compute((*batch, padded_rows, nblocks * nb), body, name=INT8_DENSE)
    return crop(full, [*batch, rows, nblocks * nb], CROP)


def _packed_dot(sch: s_tir.Schedule, block, target: tvm.target.Target) -> DotProduct:
    """The instruction a kernel was computed for: its packed weight's element type says which."""
    weight_dtype = str(sch.get(block).reads[-1].source.dtype)
    for dot in (dot_product(target, "uint8"), dot_product(target, "int8")):
        if dot is not None and dot.weight_dtype == weight_dtype:
            return dot
    raise ValueError(f"the target has no integer multiply-add for {weight_dtype} weights")


def schedule_dense(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    """Rows x a block of columns per register tile, the channel groups reduced outside it, the (lanes x
    group) step the tensor intrinsic; column blocks and row tiles in parallel."""
    dot = _packed_dot(sch, block, target)
    regs = vector_registers(target)
    inline_side_inputs(sch, block)
    epilogue = inline_epilogue(sch, epilogue_blocks(sch, block))
    for pad in [b for b in sch.get_producers(block) if sch.get(b).name_hint.startswith(PAD)]:
        schedule_spatial(sch, pad, dot.lanes)
    *rows, j, rg, ri = sch.get_loops(block)
    # The tile runs along one row axis (the last that is not statically 1, padded to whole tiles by the
    # compute where symbolic), the batch axes outside it: fused rows are indexed by divisions, which
    # the tensor intrinsic's blockize rejects (and a symbolic extent would divide every index).
    axis = row_axis([loop_extent(sch, r) for r in rows])
    outer, m = rows[:axis] + rows[axis + 1 :], rows[axis]
    nb = int(sch.get(block).reads[-1].source.shape[-2])
    jo, ji = sch.split(j, [None, nb])
    mt = tile_rows(sch, m, regs, nb // dot.lanes, 1)
    mo, mi = sch.split(m, [None, mt])
    jv, jl = sch.split(ji, [None, dot.lanes])
    sch.reorder(jo, *outer, mo, rg, mi, jv, jl, ri)
    tile_epilogue(sch, block, epilogue, mo, dot.lanes)
    parallel(sch, [jo, *outer, mo], min_elements=1, work=None)
    init = sch.decompose_reduction(block, rg)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(jl, _tensor_intrinsic(dot))
    sch.unroll(jv)
    sch.unroll(mi)


def schedule_conv(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    """The register tile of ``tiled.schedule_conv`` with the integer multiply-add as its step: output
    columns x a block of output channels accumulate while the kernel rows, columns and channel groups are
    reduced outside; the tile's (lanes x group) inner step is the tensor intrinsic."""
    dot = _packed_dot(sch, block, target)
    regs = vector_registers(target)
    inline_side_inputs(sch, block)
    epilogue = inline_epilogue(sch, epilogue_blocks(sch, block))
    for pad in [b for b in sch.get_producers(block) if sch.get(b).name_hint.startswith(PAD)]:
        schedule_spatial(sch, pad, dot.lanes)
    b, y, x, o, rh, rw, rg, ri = sch.get_loops(block)
    ob = int(sch.get(block).reads[-1].source.shape[-2])
    vectors = ob // dot.lanes
    oo, oi = sch.split(o, [None, ob])
    wt = row_tile(loop_extent(sch, x), tile_budget(regs, vectors), 2)
    xo, xi = sch.split(x, [None, wt])
    ov, ol = sch.split(oi, [None, dot.lanes])
    sch.reorder(b, oo, y, xo, rh, rw, rg, xi, ov, ol, ri)
    tile_epilogue(sch, block, epilogue, xo, dot.lanes)
    parallel(sch, [b, oo, y], min_elements=1, work=None)
    init = sch.decompose_reduction(block, rh)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(ol, _tensor_intrinsic(dot))
    sch.unroll(ov)
    sch.unroll(xi)
