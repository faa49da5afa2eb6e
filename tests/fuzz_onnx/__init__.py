"""The differential ONNX fuzzer's generator, runner, comparison and minimizer (tests/e2e/test_fuzz_onnx.py runs
it in CI, scripts/fuzz_onnx.py runs long campaigns).

A graph is drawn node by node with hypothesis: ``VOCABULARY`` maps each ONNX operator we claim to a
builder that picks inputs from the float tensors made so far (their concrete shapes tracked through
onnx's shape inference), draws attributes within their domains and adds the node (and any constant
inputs).  Graph inputs may declare symbolic dimensions (dim_params); feeds are numpy arrays from a drawn
seed, some sprinkled with NaN, infinities, signed zeros, extremes and denormals.  Several independent
graphs are merged into one multi-output model, compiled once by nnadapter_tvm's Predictor and run by
onnxruntime (onnx's ReferenceEvaluator where onnxruntime has no kernel); each output must agree within a
tolerance derived from its dtype and its depth in the graph.  Where it does not, onnx's evaluator is a
second opinion and the operators' definition (the evaluator on the model in float64, the max family
propagating NaN) a third: one that sides with us makes the difference ambiguous, not a failure.  A
difference is minimized to the first node whose output differs while its inputs agree, run alone on the
values that reached it.

The package, by what each part does:

    graph.py        drawing (Draw, RandomDraw), the graph being built (Graph, Tensor), random feeds,
                    the vocabulary's registry (VOCABULARY, @op)
    ops_math.py     builders: elementwise, activations, comparisons, reductions, softmax, CumSum, TopK
    ops_shape.py    builders: shape and indexing operators (Reshape, Concat, Slice, Gather, Pad, ...)
    ops_nn.py       builders: MatMul/Gemm, convolutions, pools, normalizations, Cast, recurrent layers,
                    control flow (If, Loop, Scan), dynamic quantization
    cases.py        whole graphs (Case, draw_graph), merged batches, a model cut to one output's ancestors
    run.py          both sides run and compared (run_case, run_graphs, differs), the second opinion
    definition.py   the third opinion: the operators' definition in float64 (definition, to_float64)
    minimize.py     the first node that differs, alone (minimize)
    explain.py      differences that are not wrong answers (explain)
    corpus.py       the corpus files (save, load, describe, signature)

Here are the names the fuzzer's users (tests/e2e/test_fuzz_onnx.py, scripts/fuzz_onnx.py) import.
"""

from .cases import Case, draw_graph
from .corpus import _decode, describe, load, save, signature
from .definition import definition, max_pool, nan_propagating_ops, to_float64
from .explain import explain
from .graph import CORPUS, Draw, RandomDraw
from .minimize import minimize
from .run import differs, run_case, run_graphs

__all__ = [
    "CORPUS",
    "Case",
    "Draw",
    "RandomDraw",
    "_decode",
    "definition",
    "describe",
    "differs",
    "draw_graph",
    "explain",
    "load",
    "max_pool",
    "minimize",
    "nan_propagating_ops",
    "run_case",
    "run_graphs",
    "save",
    "signature",
    "to_float64",
]
