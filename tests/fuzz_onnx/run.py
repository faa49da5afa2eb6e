"""Running the ONNX fuzzer's cases: nnadapter_tvm's Predictor against onnxruntime (onnx's
ReferenceEvaluator where onnxruntime has no kernel), each output compared within a tolerance derived
from its dtype and its depth in the graph; where it differs, onnx's evaluator is a second opinion and
the operators' definition (definition.py) a third: one that sides with us makes the difference
ambiguous, not a failure (part of tests/fuzz_onnx/).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx

from .cases import Case, _ancestors, merge
from .definition import DEFINITION, definition


# =================================================================================================
# Running both sides and comparing
# =================================================================================================
def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], str]:
    """onnxruntime's outputs (``"onnxruntime"``), or onnx's ReferenceEvaluator's where onnxruntime has
    no kernel for an operator (``"reference"``)."""
    import onnxruntime as ort

    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as err:
        if "NOT_IMPLEMENTED" not in str(err) and "not implemented" not in str(err).lower():
            raise
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)], "reference"
    return session.run(None, feeds), "onnxruntime"


def tolerance(dtype: np.dtype, depth: int) -> tuple[float, float]:
    """(rtol, atol) for an output ``depth`` nodes from the inputs: float32 results may drift by a few
    ulps per node (other summation orders, other transcendental approximations), so the bound grows
    with the depth; integers and booleans must be exact."""
    if np.dtype(dtype).kind not in "fc":
        return 0.0, 0.0
    eps = float(np.finfo(dtype).eps)
    scale = 64 * eps * (1 + depth)  # 7.6e-6 per node for float32
    return scale * 4, scale


def mismatch(ref: np.ndarray, got: np.ndarray, depth: int) -> np.ndarray | str:
    """Where ``got`` differs from ``ref`` (a boolean mask: NaN or infinity placement, values beyond
    the tolerance), or why they cannot be compared element by element (shape, dtype)."""
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape:
        return f"shape {got.shape} != reference {ref.shape}"
    if ref.dtype != got.dtype:
        return f"dtype {got.dtype} != reference {ref.dtype}"
    if ref.dtype.kind not in "fc":
        return ref != got
    rtol, atol = tolerance(ref.dtype, depth)
    r, x = ref.astype("float64"), got.astype("float64")
    nan = np.isnan(r) != np.isnan(x)
    inf = (np.isinf(r) | np.isinf(x)) & ~(np.isnan(r) | np.isnan(x)) & (r != x)
    finite = np.isfinite(r) & np.isfinite(x)
    # Values are compared against the output's own scale too: a sum that cancels keeps the rounding
    # error of its largest terms.
    magnitude = max(1.0, float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)))
    with np.errstate(all="ignore"):
        far = finite & (np.abs(r - x) > atol * magnitude + rtol * np.abs(r))
    return nan | inf | far


def differs(ref: np.ndarray, got: np.ndarray, depth: int, also: np.ndarray | None = None) -> str | None:
    """Why ``got`` is not ``ref`` (counting only elements that differ from ``also`` too, where given),
    or None."""
    bad = mismatch(ref, got, depth)
    if isinstance(bad, str):
        return bad
    if also is not None:
        other = mismatch(also, got, depth)
        if not isinstance(other, str):
            bad = bad & other
    if not bad.any():
        return None
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return (
        f"{int(bad.sum())} of {bad.size} elements differ, first at {list(at)}: got {got[at]!r}, reference {ref[at]!r}"
    )


@dataclasses.dataclass
class Outcome:
    """``ok``; ``differs`` (a silent wrong answer: the failure this fuzzer hunts); ``ambiguous`` (we
    differ from onnxruntime but agree, at every differing element, with onnx's reference evaluator or
    with the operators' definition, ``definition``: the oracles disagree, or rounding and NaN rules the
    spec leaves open decide); ``refused`` (we
    raised NNAdapterError where the reference ran: unsupported or invalid, not silent); ``invalid``
    (the reference refused the model: a generator slip, not counted); ``error`` (any other exception
    of ours: a failure)."""

    status: str
    detail: str = ""
    output: str | None = None


def run_case(case: Case) -> dict[str, Outcome]:
    """Every output of ``case`` -> its outcome (one compilation, one run on each side)."""
    import nnadapter_tvm as nna

    names = [o.name for o in case.model.graph.output]
    try:
        want, _ = reference(case.model, case.feeds)
    except Exception as err:
        return {n: Outcome("invalid", _line(err)) for n in names}
    try:
        # Host fallback on, as applications meet it through nnadapter_tvm.onnxruntime: what no device
        # runs goes to the host, whose run-time checks are fuzzed too.
        got = nna.Predictor(case.model, host_fallback=True).run(case.feeds)
    except nna.NNAdapterError as err:
        # TVM failing to build a valid model is our failure, not a refusal.
        status = "error" if err.code == nna.ResultCode.DEVICE_INTERNAL_ERROR else "refused"
        return {n: Outcome(status, _line(err)) for n in names}
    except Exception as err:
        import traceback

        where = traceback.extract_tb(err.__traceback__)[-1]
        at = f" at {Path(where.filename).name}:{where.lineno}"
        return {n: Outcome("error", f"{type(err).__name__}: {_line(err)}{at}") for n in names}
    result = {}
    second: list | None = None
    third: list | None = None
    for i, (name, r, x) in enumerate(zip(names, want, got)):
        depth = case.depths.get(name, 1)
        why = differs(r, x, depth)
        if not why:
            result[name] = Outcome("ok")
            continue
        if second is None:
            second = _second_opinion(case)
        sided = None
        if second and second[i] is not None and differs(r, x, depth, also=second[i]) is None:
            # Wherever we differ from onnxruntime, onnx's reference evaluator sides with us: the two
            # oracles disagree, the spec leaves it open (Clip's missing bound, Hardmax of NaN).
            sided = "onnx's reference evaluator"
        else:
            # The third opinion, only where the first two disagree with us (it costs a float64 run).
            if third is None:
                third = definition(case, second)
            if third and third[i] is not None and differs(r, x, depth, also=third[i]) is None:
                sided = DEFINITION
        if sided:
            result[name] = Outcome("ambiguous", f"onnxruntime: {why}; {sided} agrees with us there", name)
        else:
            result[name] = Outcome("differs", why, name)
    return result


def _second_opinion(case: Case) -> list:
    """onnx's ReferenceEvaluator's outputs (None for one it cannot compute), or [] where it computes none.
    Where it cannot run the whole model (one node it cannot evaluate on these values), each output is
    asked again on the part of the graph it depends on."""
    from onnx.reference import ReferenceEvaluator

    def evaluate(model: onnx.ModelProto) -> list | None:
        try:
            with np.errstate(all="ignore"):
                return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, case.feeds_of(model))]
        except Exception:
            return None

    whole = evaluate(case.model)
    if whole is not None:
        return whole
    each = []
    for output in case.model.graph.output:
        alone = evaluate(_ancestors(case.model, output.name))
        each.append(None if alone is None else alone[0])
    return each if any(v is not None for v in each) else []


def run_graphs(cases: list[Case]) -> list[tuple[Case, dict[str, Outcome]]]:
    """Each case's outcomes, from one compilation of all of them merged; where the merged model as a
    whole is refused, invalid or fails (one graph's operator can do that to all), case by case."""
    outcomes = run_case(merge(cases)) if len(cases) > 1 else {}
    whole = {o.status for o in outcomes.values()} & {"refused", "invalid", "error"}
    results = []
    for case in cases:
        names = [o.name for o in case.model.graph.output]
        mine = {n: outcomes[n] for n in names} if outcomes and not whole else None
        if mine is None or any(o.status == "differs" for o in mine.values()):
            # Alone, too, where the batch differs: onnx's evaluator, the second opinion, runs the whole merged
            # model, and one graph it cannot run (LRN of size 1) would leave every other graph without it.
            mine = run_case(case)
        results.append((case, mine))
    return results


def _line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return (" ".join(lines[:3]) if lines else type(err).__name__)[:400]
