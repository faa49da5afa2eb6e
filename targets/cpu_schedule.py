"""Default schedules for the CPU targets (``llvm``, ``arm``): no tuning, every kernel scheduled.

``tvm.compile`` on an LLVM target schedules nothing: each operator becomes a naive, single-threaded
loop nest, and a plain ``{"kind": "llvm"}`` target even generates SSE2 code only.  ``prepare`` turns a
Relax module into a legalized, fused module whose every PrimFunc carries a CPU schedule:

1. **Layout.**  ``ConvertLayout`` moves convolutions (and with them the element-wise ops, pools,
   concatenations and reductions around them) to NHWC, so that the channel axis is the contiguous one
   for any channel count; the graph's NCHW inputs and outputs get one transpose each.
2. **Lowering with packed weights.**  ``LegalizeOps`` lowers float32 ``conv2d`` (NHWC) and ``matmul``
   with a 2-D right operand through this module's own TE computes, whose weights are *packed* into a
   blocked layout by a separate kernel: ``[OC / ob, KH, KW, IC / group, ob]`` for convolutions,
   ``[KH, KW, C]`` for depthwise ones, ``[N / nb, K, nb]`` for matrix products.  ``FoldConstant`` then
   runs the packing once, at compile time, on constant weights.
3. **Fusion.**  ``FuseOps``/``FuseTIR`` put bias, batch-norm, activation and residual epilogues into the
   kernel of the convolution or product they follow.
4. **Scheduling** (``schedule_prim_func``), by the main block of each fused PrimFunc:

   - ``conv2d`` / ``dense``: a register tile of ``wt`` output pixels (rows) x ``ob`` output channels
     (columns, one or two SIMD vectors) accumulates in a local buffer while the reduction loops
     (kernel rows, columns, input channels) run outside it; the tile's channel loop is vectorized and
     its pixel loop unrolled; batch x channel blocks x output rows run in parallel; the epilogue is
     computed on the tile right after its reduction (``reverse_compute_at``), before it leaves registers.
   - ``depthwise``: the same with the channel block as the only reduction-free vector axis.
   - reductions (pools, means, softmax's max/sum): the contiguous output axis moves inside the
     reduction loops and is vectorized (NHWC pools vectorize over channels); outer axes parallel.
   - everything else (element-wise, broadcast, injective: transposes, concatenations, pads): producers
     inlined where TVM allows, then outer loops fused and parallel, the innermost loop vectorized.

   A rule that raises, or whose result does not lower through TVM's TIR pipeline, is dropped for the
   next one; the last resort is the unscheduled function, so a schedule never fails a compile.

5. **Symbolic extents** (batch, height, width, sequence length unknown until execution; channels
   static) get the same rules: a register tile along a symbolic axis runs whole tiles past the end
   (``_padded``: clamped reads, then a crop), vector loops over a symbolic axis are partitioned into
   whole vectors and a scalar tail (``_vectorize_inner``), parallel loops fuse at most two symbolic
   loops (``_parallel``), and products of two run-time tensors are packed at run time and run under
   the dense rule (``Lowering._batch_matmul``).  docs/performance.md, section 4, has the measurements.

The vector width comes from the target (AVX-512: 16 floats, AVX2: 8, NEON/SSE: 4); ``host_target``
gives the ``llvm`` driver this machine's CPU so that LLVM can use it.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable

import tvm
import tvm_ffi
from tvm import relax, s_tir, te, tirx, topi
from tvm.target import codegen

from nnadapter_tvm.targets.base import is_scheduled

log = logging.getLogger("nnadapter_tvm")

CONV = "nna_conv2d_nhwc"
DEPTHWISE = "nna_depthwise_conv2d_nhwc"
DENSE = "nna_dense_packed"
PACK = "nna_pack_"
PAD = "nna_pad"
CROP = "nna_crop"

#: Below this many output elements a kernel stays on one thread (a parallel launch costs microseconds).
PARALLEL_MIN_ELEMENTS = 4096

#: At most this many symbolic loops are fused into one parallel loop (the ones after stay serial inside
#: it): fusing three (batch, height, width) made TVM's region analysis fail on padded copies.
MAX_SYMBOLIC_FUSED = 2


# -- the target ---------------------------------------------------------------------------


def _has(feature: str, target: tvm.target.Target) -> bool:
    try:
        return bool(codegen.target_has_features(feature, target))
    except Exception:  # a target LLVM cannot describe: assume the baseline
        return False


def vector_lanes(target: tvm.target.Target, dtype_bits: int = 32) -> int:
    """SIMD lanes of ``dtype_bits`` elements: 512-bit vectors with AVX-512, 256 with AVX2, else 128."""
    if _has("avx512f", target):
        bits = 512
    elif _has("avx2", target) or _has("avx", target):
        bits = 256
    else:
        bits = 128  # NEON, SSE
    return max(bits // dtype_bits, 1)


def vector_registers(target: tvm.target.Target) -> int:
    """Architectural SIMD registers (32 on AVX-512 and aarch64, 16 on AVX2/SSE)."""
    if _has("avx512f", target) or _has("neon", target):
        return 32
    mtriple = str(target.attrs.get("mtriple", ""))
    return 32 if mtriple.startswith(("aarch64", "arm64")) else 16


# -- lowering with packed weights ---------------------------------------------------------


def _static_shape(expr: relax.Expr) -> list[int] | None:
    shape = getattr(expr.ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    dims = []
    for d in shape.values:
        if not isinstance(d, tirx.IntImm):
            return None
        dims.append(int(d.value))
    return dims


def _shape(expr: relax.Expr) -> list | None:
    shape = getattr(expr.ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    return [int(d.value) if isinstance(d, tirx.IntImm) else d for d in shape.values]


def _block(extent: int, candidates: list[int]) -> int:
    """The first of ``candidates`` that divides ``extent`` (1 if none)."""
    return next((c for c in candidates if c >= 1 and extent % c == 0), 1)


def _channel_blocks(lanes: int) -> list[int]:
    return [2 * lanes, lanes, lanes // 2, lanes // 4, 2]


class Lowering:
    """``LegalizeOps`` overrides for ``relax.nn.conv2d`` and ``relax.matmul`` (see the module docstring)."""

    def __init__(self, target: tvm.target.Target):
        self.lanes = vector_lanes(target)
        self.registers = vector_registers(target)
        self._default = {
            name: tvm.ir.Op.get(name).get_attr("FLegalize") for name in ("relax.nn.conv2d", "relax.matmul")
        }

    def legalize_map(self) -> dict[str, Callable]:
        return {"relax.nn.conv2d": self.conv2d, "relax.matmul": self.matmul}

    # conv2d ---------------------------------------------------------------------------

    def conv2d(self, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        try:
            lowered = self._conv2d(bb, call)
        except Exception as err:  # any surprise: TVM's own lowering
            log.debug("cpu_schedule: conv2d keeps the default lowering (%s)", err)
            lowered = None
        return lowered if lowered is not None else self._default["relax.nn.conv2d"](bb, call)

    def _conv2d(self, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr | None:
        attrs = call.attrs
        x, w = call.args
        layouts = (attrs.data_layout, attrs.kernel_layout, attrs.out_layout)
        if layouts not in (("NHWC", "OIHW", "NHWC"), ("NCHW", "OIHW", "NCHW")):
            return None
        nchw = layouts[0] == "NCHW"
        if x.ty.dtype != "float32" or w.ty.dtype != "float32" or _out_dtype(attrs, "float32") != "float32":
            return None
        w_shape, x_shape = _static_shape(w), _shape(x)
        if w_shape is None or x_shape is None or len(x_shape) != 4:
            return None
        oc, icg, kh, kw = w_shape
        c = x_shape[1] if nchw else x_shape[3]
        groups = int(attrs.groups)
        if not isinstance(c, int) or groups <= 0 or c % groups or oc % groups or icg * groups != c:
            return None
        strides = [int(v) for v in attrs.strides]
        dilation = [int(v) for v in attrs.dilation]
        pad_t, pad_l, pad_b, pad_r = (int(v) for v in attrs.padding)
        pads = (pad_t, pad_l, pad_b, pad_r)
        ocg = oc // groups
        if nchw:
            # ConvertLayout did not run (it rejects some graphs): NHWC around this convolution only.
            x = bb.emit_te(topi.transpose, x, [0, 2, 3, 1], primfunc_name_hint="transpose")
        if icg == 1 and groups > 1:  # depthwise (with a channel multiplier when ocg > 1)
            wp = bb.emit_te(
                lambda t: te.compute((kh, kw, oc), lambda a, b, o: t[o, 0, a, b], name=PACK + "depthwise_weight"),
                w,
                primfunc_name_hint=PACK + "depthwise_weight",
            )
            tile = symbolic_tile(self.registers, max(_block(oc, _channel_blocks(self.lanes)) // self.lanes, 1))
            y = bb.call_te(_depthwise_nhwc, x, wp, strides, pads, dilation, ocg, tile, primfunc_name_hint=DEPTHWISE)
        else:
            # Output channels pad to whole vectors (zero weights) when that is all a block lacks; the
            # extra channels are sliced off (a channel count like 1000 would otherwise get 8-wide blocks).
            ocp = _round_up(oc, self.lanes) if groups == 1 and oc > self.lanes and oc % self.lanes else oc
            ob = _block(ocp // groups, _channel_blocks(self.lanes))
            wp = bb.emit_te(
                lambda t: te.compute(
                    (ocp // ob, kh, kw, icg, ob),
                    lambda o, a, b, i, v: _zero_past(t, (o * ob + v, i, a, b), oc),
                    name=PACK + "conv_weight",
                ),
                w,
                primfunc_name_hint=PACK + "conv_weight",
            )
            tile = symbolic_tile(self.registers, max(ob // self.lanes, 1))
            y = bb.call_te(_conv_nhwc, x, wp, ocp, strides, pads, dilation, groups, tile, primfunc_name_hint=CONV)
            if ocp != oc:
                y = relax.op.strided_slice(bb.emit(y), axes=[3], begin=[0], end=[oc])
        if nchw:
            y = bb.call_te(topi.transpose, bb.emit(y), [0, 3, 1, 2], primfunc_name_hint="transpose")
        return y

    # matmul ---------------------------------------------------------------------------

    def matmul(self, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        try:
            lowered = self._matmul(bb, call)
        except Exception as err:
            log.debug("cpu_schedule: matmul keeps the default lowering (%s)", err)
            lowered = None
        return lowered if lowered is not None else self._default["relax.matmul"](bb, call)

    def _matmul(self, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr | None:
        a, b = call.args
        if _out_dtype(call.attrs, "float32") != "float32":
            return None
        if a.ty.dtype != "float32" or b.ty.dtype != "float32":
            return None
        b_shape, a_shape = _static_shape(b), _shape(a)
        if b_shape is None or len(b_shape) != 2:
            return self._batch_matmul(bb, a, b)
        if a_shape is None or len(a_shape) < 2:
            return None
        k, n = b_shape
        if not isinstance(a_shape[-1], int) or a_shape[-1] != k:
            return None
        npad = _round_up(n, self.lanes) if n > self.lanes and n % self.lanes else n
        nb = _block(npad, _channel_blocks(self.lanes))
        bp = bb.emit_te(
            lambda t: te.compute(
                (npad // nb, k, nb),
                lambda o, r, v: _zero_past(t, (r, o * nb + v), n, axis=1),
                name=PACK + "dense_weight",
            ),
            b,
            primfunc_name_hint=PACK + "dense_weight",
        )
        tile = symbolic_tile(self.registers, max(nb // self.lanes, 1))
        y = bb.call_te(_dense_packed, a, bp, npad, tile, primfunc_name_hint=DENSE)
        if npad != n:
            y = relax.op.strided_slice(bb.emit(y), axes=[len(a_shape) - 1], begin=[0], end=[n])
        return y

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
            npad = _round_up(n, self.lanes) if n > self.lanes and n % self.lanes else n
            nb = _block(npad, _channel_blocks(self.lanes))
        else:
            nb = 2 * self.lanes if self.registers >= 32 else self.lanes
            npad = (n + nb - 1) // nb * nb
        batch = b_shape[:-2]

        def pack(t: te.Tensor) -> te.Tensor:
            def body(*idx):
                *lead, o, r, v = idx
                j = o * nb + v
                return tirx.if_then_else(j < n, t[(*lead, r, tirx.min(j, n - 1))], tirx.const(0, t.dtype))

            return te.compute((*batch, npad // nb, b_shape[-2], nb), body, name=PACK + "batch_matmul")

        bp = bb.emit_te(pack, b, primfunc_name_hint=PACK + "batch_matmul")
        tile = symbolic_tile(self.registers, max(nb // self.lanes, 1))
        return bb.call_te(_batch_matmul_packed, a, bp, n, tile, primfunc_name_hint=DENSE)


def _out_dtype(attrs, default: str) -> str:
    """An op's ``out_dtype`` attribute; unset (None, void, empty) means ``default``."""
    text = str(getattr(attrs, "out_dtype", None) or "")
    return default if text in ("", "None", "void") else text


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _zero_past(t: te.Tensor, index: tuple, limit: int, axis: int = 0):
    """``t[index]``, or 0 where ``index[axis]`` is past ``limit`` (the padding of a packed weight)."""
    clamped = list(index)
    clamped[axis] = tirx.min(index[axis], limit - 1)
    return tirx.Select(index[axis] < limit, t[tuple(clamped)], tirx.const(0, t.dtype))


def _pad_nhwc(x: te.Tensor, pads: tuple[int, int, int, int]) -> te.Tensor:
    pad_t, pad_l, pad_b, pad_r = pads
    if not any(pads):
        return x
    return topi.nn.pad(x, [0, pad_t, pad_l, 0], [0, pad_b, pad_r, 0], name=PAD)


def _out_size(size, before: int, after: int, k: int, stride: int, dilation: int):
    return (size + before + after - ((k - 1) * dilation + 1)) // stride + 1


def symbolic_tile(registers: int, vectors: int) -> int:
    """Register-tile rows (output pixels of a row, matrix rows) for an extent known only at run time.

    A static extent gets the largest divisor within the register budget (``_row_tile``); a symbolic
    one is rounded up to a multiple of this tile instead (see ``_padded``), so the tile is kept short:
    at most ``SYMBOLIC_TILE - 1`` rows wasted per row of output.  8 divides the widths of inputs sized
    in multiples of 32 (OCR, detectors: 16, 32, 40, 80...) and of 224-pixel inputs down to 56; 7, 14
    and 28 compute 14% extra.  7 (the 224-input widths exactly) computed 16 columns as 21 (+31%: a
    64x64 classifier measured 1.18x); 4 lost up to 1.4x on a grouped conv (too few accumulators)."""
    return max(min((registers - 4) // vectors, SYMBOLIC_TILE), 1)


def _is_static(expr) -> bool:
    return isinstance(expr, int) or isinstance(tvm.sym.Analyzer().simplify(expr), tirx.IntImm)


def _padded(extent, tile: int):
    """``extent`` rounded up to a multiple of ``tile`` when it is symbolic (else unchanged).

    A symbolic loop split by a tile that may not divide it gets a predicate inside the tile, and TVM then
    keeps the whole accumulator row in memory instead of the tile in registers (the predicate defeats
    buffer compaction).  The computes therefore run whole tiles past the end, reading a clamped index
    (the last valid row or column, so every load stays in bounds and costs no branch), and a crop stage
    (``CROP``) keeps the valid part."""
    if tile <= 1 or _is_static(extent):
        return extent
    return (extent + tile - 1) // tile * tile


def _crop(full: te.Tensor, shape: list, name: str) -> te.Tensor:
    if all(_is_static(a - b) and int(tvm.sym.Analyzer().simplify(a - b)) == 0 for a, b in zip(full.shape, shape)):
        return full
    return te.compute(shape, lambda *i: full[i], name=name)


def _conv_nhwc(x: te.Tensor, wp: te.Tensor, oc: int, strides, pads, dilation, groups: int, tile: int = 1) -> te.Tensor:
    """out[n, y, x, o] = sum over (kh, kw, ic of o's group) of pad(x)[...] * wp[o // ob, kh, kw, ic, o % ob]."""
    n, h, w, _ = x.shape
    _, kh, kw, icg, ob = (int(d) for d in wp.shape)
    (sh, sw), (dh, dw) = strides, dilation
    oh = _out_size(h, pads[0], pads[2], kh, sh, dh)
    ow = _out_size(w, pads[1], pads[3], kw, sw, dw)
    xp = _pad_nhwc(x, pads)
    rh, rw, ri = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, icg), "ri")
    ocg = oc // groups
    owp = _padded(ow, tile)

    def body(b, y, xx, o):
        # The group of channel o, written through o's block (ob divides ocg) so that it does not vary
        # inside the vectorized block.
        channel = ri if groups == 1 else ((o // ob) * ob // ocg) * icg + ri
        col = xx if owp is ow else tirx.min(xx, ow - 1)
        return te.sum(
            xp[b, y * sh + rh * dh, col * sw + rw * dw, channel] * wp[o // ob, rh, rw, ri, o % ob], axis=[rh, rw, ri]
        )

    return _crop(te.compute((n, oh, owp, oc), body, name=CONV), [n, oh, ow, oc], CROP)


def _depthwise_nhwc(x: te.Tensor, wp: te.Tensor, strides, pads, dilation, multiplier: int, tile: int = 1) -> te.Tensor:
    """out[n, y, x, o] = sum over (kh, kw) of pad(x)[..., o // multiplier] * wp[kh, kw, o]."""
    n, h, w, _ = x.shape
    kh, kw, oc = (int(d) for d in wp.shape)
    (sh, sw), (dh, dw) = strides, dilation
    oh = _out_size(h, pads[0], pads[2], kh, sh, dh)
    ow = _out_size(w, pads[1], pads[3], kw, sw, dw)
    xp = _pad_nhwc(x, pads)
    rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")

    owp = _padded(ow, tile)

    def body(b, y, xx, o):
        channel = o if multiplier == 1 else o // multiplier
        col = xx if owp is ow else tirx.min(xx, ow - 1)
        return te.sum(xp[b, y * sh + rh * dh, col * sw + rw * dw, channel] * wp[rh, rw, o], axis=[rh, rw])

    return _crop(te.compute((n, oh, owp, oc), body, name=DEPTHWISE), [n, oh, ow, oc], CROP)


def _dense_packed(a: te.Tensor, bp: te.Tensor, n: int, tile: int = 1) -> te.Tensor:
    """out[..., m, j] = sum_k a[..., m, k] * bp[j // nb, k, j % nb].

    A symbolic row count ``m`` (batch, sequence) runs whole tiles of rows (see ``_padded``)."""
    _, k, nb = (int(d) for d in bp.shape)
    r = te.reduce_axis((0, k), "k")
    batch = list(a.shape[:-1])
    rows = batch[-1] if batch else None
    padded = _padded(rows, tile) if rows is not None else None

    def body(*idx):
        *index, j = idx
        if padded is not rows:
            index[-1] = tirx.min(index[-1], rows - 1)
        return te.sum(a[(*index, r)] * bp[j // nb, r, j % nb], axis=[r])

    if padded is rows:
        return te.compute((*batch, n), body, name=DENSE)
    return _crop(te.compute((*batch[:-1], padded, n), body, name=DENSE), [*batch, n], CROP)


def _batch_matmul_packed(a: te.Tensor, bp: te.Tensor, n, tile: int = 1) -> te.Tensor:
    """out[..., m, j] = sum_k a[..., m, k] * bp[..., j // nb, k, j % nb] (``bp`` packed per batch)."""
    *batch, rows, _ = a.shape
    k, nb = bp.shape[-2], int(bp.shape[-1])
    r = te.reduce_axis((0, k), "k")
    rows_p = _padded(rows, tile)
    cols_p = bp.shape[-3] * nb

    def body(*idx):
        *lead, m, j = idx
        if rows_p is not rows:
            m = tirx.min(m, rows - 1)
        return te.sum(a[(*lead, m, r)] * bp[(*lead, j // nb, r, j % nb)], axis=[r])

    full = te.compute((*batch, rows_p, cols_p), body, name=DENSE)
    return _crop(full, [*batch, rows, n], CROP)


# -- scheduling ---------------------------------------------------------------------------


def _extent(sch: s_tir.Schedule, loop) -> int | None:
    value = sch.get(loop).extent
    return int(value.value) if isinstance(value, tirx.IntImm) else None


def _product(extents: list[int | None]) -> int | None:
    return None if any(e is None for e in extents) else math.prod(extents)


def _iter_kinds(sch: s_tir.Schedule, block) -> list[str] | None:
    """'S'/'R' per loop of ``block`` when each of its loops binds exactly one block iterator, in order."""
    loops = sch.get_loops(block)
    realize = sch.get(loops[-1]).body if loops else None
    if not isinstance(realize, s_tir.SBlockRealize):
        return None
    stmt = realize.block
    if len(stmt.iter_vars) != len(loops):
        return None
    kinds = []
    for loop, iv, value in zip(loops, stmt.iter_vars, realize.iter_values):
        if not (isinstance(value, tirx.Var) and value.same_as(sch.get(loop).loop_var)):
            return None
        if iv.iter_type == tirx.IterVar.DataPar:
            kinds.append("S")
        elif iv.iter_type == tirx.IterVar.CommReduce:
            kinds.append("R")
        else:
            return None
    return kinds


def _vectorize_inner(sch: s_tir.Schedule, loop, lanes: int) -> bool:
    """Vectorize ``loop`` (split by a vector-sized divisor when longer); False when it cannot pay."""
    extent = _extent(sch, loop)
    if extent is None and lanes >= 2:
        # A symbolic extent: whole vectors, then a scalar tail.  The partition hint makes TVM's
        # LoopPartition emit the two as separate loops; without it the vectorized loop carries the
        # split's guard and is scalarized element by element (20-50x slower than the static loop).
        outer, inner = sch.split(loop, [None, lanes])
        sch.vectorize(inner)
        sch.annotate(outer, "pragma_loop_partition_hint", 1)
        return True
    if extent is None or extent < 2 or lanes < 2:
        return False
    if extent <= 2 * lanes:
        sch.vectorize(loop)
        return True
    factor = _block(extent, [lanes, 2 * lanes, lanes // 2, lanes // 4]) if extent % lanes else lanes
    if factor < 2:
        return False
    _, inner = sch.split(loop, [None, factor])
    sch.vectorize(inner)
    return True


#: What a symbolic extent is taken to be when deciding whether a loop nest is worth the threads: an
#: outermost one (a batch) 1, since inference usually runs one sample; others (rows, columns, sequence
#: length) this many.
SYMBOLIC_GUESS = 64

#: The register tile's rows along a symbolic axis (see ``symbolic_tile``).
SYMBOLIC_TILE = 8


def _guess_extent(sch: s_tir.Schedule, loop) -> int:
    extent = _extent(sch, loop)
    if extent is not None:
        return extent
    parent = sch.get_sref(loop).parent
    outermost = parent is None or not isinstance(parent.stmt, tirx.For)
    return 1 if outermost else SYMBOLIC_GUESS


def _guess_work(sch: s_tir.Schedule, loops: list) -> int:
    """The iterations of ``loops`` and of the loops nested singly inside the last one, symbolic extents
    guessed (``_guess_extent``)."""
    return math.prod(_guess_extent(sch, lp) for lp in loops) * _inner_work(sch, loops[-1])


#: The least work (elements, symbolic extents guessed) each iteration of a fused symbolic loop must do.
MIN_FUSED_WORK = 64


def _inner_work(sch: s_tir.Schedule, loop) -> int:
    """Iterations of the loops nested singly inside ``loop`` (1 when its body is not a loop)."""
    work, body = 1, sch.get(loop).body
    while isinstance(body, tirx.For):
        extent = body.extent
        work *= int(extent.value) if isinstance(extent, tirx.IntImm) else SYMBOLIC_GUESS
        body = body.body
    return work


def _parallel(sch: s_tir.Schedule, loops: list, min_elements: int = PARALLEL_MIN_ELEMENTS, work: int | None = None):
    """Fuse ``loops`` and run them in parallel when the work is worth the threads."""
    if not loops:
        return None
    extents = [_extent(sch, lp) for lp in loops]
    symbolic = [i for i, e in enumerate(extents) if e is None]
    if len(symbolic) > 1:
        # Fusing symbolic loops makes each iteration divide by a symbolic extent to recover its
        # indices: worth it over a loop of work (batch x rows), not over single elements.
        second = symbolic[1]
        keep = second + 1 if _inner_work(sch, loops[second]) >= MIN_FUSED_WORK else second
        keep = min(keep, symbolic[MAX_SYMBOLIC_FUSED - 1] + 1 if len(symbolic) > MAX_SYMBOLIC_FUSED else keep)
        loops, extents = loops[:keep], extents[:keep]
    total = work if work is not None else _product(extents)
    if total is None and min_elements > 1:
        total = _guess_work(sch, loops)
    if total is not None and total < min_elements:
        return None
    outer = _product([_guess_extent(sch, lp) for lp in loops])
    if outer < 2:
        return None
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.parallel(fused)
    return fused


def _schedule_spatial(sch: s_tir.Schedule, block, lanes: int):
    """Element-wise / injective block: outer loops parallel, innermost vectorized.  Returns the loop
    just outside the vectorized one (where a producer can be computed per vector), or None."""
    loops = sch.get_loops(block)
    kinds = _iter_kinds(sch, block)
    if not loops or kinds is None or "R" in kinds:
        return None
    total = _product([_extent(sch, lp) for lp in loops])
    if sch.get(block).name_hint.startswith(PACK + "batch_matmul") and _extent(sch, loops[-3]) is None:
        # [..., N / nb, K, nb] blocks of a run-time operand with a symbolic N: only the last block is
        # zero-padded; partitioned apart, the others copy whole vectors.
        sch.vectorize(loops[-1])
        sch.annotate(loops[-3], "pragma_loop_partition_hint", 1)
        _parallel(sch, list(loops[:-3]), work=total)
        return None
    if _transpose_tile(sch, block, lanes, total):
        return None
    symbolic_inner = _extent(sch, loops[-1]) is None
    vectorized = _vectorize_inner(sch, loops[-1], lanes)
    loops = sch.get_loops(block)
    if vectorized and symbolic_inner:
        # The vector loop's outer part (whole vectors + tail, partitioned) stays out of the parallel
        # loop.  No producer is computed in it: its buffer would be a whole row of symbolic size (a
        # heap allocation per row), so producers run as their own loop nests.
        _parallel(sch, list(loops[:-2]), work=total)
        return None
    outer = list(loops[:-1] if vectorized else loops)
    fused = _parallel(sch, outer, work=total)
    if not vectorized:
        return None
    if fused is not None:
        return fused
    return sch.get_loops(block)[-2] if len(sch.get_loops(block)) >= 2 else None


def _single_load(sch: s_tir.Schedule, block):
    """The one buffer load a block's value is (a pure copy: transpose, reshape, slice, ...), or None."""
    stmt = sch.get(block)
    body = stmt.body
    if not isinstance(body, tirx.BufferStore) or len(stmt.reads) != 1:
        return None
    value = body.value
    return value if isinstance(value, _BUFFER_LOAD) else None


def _transpose_tile(sch: s_tir.Schedule, block, lanes: int, total: int | None) -> bool:
    """A copy whose innermost output axis is not the input's innermost axis (a transpose, such as the
    NCHW <-> NHWC conversions at a network's edges): both axes tiled so that reads and writes stay in
    cache lines, tiles in parallel."""
    load = _single_load(sch, block)
    if load is None:
        return False
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    iter_vars = [iv.var for iv in stmt.iter_vars]
    last_read = load.indices[-1]
    if not isinstance(last_read, tirx.Var) or last_read.same_as(iter_vars[-1]):
        return False
    position = next((i for i, v in enumerate(iter_vars) if v.same_as(last_read)), None)
    if position is None:
        return False
    a, b = loops[position], loops[-1]
    ea, eb = _extent(sch, a), _extent(sch, b)
    if ea is None and eb is None:
        return False
    if (ea is not None and ea < lanes) or (eb is not None and eb < lanes):
        return False
    # A symbolic axis is split by a whole vector; its outer loop stays serial, with a partition hint
    # (whole tiles, then the guarded tail: see ``_vectorize_inner``).
    ta = lanes if ea is None else _block(ea, [lanes, lanes // 2])
    tb = lanes if eb is None else _block(eb, [lanes, lanes // 2])
    if ta < 4 or tb < 4:
        return False
    others = [lp for i, lp in enumerate(loops) if i not in (position, len(loops) - 1)]
    ao, ai = sch.split(a, [None, ta])
    bo, bi = sch.split(b, [None, tb])
    sch.reorder(*others, ao, bo, ai, bi)
    sch.unroll(ai)
    sch.vectorize(bi)
    if ea is None or eb is None:
        symbolic_outer = ao if ea is None else bo
        sch.annotate(symbolic_outer, "pragma_loop_partition_hint", 1)
        _parallel(sch, [*others, ao] if eb is None else others, work=total)
    else:
        _parallel(sch, [*others, ao, bo], work=total)
    return True


_BUFFER_LOAD = type(tirx.BufferLoad(tirx.decl_buffer((1,)), [0]))


def _schedule_reduction(sch: s_tir.Schedule, block, lanes: int) -> None:
    """Reduction block: the innermost spatial axis moves inside the reduction and is vectorized when it
    is the last (contiguous) output axis; the outer spatial loops run in parallel."""
    kinds = _iter_kinds(sch, block)
    if kinds is None:
        return
    loops = sch.get_loops(block)
    spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
    reduce = [lp for lp, k in zip(loops, kinds) if k == "R"]
    total = _product([_extent(sch, lp) for lp in spatial])
    work = _product([_extent(sch, lp) for lp in loops])
    last_spatial_is_last_axis = kinds and kinds.index("R") == len(spatial) if "R" in kinds else True
    inner_extent = _extent(sch, spatial[-1]) if spatial else None
    if spatial and last_spatial_is_last_axis and inner_extent is not None and inner_extent >= 4:
        inner = spatial[-1]
        sch.reorder(*spatial[:-1], *reduce, inner)
        _vectorize_inner(sch, inner, lanes)
        _parallel(sch, spatial[:-1], work=work if total else None)
        sch.decompose_reduction(block, reduce[0])
    elif spatial and reduce and last_spatial_is_last_axis and inner_extent is None and lanes >= 2:
        # A symbolic contiguous axis (a width): whole vectors of it run inside the reduction, the
        # tail apart (partition hint, see ``_vectorize_inner``).
        outer, inner = sch.split(spatial[-1], [None, lanes])
        sch.reorder(*spatial[:-1], outer, *reduce, inner)
        sch.vectorize(inner)
        sch.annotate(outer, "pragma_loop_partition_hint", 1)
        _parallel(sch, spatial[:-1], work=work)
        sch.decompose_reduction(block, reduce[0])
    else:
        _parallel(sch, spatial, work=work)


def _epilogue_blocks(sch: s_tir.Schedule, block) -> list:
    """The blocks that follow ``block`` in its function (its fused epilogue), in order."""
    root = sch.get_child_blocks(sch.get_sblock(_root_name(sch)))
    names = [sch.get(b).name_hint for b in root]
    index = names.index(sch.get(block).name_hint)
    after = root[index + 1 :]
    # Only consumers of the main block can run on its tile: a block after it that computes something
    # else (Gemm's beta * C) would be computed per tile and read whole. Leave such functions to the
    # next rule.
    consumers, frontier = set(), [block]
    while frontier:
        for c in sch.get_consumers(frontier.pop()):
            name = sch.get(c).name_hint
            if name not in consumers:
                consumers.add(name)
                frontier.append(c)
    if any(sch.get(b).name_hint not in consumers for b in after):
        raise _NotThisRule("a block after the main one does not consume it")
    return after


def _root_name(sch: s_tir.Schedule) -> str:
    return sch.mod["main"].body.block.name_hint


def _tile_epilogue(sch: s_tir.Schedule, main, epilogue: list, tile_loop, lanes: int) -> None:
    """Compute the epilogue on the tile right after its reduction, while the tile is in registers.

    Each epilogue block keeps its own stage (not inlined: see ``_schedule_generic``), on the tile,
    except after a padded symbolic tile (below)."""
    if any(sch.get(b).name_hint.startswith(CROP) for b in epilogue[:-1]):
        # A padded symbolic tile (see ``_padded``): the crop and the epilogue stages before the last
        # are inlined into it.  As stages of their own on the tile, their buffers were a whole row of
        # symbolic size (the crop's), or min(tile, width) elements: a run-time sized array, kept in
        # memory, not registers (1.2-1.35x slower on a relu6 epilogue).
        for stage in list(epilogue[:-1]):
            with contextlib.suppress(Exception):
                sch.compute_inline(stage)
                epilogue = [b for b in epilogue if not b.same_as(stage)]
    if not epilogue:
        epilogue = [sch.cache_write(main, 0, "local")]
    else:
        sch.set_scope(main, 0, "local")
    for consumer in epilogue:
        sch.reverse_compute_at(consumer, tile_loop, preserve_unit_loops=True)
        # Vectors as wide as the tile's (a 32-wide tile stored by 16-wide vectors stayed an array in
        # memory instead of becoming vector registers: 2x slower).
        _vectorize_inner(sch, sch.get_loops(consumer)[-1], lanes)
    for consumer in epilogue[:-1]:
        sch.set_scope(consumer, 0, "local")


def _row_tile(extent: int | None, budget: int, lo: int = 4) -> int:
    """Rows of a register tile: the largest divisor of ``extent`` within ``budget`` (at least ``lo``
    when one exists), or ``extent`` itself when it is small."""
    if extent is None:
        return 1
    if extent <= budget:
        return extent
    best = max((d for d in range(1, budget + 1) if extent % d == 0), default=1)
    return best if best >= lo else 1


def _tile_rows(sch: s_tir.Schedule, loop, registers: int, vectors: int, lo: int = 4) -> int:
    """The register tile's rows along ``loop``: a divisor of a static extent, ``symbolic_tile`` (which the
    compute padded the loop to, see ``_padded``) for a symbolic one."""
    extent = _extent(sch, loop)
    budget = max((registers - 4) // vectors, 1)
    if extent is not None:
        return _row_tile(extent, budget, lo)
    # The tile the compute padded to (whatever vector count it assumed): the largest one that provably
    # divides the extent.  Otherwise the split gets a guarded tail (correct, slower).
    value, analyzer = sch.get(loop).extent, tvm.sym.Analyzer()
    for tile in range(budget, 1, -1):
        if analyzer.can_prove_equal(tirx.floormod(value, tile), 0):
            return tile
    return symbolic_tile(registers, vectors)


def _packed_block(sch: s_tir.Schedule, block, ndim: int | tuple[int, ...]) -> int:
    """The innermost extent of the packed weight (the ``ndim``-D buffer ``block`` reads)."""
    # The packed operand is read last (a 3-D input of a dense product is read first); a weight is wholly
    # static, a run-time operand packed per batch (4-D) has a static block.
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    for region in reversed(list(sch.get(block).reads)):
        shape = region.source.shape
        static = all(isinstance(d, tirx.IntImm) for d in shape) or len(shape) == 4
        if len(shape) in ndims and static and isinstance(shape[-1], tirx.IntImm):
            return int(shape[-1])
    raise _NotThisRule


def _schedule_conv(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    lanes, regs = vector_lanes(target), vector_registers(target)
    epilogue = _epilogue_blocks(sch, block)
    for pad in [b for b in sch.get_producers(block) if sch.get(b).name_hint.startswith(PAD)]:
        _schedule_spatial(sch, pad, lanes)
    b, y, x, o, rh, rw, ri = sch.get_loops(block)
    ob = _packed_block(sch, block, 5)
    oo, oi = sch.split(o, [None, ob])
    vectors = max(ob // lanes, 1)
    wt = _tile_rows(sch, x, regs, vectors)
    xo, xi = sch.split(x, [None, wt])
    symbolic = _extent(sch, b) is None or _extent(sch, y) is None
    if symbolic:
        # The channel block stays out of a parallel loop fused from symbolic extents: recovered from
        # it, its index could not be proved in range, and the register tile lost its constant offsets
        # (kept in memory: 3x slower).
        sch.reorder(b, y, oo, xo, rh, rw, ri, xi, oi)
    else:
        sch.reorder(b, oo, y, xo, rh, rw, ri, xi, oi)
    sch.unroll(xi)
    sch.vectorize(oi)
    _tile_epilogue(sch, block, epilogue, xo, lanes)
    _parallel(sch, [b, y] if symbolic else [b, oo, y], min_elements=1, work=None)
    sch.decompose_reduction(block, rh)


def _schedule_depthwise(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    lanes, regs = vector_lanes(target), vector_registers(target)
    epilogue = _epilogue_blocks(sch, block)
    for pad in [b for b in sch.get_producers(block) if sch.get(b).name_hint.startswith(PAD)]:
        _schedule_spatial(sch, pad, lanes)
    b, y, x, o, rh, rw = sch.get_loops(block)
    oc = _extent(sch, o)
    ob = _block(oc, _channel_blocks(lanes)) if oc else 1
    oo, oi = sch.split(o, [None, ob])
    vectors = max(ob // lanes, 1)
    wt = _tile_rows(sch, x, regs, vectors)
    xo, xi = sch.split(x, [None, wt])
    sch.reorder(b, y, xo, oo, rh, rw, xi, oi)
    sch.unroll(xi)
    sch.vectorize(oi)
    _tile_epilogue(sch, block, epilogue, oo, lanes)
    _parallel(sch, [b, y], min_elements=1)
    sch.decompose_reduction(block, rh)


def _tiles_whole_batches(tile: int, extents: list[int]) -> bool:
    """Whether tiles of ``tile`` fused rows never straddle a batch boundary of any row axis: for every
    inner block of rows (the product of the trailing extents), the tile divides it or it divides the
    tile.  Checking the last extent alone let a tile of 12 over [5, 2, 4] rows straddle the batches of
    8 rows, and TVM then computed rows 16-19 from rows 0-3."""
    block = 1
    for extent in reversed(extents[1:]):
        block *= extent
        if tile % block and block % tile:
            return False
    return True


def _schedule_dense(sch: s_tir.Schedule, block, target: tvm.target.Target) -> None:
    lanes, regs = vector_lanes(target), vector_registers(target)
    epilogue = _epilogue_blocks(sch, block)
    loops = sch.get_loops(block)
    *rows, j, k = loops
    nb = _packed_block(sch, block, (3, 4))
    vectors = max(nb // lanes, 1)
    extents = [_extent(sch, lp) for lp in rows]
    fused_tile = _row_tile(_product(extents), max((regs - 4) // vectors, 1), lo=2) if None not in extents else 0
    if len(rows) == 1 or (fused_tile and _tiles_whole_batches(fused_tile, extents)):
        outer, m = [], sch.fuse(*rows) if len(rows) > 1 else rows[0]
    else:
        # Rows are fused only when no tile straddles two batches ([2, 77] rows in tiles of 14 computed
        # wrong results: TVM compacts such a tile's buffer wrongly), nor when an extent is symbolic (the
        # fused index would divide by it): then the last row axis is tiled (a symbolic one was padded to
        # whole tiles by the compute) and the others stay outside.
        outer, m = rows[:-1], rows[-1]
    jo, ji = sch.split(j, [None, nb])
    mt = _tile_rows(sch, m, regs, vectors, lo=2)
    mo, mi = sch.split(m, [None, mt])
    sch.reorder(jo, *outer, mo, k, mi, ji)
    sch.unroll(mi)
    sch.vectorize(ji)
    if _extent(sch, jo) is None and epilogue:
        # Columns padded to whole blocks (a symbolic N): on the tile, the crop's guard varies inside
        # the vector and scalarizes every store.  The tile is written whole to the padded product and
        # the crop and epilogue run after it, as element-wise loops (partitioned vector tails).
        _tile_epilogue(sch, block, [], mo, lanes)
        for stage in epilogue:
            _schedule_spatial(sch, stage, lanes)
    else:
        _tile_epilogue(sch, block, epilogue, mo, lanes)
    _parallel(sch, [jo, *outer, mo], min_elements=1, work=None)
    sch.decompose_reduction(block, k)


def _schedule_generic(sch: s_tir.Schedule, target: tvm.target.Target, vectorize: bool = True) -> None:
    """Every block of a function without a conv/dense main block.

    Pure copies (pads, transposes, concatenations, broadcasts) are inlined into their consumers, which
    changes no arithmetic.  Other element-wise producers are not inlined (TVM's simplifier would then
    see through stages that an operator keeps apart on purpose, e.g. log1p's ``(1 + e) - 1``): each is
    computed per vector inside its consumer's loop (``compute_at``), so it stays in registers.
    """
    lanes = vector_lanes(target) if vectorize else 1
    root = sch.get_sblock(_root_name(sch))
    for blk in sch.get_child_blocks(root)[:-1]:
        kinds = _iter_kinds(sch, blk)
        if kinds is not None and "R" not in kinds and _single_load(sch, blk) is not None:
            with contextlib.suppress(Exception):  # a producer TVM cannot inline stays a block of its own
                sch.compute_inline(blk)
    anchors: dict[str, object] = {}
    for blk in reversed(sch.get_child_blocks(root)):
        kinds = _iter_kinds(sch, blk)
        if kinds is None:
            continue
        name = sch.get(blk).name_hint
        if "R" in kinds:
            _schedule_reduction(sch, blk, lanes)
            continue
        consumers = sch.get_consumers(blk)
        anchor = anchors.get(sch.get(consumers[0]).name_hint) if len(consumers) == 1 else None
        if anchor is not None:
            try:
                sch.compute_at(blk, anchor, preserve_unit_loops=True)
                _vectorize_inner(sch, sch.get_loops(blk)[-1], lanes)
                anchors[name] = anchor
                continue
            except Exception:  # computed on its own instead
                pass
        anchors[name] = _schedule_spatial(sch, blk, lanes)


def _main_block(sch: s_tir.Schedule, name: str):
    for blk in sch.get_child_blocks(sch.get_sblock(_root_name(sch))):
        if sch.get(blk).name_hint.startswith(name) and not sch.get(blk).name_hint.startswith(PAD):
            return blk
    return None


def _lowers(func: tirx.PrimFunc, target: tvm.target.Target) -> bool:
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    try:
        host = target if target.host is None else target.host
        mod = tirx.transform.BindTarget(target.with_host(host))(mod)
        pipeline, _, _ = tirx.get_default_tir_pipeline(target)
        pipeline(mod)
    except Exception:  # any failure means the schedule is unusable
        return False
    return True


def _single_root(func: tirx.PrimFunc) -> bool:
    body = func.body
    return isinstance(body, s_tir.SBlockRealize) and body.block.name_hint == "root"


def schedule_prim_func(func: tirx.PrimFunc, target: tvm.target.Target) -> tuple[tirx.PrimFunc, str]:
    """``func`` with the first CPU schedule that applies and lowers, and that rule's name."""
    if not _single_root(func) or is_scheduled(func):
        return func, "none"
    rules: list[tuple[str, Callable]] = []
    for name, fn in ((CONV, _schedule_conv), (DEPTHWISE, _schedule_depthwise), (DENSE, _schedule_dense)):
        rules.append((name, lambda sch, n=name, f=fn: f(sch, _require(_main_block(sch, n)), target)))
    if _has_bool(func):
        # LLVM miscompiles some vectors of i1 (bool casts and comparisons came out wrong): scalar loops.
        rules = [("generic-scalar", lambda sch: _schedule_generic(sch, target, vectorize=False))]
    else:
        rules.append(("generic", lambda sch: _schedule_generic(sch, target)))
    for name, rule in rules:
        sch = s_tir.Schedule(func)
        try:
            rule(sch)
        except _NotThisRule:
            continue
        except Exception as err:  # a rule that half-matches: try the next
            log.debug("cpu_schedule: rule %s failed: %s", name, str(err).strip().splitlines()[-1:])
            continue
        candidate = sch.mod["main"]
        if _lowers(candidate, target):
            return candidate, name
        log.debug("cpu_schedule: rule %s produced a function that does not lower", name)
    return func, "none"


def _has_bool(func: tirx.PrimFunc) -> bool:
    found = []

    def visit(node: object) -> None:
        if isinstance(node, (tirx.BufferStore, _BUFFER_LOAD)):
            buffer = node.buffer if isinstance(node, tirx.BufferStore) else node.source
            if str(buffer.dtype) == "bool":
                found.append(node)

    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, visit), (_BUFFER_LOAD, visit)], order="pre")
    return bool(found) or any(str(p.ty.dtype) == "bool" for p in func.params if hasattr(p.ty, "dtype"))


class _NotThisRule(Exception):
    pass


def _require(block):
    if block is None:
        raise _NotThisRule
    return block


def schedule_module(mod: tvm.IRModule, target: tvm.target.Target) -> tuple[tvm.IRModule, dict[str, str]]:
    """Every PrimFunc of a fused module scheduled; returns ``{function name: rule}``."""
    report: dict[str, str] = {}
    updates = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        if is_scheduled(func):
            report[gvar.name_hint] = "tuned"  # MetaSchedule's record applied
            continue
        scheduled, rule = schedule_prim_func(func, target)
        report[gvar.name_hint] = rule
        if rule != "none":
            updates[gvar] = scheduled
        elif _single_root(func):
            # Visible without debug logging: such a kernel runs as TVM's naive single-threaded loops.
            log.info("cpu_schedule: no default schedule applied to %s (naive loops)", gvar.name_hint)
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod, report


def _has_conv2d(mod: tvm.IRModule) -> bool:
    found = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d":
            found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


#: Ops whose layout inference ``ConvertLayout`` handles on the graphs seen so far.  Others can trip it
#: (a channel shuffle's rank-5 reshape/stack: "can't find S in source layout"), and it then fails for
#: the whole module; on a retry they are lowered to TIR first, so that ``ConvertLayout`` treats them as
#: layout-unaware and hands them their original layout.
LAYOUT_SAFE_OPS = frozenset(
    "relax." + name
    for name in [
        "nn.conv2d",
        "nn.max_pool2d",
        "nn.avg_pool2d",
        "nn.adaptive_avg_pool2d",
        "nn.batch_norm",
        "concat",
        "nn.relu",
        "clip",
        "sigmoid",
        "tanh",
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
    ]
)


def _legalize_all_but(mod: tvm.IRModule, keep: frozenset[str]) -> tvm.IRModule:
    return relax.transform.LegalizeOps(skip_ops=sorted(keep))(mod)


def to_nhwc(mod: tvm.IRModule) -> tvm.IRModule:
    """Convolutions (and the layout-agnostic ops around them) in NHWC; ``mod`` unchanged on failure (the
    convolutions then convert their own input and output, see ``Lowering.conv2d``)."""
    if not _has_conv2d(mod):
        return mod
    convert = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OIHW"]})
    try:
        return convert(mod)
    except Exception as err:  # retried below
        log.debug("cpu_schedule: ConvertLayout failed (%s); retrying with fewer ops", err)
    try:
        return convert(_legalize_all_but(mod, LAYOUT_SAFE_OPS))
    except Exception as err:  # keep NCHW rather than fail
        log.debug("cpu_schedule: ConvertLayout failed again, keeping NCHW: %s", err)
        return mod


def prepare(
    mod: tvm.IRModule, target: tvm.target.Target, tuned: Callable[[tvm.IRModule], tvm.IRModule] | None = None
) -> tuple[tvm.IRModule, dict[str, str]]:
    """Relax -> NHWC, legalized with packed weights, fused and scheduled (call under ``with target``).
    ``tuned`` (tuning records) schedules the kernels it knows first; the default rules take the rest."""
    mod = lower(mod, target)
    if tuned is not None:
        mod = tuned(mod)
    return schedule_module(mod, target)


def lower(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Relax -> NHWC, legalized with packed weights and fused: the kernels the schedules (or MetaSchedule) see."""
    lowering = Lowering(target)
    mod = to_nhwc(mod)
    return tvm.transform.Sequential(
        [
            relax.backend.DispatchSampling(),
            relax.backend.DispatchSortScan(),
            relax.transform.LegalizeOps(customize_legalize_map=lowering.legalize_map()),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )(mod)


def build(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    opt_level: int = 3,
    tuned: Callable[[tvm.IRModule], tvm.IRModule] | None = None,
) -> tuple[relax.VMExecutable, dict]:
    """Schedule (``prepare``) and compile ``mod`` for a CPU ``target``."""
    with target, tvm.transform.PassContext(opt_level=opt_level):
        mod, report = prepare(mod, target, tuned)
        return tvm.compile(mod, target), report
