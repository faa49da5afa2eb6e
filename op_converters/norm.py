"""Normalizations."""

from __future__ import annotations

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode


def _f32(value: float) -> relax.Expr:
    return relax.const(value, "float32")


def _rank_at_least(args: OpArgs, x: relax.Expr, rank: int, layout: str) -> list:
    shape = args.shape(x)
    if len(shape) < rank:
        args.fail(f"must have rank >= {rank}{layout}, got shape {shape}", "input")
    return shape


def _mean(x: relax.Expr, axes: list[int], shape: list) -> relax.Expr:
    """The mean over ``axes`` (kept) as the sum of x / n: the values are scaled before they are added,
    so a sum that would pass float32's largest value does not (a row of -3e38: sum(x) / n is -inf / n,
    sum(x / n) is -3e38, as onnxruntime gives).  One multiply per element, fused into the reduction as
    the division of ``relax.op.mean`` was.  n is a constant where the axes are known; else the count
    is summed from ones (exact up to 2^24 elements)."""
    sizes = [shape[a] for a in axes]
    if all(isinstance(d, int) for d in sizes):
        count: int = 1
        for d in sizes:
            count *= d
        inverse = _f32(1.0 / max(count, 1))  # n = 0: the output is empty
    else:
        count = relax.op.sum(relax.op.ones_like(x), axes, keepdims=True)
        inverse = relax.op.divide(_f32(1.0), count)
    return relax.op.sum(relax.op.multiply(x, inverse), axes, keepdims=True)


def _standardize(x: relax.Expr, axes: list[int], epsilon: float, shape: list | None = None) -> relax.Expr:
    """(x - mean) / sqrt(variance + epsilon) over ``axes``, biased variance, two passes (the variance of
    the centred values, which stays accurate for inputs with a large mean).

    With ``shape`` (``x``'s) both means scale before they sum (``_mean``), so values near float32's
    largest do not overflow the mean; a variance that overflows gives 1 / sqrt(inf) = 0, the output
    then the bias: onnxruntime's LayerNormalization, row for row.  Without it the means are float32
    sums divided by n, which overflow to +-inf (NaN out): onnxruntime's and onnx's evaluator's
    InstanceNormalization, row for row (and onnx's GroupNormalization)."""
    if shape is None:
        centred = relax.op.subtract(x, relax.op.mean(x, axes, keepdims=True))
        variance = relax.op.mean(relax.op.multiply(centred, centred), axes, keepdims=True)
    else:
        centred = relax.op.subtract(x, _mean(x, axes, shape))
        variance = _mean(relax.op.multiply(centred, centred), axes, shape)
    return relax.op.multiply(centred, relax.op.rsqrt(relax.op.add(variance, _f32(epsilon))))


def _scale_bias(args: OpArgs, y: relax.Expr, expected: list, broadcast: list) -> relax.Expr:
    """y * scale + bias, with the operands ``scale`` and ``bias`` shaped ``expected`` and
    reshaped to ``broadcast``. An empty scale or bias means 1 or 0 (Paddle's optional
    Scale/Bias, which Paddle Lite may leave out)."""
    for name, combine in (("scale", relax.op.multiply), ("bias", relax.op.add)):
        if not args.has(name):
            continue
        p = args.tensor(name)
        if args.shape(p) != expected:
            args.fail(f"shape {args.shape(p)} must be {expected}", name)
        y = combine(y, relax.op.reshape(p, broadcast))
    return y


def _channel_params(args: OpArgs, y: relax.Expr, shape: list) -> relax.Expr:
    """Per-channel scale/bias of shape [C] applied along axis 1."""
    channels = shape[1]
    if not isinstance(channels, int):
        args.fail("the channel dimension (axis 1) must be known", "input", ResultCode.FEATURE_NOT_SUPPORTED)
    return _scale_bias(args, y, [channels], [1, channels] + [1] * (len(shape) - 2))


@converter(O.BATCH_NORMALIZATION)
def batch_normalization(args: OpArgs) -> relax.Expr:
    """input [N, C, ...], scale, bias, mean, variance, epsilon (1e-5) ->
    (x - mean) / sqrt(variance + epsilon) * scale + bias, per channel (inference form).

    Reference: the spec.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    if len(shape) < 2:
        args.fail(f"must have rank >= 2 [N, C, ...], got {shape}", "input")
    channels = shape[1]
    broadcast = [1, channels] + [1] * (len(shape) - 2)
    params = []
    for name in ("scale", "bias", "mean", "variance"):
        p = args.tensor(name)
        if args.shape(p) != [channels]:
            args.fail(f"shape {args.shape(p)} must be [C] = [{channels}]", name)
        params.append(relax.op.reshape(p, broadcast))
    scale, bias, mean, var = params
    eps = relax.const(args.float("epsilon", 1e-5), "float32")
    inv = relax.op.multiply(relax.op.rsqrt(relax.op.add(var, eps)), scale)
    return relax.op.add(relax.op.multiply(relax.op.subtract(x, mean), inv), bias)


@converter(O.INSTANCE_NORMALIZATION)
def instance_normalization(args: OpArgs) -> relax.Expr:
    """input [N, C, ...], scale [C], bias [C], epsilon (1e-5) ->
    (x - mean) / sqrt(variance + epsilon) * scale + bias, mean and (biased) variance taken
    per instance and channel over the remaining axes.

    The spec asks for rank > 2; rank 2 is accepted as Paddle does (each (n, c) is one element,
    so the output is `bias`). An empty scale or bias stands for 1 or 0.
    Reference: the spec (the Instance Normalization paper).
    """
    x = args.tensor("input")
    shape = _rank_at_least(args, x, 2, " [N, C, ...]")
    epsilon = args.float("epsilon", 1e-5)
    if len(shape) == 2:  # one value per (n, c): standardize over a trailing axis of 1
        y = relax.op.reshape(_standardize(relax.op.expand_dims(x, [2]), [2], epsilon), shape)
    else:
        y = _standardize(x, list(range(2, len(shape))), epsilon)
    return _channel_params(args, y, shape)


@converter(O.LAYER_NORMALIZATION)
def layer_normalization(args: OpArgs) -> relax.Expr:
    """input, scale, bias (both shaped like input's dims from begin_norm_axis on),
    begin_norm_axis (1 if empty), epsilon (1e-5) -> (x - mean) / sqrt(variance + epsilon) *
    scale + bias, mean and (biased) variance over the dims from begin_norm_axis to the last.

    begin_norm_axis may be negative; an empty scale or bias stands for 1 or 0.
    Reference: the spec; the header's default begin_norm_axis 1.
    """
    x = args.tensor("input")
    shape = _rank_at_least(args, x, 1, "")
    begin = args.axis("begin_norm_axis", len(shape), 1)
    axes = list(range(begin, len(shape)))
    normalized = shape[begin:]
    given = [name for name in ("scale", "bias") if args.has(name)]
    if given and not all(isinstance(d, int) for d in normalized):
        # A given scale/bias fixes the unknown normalized dims: adopt its shape, checked at run time.
        fixed = args.shape(args.tensor(given[0]))
        if len(fixed) == len(normalized) and all(isinstance(d, int) for d in fixed):
            x = args.match_cast(x, shape[:begin] + fixed)
            normalized = fixed
    y = _standardize(x, axes, args.float("epsilon", 1e-5), shape[:begin] + list(normalized))
    return _scale_bias(args, y, normalized, normalized)


@converter(O.GROUP_NORMALIZATION)
def group_normalization(args: OpArgs) -> relax.Expr:
    """input [N, C, ...], scale [C], bias [C], epsilon (1e-5 if empty), groups -> the channels
    split into `groups` consecutive groups; (x - mean) / sqrt(variance + epsilon) with mean and
    (biased) variance per instance and group, then * scale + bias per channel.

    `groups` must divide C. The spec asks for rank > 2; rank 2 [N, C] is accepted (groups of
    C / groups values). An empty scale or bias stands for 1 or 0.
    Reference: the spec (the Group Normalization paper); Paddle's group_norm (NCHW).
    """
    x = args.tensor("input")
    shape = _rank_at_least(args, x, 2, " [N, C, ...]")
    channels = shape[1]
    if not isinstance(channels, int):
        args.fail("the channel dimension (axis 1) must be known", "input", ResultCode.FEATURE_NOT_SUPPORTED)
    groups = args.int("groups")
    if groups <= 0 or channels % groups:
        args.fail(f"groups {groups} must be positive and divide the channel count {channels}", "groups")
    grouped = relax.op.reshape(x, [shape[0], groups, channels // groups, *shape[2:]])
    y = _standardize(grouped, list(range(2, len(shape) + 1)), args.float("epsilon", 1e-5))
    return _channel_params(args, relax.op.reshape(y, shape), shape)


@converter(O.LP_NORMALIZATION)
def lp_normalization(args: OpArgs) -> relax.Expr:
    """input, axis (1), p (2; 1 or 2), epsilon (1e-5) -> p = 1: x / (sum(|x|, axis) + epsilon);
    p = 2: x / (sqrt(sum(x^2, axis)) + epsilon).

    `axis` may list several distinct axes (as Paddle Lite's drivers accept), normalizing over
    them together. Epsilon is added after the root, as the spec's formula says (Paddle's `norm`
    adds it inside: sqrt(sum(x^2) + epsilon)).
    Reference: the spec.
    """
    x = args.tensor("input")
    rank = len(args.shape(x))
    axes = args.ints("axis", [1])
    for axis in axes:
        if not -rank <= axis < rank:
            args.fail(f"axis {axis} is out of range [-{rank}, {rank}) for a rank-{rank} input", "axis")
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes):
        args.fail(f"axes {args.ints('axis')} name the same dimension twice", "axis")
    p = args.int("p", 2)
    if p == 1:
        norm = relax.op.sum(relax.op.abs(x), axes, keepdims=True)
    elif p == 2:
        norm = relax.op.sqrt(relax.op.sum(relax.op.multiply(x, x), axes, keepdims=True))
    else:
        args.fail(f"p {p} must be 1 or 2", "p")
    return relax.op.divide(x, relax.op.add(norm, _f32(args.float("epsilon", 1e-5))))


def _lrn_te(x: te.Tensor, size: int, bias: float, alpha: te.Tensor, beta: float) -> te.Tensor:
    """Across channels (axis 1): x / (bias + alpha * sum(x[n, i, ...]^2))^beta over
    max(0, c - floor((size - 1) / 2)) <= i <= min(C - 1, c + ceil((size - 1) / 2)).

    ``alpha`` is a rank-0 tensor the kernel reads, not an immediate: TVM folds ``0.0 * sum`` to 0, and
    with alpha 0 a NaN (or a square that overflows to inf) in the window must still give NaN (0 * NaN)."""
    channels = x.shape[1]
    before = (size - 1) // 2
    square = te.compute(x.shape, lambda *i: x(*i) * x(*i), name="lrn_square")
    k = te.reduce_axis((0, size), name="k")

    def window_sum(*index):
        c = index[1] - before + k
        inside = tirx.all(c >= 0, c < channels)
        value = tirx.if_then_else(inside, square(index[0], c, *index[2:]), tirx.const(0.0, "float32"))
        return te.sum(value, axis=k)

    sums = te.compute(x.shape, window_sum, name="lrn_sum")

    def scaled(*index):
        base = tirx.const(bias, "float32") + alpha[()] * sums(*index)
        return x(*index) * tirx.power(base, tirx.const(-beta, "float32"))

    return te.compute(x.shape, scaled, name="lrn")


@converter(O.LRN)
def lrn(args: OpArgs) -> relax.Expr:
    """input [N, C, ...], size (5), bias (1), alpha (1e-4), beta (0.75) ->
    x / (bias + alpha * square_sum)^beta, square_sum over the channels
    c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2) (clipped to [0, C)).

    alpha is NOT divided by size: that is Paddle's lrn (and the AlexNet paper the spec cites),
    whose `alpha` Paddle Lite passes through unchanged; the header's formula writes
    alpha / size (the ONNX form), so a producer holding an ONNX alpha must divide it by size.
    Reference: the spec's defaults; Paddle's lrn (n, k, alpha, beta): formula and channel window.
    """
    x = args.tensor("input")
    _rank_at_least(args, x, 2, " [N, C, ...]")
    size = args.int("size", 5)
    if size <= 0:
        args.fail(f"size {size} must be positive", "size")
    bias, alpha, beta = args.float("bias", 1.0), args.float("alpha", 1e-4), args.float("beta", 0.75)
    return args.emit_te(_lrn_te, x, size, bias, _f32(alpha), beta, primfunc_name_hint="lrn")
