"""TFIDF_VECTORIZER (extension 2430): ONNX's TfIdfVectorizer over integer tokens.

The n-gram pool, its grouping by size and the output slot of each n-gram are constant operands, so the
converter resolves them at compile time into a dense table (one row of tokens per n-gram counted, with its
size) and a slot table (the n-grams each output slot sums).  The kernel then counts, for each row and
n-gram, the positions where the n-gram occurs with each allowed skip, and weights the counts per slot.
"""

from __future__ import annotations

import itertools

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.ml import TFIDF_MODES as MODES
from nnadapter_tvm.types import OperationType as O


def ngram_table(
    pool: np.ndarray, ngram_counts: list[int], ngram_indexes: list[int], min_gram: int, max_gram: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The n-grams the vectorizer counts: tokens [K, max size] (padded with 0), sizes [K] and output slots
    [K].

    The pool holds the n-grams of size 1, 2, ... in turn, group i (size i + 1) starting at
    ``ngram_counts[i]``; the j-th n-gram of the pool (over all groups) goes to slot ``ngram_indexes[j]``.
    Only sizes in [min_gram, max_gram] are counted.  As in onnx's reference (whose trie keeps the last id
    given to a path), an n-gram listed twice counts only in the slot of its last occurrence.
    """
    last: dict[tuple[int, ...], int] = {}
    grams: list[tuple[int, ...]] = []
    j = 0
    for i, start in enumerate(ngram_counts):
        size = i + 1
        end = ngram_counts[i + 1] if i + 1 < len(ngram_counts) else len(pool)
        for k in range((end - start) // size):
            gram = tuple(int(t) for t in pool[start + k * size : start + (k + 1) * size])
            if min_gram <= size <= max_gram:
                last[gram] = j
                grams.append(gram)
            j += 1
    kept = [g for g in dict.fromkeys(grams)]
    width = max((len(g) for g in kept), default=1)
    tokens = np.zeros((len(kept), width), np.int64)
    for r, g in enumerate(kept):
        tokens[r, : len(g)] = g
    sizes = np.array([len(g) for g in kept], np.int32)
    slots = np.array([ngram_indexes[last[g]] for g in kept], np.int32)
    return tokens, sizes, slots


def _check_attributes(args: OpArgs) -> tuple[int, int, int, str, list[int], list[int], np.ndarray]:
    min_gram, max_gram = args.int("min_gram_length"), args.int("max_gram_length")
    if min_gram < 1:
        args.fail(f"must be at least 1, got {min_gram}", "min_gram_length")
    if max_gram < min_gram:
        args.fail(f"must be at least min_gram_length {min_gram}, got {max_gram}", "max_gram_length")
    max_skip = args.int("max_skip_count")
    if max_skip < 0:
        args.fail(f"must be at least 0, got {max_skip}", "max_skip_count")
    mode = args.int("mode")
    if not 0 <= mode < len(MODES):
        args.fail(f"must be one of {', '.join(f'{i}={n}' for i, n in enumerate(MODES))}, got {mode}", "mode")
    pool = np.reshape(args.value("pool"), -1).astype(np.int64)
    counts, indexes = args.ints("ngram_counts"), args.ints("ngram_indexes")
    if not counts or any(not 0 <= c <= len(pool) for c in counts) or any(a > b for a, b in itertools.pairwise(counts)):
        args.fail(f"must be non-decreasing starts in [0, {len(pool)}] (the pool's size), got {counts}", "ngram_counts")
    total = sum(
        ((counts[i + 1] if i + 1 < len(counts) else len(pool)) - start) // (i + 1) for i, start in enumerate(counts)
    )
    if len(indexes) != total:
        args.fail(f"must hold one slot per n-gram of the pool ({total}), got {len(indexes)}", "ngram_indexes")
    if any(i < 0 for i in indexes):
        args.fail(f"must be non-negative, got {indexes}", "ngram_indexes")
    return min_gram, max_gram, max_skip, MODES[mode], counts, indexes, pool


@converter(O.TFIDF_VECTORIZER)
def tfidf_vectorizer(args: OpArgs) -> relax.Expr:
    """input [C] or [B, C] (INT32 or INT64 tokens), min_gram_length, max_gram_length, max_skip_count,
    mode (0 TF, 1 IDF, 2 TFIDF), ngram_counts, ngram_indexes, pool (INT32 or INT64), weights (FLOAT32,
    optional) -> output [S] or [B, S] (FLOAT32, S = max(ngram_indexes) + 1): ONNX's TfIdfVectorizer.

    Each row counts the n-grams of the pool with a size in [min_gram_length, max_gram_length]: an n-gram
    of size n > 1 occurs at position s with skip k (0 <= k <= max_skip_count) where tokens s, s + k + 1,
    ..., s + (n - 1)(k + 1) are its tokens; a unigram is counted once per occurrence.  Slot
    ngram_indexes[j] sums the counts of the pool's j-th n-gram f; TF gives f, IDF gives weights[slot]
    where f > 0 (1 without weights) and 0 elsewhere, TFIDF gives weights[slot] * f (f without weights).

    Reference: ONNX TfIdfVectorizer (opset 9), onnx.reference.ops.op_tfidf_vectorizer.
    """
    x = args.raw_tensor("input")
    shape = args.shape(x)
    if len(shape) not in (1, 2):
        args.fail(f"must have rank 1 ([C]) or 2 ([B, C]), got shape {shape}", "input")
    min_gram, max_gram, max_skip, mode, counts, indexes, pool = _check_attributes(args)
    out_size = max(indexes) + 1
    weights = None
    if args.has("weights") and mode != "TF":
        weights = np.reshape(args.value("weights"), -1).astype(np.float32)
        if len(weights) < out_size:
            args.fail(f"must hold a weight per output slot ({out_size}), got {len(weights)}", "weights")
        weights = weights[:out_size]
    tokens, sizes, slots = ngram_table(pool, counts, indexes, min_gram, max_gram)
    out_shape = [*shape[:-1], out_size]
    if len(tokens) == 0:
        return relax.op.zeros(out_shape, "float32")
    # members[j, r] (r < members_count[j]): the n-grams slot j sums.
    members_count = np.bincount(slots, minlength=out_size).astype(np.int32)
    members = np.zeros((out_size, int(members_count.max())), np.int32)
    filled = np.zeros(out_size, np.int32)
    for k, slot in enumerate(slots):
        members[slot, filled[slot]] = k
        filled[slot] += 1
    width, skips = tokens.shape[1], max_skip + 1
    tables = [relax.const(a) for a in (tokens, sizes, members, members_count)]
    if weights is not None:
        tables.append(relax.const(weights))

    def compute(data: te.Tensor, grams: te.Tensor, size: te.Tensor, member: te.Tensor, member_count, *w):
        length = data.shape[-1]
        batched = len(data.shape) == 2

        def token(b, pos):
            pos = tirx.min(tirx.max(pos, 0), length - 1)  # read in bounds; matches past the row are masked
            return (data[b, pos] if batched else data[pos]).astype("int64")

        def occurrences(*idx):
            b, k = (idx[0], idx[1]) if batched else (None, idx[0])
            d = te.reduce_axis((0, skips), name="skip")
            s = te.reduce_axis((0, length), name="start")
            n, start, step = size[k].astype("int64"), s.astype("int64"), d.astype("int64") + 1
            hit = tirx.all(start + (n - 1) * step < length, tirx.any(n > 1, d == 0))
            for i in range(width):  # the table's width is a compile-time constant: unrolled
                hit = tirx.all(hit, tirx.any(n <= i, token(b, start + i * step) == grams[k, i]))
            return te.sum(tirx.Select(hit, tirx.const(1, "int32"), tirx.const(0, "int32")), axis=[d, s])

        found = te.compute([*data.shape[:-1], len(tokens)], occurrences, name="tfidf_counts")

        def weighted(*idx):
            j = idx[-1]
            r = te.reduce_axis((0, members.shape[1]), name="member")
            return te.sum(
                tirx.Select(r < member_count[j], found[(*idx[:-1], member[j, r])], tirx.const(0, "int32")), axis=r
            )

        freq = te.compute([*data.shape[:-1], out_size], weighted, name="tfidf_frequencies")
        zero, one = tirx.const(0.0, "float32"), tirx.const(1.0, "float32")

        def output(*idx):
            f, j = freq[idx].astype("float32"), idx[-1]
            if mode == "TF":
                return f
            if mode == "IDF":
                return tirx.Select(f > zero, w[0][j] if w else one, zero)
            return w[0][j] * f if w else f

        return te.compute(freq.shape, output, name="tfidf_vectorizer")

    return args.emit_te(compute, x, *tables)
