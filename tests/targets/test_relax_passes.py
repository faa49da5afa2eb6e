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
from nnadapter_tvm.runtime import lowering_rules
from nnadapter_tvm.targets import kernel_identity, relax_passes

P, OP = nna.Precision, nna.OperationType

# Rules other modules still register process-wide (``tvm.ir.register_op_attr(..., "FLegalize")``): they
# belong in ``lowering_rules.register_legalize`` too; the test below fails on any new one.
STILL_GLOBAL: set[str] = set()  # every rule of ours goes through runtime/lowering_rules.register_legalize


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
    monkeypatch.setattr(lowering_rules, "_RULES", lowering_rules.registered())
    tvm_rule = tvm.ir.Op.get("relax.negative").get_attr("FLegalize")

    def plus_one(default):  # -x + 1: an observable change
        return lambda bb, call: bb.call_te(lambda x: topi.add(topi.negative(x), 1.0), call.args[0])

    lowering_rules.register_legalize("relax.negative", plus_one)
    lowering_rules.register_legalize("relax.negative", plus_one)  # again (a reloaded module): not stacked
    assert len(lowering_rules.registered()["relax.negative"]) == 1
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


def test_view_guarded_values_reads_a_guarded_result_through_a_view():
    """A guard (match_cast) of an operation's result reads it through a view, which FuseOps sees; a guard
    of the function's parameter is left as it is."""
    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.exp(x))
            guarded = bb.match_cast(y, relax.TensorType([n, 4], "float32"))
            bb.match_cast(x, relax.TensorType([n, 4], "float32"))
            out = bb.emit_output(relax.op.add(guarded, y))
        bb.emit_func_output(out)
    viewed = relax_passes.view_guarded_values(bb.get())
    bindings = viewed["main"].body.blocks[0].bindings
    casts = [b for b in bindings if isinstance(b, relax.MatchCast)]
    values = {b.var: b.value for b in bindings if isinstance(b, relax.VarBinding)}
    assert values[casts[0].value].op.name == "relax.memory.view"
    assert casts[1].value.same_as(viewed["main"].params[0])
    built = tvm.compile(viewed, "llvm")
    data = np.array([[0.5, -1.0, 2.0, 0.0]], "float32")
    got = relax.VirtualMachine(built, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    np.testing.assert_allclose(got, 2 * np.exp(data), rtol=1e-6)


# -- FuseOps' order: a binding moved before the match_cast defining a symbolic variable it uses ----------


def _guard_module(swapped: bool) -> tvm.IRModule:
    """main(x [n], r [1] int64): m from r's value (match_cast of a shape), a guard match_cast of x to
    [select(m > 0, n, n + 1)] (TILE's check), then y = x * 2.  ``swapped``: the guard before the
    definition of m, as FuseOps left TILE's guard."""
    n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
    x = relax.Var("x", relax.TensorType([n], "float32"))
    r = relax.Var("r", relax.TensorType([1], "int64"))
    shape = relax.DataflowVar("shape", relax.ShapeType(ndim=1))
    defined = relax.DataflowVar("defined", relax.ShapeType([m]))
    guarded_ty = relax.TensorType([tirx.Select(m > 0, n, n + 1)], "float32")
    guarded = relax.DataflowVar("guarded", guarded_ty)
    out = relax.Var("out", relax.TensorType([n], "float32"))
    bindings = [
        relax.VarBinding(shape, relax.op.tensor_to_shape(r)),
        relax.MatchCast(defined, shape, relax.ShapeType([m])),
        relax.MatchCast(guarded, x, guarded_ty),
        relax.VarBinding(out, relax.op.multiply(relax.op.memory.view(guarded, relax.ShapeExpr([n])), relax.const(2.0))),
    ]
    if swapped:
        bindings[1], bindings[2] = bindings[2], bindings[1]
    body = relax.SeqExpr([relax.DataflowBlock(bindings)], out)
    func = relax.Function([x, r], body, relax.TensorType([n], "float32")).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func})


def test_order_symbolic_definitions_puts_a_use_after_its_definition():
    """The guard moves back after the match_cast defining m (nothing else moves), the module builds (TVM's
    VMShapeLower refuses the swapped one: "is not computed"), and the guard holds at execution: x * 2 for
    r > 0, an error for r = 0."""
    fixed = relax_passes.order_symbolic_definitions(_guard_module(swapped=True))
    assert [b.var.name for b in fixed["main"].body.blocks[0].bindings] == ["shape", "defined", "guarded", "out"]
    with pytest.raises(Exception, match="not computed"):
        tvm.compile(_guard_module(swapped=True), "llvm")
    vm = relax.VirtualMachine(tvm.compile(fixed, "llvm"), tvm.cpu())
    x = np.array([1.5, -2.0, 0.25], "float32")
    got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array([3], "int64"))).numpy()
    np.testing.assert_array_equal(got, x * 2)
    with pytest.raises(RuntimeError, match="match_cast"):  # the guard's shape: 3 vs. n + 1 = 4
        vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array([0], "int64")))


def test_order_symbolic_definitions_leaves_valid_modules_alone():
    """A module already in a valid order comes back as it was (the same object)."""
    valid = _guard_module(swapped=False)
    assert relax_passes.order_symbolic_definitions(valid).same_as(valid)


def test_tile_guard_after_fusion_builds():
    """ONNX ReduceSum(x) + ReduceMax(Tile(x, r fed)) over x [N] (the fuzzer's graph, minimized): FuseOps put
    TILE's guard on r's value (a match_cast using tile_r0) before the match_cast defining tile_r0, and the
    CPU build failed ("PrimExpr ... is not computed"). Built once, it runs two sizes right (numpy)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0),
        helper.make_node("Tile", ["x", "r"], ["t"]),
        helper.make_node("ReduceMax", ["t"], ["m"], axes=[0], keepdims=0),
        helper.make_node("Add", ["s", "m"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tile_guard",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"]),
            helper.make_tensor_value_info("r", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [onnx.numpy_helper.from_array(np.array([0], "int64"), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for schedules in ("1", "0"):
        predictor = nna.Predictor(model, context_properties=f"CPU_SCHEDULES={schedules};")
        for x, r in ((np.array([-1.25, -0.5, -2.0], "float32"), [2]), (np.array([0.5, 4.0], "float32"), [3])):
            (got,) = predictor.run({"x": x, "r": np.array(r, "int64")})
            # a sum of up to 3 float32 terms (float64 accumulation rounded once) plus a max: exact or 1 ulp
            np.testing.assert_allclose(got, x.sum() + np.tile(x, r).max(), rtol=1e-6)


# -- a kernel's scalar parameters in an order of its structure ------------------------------------------


def _scalar_kernel_module() -> tvm.IRModule:
    """main(x [h, w]) calls y = x * 2 + 10 h + w through a kernel taking (x, w, h, y): its scalars in an
    order other than their appearance in x's shape, as FuseTIR leaves them in some processes."""
    h, w = tirx.Var("h", "int64"), tirx.Var("w", "int64")
    x_te = te.placeholder((h, w), "float32", name="x")
    y_te = te.compute((h, w), lambda i, j: x_te[i, j] * 2.0 + (h * 10 + w).astype("float32"), name="y")
    kernel = te.create_prim_func([x_te, w, h, y_te]).without_attr("global_symbol")
    bb = relax.BlockBuilder()
    gvar = bb.add_func(kernel, "kernel")
    x = relax.Var("x", relax.TensorType([h, w], "float32"))
    with bb.function("main", [x]):
        out = bb.emit(
            relax.call_tir(gvar, [x, relax.prim_value(w), relax.prim_value(h)], relax.TensorType([h, w], "float32"))
        )
        bb.emit_func_output(out)
    return bb.get()


def test_order_scalar_params_follows_the_kernels_structure():
    """The kernel takes h before w (their order in its buffers' shapes), the call passes them so, and the
    module computes the same values; a module already in that order comes back as it was."""
    mod = _scalar_kernel_module()
    ordered = kernel_identity.order_scalar_params(mod)
    assert [p.name for p in ordered["kernel"].params] == ["x", "h", "w", "y"]
    again = kernel_identity.order_scalar_params(ordered)
    assert again.same_as(ordered)
    data = np.arange(6, dtype="float32").reshape(2, 3)
    want = data * 2 + 10 * 2 + 3
    for built in (mod, ordered):
        vm = relax.VirtualMachine(tvm.compile(built, "llvm"), tvm.cpu())
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(data)).numpy(), want)
