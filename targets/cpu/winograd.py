"""Winograd F(4x4, 3x3) convolutions (NHWC, stride 1, no dilation, one group): the compute and its schedule.

A 3x3 convolution computes each 4x4 block of output pixels (a *tile*) from the 6x6 window of input that
covers it, as ``Y = A^T [(G g G^T) . (B^T d B)] A`` per input channel, summed over the channels (Lavin and
Gray, "Fast Algorithms for Convolutional Neural Networks", 2016, with their interpolation points 0, +-1,
+-2).  The sum over channels becomes 36 independent products, one per position ``e`` of the 6x6
transformed tile: ``M[tile, e, k] = sum_c V[tile, e, c] * U[e, c, k]``, 36 x C x K multiply-adds per tile
where the direct convolution needs 16 x 9 x C x K: 4x fewer.

Stages, by block name:

- ``PACK + "winograd_weight"``: ``U = G g G^T``, ``[K / kb, 6, 6, C, kb]`` (zero past K), computed once at
  compile time by ``FoldConstant`` (the weight must be a constant: see ``lowering``);
- ``INPUT`` (with ``INPUT + "_rows"``): ``V = B^T d B`` for every tile, ``[N, TH, TW, 6, 6, C]``, from the
  input padded so that whole tiles cover the output (a stage of its own, 2.25x the input);
- ``PRODUCT``: the 36 products, computed per block of tiles and channel block into a local buffer;
- ``WINOGRAD`` (the main block) with ``OUTPUT_ROWS``: ``Y = A^T M A`` over whole tiles and channel
  blocks, ``[N, 4 TH, 4 TW, KP]``;
- ``LANE_MAX``, ``TILE_MAX``, ``DIRECT``, ``FINITE``: the output cropped to ``[N, OH, OW, K]``, each
  non-finite output recomputed by the direct sum (``_finite``: otherwise a NaN or an infinity in the
  input would spread over whole tiles), so that the fused epilogue (bias, activation, residual) runs on
  each tile, on registers.

The transforms' constant matrices are unrolled into sums of the nonzero terms (a ``Select`` per row that
the schedule's unrolling resolves), so no multiplication by zero is left and no reduction block with an
initial value is needed.  The error is larger than a direct convolution's (the transform of the weight
divides by 6 and 24, and the input transform multiplies by up to 5 and 25): 5e-6 to 2e-5 of the outputs'
scale in float32 for 16 to 512 input channels, against about 1e-7.  A Winograd kernel takes about 0.3 s
to compile (0.04 s for the direct one): ``applies`` leaves small layers to the direct kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx, topi

from nnadapter_tvm.targets.cpu.compute import PACK, PAD, out_size
from nnadapter_tvm.targets.cpu.generic import schedule_spatial
from nnadapter_tvm.targets.cpu.loops import loop_extent, parallel
from nnadapter_tvm.targets.cpu.simd import vector_lanes
from nnadapter_tvm.targets.cpu.tiled import epilogue_blocks, tile_epilogue
from nnadapter_tvm.targets.cpu.vmath import INF_BITS, magnitude_bits

WINOGRAD = "nna_winograd_conv2d_nhwc"
INPUT = "nna_winograd_input"
PRODUCT = "nna_winograd_product"
OUTPUT_ROWS = "nna_winograd_output_rows"
DIRECT = "nna_winograd_direct"
FINITE = "nna_winograd_finite"
LANE_MAX = "nna_winograd_lane_max"
TILE_MAX = "nna_winograd_tile_max"

#: The annotation ``schedule_winograd`` puts on the direct sums' outermost loop (see ``guard_direct``).
GUARD_ATTR = "nna_winograd_guard"


#: Output pixels per tile side (m) and the transformed tile's side (alpha = m + 3 - 1).
M_TILE, ALPHA = 4, 6

# Lavin and Gray's F(4x4, 3x3): Y = A^T [(G g G^T) . (B^T d B)] A.
_BT = np.array(
    [
        [4, 0, -5, 0, 1, 0],
        [0, -4, -4, 1, 1, 0],
        [0, 4, -4, -1, 1, 0],
        [0, -2, -1, 2, 1, 0],
        [0, 2, -1, -2, 1, 0],
        [0, 4, 0, -5, 0, 1],
    ],
    dtype=np.float64,
)
_G = np.array(
    [
        [1 / 4, 0, 0],
        [-1 / 6, -1 / 6, -1 / 6],
        [-1 / 6, 1 / 6, -1 / 6],
        [1 / 24, 1 / 12, 1 / 6],
        [1 / 24, -1 / 12, 1 / 6],
        [0, 0, 1],
    ],
    dtype=np.float64,
)
_AT = np.array(
    [
        [1, 1, 1, 1, 1, 0],
        [0, 1, -1, 2, -2, 0],
        [0, 1, 1, 4, 4, 0],
        [0, 1, -1, 8, -8, 1],
    ],
    dtype=np.float64,
)


def _combination(row: np.ndarray, term, dtype: str):
    """``sum_j row[j] * term(j)`` over the nonzero ``row[j]`` (a 1 or -1 costs no multiplication)."""
    total = None
    for j, coef in enumerate(row):
        if coef == 0:
            continue
        value = term(j)
        if coef == -1:
            value = -value
        elif coef != 1:
            value = value * tirx.const(float(coef), dtype)
        total = value if total is None else total + value
    return total if total is not None else tirx.const(0, dtype)


def _by_row(index, matrix: np.ndarray, term, dtype: str):
    """``sum_j matrix[index, j] * term(j)`` for a loop index ``index``: one combination per row, chosen by
    a ``Select`` that unrolling the index's loop resolves to the one combination."""
    rows = [_combination(matrix[i], term, dtype) for i in range(matrix.shape[0])]
    value = rows[-1]
    for i in range(len(rows) - 2, -1, -1):
        value = tirx.Select(index == i, rows[i], value)
    return value


#: The product block's annotation that carries its block of tiles (rows, columns) to the schedule.
BLOCK_ATTR = "nna_winograd_block"


def output_size(h: int, w: int, pads) -> tuple[int, int]:
    """A stride-1 3x3 convolution's output height and width (``pads``: top, left, bottom, right)."""
    return out_size(h, pads[0], pads[2], 3, 1, 1), out_size(w, pads[1], pads[3], 3, 1, 1)


def tiles(size):
    """Tiles along an output side of ``size`` pixels (an int, or an expression of symbolic sizes)."""
    return (size + M_TILE - 1) // M_TILE


#: At least this many tiles per image where the transformed weight is large (see ``applies``).
MIN_TILES = 8

#: Below this many multiply-adds x 2 (the direct convolution's count) a layer keeps the direct kernel: a
#: Winograd kernel takes 0.3 s to compile against 0.04 s, and such a layer saves under ~0.05 ms an
#: inference (densenet121's forty 3x3 layers at 14x14 and 7x7 added 10 s to its compile for 0.7 ms).
MIN_FLOPS = 40e6

#: The height and width ``applies`` assumes of a side unknown at compile time: a mid-network feature map
#: (ResNet's 28x28 stage). Such a layer gets Winograd where its channels would at that size; fed a smaller
#: map it computes the same values, at the cost of tiles that are mostly padding.
TYPICAL_SIDE = 28


def applies(x_shape: list, w_shape: list, strides, dilation, groups: int, pads=(1, 1, 1, 1)) -> bool:
    """Whether a convolution of NHWC ``x_shape`` by OIHW ``w_shape`` runs as F(4x4, 3x3): 3x3, stride 1,
    no dilation, one group, static channels, enough work to pay for its compile (``MIN_FLOPS``), and
    enough tiles to pay for reading the transformed weight (36 / 9 = 4x the weight): on 7x7 outputs (4
    tiles) with 512 x 512 channels the direct kernel is faster (it reads a quarter of the bytes for the
    same 4x16 pixels), with 256 x 256 slower.

    A batch, height or width unknown at compile time counts as 1, ``TYPICAL_SIDE`` and ``TYPICAL_SIDE``
    for the work, and the tiles cannot be counted: only channels of at most 256 x 256 qualify (wider
    layers sit where maps are small, 7x7 in a ResNet). Such a size must be a variable of its own (an
    input's, or kept by stride-1 layers): one derived from others (``(h - 1) // 4 + 1`` after two
    stride-2 layers) enters every unrolled index of the kernel, and TIR lowering took 13 s per kernel
    (0.4 s static, 2 s with plain variables)."""
    k, c, kh, kw = w_shape
    if (kh, kw) != (3, 3) or groups != 1 or list(strides) != [1, 1] or list(dilation) != [1, 1]:
        return False
    if not isinstance(x_shape[3], int) or not all(isinstance(d, (int, tirx.Var)) for d in x_shape):
        return False
    n, h, w = (d if isinstance(d, int) else typical for d, typical in zip(x_shape, (1, TYPICAL_SIDE, TYPICAL_SIDE)))
    oh, ow = output_size(h, w, pads)
    if h < 3 or w < 3 or oh < 1 or ow < 1 or 2 * 9 * c * k * n * oh * ow < MIN_FLOPS:
        return False
    if not all(isinstance(d, int) for d in x_shape):
        return c * k <= 256 * 256
    return n * tiles(oh) * tiles(ow) >= MIN_TILES or c * k <= 256 * 256


def tile_block(oh, ow, budget: int) -> tuple[int, int]:
    """The (rows, columns) of tiles one register tile of the products covers: at most ``budget`` tiles
    (accumulators per channel vector), whole rows of tiles when a row fits, the grid padded to whole
    blocks (wasted work) as little as possible.  Each step of the product loads the channel vectors of
    the weight once for the block's tiles, so a block of a few tiles is bound by those loads: the cost
    counts them as 3 extra tiles.  A side unknown at compile time (an expression) counts as
    ``TYPICAL_SIDE`` pixels."""
    th, tw = (tiles(s if isinstance(s, int) else TYPICAL_SIDE) for s in (oh, ow))

    def cost(rows: int, cols: int) -> float:
        padded = -(-th // rows) * rows * -(-tw // cols) * cols
        return padded * (rows * cols + 3) / (rows * cols)

    if tw <= budget:
        candidates = [(r, tw) for r in range(1, min(budget // tw, th) + 1)]
    else:
        candidates = [(1, c) for c in range(max(budget // 2, 1), budget + 1)]
    return min(candidates, key=lambda rc: (cost(*rc), -rc[0] * rc[1]))


def pack_weight(w: te.Tensor, kp: int, kb: int) -> te.Tensor:
    """``[K, C, 3, 3]`` -> ``U = G g G^T`` as ``[KP / kb, 6, 6, C, kb]``, zero past K (``KP`` >= K)."""
    k, c, _, _ = (int(d) for d in w.shape)
    dtype = w.dtype
    a = te.reduce_axis((0, 3), "a")
    b = te.reduce_axis((0, 3), "b")
    g = topi.utils.const_matrix(_G.astype("float32"), "G")

    def body(o, e1, e2, ci, v):
        kk = tirx.min(o * kb + v, k - 1)
        return te.sum(g[e1, a] * w[kk, ci, a, b] * g[e2, b], axis=[a, b])

    u = te.compute((kp // kb, ALPHA, ALPHA, c, kb), body, name=PACK + "winograd_weight_raw")
    return te.compute(
        u.shape,
        lambda o, e1, e2, ci, v: tirx.Select(o * kb + v < k, u[o, e1, e2, ci, v], tirx.const(0, dtype)),
        name=PACK + "winograd_weight",
    )


def conv_nhwc(x: te.Tensor, u: te.Tensor, w: te.Tensor, pads, budget: int) -> te.Tensor:
    """out[n, y, x, o] = sum over (3 x 3 window, c) of pad(x)[...] * w[o, c, ...], by F(4x4, 3x3) with the
    transformed weight ``u`` (``pack_weight``, which may pad the ``K`` output channels of ``w``); ``w``
    itself (``[K, C, 3, 3]``) serves the direct sums of non-finite outputs (``_finite``).  ``budget``:
    the tiles a register tile of the products may hold (``tile_block`` picks the block of tiles; the grid
    of tiles is padded to whole blocks)."""
    n, h, width, c = (_static(d) for d in x.shape)
    dtype = x.dtype
    pad_t, pad_l = pads[0], pads[1]
    oh, ow = output_size(h, width, pads)
    rows, cols = tile_block(oh, ow, budget)
    th, tw = (tiles(oh) + rows - 1) // rows * rows, (tiles(ow) + cols - 1) // cols * cols
    # The input padded so that every tile's 6x6 window is inside it.
    ph, pw = th * M_TILE + 2, tw * M_TILE + 2
    xp = topi.nn.pad(x, [0, pad_t, pad_l, 0], [0, ph - h - pad_t, pw - width - pad_l, 0], name=PAD)

    def input_rows(b, ty, tx, e1, j, ci):
        return _by_row(e1, _BT, lambda i: xp[b, ty * M_TILE + i, tx * M_TILE + j, ci], dtype)

    t1 = te.compute((n, th, tw, ALPHA, ALPHA, c), input_rows, name=INPUT + "_rows")
    v = te.compute(
        (n, th, tw, ALPHA, ALPHA, c),
        lambda b, ty, tx, e1, e2, ci: _by_row(e2, _BT, lambda j: t1[b, ty, tx, e1, j, ci], dtype),
        name=INPUT,
    )
    kb = int(u.shape[-1])
    r = te.reduce_axis((0, c), "c")
    m = te.compute(
        (n, th, tw, ALPHA, ALPHA, int(u.shape[0]) * kb),
        lambda b, ty, tx, e1, e2, o: te.sum(v[b, ty, tx, e1, e2, r] * u[o // kb, e1, e2, r, o % kb], axis=[r]),
        name=PRODUCT,
        attrs={BLOCK_ATTR: [rows, cols]},
    )
    kp = int(u.shape[0]) * kb
    t2 = te.compute(
        (n, th, tw, M_TILE, ALPHA, kp),
        lambda b, ty, tx, i, e2, o: _by_row(i, _AT, lambda e1: m[b, ty, tx, e1, e2, o], dtype),
        name=OUTPUT_ROWS,
    )
    # Whole tiles and channel blocks (the output's last row and column of tiles may stick out, and its
    # channels may stop within a block): the tests of ``_finite`` read each without clamping its indices
    # (which the schedule's region analysis cannot invert).
    yw = te.compute(
        (n, tiles(oh) * M_TILE, tiles(ow) * M_TILE, kp),
        lambda b, y, xx, o: _by_row(
            xx % M_TILE, _AT, lambda e2: t2[b, y // M_TILE, xx // M_TILE, y % M_TILE, e2, o], dtype
        ),
        name=WINOGRAD,
    )
    return _finite(yw, x, w, (oh, ow), (pad_t, pad_l), kb)


def _nonfinite(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """Whether float32 ``x`` is NaN or infinite, from its bits (TVM's simplifier folds ``x != x``)."""
    return magnitude_bits(x) >= tirx.const(INF_BITS, "int32")


def _finite(yw: te.Tensor, x: te.Tensor, w: te.Tensor, size: tuple[int, int], pads: tuple[int, int], kb: int):
    """``yw`` where it is finite, else the direct convolution's value (``DIRECT``) of that element.

    A NaN or an infinity in the input reaches, through the transforms, every output of the tiles whose
    windows hold it, where the direct convolution makes only the outputs whose 3x3 windows hold it
    non-finite (and an infinity may become NaN): wrong answers around a non-finite pixel.  The
    transforms keep every output the direct convolution makes non-finite non-finite (each input of its
    window reaches it through nonzero coefficients), so recomputing the non-finite outputs directly
    gives the direct convolution's answer everywhere.  Per tile and channel block, the largest magnitude
    (as bits: ``LANE_MAX`` over the tile's pixels, vectorized over the channels, then ``TILE_MAX`` over
    them) tells whether any output is not finite; only then do the direct sums run (``guard_direct``
    puts their loops under that test), for the non-finite outputs alone (their block's predicate; TE
    drops a reduction's ``where``).  They read the weight ``w`` itself: one rebuilt from the transformed
    weight (``w = L U L^T``) is exact only in exact arithmetic, and a zero tap that came back 1e-8 turned
    inf x 0 (NaN) into an infinity.  Their input is read from ``x`` itself (the padded copy is a stage the
    tile's loops cannot depend on), zero outside it (``pads``: top, left).  ``yw`` covers whole tiles and
    channel blocks of ``kb``; the result is cropped to ``size`` (the output's height and width) and
    ``w``'s channels."""
    n, _, _, kp = yw.shape
    oh, ow = size
    _, h, width, c = (_static(d) for d in x.shape)
    k, dtype = int(w.shape[0]), yw.dtype
    rh, rw, rc = te.reduce_axis((0, 3), "rh"), te.reduce_axis((0, 3), "rw"), te.reduce_axis((0, c), "rc")

    def pixel(b, row, col, ci):
        inside = tirx.all(row >= 0, row < h, col >= 0, col < width)
        clamped = (b, tirx.max(tirx.min(row, h - 1), 0), tirx.max(tirx.min(col, width - 1), 0), ci)
        return tirx.if_then_else(inside, x[clamped], tirx.const(0, dtype))

    ri, rj = te.reduce_axis((0, M_TILE), "ri"), te.reduce_axis((0, M_TILE), "rj")
    lane_max = te.compute(
        (n, tiles(oh), tiles(ow), kp),
        lambda b, ty, tx, o: te.max(
            magnitude_bits(yw[b, ty * M_TILE + ri, tx * M_TILE + rj, o]),
            axis=[ri, rj],
        ),
        name=LANE_MAX,
    )
    rv = te.reduce_axis((0, kb), "rv")
    tile_max = te.compute(
        (n, tiles(oh), tiles(ow), kp // kb),
        lambda b, ty, tx, ko: te.max(lane_max[b, ty, tx, ko * kb + rv], axis=[rv]),
        name=TILE_MAX,
    )

    def term(b, y, xx, o):
        value = pixel(b, y + rh - pads[0], xx + rw - pads[1], rc) * w[o, rc, rh, rw]
        # The block reads the tests here; ``guard_direct`` makes them the loops' and block's conditions.
        tile = tile_max[b, y // M_TILE, xx // M_TILE, o // kb] >= tirx.const(INF_BITS, "int32")
        condition = tirx.And(tile, _nonfinite(yw[b, y, xx, o]))
        return te.sum(tirx.Select(condition, value, tirx.const(0, dtype)), axis=[rh, rw, rc])

    # Over whole tiles, as ``yw``: with symbolic sizes TVM's region analysis proves that ``tile_max`` covers
    # the reads ``y // 4`` only where ``y`` runs to a multiple of 4 (it cannot for ``y < oh``), and refuses
    # to schedule the function.
    direct = te.compute((n, tiles(oh) * M_TILE, tiles(ow) * M_TILE, k), term, name=DIRECT)
    return te.compute((n, oh, ow, k), lambda *i: tirx.Select(_nonfinite(yw(*i)), direct(*i), yw(*i)), name=FINITE)


def schedule_winograd(
    sch: s_tir.Schedule, block, target: tvm.target.Target
) -> Callable[[tirx.PrimFunc], tirx.PrimFunc]:
    """The schedule of ``conv_nhwc``'s function (with its fused epilogue), ``block`` its ``WINOGRAD`` block.

    Per block of rows x columns of tiles (``BLOCK_ATTR``) and channel block (parallel): the products of
    the block's tiles, a register tile of the block's tiles x ``kb`` channels per transformed position,
    accumulated over the input channels into a local buffer; then per tile the output transform, the
    non-finite test (and the direct sums where it fails) and the epilogue, on registers.  The input
    transform runs first, as a parallel stage of its own (each 6x6 window of a channel vector is
    transformed in registers).
    Returns what finishes the scheduled function (``guard_direct``: a loop nest put under a condition,
    which no schedule primitive does)."""
    lanes = vector_lanes(target)
    # After the main block: the non-finite tests and direct sums (``_finite``), then the fused epilogue.
    direct, epilogue = _take(sch, epilogue_blocks(sch, block), DIRECT)
    lane_max, epilogue = _take(sch, epilogue, LANE_MAX)
    tile_max, epilogue = _take(sch, epilogue, TILE_MAX)
    product = sch.get_producers(sch.get_producers(block)[0])[0]
    t2 = sch.get_producers(block)[0]
    v_block = next(p for p in sch.get_producers(product) if sch.get(p).name_hint.startswith(INPUT))
    t1 = sch.get_producers(v_block)[0]
    pad = sch.get_producers(t1)[0]
    kb = int(sch.get(product).reads[1].source.shape[-1])
    rows, cols = (int(v) for v in sch.get(product).annotations[BLOCK_ATTR])

    # The output transform: rows x cols tiles x kb channels per parallel iteration.
    n, y, x, o = sch.get_loops(block)
    yo, yi = sch.split(y, [None, rows * M_TILE])
    yt, i = sch.split(yi, [None, M_TILE])
    xo, xi = sch.split(x, [None, cols * M_TILE])
    xt, j = sch.split(xi, [None, M_TILE])
    oo, oi = sch.split(o, [None, kb])
    # The outer loop is over what is larger: the blocks of tiles when the transformed input is, the
    # channel blocks when the transformed weight is (each is then read from memory once, the other
    # again per iteration, from cache).
    # A transformed input of symbolic size is taken as the larger (a map of unknown size per image).
    weight, transformed = _elements(sch.get(product).reads[1].source), _elements(sch.get(v_block).writes[0].source)
    weight_first = transformed is not None and weight > transformed
    outer = [oo, n, yo, xo] if weight_first else [n, yo, xo, oo]
    sch.reorder(*outer, yt, xt, i, j, oi)
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(oi)
    sch.compute_at(t2, xt, preserve_unit_loops=True)
    sch.set_scope(t2, 0, "local")
    *_, ti, te2, to = sch.get_loops(t2)
    sch.unroll(ti)
    sch.unroll(te2)
    sch.vectorize(to)
    # The tests and the direct sums of non-finite outputs (``_finite``), on the tile before the epilogue.
    sch.reverse_compute_at(lane_max, xt, preserve_unit_loops=True)
    *_, lo, li, lj = sch.get_loops(lane_max)
    sch.reorder(li, lj, lo)
    sch.vectorize(lo)
    sch.reverse_compute_at(tile_max, xt, preserve_unit_loops=True)
    for stage in (lane_max, tile_max):
        sch.set_scope(stage, 0, "local")
    sch.reverse_compute_at(direct, xt, preserve_unit_loops=True)
    sch.set_scope(direct, 0, "local")
    # The direct sums' outermost loop, which ``guard_direct`` puts under the tile's test.
    loops = sch.get_loops(direct)
    at = next(i for i, lp in enumerate(loops) if sch.get_sref(lp).same_as(sch.get_sref(xt)))
    sch.annotate(loops[at + 1], GUARD_ATTR, 1)
    tile_epilogue(sch, block, epilogue, xt, lanes)

    # The products, at the channel block.
    sch.compute_at(product, outer[-1], preserve_unit_loops=True)
    sch.set_scope(product, 0, "local")
    *_, pty, ptx, pe1, pe2, po, pc = sch.get_loops(product)
    sch.reorder(pe1, pe2, pc, pty, ptx, po)
    sch.unroll(pty)
    sch.unroll(ptx)
    sch.vectorize(po)
    parallel(sch, outer, min_elements=1, work=None)
    sch.decompose_reduction(product, pc)
    sch.decompose_reduction(direct, sch.get_loops(direct)[-3])
    sch.decompose_reduction(lane_max, sch.get_loops(lane_max)[-3])

    # The input transform: per tile and channel vector.
    vn, vty, vtx, ve1, ve2, vc = sch.get_loops(v_block)
    vco, vci = sch.split(vc, [None, lanes]) if loop_extent(sch, vc) % lanes == 0 else (None, vc)
    if vco is not None:
        sch.reorder(vn, vty, vtx, vco, ve1, ve2, vci)
        anchor = vco
    else:
        sch.reorder(vn, vty, vtx, ve1, ve2, vci)
        anchor = vtx
    sch.compute_at(t1, anchor, preserve_unit_loops=True)
    sch.set_scope(t1, 0, "local")
    *_, ae1, aj, ac = sch.get_loops(t1)
    for lp in (ae1, aj, ve1, ve2):
        sch.unroll(lp)
    sch.vectorize(ac)
    sch.vectorize(vci)
    parallel(sch, [vn, vty, vtx], min_elements=1, work=None)
    schedule_spatial(sch, pad, lanes)
    return guard_direct


def _take(sch: s_tir.Schedule, blocks: list, prefix: str) -> tuple:
    """The block of ``blocks`` whose name starts with ``prefix``, and the others."""
    found = next(b for b in blocks if sch.get(b).name_hint.startswith(prefix))
    return found, [b for b in blocks if not b.same_as(found)]


def _elements(buffer) -> int | None:
    """The number of elements of a buffer, None where its shape is symbolic."""
    dims = [_static(d) for d in buffer.shape]
    return int(np.prod(dims)) if all(isinstance(d, int) for d in dims) else None


def _static(dim):
    """A dimension as an int where it is one, else the expression."""
    return int(dim) if isinstance(dim, (int, tirx.IntImm)) else dim


def _substitute(expr, pairs: list):
    """``expr`` with each variable of ``pairs`` (variable, value) replaced by its value."""

    def bound(var):
        return next((value for v, value in pairs if v.same_as(var)), var)

    return tvm_ffi.structural_map(expr, [(tirx.Var, bound)])


def guard_direct(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` (scheduled by ``schedule_winograd``) with the direct sums of ``_finite`` run only where
    needed: their loop nest (its outermost loop annotated ``GUARD_ATTR``) under the tile's test, and
    their update block predicated on the output's own test, both taken from the ``Select`` of its value
    (``tile and element``); the reduction loops then run for non-finite outputs only, instead of adding
    zeros for every output.  Raises ``ValueError`` where the function is not shaped so (the rule then
    fails: a kernel left to add zeros would be as slow as the direct convolution plus Winograd's)."""
    found = []

    def visit(node):
        if node.block.name_hint.startswith(DIRECT) and not node.block.name_hint.endswith("_init"):
            found.append(node)

    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, visit)], order="pre")
    if len(found) != 1:
        raise ValueError(f"guard_direct: {len(found)} direct update blocks, expected 1")
    update = found[0]
    store = update.block.body
    select = store.value.b if isinstance(store, tirx.BufferStore) and isinstance(store.value, tirx.Add) else None
    if not isinstance(select, tirx.Select) or not isinstance(select.condition, tirx.And):
        raise ValueError("guard_direct: the direct update is not sum + Select(tile and element, ...)")
    binding = [(iv.var, value) for iv, value in zip(update.block.iter_vars, update.iter_values)]
    tile, element = (_substitute(c, binding) for c in (select.condition.a, select.condition.b))
    wrapped = []

    def wrap(node):
        if isinstance(node, s_tir.SBlockRealize):
            if node.same_as(update):
                return s_tir.SBlockRealize(node.iter_values, tirx.And(node.predicate, element), node.block)
            return node
        if GUARD_ATTR not in (node.annotations or {}):
            return node
        inner = []
        tvm_ffi.structural_walk(node, [(tirx.For, lambda f: inner.append((f.loop_var, f.min)))], order="pre")
        wrapped.append(node)
        # The tile's test at the nest's first iteration: every iteration of the nest is in one tile and
        # channel block.
        return tirx.IfThenElse(_substitute(tile, inner), node, None)

    body = tvm_ffi.structural_map(func.body, [(s_tir.SBlockRealize, wrap), (tirx.For, wrap)])
    if len(wrapped) != 1:
        raise ValueError(f"guard_direct: {len(wrapped)} loops annotated {GUARD_ATTR}, expected 1")
    return func.with_body(body)


def without_fallback(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` without its ``DIRECT`` sums (which run only for non-finite outputs): the kernel whose work
    ``nnadapter-tvm profile`` counts (TVM's FLOP estimate would count the fallback as a whole direct
    convolution)."""

    def drop(node):
        return tirx.Evaluate(0) if node.block.name_hint.startswith(DIRECT) else node

    return func.with_body(tvm_ffi.structural_map(func.body, [(s_tir.SBlockRealize, drop)]))
