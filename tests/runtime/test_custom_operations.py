"""Operations beyond the standard set (nnadapter_tvm.extensions, docs/custom_operations.md): registered by a
call or by another package's entry point, converted like the standard ones, covered by the model token and
recorded in the cache, which refuses to load where the operation is missing or has another version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tvm import te

import nnadapter_tvm as nna
from nnadapter_tvm import operations
from nnadapter_tvm.extensions import Arg, extension_kernel
from nnadapter_tvm.operations.schema import F32
from nnadapter_tvm.runtime.token import model_token

P = nna.Precision
SCHEDULED: list[str] = []


def _square_plus(args):
    """input, alpha (default 1) -> input * input + alpha (one TE kernel with its own CPU schedule)."""
    x = args.tensor("input")
    alpha = args.float("alpha", 1.0)
    return args.emit_te(
        lambda t: te.compute(t.shape, lambda *i: t(*i) * t(*i) + alpha, name="square_plus"),
        x,
        primfunc_attrs=extension_kernel("TEST_SQUARE_PLUS"),
    )


def _schedule(sch, target) -> None:
    SCHEDULED.append(target.kind.name)
    (outer, *_) = sch.get_loops(sch.get_sblock("square_plus"))
    sch.parallel(outer)


SQUARE_PLUS = nna.register_operation(
    "TEST_SQUARE_PLUS",
    10001,
    [Arg("input", F32), Arg("alpha", F32, optional=True)],
    [Arg("output", F32)],
    _square_plus,
    schedule=_schedule,
)


def _model(alpha: float | None = 0.5) -> nna.Model:
    """y = relu(square_plus(x, alpha)), x: [?, 8]."""
    m = nna.Model()
    x = m.add_operand(nna.OperandType(P.FLOAT32, [nna.UNKNOWN, 8]))
    ins = [x]
    if alpha is not None:
        a = m.add_operand(nna.OperandType(P.FLOAT32, [1], lifetime=nna.Lifetime.CONSTANT_COPY))
        m.set_operand_value(a, np.float32([alpha]))
        ins.append(a)
    r = m.add_operand(nna.OperandType(P.FLOAT32, [nna.UNKNOWN, 8]))
    y = m.add_operand(nna.OperandType(P.FLOAT32, [nna.UNKNOWN, 8]))
    m.add_operation(SQUARE_PLUS, ins, [r])
    m.add_operation(nna.OperationType.RELU, [r], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def _run(compilation: nna.Compilation, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    execution = nna.Execution(compilation)
    execution.set_input(0, x)
    execution.set_output(0, out)
    execution.compute()
    return out


@pytest.mark.parametrize("alpha", [0.5, None])
def test_a_registered_operation_converts_schedules_and_runs(alpha):
    SCHEDULED.clear()
    compilation = nna.Compilation(_model(alpha), nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    x = np.random.default_rng(0).uniform(-2, 2, (3, 8)).astype("float32")
    want = np.maximum(x * x + np.float32(1.0 if alpha is None else alpha), 0)
    np.testing.assert_allclose(_run(compilation, x), want, rtol=1e-6)
    assert SCHEDULED == ["llvm"], "the extension's own CPU schedule ran"
    assert nna.OperationType(10001) is SQUARE_PLUS and SQUARE_PLUS.name == "TEST_SQUARE_PLUS"
    assert SQUARE_PLUS not in list(nna.OperationType), "the enum still lists only the standard operations"


def test_the_model_is_validated_against_the_registered_schema():
    m = nna.Model()
    x = m.add_operand(nna.OperandType(P.INT32, [4]))
    y = m.add_operand(nna.OperandType(P.FLOAT32, [4]))
    with pytest.raises(nna.NNAdapterError, match="TEST_SQUARE_PLUS"):
        m.add_operation(SQUARE_PLUS, [x], [y])


def test_the_token_covers_the_extension_and_its_version(monkeypatch):
    model, context = _model(), nna.Context([nna.Device.acquire("llvm")])
    before = model_token(model, context)
    assert model_token(model, context) == before
    monkeypatch.setattr(operations.lookup(SQUARE_PLUS), "version", "2")
    assert model_token(model, context) != before


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [
        ("TEST_SQUARE_PLUS", 10002, "name is taken by operation code 10001"),
        ("RELU", 10003, "name is taken by operation code"),
        ("OTHER_OP", 10001, "code 10001 is taken by TEST_SQUARE_PLUS"),
        ("OTHER_OP", 1001, r"outside \[10000"),
        ("OTHER_OP", 9999, r"outside \[10000"),
        ("other_op", 10004, "upper snake case"),
    ],
)
def test_names_and_codes_never_collide(name, code, message):
    with pytest.raises(ValueError, match=message):
        nna.register_operation(name, code, [Arg("input", F32)], [Arg("output", F32)], _square_plus)


# -- a package of someone else's, found through its entry point ---------------------------------------
PACKAGE = '''
"""A user's package: one custom operation for the model API and one ONNX converter for it."""
import os
from tvm import relax
import nnadapter_tvm as nna
from nnadapter_tvm.extensions import Arg
from nnadapter_tvm.operations.schema import F32


def _convert(args):
    """input, scale -> input * scale + 1, in Relax."""
    x = args.tensor("input")
    return relax.op.add(relax.op.multiply(x, args.tensor("scale")), relax.const(1.0, "float32"))


def register():
    op = nna.register_operation(
        "USER_SCALE_PLUS_ONE", 10500, [Arg("input", F32), Arg("scale", F32)], [Arg("output", F32)], _convert,
        infer=lambda shapes, values: [shapes[0]], version=os.environ.get("USER_OP_VERSION", "1"),
    )
    from nnadapter_tvm.frontends.onnx.registry import onnx_op

    @onnx_op("com.example.ScalePlusOne")
    def _scale_plus_one(ctx):
        scale = ctx.constant(float(ctx.attr("scale", 1.0)), "float32")
        return ctx.emit(op, [ctx.input(0), scale])
'''

USE = """
import json, sys
import numpy as np, onnx
from onnx import helper, TensorProto
import nnadapter_tvm as nna

mode, cache_dir = sys.argv[1], sys.argv[2]
context = nna.Context([nna.Device.acquire("llvm")])
token = "0123456789abcdef0123456789abcdef"
x = np.arange(6, dtype="float32").reshape(2, 3)
result = {}
if mode == "compile":
    op = nna.OperationType(10500)  # the first unknown code loads the entry points
    P = nna.Precision
    m = nna.Model()
    a = m.add_operand(nna.OperandType(P.FLOAT32, [2, 3]))
    s = m.add_operand(nna.OperandType(P.FLOAT32, [1], lifetime=nna.Lifetime.CONSTANT_COPY))
    m.set_operand_value(s, np.float32([3.0]))
    y = m.add_operand(nna.OperandType(P.FLOAT32, [2, 3]))
    m.add_operation(op, [a, s], [y])
    m.identify_inputs_and_outputs([a], [y])
    m.finish()
    c = nna.Compilation(m, context, cache_token=token, cache_dir=cache_dir)
    c.finish()
    e = nna.Execution(c)
    out = np.empty((2, 3), "float32")
    e.set_input(0, x); e.set_output(0, out); e.compute()
    result["model_api"] = out.tolist()
    node = helper.make_node("ScalePlusOne", ["x"], ["y"], domain="com.example", scale=2.0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    result["onnx"] = nna.Predictor(model).run({"x": x})[0].tolist()
else:
    try:
        c = nna.Compilation(None, context, cache_token=token, cache_dir=cache_dir)
        c.finish()
        result["loaded"] = True
    except nna.NNAdapterError as err:
        result["error"] = str(err)
print(json.dumps(result))
"""


def _user_package(root: Path) -> Path:
    """``nna_user_ops`` with an installed-distribution record declaring its entry point (what pip writes)."""
    site = root / "site"
    (site / "nna_user_ops").mkdir(parents=True)
    (site / "nna_user_ops" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    info = site / "nna_user_ops-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nna-user-ops\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[nnadapter_tvm.operations]\nscale_plus_one = nna_user_ops:register\n")
    return site


def _python(code: str, *args: str, site: Path | None = None, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | env
    if site is not None:
        environ["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=environ)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_package_registers_through_its_entry_point_and_caches_know_it(tmp_path):
    site, cache_dir = _user_package(tmp_path), str(tmp_path / "cache")
    x = np.arange(6, dtype="float32").reshape(2, 3)
    done = _python(USE, "compile", cache_dir, site=site)
    np.testing.assert_array_equal(done["model_api"], x * 3 + 1)
    np.testing.assert_array_equal(done["onnx"], x * 2 + 1)
    assert _python(USE, "load", cache_dir, site=site) == {"loaded": True}
    # Without the package, the cached model names what it needs; with another version, which one.
    missing = _python(USE, "load", cache_dir)["error"]
    assert "custom operation USER_SCALE_PLUS_ONE (code 10500)" in missing and "not registered" in missing
    other = _python(USE, "load", cache_dir, site=site, USER_OP_VERSION="2")["error"]
    assert "version 1 of the custom operation USER_SCALE_PLUS_ONE" in other and "version 2" in other


def test_a_cached_load_of_standard_operations_imports_no_converter(tmp_path):
    """Checking a cache's custom operations loads the registrations only where one is missing: a board
    loading a model of standard operations never imports the converters (nor TVM's Relax with them)."""
    code = (
        "import sys, json, nnadapter_tvm as nna\n"
        "from nnadapter_tvm.tools import builtin_model\n"
        "context = nna.Context([nna.Device.acquire('llvm')])\n"
        "if sys.argv[1] == 'compile':\n"
        "    c = nna.Compilation(builtin_model.build_tiny(), context, cache_token='T' * 32, cache_dir=sys.argv[2])\n"
        "else:\n"
        "    c = nna.Compilation(None, context, cache_token='T' * 32, cache_dir=sys.argv[2])\n"
        "c.finish()\n"
        "print(json.dumps({'converters': 'nnadapter_tvm.op_converters' in sys.modules}))\n"
    )
    assert _python(code, "compile", str(tmp_path)) == {"converters": True}
    assert _python(code, "load", str(tmp_path)) == {"converters": False}
