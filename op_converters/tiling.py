"""Rolling, tiling, expanding and padding: ROLL, TILE, EXPAND and PAD, whose outputs wrap the input
around, repeat it, broadcast it or surround it with a fill (or its own edges).

All of these only move (or replicate) elements, so a quantized input whose output has the same
scale comes back bit-exact: dequantize, move, requantize is the identity on the moved values.
"""

from __future__ import annotations

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.indexing import _as_i64, _bounds, _same_dim, _static
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import PadMode, ResultCode


def _roll_te(x: te.Tensor, shifts: dict[int, int]) -> te.Tensor:
    def index(*i):
        return x[tuple(tirx.floormod(v - shifts[a], x.shape[a]) if a in shifts else v for a, v in enumerate(i))]

    return te.compute(x.shape, index, name="roll")


@converter(O.ROLL)
def roll(args: OpArgs) -> relax.Expr:
    """input, shifts, axes (optional; absent or empty: roll the flattened input) -> output.

    ``output = numpy.roll(input, shifts, axes)``: elements shifted past the end come back at the
    start; shifts and axes broadcast against each other, shifts of a repeated axis add up.

    Reference: the spec; numpy.roll (Paddle's roll, which numpy's broadcasting extends).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    shifts = args.ints("shifts")
    if not shifts:
        args.fail("must hold at least one shift", "shifts")
    if not args.has("axes"):
        flat = args.emit(relax.op.reshape(x, [-1]))
        rolled = args.emit_te(lambda t: _roll_te(t, {0: sum(shifts)}), flat)
        return relax.op.reshape(rolled, shape)
    axes = args.ints("axes")
    if len(shifts) != len(axes) and 1 not in (len(shifts), len(axes)):
        args.fail(f"{len(shifts)} shifts do not match {len(axes)} axes (nor broadcast)", "shifts")
    total: dict[int, int] = {}
    for s, a in zip(shifts * (len(axes) if len(shifts) == 1 else 1), axes * (len(shifts) if len(axes) == 1 else 1)):
        if not -rank <= a < rank:
            args.fail(f"axis {a} is out of range [-{rank}, {rank})", "axes")
        total[a % rank] = total.get(a % rank, 0) + s
    return args.emit_te(lambda t: _roll_te(t, total), x)


@converter(O.TILE)
def tile(args: OpArgs) -> relax.Expr:
    """input, repeats (positive) -> output with output_dims[i] = input_dims[i] * repeats[i].

    ``output = numpy.tile(input, repeats)``: fewer repeats than dimensions repeat the trailing
    ones; more add leading dimensions; no repeats at all is the identity (numpy.tile(x, ()), and
    ONNX's Tile of a rank-0 input, whose repeats are empty; onnxruntime runs it).

    Reference: the spec; numpy.tile / Paddle's tile (repeats must be positive).
    """
    x = args.tensor("input")
    if not args.operand("repeats").is_constant:
        return _tile_computed(args, x)
    repeats = args.ints("repeats")
    if not repeats:
        return x
    if any(r <= 0 for r in repeats):
        args.fail(f"must hold positive repeat counts, got {repeats}", "repeats")
    return relax.op.tile(x, repeats)


def _tile_computed(args: OpArgs, x: relax.Expr) -> relax.Expr:
    """TILE by repeat counts computed from symbolic dimensions (or read at execution): the same
    numpy.tile, each count checked positive at execution."""
    repeats = _computed_values(args, "repeats", "tile_r")
    if not repeats:
        return x  # numpy.tile(x, ()): the identity
    if any(_static(r) and r <= 0 for r in repeats):
        args.fail(f"must hold positive repeat counts, got {repeats}", "repeats")
    symbolic = [r for r in repeats if not _static(r)]
    x = (
        args.require(
            x,
            tirx.all(*[r > 0 for r in symbolic]) if len(symbolic) > 1 else symbolic[0] > 0,
            "repeat counts must be positive at execution",
            "repeats",
        )
        if symbolic
        else x
    )
    rank = len(args.shape(x))
    n = max(rank, len(repeats))
    repeats = [1] * (n - len(repeats)) + list(repeats)
    return args.emit_te(lambda t: _tile_te(t, repeats), x)


def _computed_values(args: OpArgs, name: str, dim_name: str) -> list:
    """Operand ``name`` (TILE's repeats, EXPAND's shape), not a constant: its values computed from
    symbolic dimensions (shape_values) or, where they depend on data, read at execution as new
    symbolic dimensions ``dim_name0``, ``dim_name1``, ... (it must then be 1-D of a known length)."""
    values = args.shape_values(name)
    if values is None:
        lengths = args.shape(args.raw_tensor(name))
        if len(lengths) != 1 or not _static(lengths[0]):
            args.fail(f"must be 1-D with a known length, got shape {lengths}", name)
        values = args.runtime_shape(name, lengths[0], dim_name)
    return values


def _tile_te(x: te.Tensor, repeats: list) -> te.Tensor:
    diff = len(repeats) - len(x.shape)
    dims = [1] * diff + list(x.shape)
    out = [d * r for d, r in zip(dims, repeats)]

    def index(*i):
        return x[tuple(tirx.floormod(i[a + diff], d) for a, d in enumerate(x.shape))]

    return te.compute(out, index, name="tile")


@converter(O.EXPAND)
def expand(args: OpArgs) -> relax.Expr:
    """input, shape (INT32/INT64; -1 keeps the input's dimension) -> output of shape ``shape``.

    numpy broadcasting of ``input`` to ``shape`` (aligned at the trailing dimensions): a
    dimension of 1 expands to any size, others must equal the target; leading new dimensions
    must be positive.

    Reference: the spec; Paddle's expand_v2 for -1.
    """
    x = args.tensor("input")
    in_shape = args.shape(x)
    if not args.operand("shape").is_constant:
        return _expand_computed(args, x)
    target = args.ints("shape")
    diff = len(target) - len(in_shape)
    if diff < 0:
        args.fail(f"{target} has fewer dimensions than the input {in_shape}", "shape")
    dims = []
    for i, t in enumerate(target):
        d = in_shape[i - diff] if i >= diff else None
        if t == -1 and d is not None:
            dims.append(d)
        elif t <= 0:
            where = "a new leading dimension" if d is None else f"dimension {i}"
            args.fail(f"{where} must be positive{'' if d is None else ' or -1'}, got {t} in {target}", "shape")
        elif d is not None and _static(d) and d not in (1, t):
            args.fail(f"input dimension {i - diff} of size {d} cannot expand to {t} (target {target})", "shape")
        else:
            dims.append(t)
    symbolic = [i for i, d in enumerate(in_shape) if not _static(d) and _static(dims[i + diff])]
    if not symbolic:
        return relax.op.broadcast_to(x, dims)
    # An UNKNOWN input dim expanded to a known size may be 1 or that size: relax.op.broadcast_to
    # would assume the latter, so index it at run time (0 where it is 1), once execution has checked
    # that it is one of the two (anything else would read past the input).
    for i in symbolic:
        d, t = in_shape[i], dims[i + diff]
        condition = tirx.Or(tirx.EQ(d, tirx.const(1, "int64")), tirx.EQ(d, tirx.const(t, "int64")))
        message = f"input dimension {i} (unknown until execution) must be 1 or {t} to expand to {target}"
        x = args.require(x, condition, message, "input")
    return args.emit_te(lambda t: _expand_te(t, dims, set(symbolic)), x)


def _expand_computed(args: OpArgs, x: relax.Expr) -> relax.Expr:
    """EXPAND to a shape computed from symbolic dimensions (or read at execution).  A computed size of
    -1 or 1 keeps the input's dimension (ONNX's bidirectional broadcasting, which is what such shapes
    come from); any other size must match the input's dimension unless that is 1, checked at execution.
    """
    in_shape = args.shape(x)
    target = _computed_values(args, "shape", "expand_d")
    diff = len(target) - len(in_shape)
    if diff < 0:
        args.fail(f"has {len(target)} dimensions, fewer than the input's {len(in_shape)}", "shape")
    dims, conditions = [], []
    for i, t in enumerate(target):
        d = in_shape[i - diff] if i >= diff else None
        if d is None:
            if _static(t) and t < 0:
                args.fail(f"a new leading dimension must be non-negative, got {t}", "shape")
            dims.append(t)
            if not _static(t):
                conditions.append(t >= 0)
        elif _static(t) and t in (-1, 1):
            dims.append(d)
        elif _static(d) and d == 1:
            dims.append(t)
            if not _static(t):
                conditions.append(t >= -1)
        elif _static(t) or _static(d) or not _same_dim(d, t):
            one, minus_one = tirx.const(1, "int64"), tirx.const(-1, "int64")
            tt = tirx.const(t, "int64") if _static(t) else t
            dd = tirx.const(d, "int64") if _static(d) else d
            keep = tirx.Or(tirx.EQ(tt, minus_one), tirx.EQ(tt, one))
            conditions.append(tirx.Or(tirx.Or(keep, tirx.EQ(dd, tt)), tirx.EQ(dd, one)))
            if _static(d):
                dims.append(d)  # d > 1: the size must be d (or keep it)
            elif _static(t):
                dims.append(t)  # the input's dimension must be t or 1
            else:
                dims.append(tirx.Select(keep, dd, tt))
        else:
            dims.append(d)
    # The guards hold x (a tensor guard orders the kernel after the sizes it reads are bound; a guard on the
    # sizes alone let FuseOps place the kernel first: "expand_d0 ... has not been computed"), through a
    # no-copy view: where x is one item of a multi-output kernel (GRU's Y) that an element-wise op also
    # reads, a match_cast of x itself made FuseOps return that item from the op's fused function as its own
    # parameter, and FuseTIR failed ("There must be an in-place index specified for each output").
    if conditions:
        x = args.emit(relax.op.memory.view(x, relax.ShapeExpr(in_shape)))
    for condition in conditions:
        message = "the input's dimensions cannot expand to the shape computed at execution"
        x = args.require(x, condition, message, "shape")
    symbolic = {a for a, d in enumerate(in_shape) if not _static(d)}
    return args.emit_te(lambda t: _expand_te(t, dims, symbolic), x)


def _expand_te(x: te.Tensor, dims: list, symbolic: set[int]) -> te.Tensor:
    diff = len(dims) - len(x.shape)

    def index(*i):
        at = []
        for a, d in enumerate(x.shape):
            v = i[a + diff]
            if a in symbolic:
                # min: reads stay inside x should the size guard (require_dims) run after this kernel
                v = tirx.if_then_else(d == 1, tirx.const(0, v.ty), tirx.min(v, d - 1))
            elif _static_one(d):
                v = tirx.const(0, v.ty)
            at.append(v)
        return x[tuple(at)]

    return te.compute(dims, index, name="expand")


def _static_one(d) -> bool:
    return isinstance(d, tirx.IntImm) and d.value == 1


# Relax's names: its 'replicate' is numpy's 'edge'.
_RELAX_PAD = {
    PadMode.CONSTANT: "constant",
    PadMode.REFLECT: "reflect",
    PadMode.REPLICATE: "replicate",
    PadMode.EDGE: "replicate",
}


@converter(O.PAD)
def pad(args: OpArgs) -> relax.Expr:
    """input, pads [x0_begin, x0_end, x1_begin, ...] (2 * rank, >= 0), mode, value -> output.

    ``mode``: CONSTANT fills with ``value`` (default 0), REFLECT mirrors without repeating the
    edge (numpy 'reflect'; pads must be smaller than the dimension), REPLICATE and EDGE repeat
    the edge (numpy 'edge'); NONE is rejected.

    Reference: the spec; numpy.pad, Paddle's pad2d/pad3d for the modes.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    if not args.operand("pads").is_constant:
        return _pad_computed(args, x, shape)
    pads = args.ints("pads")
    if len(pads) != 2 * len(shape) or any(p < 0 for p in pads):
        args.fail(f"must hold 2 * rank = {2 * len(shape)} non-negative values, got {pads}", "pads")
    mode = args.int("mode")
    if mode not in _RELAX_PAD:
        names = ", ".join(f"{m.name}={m.value}" for m in _RELAX_PAD)
        args.fail(f"mode {mode} is not a supported padding mode (one of {names})", "mode")
    if mode == PadMode.REFLECT:
        for axis, d in enumerate(shape):
            widest = max(pads[2 * axis : 2 * axis + 2])
            message = f"REFLECT pads {pads[2 * axis : 2 * axis + 2]} of axis {axis} must be below its size"
            if _static(d) and widest >= d:
                args.fail(f"{message} {d}", "pads")
            if not _static(d) and widest:
                x = args.require(x, d > widest, f"{message} (unknown until execution)", "pads")
    value = 0
    if mode == PadMode.CONSTANT and args.has("value"):
        value = args.value("value").reshape(-1)
        if value.size != 1:
            args.fail(f"must hold one value, got {value.size}", "value")
        value = value[0].item()
    if not any(pads):
        return x
    return relax.op.nn.pad(x, pads, _RELAX_PAD[mode], value)


def _pad_computed(args: OpArgs, x: relax.Expr, shape: list) -> relax.Expr:
    """PAD whose pads are computed at run time: their values as expressions over the symbolic sizes, or
    read at execution (``_bounds``); CONSTANT mode only.  A negative pad crops, as ONNX's Pad (and
    onnxruntime) do; an axis cropped below 0 fails the execution."""
    if args.int("mode") != PadMode.CONSTANT:
        args.fail("pads computed at run time take CONSTANT mode only", "mode", ResultCode.FEATURE_NOT_SUPPORTED)
    pads = _bounds(args, "pads")
    if len(pads) != 2 * len(shape):
        args.fail(f"must hold 2 * rank = {2 * len(shape)} values, got {len(pads)}", "pads")
    before, after = [_as_i64(p) for p in pads[0::2]], [_as_i64(p) for p in pads[1::2]]
    for axis, (d, b, a) in enumerate(zip(shape, before, after)):
        size = _as_i64(d) + b + a
        if not isinstance(size, tirx.IntImm):
            args.require_dims(size >= 0, size, f"pads crop axis {axis} below 0 elements at execution", "pads")
        elif size.value < 0:
            args.fail(f"pads crop axis {axis} of size {d} below 0 elements", "pads")
    value = args.value("value").reshape(-1)[0].item() if args.has("value") else 0
    spans = [[b, a] for b, a in zip(before, after)]
    return args.emit_te(_pad_te, x, spans, value, primfunc_name_hint="pad")


def _pad_te(x: te.Tensor, spans: list, value: object) -> te.Tensor:
    """``x`` with ``spans[axis] = [before, after]`` elements of ``value`` around each axis (negative:
    cropped); reads stay inside ``x``."""
    dims = [_as_i64(d) for d in x.shape]
    fill = tirx.const(value, str(x.dtype))

    def element(*index):
        sources = [i - b for i, (b, _) in zip(index, spans)]
        inside = tirx.all(*[tirx.And(s >= 0, s < d) for s, d in zip(sources, dims)]) if dims else True
        clamped = [tirx.max(tirx.min(s, d - 1), tirx.const(0, "int64")) for s, d in zip(sources, dims)]
        return tirx.Select(inside, x(*clamped), fill)

    out_shape = [d + b + a for d, (b, a) in zip(dims, spans)]
    return te.compute(out_shape, element, name="pad")
