"""Differences the ONNX fuzzer finds that are not wrong answers: the oracles disagree (``ambiguous``),
a product overflowing float32 in one order and not another (``float32_range``), a sum whose terms
cancel (``ill_conditioned``), upstream differences within the tolerance amplified by nodes each right
on its inputs (``amplified``).  Campaigns count these apart, CI does not fail on them (part of
tests/fuzz_onnx/).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .cases import Case
from .definition import definition, to_float64
from .minimize import node_case
from .run import mismatch, reference, run_case

# Operators whose products, squares or sums of inputs near the float32 maximum overflow in one evaluation
# order and not in another (onnxruntime's MLAS fuses each product into its sum; ours rounds some first).
PRODUCT_OPS = {
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "ReduceProd",
    "ConvInteger",
    "MatMulInteger",
    # Sums not accumulated in float64 (the average pools, variadic Sum/Mean): terms near 3e38 overflow
    # in one order, before an infinite term is met, and not in another (ours NaN, the exact sum -inf).
    "AveragePool",
    "Sum",
    "Mean",
    # Squares: values above 1.8e19 square past float32's range (the variance, the L2 norm).
    "InstanceNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "LpNormalization",
    "ReduceL2",
    "ReduceSumSquare",
}


# Operators that are sums of products (of one term for the plain sums): their float32 result may differ
# from another order's by the standard rounding-error bound, n * u * (the same sums over |terms|).
SUMMING_OPS = {
    "ReduceSum",
    "ReduceMean",
    "GlobalAveragePool",
    "AveragePool",
    "MatMul",
    "Gemm",
    "Conv",
    "ConvTranspose",
    "Sum",
    "Mean",
}


def ill_conditioned(case: Case) -> bool:
    """Whether ``case`` (a minimized, one-node difference) is a sum whose terms cancel: at every
    differing element, ours and onnxruntime's are finite and differ by no more than the rounding-error
    bound of a float32 sum in any order, n * 2^-24 * S (n: the most terms an output can have, S: the
    same operator on the terms' magnitudes, |inputs|, computed in float64).  Such an output has no
    float32 answer independent of the order (a mean of -3e38, +3e38 and small values is whatever the
    small values sum to after the large ones cancel, or 0 where they were absorbed); counted apart from
    the differences, never among the matches (docs/reliability.md)."""
    from onnx.reference import ReferenceEvaluator

    nodes = case.model.graph.node
    if len(nodes) != 1 or nodes[0].op_type not in SUMMING_OPS:
        return False
    import nnadapter_tvm as nna

    want, _ = reference(case.model, case.feeds)
    got = nna.Predictor(case.model, host_fallback=True).run(case.feeds)
    magnitudes = onnx.ModelProto()
    magnitudes.CopyFrom(case.model)
    for init in magnitudes.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype.kind == "f":
            init.CopyFrom(numpy_helper.from_array(np.abs(array), init.name))
    for attr in magnitudes.graph.node[0].attribute:
        if attr.name in ("alpha", "beta"):
            attr.f = abs(attr.f)
    feeds = {k: (np.abs(v).astype("float64") if v.dtype.kind == "f" else v) for k, v in case.feeds.items()}
    try:
        with np.errstate(all="ignore"):
            bound_of = ReferenceEvaluator(to_float64(magnitudes)).run(None, feeds)
    except Exception:
        return False
    terms = max(np.asarray(v).size for v in case.feeds.values())
    terms = max([terms] + [numpy_helper.to_array(i).size for i in case.model.graph.initializer])
    for r, x, s in zip(want, got, bound_of):
        bad = mismatch(r, x, 1)  # at the output's own precision (float32's tolerance)
        if isinstance(bad, str):
            return False
        r, x, s = np.asarray(r, "float64"), np.asarray(x, "float64"), np.asarray(s, "float64")
        if not bad.any():
            continue
        if not (np.isfinite(r[bad]).all() and np.isfinite(x[bad]).all()):
            return False
        if not (np.abs(r[bad] - x[bad]) <= terms * 2.0**-24 * s[bad]).all():
            return False
    return True


def locally_correct(case: Case) -> bool:
    """Whether ``case`` (a minimized chain of several nodes, none differing alone on the reference's
    values) has every node right on *our* values of its inputs: our intermediates are computed, each
    node is run by the reference on them, and its output matches ours within the tolerance.  Then the
    difference is upstream differences within the tolerance amplified downstream (a last-ulp difference
    of a Sigmoid flipping a DynamicQuantizeLinear rounding, then multiplied by MatMulInteger's weights),
    no node is wrong; counted apart from the differences (docs/reliability.md)."""
    import nnadapter_tvm as nna

    nodes = list(case.model.graph.node)
    if len(nodes) < 2:
        return False
    everything = onnx.ModelProto()
    everything.CopyFrom(case.model)
    names = [o for n in nodes for o in n.output if o]
    del everything.graph.output[:]
    everything.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in names)
    try:
        inferred = onnx.shape_inference.infer_shapes(everything)
        typed = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
        del everything.graph.output[:]
        everything.graph.output.extend(typed[o] for o in names)
        ours = dict(zip(names, nna.Predictor(everything, host_fallback=True).run(case.feeds)))
    except Exception:
        return False
    values = {**case.feeds, **ours}
    inits = {i.name: numpy_helper.to_array(i) for i in case.model.graph.initializer}
    for node in nodes:
        single = node_case(case.model, node, values, inits)
        if single is None:
            return False
        try:
            want, _ = reference(single.model, single.feeds)
        except Exception:
            return False
        outs = [o.name for o in single.model.graph.output]
        exact: list | None = None
        for i, (name, r) in enumerate(zip(outs, want)):
            if _close_elementwise(np.asarray(r), np.asarray(ours[name])):
                continue
            # onnxruntime's own approximation may be the looser one (its Sigmoid is 7e-5 off at -7.76 and
            # 0 below -30): the node is right if the float64 definition agrees with us.
            exact = definition(single) if exact is None else exact
            if exact and exact[i] is not None and _close_elementwise(np.asarray(exact[i]), np.asarray(ours[name])):
                continue
            if not ill_conditioned(single):  # a sum whose terms cancel has no order-free answer
                return False
    return True


def _close_elementwise(ref, got) -> bool:
    """Each element within 2^-16 of the reference's own magnitude (about 128 float32 ulps) or of float32's
    smallest normal number (results in the denormal range carry fewer digits in any implementation:
    sigmoid(-100) is 0 here, 3.7e-44 in onnxruntime), NaN and infinities in the same places, integers
    equal: stricter than the campaign's tolerance (scaled by the output's largest value), so that a node
    wrong on its small values (tanh(1e-8) = 0, fixed) is not called locally correct."""
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return False
    if ref.dtype.kind not in "fc":
        return bool(np.array_equal(ref, got))
    r, x = ref.astype("float64"), got.astype("float64")
    if not np.array_equal(np.isnan(r), np.isnan(x)):
        return False
    finite = np.isfinite(r) & np.isfinite(x)
    if not np.array_equal(r[~finite & ~np.isnan(r)], x[~finite & ~np.isnan(r)]):
        return False
    smallest_normal = float(np.finfo("float32").tiny)
    return bool(np.all(np.abs(r[finite] - x[finite]) <= np.maximum(2.0**-16 * np.abs(r[finite]), smallest_normal)))


def float32_range(case: Case) -> bool:
    """Whether ``case`` (a minimized, one-node difference) is one of float32's range: a product operator
    whose inputs hold a finite value of magnitude >= 1e30 beside values whose products overflow float32,
    and whose differing elements are non-finite on one side (ours or onnxruntime's).  Neither runtime is
    exact there (the float64 definition may side with either); counted apart from the differences,
    never among them silently (docs/reliability.md)."""
    nodes = case.model.graph.node
    if len(nodes) != 1 or nodes[0].op_type not in PRODUCT_OPS:
        return False
    values = [np.asarray(v, "float64") for v in case.feeds.values() if np.asarray(v).dtype.kind == "f"]
    values += [
        numpy_helper.to_array(i).astype("float64")
        for i in case.model.graph.initializer
        if numpy_helper.to_array(i).dtype.kind == "f"
    ]
    finite = [np.abs(v[np.isfinite(v)]) for v in values]
    if not any(f.size and f.max() >= 1e30 for f in finite):
        return False
    import nnadapter_tvm as nna

    want, _ = reference(case.model, case.feeds)
    got = nna.Predictor(case.model, host_fallback=True).run(case.feeds)
    for r, x in zip(want, got):
        bad = mismatch(r, x, 1)  # at the output's own precision (float32's tolerance)
        if isinstance(bad, str):
            return False
        r, x = np.asarray(r, "float64"), np.asarray(x, "float64")
        if bad.any() and not np.all(~np.isfinite(r[bad]) | ~np.isfinite(x[bad])):
            return False
    return True


def explain(case: Case) -> str | None:
    """Why the difference of ``case`` (a minimized difference) is not a wrong answer, or None: the oracles
    disagree there (``ambiguous``), a product overflowing float32 in one order and not another
    (``float32_range``), a sum whose terms cancel (``ill_conditioned``), or upstream differences within
    the tolerance amplified by nodes each right on its inputs (``amplified``).  Campaigns count these
    apart, CI does not fail on them; anything else that differs is a finding."""
    if {o.status for o in run_case(case).values()} <= {"ok", "ambiguous"}:
        return "ambiguous"
    tests = (("float32_range", float32_range), ("ill_conditioned", ill_conditioned), ("amplified", locally_correct))
    for name, test in tests:
        if test(case):
            return name
    return None
