"""The Relax passes every pipeline of ours runs (targets/relax_passes.py): legalization rules passed to
``LegalizeOps`` rather than registered on TVM's operators, and the fused-function rewrite that keeps
TVM 0.27's ``FuseTIR`` from failing on scalar parameters of two kinds (issue 17)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
from oputil import execute
from tvm import relax, te, tirx, topi

import nnadapter_tvm as nna
from nnadapter_tvm.targets import relax_passes

P, OP = nna.Precision, nna.OperationType

# Rules other modules still register process-wide (``tvm.ir.register_op_attr(..., "FLegalize")``): they
# belong in ``relax_passes.register_legalize`` too; the test below fails on any new one.
STILL_GLOBAL = {
    "relax.nn.max_pool2d",  # op_converters/pool.py, the NaN-aware max pool
    "relax.sum",  # op_converters/reduce.py, float64-accumulated REDUCE_* sums
    "relax.mean",
    "relax.astype",
}


def test_import_leaves_tvm_legalize_rules_untouched():
    """Importing nnadapter_tvm, every converter, the ONNX frontend and the pipelines changes no ``FLegalize``
    of TVM's operators (a fresh process: others in this one have imported everything already), and none
    of the float-zero ops at all; the project's rules reach the pipelines through ``legalize_map``."""
    script = textwrap.dedent(
        """
        import json
        import tvm
        from tvm import relax  # TVM's own legalization rules register on this import

        def rules():
            found = {}
            for name in tvm.ir.Op.list_op_names():
                op = tvm.ir.Op.get(name)
                rule = op.get_attr("FLegalize") if op.has_attr("FLegalize") else None
                if rule is not None:
                    found[name] = rule
            return found

        before = rules()
        import nnadapter_tvm
        import nnadapter_tvm.op_converters
        import nnadapter_tvm.frontends.onnx
        from nnadapter_tvm.targets import gpu, relax_passes
        from nnadapter_tvm.targets.cpu import pipeline
        after = rules()
        changed = [n for n in set(before) | set(after) if n not in before or n not in after
                   or not after[n].same_as(before[n])]
        print(json.dumps({"changed": sorted(changed), "ours": sorted(relax_passes.legalize_map())}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    changed, ours = set(result["changed"]), set(result["ours"])
    assert set(relax_passes.ZERO_KEEPING_OPS) <= ours
    assert not changed & set(relax_passes.ZERO_KEEPING_OPS), changed
    assert changed <= STILL_GLOBAL, f"new process-wide FLegalize registrations: {sorted(changed - STILL_GLOBAL)}"


def test_register_legalize_reaches_our_pipelines_only(monkeypatch):
    """A rule added with ``register_legalize`` lowers the op in ``legalize_ops`` (and so in every pipeline of
    ours), while TVM's own ``LegalizeOps()`` and the operator's attribute keep TVM's rule."""
    monkeypatch.setattr(relax_passes, "_RULES", {k: list(v) for k, v in relax_passes._RULES.items()})
    tvm_rule = tvm.ir.Op.get("relax.negative").get_attr("FLegalize")

    def plus_one(default):  # -x + 1: an observable change
        return lambda bb, call: bb.call_te(lambda x: topi.add(topi.negative(x), 1.0), call.args[0])

    relax_passes.register_legalize("relax.negative", plus_one)
    relax_passes.register_legalize("relax.negative", plus_one)  # again (a reloaded module): not stacked
    assert len(relax_passes._RULES["relax.negative"]) == 1
    assert tvm.ir.Op.get("relax.negative").get_attr("FLegalize").same_as(tvm_rule)

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([3], "float32"))
    with bb.function("main", [x]):
        out = bb.emit(relax.op.negative(x))
        bb.emit_func_output(out)
    mod = bb.get()
    data = np.array([1.0, -2.0, 0.5], "float32")

    def run(legalized: tvm.IRModule) -> np.ndarray:
        vm = relax.VirtualMachine(tvm.compile(legalized, "llvm"), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(data)).numpy()

    np.testing.assert_array_equal(run(relax_passes.legalize_ops()(mod)), -data + 1.0)
    np.testing.assert_array_equal(run(relax.transform.LegalizeOps()(mod)), -data)


# -- FuseTIR: a fused function with a scalar parameter and a Shape parameter --------------------------


def _tile_reduce_model(reduce_op: OP, tail: OP) -> nna.Model:
    """TILE(x [4, 3], repeats fed at execution) -> REDUCE_*(axis 0, keepdim) -> an element-wise op: the
    smallest graph of the corpus case fixed-Tile-fed-repeats-then-ReduceL2-fails-to-build."""
    m = nna.Model()
    x = m.add_operand(nna.OperandType(P.FLOAT32, [4, 3]))
    repeats = m.add_operand(nna.OperandType(P.INT32, [2]))
    tiled = m.add_operand(nna.OperandType(P.FLOAT32, [nna.UNKNOWN, nna.UNKNOWN]))
    m.add_operation(OP.TILE, [x, repeats], [tiled])
    axes = m.add_operand(nna.OperandType(P.INT32, [1]))
    m.set_operand_value(axes, np.array([0], "int32"))
    keep = m.add_operand(nna.OperandType(P.BOOL8, [1]))
    m.set_operand_value(keep, np.array([True]))
    reduced = m.add_operand(nna.OperandType(P.FLOAT32, [1, nna.UNKNOWN]))
    m.add_operation(reduce_op, [tiled, axes, keep], [reduced])
    out = m.add_operand(nna.OperandType(P.FLOAT32, [1, nna.UNKNOWN]))
    m.add_operation(tail, [reduced], [out])
    m.identify_inputs_and_outputs([x, repeats], [out])
    m.finish()
    return m


_NUMPY = {OP.REDUCE_SUM: np.sum, OP.REDUCE_MAX: np.max, OP.ABS: np.abs, OP.EXP: np.exp}


@pytest.mark.parametrize("schedules", ["1", "0"], ids=["cpu_schedules", "no_schedules"])
@pytest.mark.parametrize(
    "reduce_op,tail", [(OP.REDUCE_SUM, OP.ABS), (OP.REDUCE_MAX, OP.EXP)], ids=["sum-abs", "max-exp"]
)
def test_tile_fed_repeats_then_reduction_builds(reduce_op, tail, schedules):
    """The reduction's empty-count select (it reads the repeat count ``tile_r0``, which no tensor carries)
    fuses with the op after it into a function taking ``tile_r0`` as a scalar and ``tile_r1`` (inside the
    dim 3 * tile_r1) in a Shape: TVM's FuseTIR failed on it ("VarRemapGet(source) == nullptr"). It builds,
    and one compilation runs several repeat counts right (numpy's tile, reduction and op)."""
    context = nna.Context([nna.Device.acquire("llvm")], f"CPU_SCHEDULES={schedules};")
    compilation = nna.Compilation(_tile_reduce_model(reduce_op, tail), context)
    compilation.finish()
    x = np.random.default_rng(7).standard_normal((4, 3)).astype("float32")
    for reps in ([1, 2], [3, 1], [2, 3]):
        got = execute(compilation, [x, np.array(reps, "int32")])[0]
        want = _NUMPY[tail](_NUMPY[reduce_op](np.tile(x, reps), axis=0, keepdims=True))
        # float32 sums of up to 12 terms, then one correctly rounded op: a few ulp.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["cuda", "opencl"])
def test_tile_fed_repeats_then_reduction_builds_for_gpus(device):
    """The GPU pipeline fuses the same way (compiled here; the kernels run where a GPU is)."""
    context = nna.Context([nna.Device.acquire(device)])
    nna.Compilation(_tile_reduce_model(OP.REDUCE_MAX, OP.ABS), context).finish()


def _mixed_scalar_module() -> tvm.IRModule:
    """main(x [n], s: Shape([m])): t = tile(x) of dim 3 * n (opaque: it fuses with nothing), an alias of t,
    y = (m == 0 ? 0 : t), exp(y).  After FuseOps, select and exp form one function taking m as a scalar
    and n in a Shape parameter, called on the alias (which FuseTIR's normalizer removes, re-deriving the
    call's type: the call then needs a signature that gives its output shape)."""
    bb = relax.BlockBuilder()
    n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
    x = relax.Var("x", relax.TensorType([n], "float32"))
    s = relax.Var("s", relax.ShapeType([m]))

    def tile(t: te.Tensor) -> te.Tensor:
        return te.compute((3 * t.shape[0],), lambda i: t[i % t.shape[0]], name="tile")

    def select(t: te.Tensor, k) -> te.Tensor:
        return te.compute(t.shape, lambda i: tirx.if_then_else(k == 0, tirx.const(0, "float32"), t[i]), name="sel")

    with bb.function("main", [x, s]):
        with bb.dataflow():
            tiled = bb.emit_te(tile, x, primfunc_name_hint="tile")
            alias = bb.emit(tiled)
            selected = bb.emit_te(select, alias, m, primfunc_name_hint="select")
            out = bb.emit_output(relax.op.exp(selected))
        bb.emit_func_output(out)
    gvar = bb.get().get_global_var("tile")
    bb.update_func(gvar, bb.get()[gvar].with_attr("op_pattern", 8))  # kOpaque: AnnotateTIROpPattern keeps it
    return bb.get()


def test_split_fused_shape_params_moves_scalars_into_the_shape():
    """The pass leaves no fused function with both kinds of scalar parameters, the call's output keeps its
    symbolic shape, FuseTIR fuses, and the kernel computes numpy's values for m = 0 and m = 2."""
    passes = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps()]
    with tvm.target.Target("llvm"), tvm.transform.PassContext(opt_level=3):
        fused = tvm.transform.Sequential(passes)(_mixed_scalar_module())
        split = relax_passes.split_fused_shape_params(fused)
        for func in split.functions.values():
            if isinstance(func, relax.Function) and func.attrs and func.attrs.get("Primitive", False):
                assert not any(isinstance(p.ty, tvm.ir.PrimType) for p in func.params), func.params
        lowered = relax.transform.FuseTIR()(split)
    assert isinstance(lowered["main"].ret_ty.shape, relax.ShapeExpr)  # 3 * n, not an unknown shape
    vm = relax.VirtualMachine(tvm.compile(lowered, "llvm"), tvm.cpu())
    data = np.array([0.5, -1.0, 2.0, 0.0], "float32")
    for m in (0, 2):
        got = vm["main"](tvm.runtime.tensor(data), tvm.runtime.ShapeTuple([m])).numpy()
        np.testing.assert_allclose(got, np.exp(np.zeros(12) if m == 0 else np.tile(data, 3)), rtol=1e-6)


def test_split_fused_shape_params_leaves_other_modules_alone():
    """A module without such a function comes back as it was (the same object)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.exp(relax.op.abs(x)))
        bb.emit_func_output(out)
    passes = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps()]
    with tvm.target.Target("llvm"):
        fused = tvm.transform.Sequential(passes)(bb.get())
        assert relax_passes.split_fused_shape_params(fused).same_as(fused)
