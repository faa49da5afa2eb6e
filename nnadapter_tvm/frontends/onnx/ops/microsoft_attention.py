"""onnxruntime's com.microsoft attention operators: Attention, MultiHeadAttention and RotaryEmbedding, each
composed of standard NNAdapter operations (scaled dot-product attention by MAT_MUL, SOFTMAX and the masks'
biases; the rotation by GATHER, MUL and ADD).  The other com.microsoft operators, and the helpers these share
with them, are in ``microsoft.py``, whose notes on semantics and types hold here too."""

from __future__ import annotations

import itertools

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast, reshape
from nnadapter_tvm.frontends.onnx.ops.elementwise import op
from nnadapter_tvm.frontends.onnx.ops.microsoft import (
    MS,
    _f,
    _f32,
    _matmul,
    _opt_f32,
    _rank,
    _refuse_attrs,
    _refuse_inputs,
    _refuse_outputs,
    _size,
    _static,
    _wanted,
)
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O

_LOWEST = float(np.finfo(np.float32).min)  # what onnxruntime writes where the causal mask hides a position


# -- shapes ----------------------------------------------------------------------------------------------------
def _arange(ctx: NodeContext, x: Value, axis: int) -> Value:
    """0, 1, .. dimension ``axis`` of ``x`` - 1 (INT32)."""
    d = x.shape[axis]
    if d is not None:
        return ctx.i32(np.arange(d, dtype="int32"))
    return ctx.emit(O.RANGE, [ctx.i32(0), _size(ctx, x, axis), ctx.i32(1)], dtype="int32", shape=(None,))


def _unsqueeze(ctx: NodeContext, x: Value, axes: list[int]) -> Value:
    shape = list(x.shape)
    for a in sorted(axes):
        shape.insert(a, 1)
    return ctx.emit(O.UNSQUEEZE, [x, ctx.i32(axes)], shape=tuple(shape))


def _transpose(ctx: NodeContext, x: Value, perm: list[int]) -> Value:
    return ctx.emit(O.TRANSPOSE, [x, ctx.i32(perm)], shape=tuple(x.shape[p] for p in perm))


def _slice_last(ctx: NodeContext, x: Value, start: int, end: int) -> Value:
    axis = x.rank - 1
    shape = (*x.shape[:-1], end - start)
    inputs = [x, ctx.i32([axis]), ctx.i32([start]), ctx.i32([end]), ctx.i32([1])]
    return ctx.emit(O.SLICE, inputs, shape=shape)


def _concat(ctx: NodeContext, parts: list[Value], axis: int) -> Value:
    sizes = [p.shape[axis] for p in parts]
    total = None if None in sizes else sum(sizes)
    shape = (*parts[0].shape[:axis], total, *parts[0].shape[axis + 1 :])
    return ctx.emit(O.CONCAT, [*parts, ctx.i32(axis)], shape=shape)


# -- attention ---------------------------------------------------------------------------------------------------
def _heads(ctx: NodeContext, t: Value, heads: int, perm: list[int]) -> Value:
    """[B, L, heads * size] -> [B, L, heads, size] -> TRANSPOSE ``perm``."""
    size = t.shape[2] // heads
    split = reshape(ctx, t, [0, 0, heads, size], out_shape=(t.shape[0], t.shape[1], heads, size))
    return _transpose(ctx, split, perm)


def _reshape_to(ctx: NodeContext, x: Value, dims: list[tuple[Value | None, int | None]]) -> Value:
    """RESHAPE ``x`` to ``dims``: each a static size or a [1] INT32 size computed from dimensions, so that
    the result has the very symbolic sizes of the tensors those were read from (a mask fed with its own
    ``total`` dimension then broadcasts with the scores; RESHAPE checks the element count at execution)."""
    if all(size is not None for _, size in dims):
        return reshape(ctx, x, [size for _, size in dims], out_shape=tuple(size for _, size in dims))
    parts = [ctx.i32([size]) if size is not None else computed for computed, size in dims]
    target = _concat(ctx, parts, 0)
    return ctx.emit(O.RESHAPE, [x, target], shape=tuple(size for _, size in dims))


def _dim_of(ctx: NodeContext, x: Value, axis: int) -> tuple[Value | None, int | None]:
    d = x.shape[axis]
    return (None, d) if d is not None else (_size(ctx, x, axis, one_d=True), None)


def _mask_bias(ctx: NodeContext, mask: Value, q: Value, k: Value, filler: float) -> Value:
    """What onnxruntime adds to the scores [B, N, S, T] for ``mask``, as [B, 1, S|1, T]: 0 where a position is
    kept, ``filler`` (mask_filter_value) where it is masked.  A 2-D mask [B, T] or 3-D [B, S, T] keeps its
    positions > 0; a 1-D one holds B end positions (right padding: positions at or after the end are
    masked), followed by B start positions where it holds 2 * B values (left padding: positions before the
    start are masked as well)."""
    if mask.rank == 4:
        ctx.unsupported(f"mask_index {mask.describe()} of rank 4 (Megatron's; onnxruntime's CPU kernel neither)")
    rank = _rank(ctx, mask, "mask_index", (1, 2, 3))
    zero, fill = _f(ctx, 0.0), _f(ctx, filler)
    batch, rows, total = _dim_of(ctx, q, 0), _dim_of(ctx, q, 2), _dim_of(ctx, k, 2)
    if rank >= 2:
        kept = ctx.emit(O.GREATER, [mask, ctx.constant(np.array(0, mask.dtype))], dtype="bool", shape=mask.shape)
        bias = op(ctx, O.WHERE, kept, zero, fill)
        return _reshape_to(ctx, bias, [batch, (None, 1), rows if rank == 3 else (None, 1), total])
    mask = cast(ctx, mask, "int32")
    positions = _unsqueeze(ctx, _arange(ctx, k, 2), [0])  # [1, T]
    b = q.shape[0]
    if b is not None and mask.shape[0] == b:
        masked = ctx.emit(O.GREATER_EQUAL, [positions, _unsqueeze(ctx, mask, [1])], dtype="bool", shape=(b, k.shape[2]))
    else:
        # [B] or [2 * B] known only at execution: the ends are the first B values, the starts the next B of
        # the mask followed by B zeros (no left padding where only ends are given).  GATHERed at 0 .. B-1
        # and B .. 2B-1, so that both keep the batch's own symbolic size (and a mask shorter than the batch
        # fails GATHER's index check at execution).
        padded = _concat(ctx, [mask, ctx.emit(O.FILL_LIKE, [mask, ctx.i32(0)], dtype="int32", shape=mask.shape)], 0)
        indices = _arange(ctx, q, 0)

        def part(index: Value) -> Value:
            return _unsqueeze(ctx, ctx.emit(O.GATHER, [padded, index, ctx.i32(0)], shape=(b,)), [1])

        ends, starts = part(indices), part(op(ctx, O.ADD, indices, _size(ctx, q, 0)))
        after = ctx.emit(O.GREATER_EQUAL, [positions, ends], dtype="bool", shape=(b, k.shape[2]))
        before = ctx.emit(O.LESS, [positions, starts], dtype="bool", shape=(b, k.shape[2]))
        masked = ctx.emit(O.OR, [after, before], dtype="bool", shape=(b, k.shape[2]))
    return _unsqueeze(ctx, op(ctx, O.WHERE, masked, fill, zero), [1, 2])


def _causal(ctx: NodeContext, q: Value, k: Value, past: Value | None, bias: Value | None) -> Value:
    """``bias`` with the positions after each query's own (past length + its index) set to the lowest
    float, as onnxruntime's unidirectional attention does."""
    rows = _unsqueeze(ctx, _arange(ctx, q, 2), [1])  # [S, 1]
    if past is not None:
        rows = op(ctx, O.ADD, rows, _size(ctx, past, 2))
    later = ctx.emit(O.GREATER, [_arange(ctx, k, 2), rows], dtype="bool", shape=(q.shape[2], k.shape[2]))
    return op(ctx, O.WHERE, later, _f(ctx, _LOWEST), bias if bias is not None else _f(ctx, 0.0))


def _attend(
    ctx: NodeContext,
    q: Value,
    k: Value,
    v: Value,
    past: tuple[Value, Value] | None,
    mask: Value | None,
    attention_bias: Value | None,
) -> tuple[Value, Value, Value]:
    """Scaled dot-product attention on heads: q [B, N, S, h], k [B, N, L, h], v [B, N, L, hv] (after the past
    ones [B, N, P, h] when given) -> ([B, S, N * hv], the keys and values attended to)."""
    if past is not None:
        k = _concat(ctx, [past[0], k], 2)
        v = _concat(ctx, [past[1], v], 2)
    head_size = q.shape[3]
    scale = ctx.attr("scale", None)
    scale = float(1.0 / np.sqrt(head_size)) if scale is None else float(scale)
    b, n, s, t = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    scores = ctx.emit(O.MAT_MUL, [q, k, ctx.boolean(False), ctx.boolean(True)], shape=(b, n, s, t))
    scores = op(ctx, O.MUL, scores, _f(ctx, scale))
    bias = None
    if mask is not None:
        bias = _mask_bias(ctx, mask, q, k, float(ctx.attr("mask_filter_value", -10000.0)))
    if int(ctx.attr("unidirectional", 0)):
        bias = _causal(ctx, q, k, None if past is None else past[0], bias)
    if bias is not None:
        scores = op(ctx, O.ADD, scores, bias)
    if attention_bias is not None:
        _rank(ctx, attention_bias, "attention_bias", (4,))
        lead = [(None, d) if d is not None else _dim_of(ctx, q, i) for i, d in enumerate(attention_bias.shape[:2])]
        shaped = _reshape_to(ctx, attention_bias, [*lead, _dim_of(ctx, q, 2), _dim_of(ctx, k, 2)])
        scores = op(ctx, O.ADD, scores, shaped)
    probs = ctx.emit(O.SOFTMAX, [scores, ctx.i32(3)], shape=scores.shape)
    out = ctx.emit(O.MAT_MUL, [probs, v], shape=(b, n, s, v.shape[3]))
    out = _transpose(ctx, out, [0, 2, 1, 3])
    hidden = n * v.shape[3]
    return reshape(ctx, out, [0, 0, hidden], out_shape=(b, s, hidden)), k, v


def _num_heads(ctx: NodeContext, *sizes: int) -> int:
    heads = int(ctx.attr("num_heads"))
    if heads <= 0 or any(size % heads for size in sizes):
        ctx.fail(f"num_heads {heads} must divide the hidden sizes {list(sizes)}")
    return heads


@onnx_op(MS + "Attention")
def attention(ctx: NodeContext) -> list[Value]:
    """Attention -> MAT_MUL by the packed Q/K/V weights (+ bias), heads by RESHAPE and TRANSPOSE, scores
    Q K^T * scale (1 / sqrt(head size) by default) + the mask's bias (mask_index: a [B, T] or [B, S, T] 0/1 mask,
    or [B] end / [2 * B] end and start positions; mask_filter_value), the causal mask (unidirectional),
    attention_bias; SOFTMAX; times V.  qkv_hidden_sizes; past [2, B, N, P, h] and present by CONCAT / STACK."""
    x, weights = _f32(ctx, 0, "input"), _f32(ctx, 1, "weights")
    bias = _opt_f32(ctx, 2, "bias")
    _refuse_inputs(ctx, {6: "past_sequence_length"})
    _refuse_attrs(ctx, {"do_rotary": 0, "past_present_share_buffer": 0})
    _rank(ctx, x, "input", (3,))
    _rank(ctx, weights, "weights", (2,))
    total = _static(ctx, weights, 1, "weights")
    sizes = [int(d) for d in ctx.attr("qkv_hidden_sizes", [])]
    if not sizes:
        if total % 3:
            ctx.fail(f"weights {weights.describe()}: without qkv_hidden_sizes its second dimension must divide by 3")
        sizes = [total // 3] * 3
    if len(sizes) != 3 or sum(sizes) != total or sizes[0] != sizes[1]:
        ctx.fail(f"qkv_hidden_sizes {sizes} must be 3 sizes, Q's equal to K's, summing to weights' {total}")
    heads = _num_heads(ctx, *sizes)
    past = ctx.optional(4)
    if past is not None:
        past = _f32(ctx, 4, "past")
        _rank(ctx, past, "past", (5,))
        if sizes[1] != sizes[2]:
            ctx.fail(f"with past, Q, K and V must have one hidden size (qkv_hidden_sizes {sizes})")
    bounds = np.cumsum([0, *sizes])
    parts = []
    for lo, hi in itertools.pairwise(bounds):
        if weights.is_const:
            part = _matmul(ctx, x, ctx.constant(np.ascontiguousarray(weights.const[:, lo:hi])))
        else:
            part = _slice_last(ctx, _matmul(ctx, x, weights), int(lo), int(hi))
        if bias is not None:
            b = ctx.constant(bias.const[lo:hi]) if bias.is_const else _slice_last(ctx, bias, int(lo), int(hi))
            part = op(ctx, O.ADD, part, b)
        parts.append(part)
    q, k, v = (_heads(ctx, p, heads, [0, 2, 1, 3]) for p in parts)
    pair = None
    if past is not None:
        pair = tuple(ctx.emit(O.GATHER, [past, ctx.i32(i), ctx.i32(0)], shape=past.shape[1:]) for i in (0, 1))
    out, keys, values = _attend(ctx, q, k, v, pair, ctx.optional(3), _opt_f32(ctx, 5, "attention_bias"))
    results = [out]
    if _wanted(ctx, 1):
        results.append(ctx.emit(O.STACK, [keys, values, ctx.i32(0)], shape=(2, *keys.shape)))
    return results


@onnx_op(MS + "MultiHeadAttention")
def multi_head_attention(ctx: NodeContext) -> list[Value]:
    """MultiHeadAttention -> query, key, value [B, L, hidden] (+ bias), or key and value already in heads
    [B, N, L, h]; heads by RESHAPE and TRANSPOSE, then as Attention: key_padding_mask ([B] lengths, [B, T] or
    [B, S, T] 0/1), unidirectional, attention_bias, past_key / past_value and present_key / present_value."""
    q = _f32(ctx, 0, "query")
    _refuse_inputs(ctx, {8: "past_sequence_length", 9: "cache_indirection"})
    _refuse_outputs(ctx, {3: "qk"})
    _rank(ctx, q, "query", (3, 5))
    if q.rank == 5:
        ctx.unsupported("query holds packed Q, K and V (rank 5): not supported (onnxruntime's CPU kernel neither)")
    if not ctx.has(1) or not ctx.has(2):
        ctx.unsupported("key and value must be given (packed K and V are not supported)")
    k, v = _f32(ctx, 1, "key"), _f32(ctx, 2, "value")
    _rank(ctx, k, "key", (3, 4, 5))
    if k.rank == 5:
        ctx.unsupported("key holds packed K and V (rank 5): not supported (onnxruntime's CPU kernel neither)")
    _rank(ctx, v, "value", (k.rank,))
    hidden = _static(ctx, q, 2, "query")
    in_heads = k.rank == 4
    if in_heads:
        kv_sizes = [_static(ctx, k, 1, "key") * _static(ctx, k, 3, "key"), v.shape[1] * _static(ctx, v, 3, "value")]
    else:
        kv_sizes = [_static(ctx, k, 2, "key"), _static(ctx, v, 2, "value")]
    heads = _num_heads(ctx, hidden, *kv_sizes)
    if in_heads and k.shape[1] != heads:
        ctx.fail(f"key {k.describe()} in heads must have num_heads {heads} heads")
    bias = _opt_f32(ctx, 3, "bias")
    if bias is not None:
        total = hidden + sum(kv_sizes)
        if bias.shape != (total,):
            ctx.fail(f"bias {bias.describe()} must be [{total}]")
        bounds = np.cumsum([0, hidden, *kv_sizes])

        def add_bias(x: Value, i: int) -> Value:
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            b = ctx.constant(bias.const[lo:hi]) if bias.is_const else _slice_last(ctx, bias, lo, hi)
            return op(ctx, O.ADD, x, b)

        q = add_bias(q, 0)
        if not in_heads:  # onnxruntime adds no bias to a key and value given in heads
            k, v = add_bias(k, 1), add_bias(v, 2)
    q = _heads(ctx, q, heads, [0, 2, 1, 3])
    if not in_heads:
        k, v = _heads(ctx, k, heads, [0, 2, 1, 3]), _heads(ctx, v, heads, [0, 2, 1, 3])
    past = None
    if ctx.has(6) or ctx.has(7):
        if in_heads:
            ctx.unsupported("past_key / past_value with a key and value given in heads")
        past = (_f32(ctx, 6, "past_key"), _f32(ctx, 7, "past_value"))
        _rank(ctx, past[0], "past_key", (4,))
        _rank(ctx, past[1], "past_value", (4,))
    out, keys, values = _attend(ctx, q, k, v, past, ctx.optional(4), _opt_f32(ctx, 5, "attention_bias"))
    return [out, keys, values][: len(ctx.node.output)]


# -- rotary embedding --------------------------------------------------------------------------------------------
@onnx_op(MS + "RotaryEmbedding")
def rotary_embedding(ctx: NodeContext) -> Value:
    """RotaryEmbedding -> cos and sin GATHERed at the positions (position_ids [B, S], or [1]: a start offset
    for 0 .. S-1), then x1 * cos - x2 * sin and x2 * cos + x1 * sin on the halves of the first
    rotary_embedding_dim values of each head (or on the even and odd ones, interleaved); input [B, S, hidden]
    (heads of 2 * cos_cache's width unless num_heads says) or [B, N, S, h].  The attribute scale is ignored,
    as in onnxruntime."""
    x, position_ids = _f32(ctx, 0, "input"), ctx.input(1)
    cos, sin = _f32(ctx, 2, "cos_cache"), _f32(ctx, 3, "sin_cache")
    _refuse_attrs(ctx, {"is_packed_batching": 0})
    rank = _rank(ctx, x, "input", (3, 4))
    _rank(ctx, cos, "cos_cache", (2,))
    half = _static(ctx, cos, 1, "cos_cache")
    if sin.shape != cos.shape:
        ctx.fail(f"sin_cache {sin.describe()} and cos_cache {cos.describe()} must have one shape")
    rotary, heads = int(ctx.attr("rotary_embedding_dim", 0)), int(ctx.attr("num_heads", 0))
    if rotary > 0 and heads <= 0:
        ctx.fail("rotary_embedding_dim needs num_heads")
    if rank == 3:
        hidden = _static(ctx, x, 2, "input")
        size = hidden // heads if heads > 0 else 2 * half
        if hidden % size:
            ctx.fail(f"input {x.describe()}: the hidden size is not a multiple of the head size {size}")
        heads = hidden // size
        work = reshape(ctx, x, [0, 0, heads, size], out_shape=(x.shape[0], x.shape[1], heads, size))
        seq_axis, head_axis = 1, 2
    else:
        size = _static(ctx, x, 3, "input")
        work, seq_axis, head_axis = x, 2, 1
    rotary = rotary if rotary > 0 else size
    if rotary != 2 * half or rotary > size:
        ctx.fail(f"rotary dimension {rotary}: must be twice cos_cache's width {half} and at most the head size {size}")
    if position_ids.dtype.kind not in "iu":
        ctx.fail(f"position_ids {position_ids.describe()} must be integers")
    _rank(ctx, position_ids, "position_ids", (1, 2))
    if position_ids.rank == 1:  # [1]: the first position; the others follow
        steps = cast(ctx, _arange(ctx, x, seq_axis), position_ids.dtype)
        positions = _unsqueeze(ctx, op(ctx, O.ADD, steps, position_ids), [0])
    else:
        positions = position_ids
    tables = []
    for table in (cos, sin):
        picked = ctx.emit(O.GATHER, [table, positions, ctx.i32(0)], shape=(*positions.shape, half))
        tables.append(_unsqueeze(ctx, picked, [head_axis]))  # [B, S, 1, half] or [B, 1, S, half]
    rotated = work if rotary == size else _slice_last(ctx, work, 0, rotary)
    if int(ctx.attr("interleaved", 0)):
        pairs = reshape(ctx, rotated, [0, 0, 0, half, 2], out_shape=(*rotated.shape[:3], half, 2))
        first, second = _slice_last(ctx, pairs, 0, 1), _slice_last(ctx, pairs, 1, 2)
        c, s_ = (_unsqueeze(ctx, t, [4]) for t in tables)
    else:
        first, second = _slice_last(ctx, rotated, 0, half), _slice_last(ctx, rotated, half, rotary)
        c, s_ = tables
    out_first = op(ctx, O.SUB, op(ctx, O.MUL, first, c), op(ctx, O.MUL, second, s_))
    out_second = op(ctx, O.ADD, op(ctx, O.MUL, second, c), op(ctx, O.MUL, first, s_))
    out = _concat(ctx, [out_first, out_second], out_first.rank - 1)
    if int(ctx.attr("interleaved", 0)):
        out = reshape(ctx, out, [0, 0, 0, rotary], out_shape=(*rotated.shape[:3], rotary))
    if rotary < size:
        out = _concat(ctx, [out, _slice_last(ctx, work, rotary, size)], 3)
    if rank == 3:
        out = reshape(ctx, out, [0, 0, x.shape[2]], out_shape=x.shape)
    return out
