"""Text features: TfIdfVectorizer over integer tokens -> the extension TFIDF_VECTORIZER (op_converters/text.py)."""

from __future__ import annotations

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations.ml import TFIDF_MODES as MODES
from nnadapter_tvm.operations.ml import TFIDF_VECTORIZER


@onnx_op("TfIdfVectorizer")
def tfidf_vectorizer(ctx: NodeContext) -> Value:
    """TfIdfVectorizer(pool_int64s) -> TFIDF_VECTORIZER with the pool, ngram_counts, ngram_indexes and
    weights as constant operands and mode as its index in ``MODES``.  A pool of strings (pool_strings, and
    string inputs) has no NNAdapter precision: unsupported."""
    x = ctx.input(0)
    if ctx.attr("pool_strings", None) or x.dtype is None or x.dtype.name not in ("int32", "int64"):
        ctx.unsupported(
            f"TfIdfVectorizer over {x.describe()} with a string pool: NNAdapter operands have no string precision"
        )
    pool = ctx.attr("pool_int64s", None)
    if pool is None:
        ctx.fail("TfIdfVectorizer needs the attribute pool_int64s (its n-gram pool)")
    mode = ctx.attr("mode")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in MODES:
        ctx.fail(f"TfIdfVectorizer mode '{mode}' is not one of {', '.join(MODES)}")
    inputs = [
        x,
        ctx.i32(ctx.attr("min_gram_length")),
        ctx.i32(ctx.attr("max_gram_length")),
        ctx.i32(ctx.attr("max_skip_count")),
        ctx.i32(MODES.index(mode)),
        ctx.i64(list(ctx.attr("ngram_counts"))),
        ctx.i64(list(ctx.attr("ngram_indexes"))),
        ctx.i64(list(pool)),
    ]
    weights = ctx.attr("weights", None)
    if weights is not None and len(weights):
        inputs.append(ctx.f32(list(weights)))
    return ctx.emit(TFIDF_VECTORIZER, inputs, dtype="float32")
