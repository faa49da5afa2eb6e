"""Tuning: the database as a context property (validated, its fingerprint and not its path in the token),
and a real MetaSchedule search whose records are applied only where they beat the default schedules."""

from __future__ import annotations

import functools
import shutil

import numpy as np
import pytest
from conftest import build_add_relu
from oputil import Const, In, Out, build_model, conv2d_ref, fuse, fuse_ref, i32, run_model

import nnadapter_tvm as nna
from nnadapter_tvm.runtime.convert import convert_model
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.tools import tuning


def fake_database(path, records: str = "") -> str:
    path.mkdir()
    (path / "database_workload.json").write_text("")
    (path / "database_tuning_record.json").write_text(records)
    return str(path)


def token(props: str) -> str:
    return model_token(build_add_relu(), nna.Context([nna.Device.acquire("llvm")], props))


def test_database_fingerprint_enters_the_token(tmp_path):
    a = fake_database(tmp_path / "a")
    b = str(tmp_path / "b")
    shutil.copytree(a, b)
    untuned, tuned_a, tuned_b = token(""), token(f"TUNING_DATABASE={a};"), token(f"TUNING_DATABASE={b};")
    assert untuned != tuned_a, "tuned and untuned caches must not collide"
    assert tuned_a == tuned_b, "the same records in another directory are the same compiled code"
    (tmp_path / "b" / "database_tuning_record.json").write_text("[0, []]\n")
    assert token(f"TUNING_DATABASE={b};") != tuned_a, "new records give a new token"


def test_a_directory_without_a_database_is_refused(tmp_path):
    with pytest.raises(nna.NNAdapterError, match=r"TUNING_DATABASE.*no MetaSchedule database"):
        nna.Context([nna.Device.acquire("llvm")], f"TUNING_DATABASE={tmp_path};")


CONV_PADS, CONV_W = [1, 1, 1, 1], np.random.default_rng(5).standard_normal([16, 8, 3, 3]).astype("float32")
CONV_B = np.random.default_rng(6).standard_normal([16]).astype("float32")


def conv_model() -> nna.Model:
    """One 3x3 convolution with bias and ReLU, batch 1 (MetaSchedule tunes static loops only)."""
    x = np.zeros([1, 8, 12, 12], "float32")
    inputs = [In(x), Const(CONV_W), Const(CONV_B), i32([int(nna.AutoPad.NONE)]), i32(CONV_PADS), i32([1, 1])]
    inputs += [i32([1]), i32([1, 1]), fuse(nna.FuseCode.RELU)]
    return build_model(nna.OperationType.CONV_2D, inputs, [Out()], [(1, 16, 12, 12)])


def conv_reference(x: np.ndarray) -> np.ndarray:
    return fuse_ref(conv2d_ref(x, CONV_W, CONV_B, CONV_PADS, [1, 1], [1, 1], 1), nna.FuseCode.RELU)


@pytest.mark.slow
def test_tune_keeps_only_records_that_beat_the_default_schedule(tmp_path):
    """A real (small) MetaSchedule search: the database resumes, the selection measures every tuned kernel
    against its default schedule and applies only the winners, and tuned builds still compute the model."""
    from nnadapter_tvm.targets import DRIVERS
    from nnadapter_tvm.targets.cpu import pipeline

    # The direct kernel: MetaSchedule's search finds few valid schedules for Winograd's six stages.
    driver, props = DRIVERS["llvm"], {"CPU_WINOGRAD": False}
    model = conv_model()
    fused = [driver.lower_for_tuning(convert_model(model)[0], props)]
    target = driver.tvm_target(props)
    work = str(tmp_path / "db")
    summary = tuning.tune(fused, target, work, trials=16)
    assert summary["records_after"] >= 16 and summary["kernels"] >= 1 and not summary["failed_kernels"]
    assert tuning.tune(fused, target, work, trials=16)["records_after"] == summary["records_after"], "resumed"

    x = np.random.default_rng(6).standard_normal([1, 8, 12, 12]).astype("float32")
    want = conv_reference(x)
    for default, expect_kept in [(lambda f: driver.default_schedule(f, props), None), (lambda f: f, True)]:
        rows = tuning.select(fused, target, work, default)
        assert rows and all(r["default_us"] > 0 and r["tuned_us"] > 0 for r in rows)
        kept = [r for r in rows if r["kept"]]
        assert all(r["tuned_us"] < r["default_us"] for r in kept)
        assert all(r["kept"] == (r["tuned_us"] < r["default_us"] * (1 - tuning.MIN_GAIN)) for r in rows)
        applied = tuning.TuningDatabase(work)
        assert applied.records_path.endswith(tuning.APPLIED)
        assert tuning.record_count(applied.records_path) == len(kept)
        if expect_kept:
            # Against unscheduled loops the tuned convolution wins: its record is what a build applies.
            assert any(r["kernel"].startswith("fused_nna_conv2d") for r in kept), rows
        tuned = functools.partial(tuning.apply, target=target, database=applied)
        _, report = pipeline.build(convert_model(model)[0], target, 3, tuned, winograd=False)
        assert {name for name, rule in report.items() if rule == "tuned"} == {r["kernel"] for r in kept}, report
        (got,) = run_model(model, [x], properties=f"TUNING_DATABASE={work};CPU_WINOGRAD=0;")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_kernels_with_let_bindings_are_tuned_and_looked_up(tmp_path):
    """The CPU's vector math binds intermediates with ``Let`` (a sigmoid's exp), which MetaSchedule's FLOP
    estimate has no rule for: the search gets each kernel in its ``tunable`` form, a build looks records up
    in that form, and a kernel with no record keeps its bindings."""
    import tvm
    import tvm_ffi
    from tvm.s_tir.analysis import estimate_tir_flops

    from nnadapter_tvm.runtime.tuning_database import tunable
    from nnadapter_tvm.targets import DRIVERS
    from nnadapter_tvm.targets.cpu import pipeline

    def lets(mod) -> int:
        found = []
        tvm_ffi.structural_walk(mod, [(tvm.tirx.Let, found.append)])
        return len(found)

    driver, props = DRIVERS["llvm"], {}
    x = np.random.default_rng(7).standard_normal([4, 64]).astype("float32") * 8
    model = build_model(nna.OperationType.SIGMOID, [In(x)], [Out()], [(4, 64)])
    fused = driver.lower_for_tuning(convert_model(model)[0], props)
    assert lets(fused) > 0 and lets(tunable(fused)) == 0
    kernels = [f for f in tunable(fused).functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert [estimate_tir_flops(tvm.IRModule({"main": f})) > 0 for f in kernels] == [True]

    target, work = driver.tvm_target(props), str(tmp_path / "db")
    summary = tuning.tune([fused], target, work, trials=8)
    assert summary["records_after"] >= 1 and summary["kernels"] == 1 and not summary["failed_kernels"]
    # Whatever the selection keeps (against the kernel unscheduled, then scheduled), lookups agree with it.
    for default in [lambda f: f, lambda f: driver.default_schedule(f, props)]:
        rows = tuning.select([fused], target, work, default)
        applied = tuning.TuningDatabase(work)
        tuned = functools.partial(tuning.apply, target=target, database=applied)
        looked_up = tuned(fused)
        names = [r["kernel"] for r in rows if r["kept"]]
        for gvar, func in looked_up.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc):
                # A kernel with a record is replaced by its tuned form; one without keeps its Let bindings.
                assert (lets(func) == 0) == (gvar.name_hint in names), (gvar, names)
        _, report = pipeline.build(convert_model(model)[0], target, 3, tuned)
        assert {n for n, rule in report.items() if rule == "tuned"} == set(names), report
        (got,) = run_model(model, [x], properties=f"TUNING_DATABASE={work};")
        np.testing.assert_allclose(got, 1 / (1 + np.exp(-x.astype("float64"))), rtol=1e-5, atol=1e-6)
