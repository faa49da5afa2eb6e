"""The TE computes the CPU lowering emits: weight packing, NHWC convolutions and packed matrix products.

Each compute names its main block (``CONV``, ``DEPTHWISE``, ``DENSE``); the schedule rules find a fused
function's main block by that name.  Weights are packed into blocked layouts by kernels of their own
(``PACK`` names), which ``FoldConstant`` runs once at compile time on constant weights:
``[OC / ob, KH, KW, IC / group, ob]`` for convolutions, ``[KH, KW, C]`` for depthwise ones,
``[N / nb, K, nb]`` for matrix products (``[..., N / nb, K, nb]``, at run time, for a product of two
run-time tensors).

A symbolic extent that a register tile runs along (a width, a row count), or a static one that no tile
within the register budget divides (197 tokens), is padded to whole tiles: the compute reads a clamped
index past the end and a crop stage keeps the valid part (see ``padded``).
"""

from __future__ import annotations

import tvm
from tvm import te, tirx, topi

from nnadapter_tvm.targets.cpu.simd import padded_rows

CONV = "nna_conv2d_nhwc"
DEPTHWISE = "nna_depthwise_conv2d_nhwc"
DENSE = "nna_dense_packed"
PACK = "nna_pack_"
PAD = "nna_pad"
CROP = "nna_crop"


# -- packing ------------------------------------------------------------------------------


def _zero_past(t: te.Tensor, index: tuple, limit: int, axis: int = 0):
    """``t[index]``, or 0 where ``index[axis]`` is past ``limit`` (the padding of a packed weight)."""
    clamped = list(index)
    clamped[axis] = tirx.min(index[axis], limit - 1)
    return tirx.Select(index[axis] < limit, t[tuple(clamped)], tirx.const(0, t.dtype))


def pack_conv_weight(w: te.Tensor, ocp: int, ob: int) -> te.Tensor:
    """``[OC, IC / group, KH, KW]`` -> ``[OCP / ob, KH, KW, IC / group, ob]``, zero past OC (``OCP`` >= OC
    output channels, padded to whole vectors)."""
    oc, icg, kh, kw = (int(d) for d in w.shape)
    return te.compute(
        (ocp // ob, kh, kw, icg, ob),
        lambda o, a, b, i, v: _zero_past(w, (o * ob + v, i, a, b), oc),
        name=PACK + "conv_weight",
    )


def pack_depthwise_weight(w: te.Tensor) -> te.Tensor:
    """``[OC, 1, KH, KW]`` -> ``[KH, KW, OC]``: a vector of channels per kernel position."""
    oc, _, kh, kw = (int(d) for d in w.shape)
    return te.compute((kh, kw, oc), lambda a, b, o: w[o, 0, a, b], name=PACK + "depthwise_weight")


def pack_dense_weight(b: te.Tensor, npad: int, nb: int) -> te.Tensor:
    """``[K, N]`` -> ``[NPAD / nb, K, nb]``, zero past N."""
    k, n = (int(d) for d in b.shape)
    return te.compute(
        (npad // nb, k, nb),
        lambda o, r, v: _zero_past(b, (r, o * nb + v), n, axis=1),
        name=PACK + "dense_weight",
    )


def pack_batch_operand(b: te.Tensor, shape: list, npad, nb: int) -> te.Tensor:
    """A run-time right operand ``[..., K, N]`` -> ``[..., NPAD / nb, K, nb]``, zero past N (``N`` may be
    symbolic; ``npad`` is then N rounded up to whole blocks).  ``shape`` is the operand's shape as the
    Relax graph declares it (static dims as ints, symbolic ones the graph's own variables)."""
    *batch, k, n = shape

    def body(*idx):
        *lead, o, r, v = idx
        j = o * nb + v
        return tirx.if_then_else(j < n, b[(*lead, r, tirx.min(j, n - 1))], tirx.const(0, b.dtype))

    return te.compute((*batch, npad // nb, k, nb), body, name=PACK + "batch_matmul")


# -- padding and cropping -----------------------------------------------------------------


def _is_static(expr) -> bool:
    return isinstance(expr, int) or isinstance(tvm.sym.Analyzer().simplify(expr), tirx.IntImm)


def padded(extent, tile: int, budget: int = 0):
    """``extent`` rounded up to a multiple of ``tile`` when it is symbolic; a static one to what
    ``simd.padded_rows`` gives for a register tile of at most ``budget`` rows (unchanged when it has a good
    divisor, or without a ``budget``). The same object is returned when nothing is padded.

    A symbolic loop split by a tile that may not divide it gets a predicate inside the tile, and TVM then
    keeps the whole accumulator row in memory instead of the tile in registers (the predicate defeats
    buffer compaction).  The computes therefore run whole tiles past the end, reading a clamped index
    (the last valid row or column, so every load stays in bounds and costs no branch), and a crop stage
    (``CROP``) keeps the valid part."""
    if _is_static(extent):
        if budget <= 1:
            return extent
        value = int(tvm.sym.Analyzer().simplify(extent)) if not isinstance(extent, int) else extent
        padded = padded_rows(value, budget)
        return extent if padded == value else padded
    if tile <= 1:
        return extent
    return (extent + tile - 1) // tile * tile


def crop(full: te.Tensor, shape: list, name: str) -> te.Tensor:
    if all(_is_static(a - b) and int(tvm.sym.Analyzer().simplify(a - b)) == 0 for a, b in zip(full.shape, shape)):
        return full
    return te.compute(shape, lambda *i: full[i], name=name)


def _pad_nhwc(x: te.Tensor, pads: tuple[int, int, int, int]) -> te.Tensor:
    pad_t, pad_l, pad_b, pad_r = pads
    if not any(pads):
        return x
    return topi.nn.pad(x, [0, pad_t, pad_l, 0], [0, pad_b, pad_r, 0], name=PAD)


def out_size(size, before: int, after: int, k: int, stride: int, dilation: int):
    """A sliding window's output extent, simplified: the next kernel's input shape is this expression, and
    unsimplified ones grow with depth (``(h - 4) // 4 + 1 + 3 + 3 - 7 + 1 ...`` after a stage of 7x7
    windows), which makes kernels of the same shape structurally different (each built again) and slow
    to lower."""
    size = (size + before + after - ((k - 1) * dilation + 1)) // stride + 1
    return size if isinstance(size, int) else tvm.sym.Analyzer().simplify(size)


# -- convolutions -------------------------------------------------------------------------


def _sliding_window(
    x: te.Tensor, kh: int, kw: int, oc: int, strides, pads, dilation, tile: int, budget: int, name: str, term
):
    """The NHWC output ``[n, oh, ow, oc]`` of a window of ``kh`` x ``kw`` sliding over ``pad(x)``, its
    width padded to whole tiles: ``term(xp, y, x, o)`` is the sum at one output element, given the
    padded input and the (clamped) input row and column of the window's top-left tap per stride."""
    n, h, w, _ = x.shape
    (sh, sw), (dh, dw) = strides, dilation
    oh = out_size(h, pads[0], pads[2], kh, sh, dh)
    ow = out_size(w, pads[1], pads[3], kw, sw, dw)
    xp = _pad_nhwc(x, pads)
    owp = padded(ow, tile, budget)

    def body(b, y, xx, o):
        col = xx if owp is ow else tirx.min(xx, ow - 1)
        return term(xp, b, y, col, o)

    return crop(te.compute((n, oh, owp, oc), body, name=name), [n, oh, ow, oc], CROP)


def conv_nhwc(
    x: te.Tensor, wp: te.Tensor, oc: int, strides, pads, dilation, groups: int, tile: int = 1, budget: int = 0
) -> te.Tensor:
    """out[n, y, x, o] = sum over (kh, kw, ic of o's group) of pad(x)[...] * wp[o // ob, kh, kw, ic, o % ob]."""
    _, kh, kw, icg, ob = (int(d) for d in wp.shape)
    (sh, sw), (dh, dw) = strides, dilation
    rh, rw, ri = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, icg), "ri")
    ocg = oc // groups

    def term(xp, b, y, col, o):
        # The group of channel o, written through o's block (ob divides ocg) so that it does not vary
        # inside the vectorized block.
        channel = ri if groups == 1 else ((o // ob) * ob // ocg) * icg + ri
        return te.sum(
            xp[b, y * sh + rh * dh, col * sw + rw * dw, channel] * wp[o // ob, rh, rw, ri, o % ob], axis=[rh, rw, ri]
        )

    return _sliding_window(x, kh, kw, oc, strides, pads, dilation, tile, budget, CONV, term)


def depthwise_nhwc(
    x: te.Tensor, wp: te.Tensor, strides, pads, dilation, multiplier: int, tile: int = 1, budget: int = 0
) -> te.Tensor:
    """out[n, y, x, o] = sum over (kh, kw) of pad(x)[..., o // multiplier] * wp[kh, kw, o]."""
    kh, kw, oc = (int(d) for d in wp.shape)
    (sh, sw), (dh, dw) = strides, dilation
    rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")

    def term(xp, b, y, col, o):
        channel = o if multiplier == 1 else o // multiplier
        return te.sum(xp[b, y * sh + rh * dh, col * sw + rw * dw, channel] * wp[rh, rw, o], axis=[rh, rw])

    return _sliding_window(x, kh, kw, oc, strides, pads, dilation, tile, budget, DEPTHWISE, term)


# -- matrix products ----------------------------------------------------------------------


def row_axis(extents: list) -> int:
    """Which of a product's row axes (its output's axes before the columns) the register tile runs
    along: the last one that is not statically 1 ([T, 1, K] rows: an ONNX LSTM's input projection over
    T steps of batch 1), the last one when all are. ``extents``: ints, None where symbolic, or TIR
    expressions."""
    for axis in range(len(extents) - 1, -1, -1):
        value = extents[axis]
        if isinstance(value, tirx.IntImm):
            value = int(value.value)
        if value != 1:
            return axis
    return len(extents) - 1


def dense_packed(a: te.Tensor, bp: te.Tensor, n: int, tile: int = 1, budget: int = 0) -> te.Tensor:
    """out[..., m, j] = sum_k a[..., m, k] * bp[j // nb, k, j % nb].

    A symbolic row count (batch, sequence) runs whole tiles of rows (see ``padded``), along the row
    axis ``row_axis`` picks."""
    _, k, nb = (int(d) for d in bp.shape)
    r = te.reduce_axis((0, k), "k")
    batch = list(a.shape[:-1])
    axis = row_axis(batch) if batch else None
    rows = batch[axis] if batch else None
    rows_p = padded(rows, tile, budget) if rows is not None else None

    def body(*idx):
        *index, j = idx
        if rows_p is not rows:
            index[axis] = tirx.min(index[axis], rows - 1)
        return te.sum(a[(*index, r)] * bp[j // nb, r, j % nb], axis=[r])

    if rows_p is rows:
        return te.compute((*batch, n), body, name=DENSE)
    shape = [rows_p if i == axis else d for i, d in enumerate(batch)]
    return crop(te.compute((*shape, n), body, name=DENSE), [*batch, n], CROP)


def batch_matmul_packed(a: te.Tensor, bp: te.Tensor, n, tile: int = 1, budget: int = 0) -> te.Tensor:
    """out[..., m, j] = sum_k a[..., m, k] * bp[..., j // nb, k, j % nb] (``bp`` packed per batch)."""
    *batch, rows, _ = a.shape
    k, nb = bp.shape[-2], int(bp.shape[-1])
    r = te.reduce_axis((0, k), "k")
    rows_p = padded(rows, tile, budget)
    cols_p = bp.shape[-3] * nb

    def body(*idx):
        *lead, m, j = idx
        if rows_p is not rows:
            m = tirx.min(m, rows - 1)
        return te.sum(a[(*lead, m, r)] * bp[(*lead, j // nb, r, j % nb)], axis=[r])

    full = te.compute((*batch, rows_p, cols_p), body, name=DENSE)
    return crop(full, [*batch, rows, n], CROP)
