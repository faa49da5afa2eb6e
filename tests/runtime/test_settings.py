"""Context settings read through their declared ``Property`` (typed value or declared default), and the
runtime's independence from the offline tools (the tuning search in particular)."""

import os
import subprocess
import sys

import pytest

import nnadapter_tvm as nna
from nnadapter_tvm.context import COMMON_PROPERTIES, known_properties, parse_properties
from nnadapter_tvm.targets.arm import ARM_MATTR, ARM_MTRIPLE, DEFAULT_MATTR, DEFAULT_MTRIPLE, ArmDriver
from nnadapter_tvm.targets.base import TVM_NUM_THREADS, TVM_OPT_LEVEL
from nnadapter_tvm.targets.cuda import CUDA_ARCH, DEFAULT_ARCH, CudaDriver
from nnadapter_tvm.targets.llvm import CPU_SCHEDULES


def test_read_gives_the_parsed_value_or_the_declared_default():
    props = parse_properties("TVM_OPT_LEVEL=1;CUDA_ARCH=sm_90;CPU_SCHEDULES=off;TVM_NUM_THREADS=2;")
    assert TVM_OPT_LEVEL.read(props) == 1 and CUDA_ARCH.read(props) == "sm_90"
    assert CPU_SCHEDULES.read(props) is False and TVM_NUM_THREADS.read(props) == 2
    unset = parse_properties("")
    assert TVM_OPT_LEVEL.read(unset) == 3 and CUDA_ARCH.read(unset) == DEFAULT_ARCH == "sm_80"
    assert CPU_SCHEDULES.read(unset) is True and TVM_NUM_THREADS.read(unset) is None
    assert ARM_MTRIPLE.read(unset) == DEFAULT_MTRIPLE and ARM_MATTR.read(unset) == list(DEFAULT_MATTR)
    # A raw mapping (a direct driver call) reads the same defaults.
    assert TVM_OPT_LEVEL.read({}) == 3 and CUDA_ARCH.read({}) == "sm_80"


def test_every_declared_default_parses_from_its_own_text():
    # A default is a typed value the parser could have given: rendered as the README writes it, it
    # parses back to itself.
    texts = {"TVM_OPT_LEVEL": "3", "CPU_SCHEDULES": "1", "ARM_MATTR": "+neon", "ARM_MTRIPLE": "aarch64-linux-gnu"}
    texts["CPU_WINOGRAD"] = "1"
    texts["CUDA_ARCH"] = "sm_80"
    declared = {k: p for k, p in known_properties().items() if p.default is not None}
    assert set(declared) == set(texts)
    for key, prop in declared.items():
        assert prop.parse(texts[key]) == prop.default, key


def test_only_common_defaults_enter_the_codegen_properties():
    """A device's own defaults are read, not filled in: an llvm context's token carries no CUDA_ARCH."""
    props = nna.Context([nna.Device.acquire("llvm")]).codegen_properties()
    assert props == {p.key: p.default for p in COMMON_PROPERTIES if p.default is not None} == {"TVM_OPT_LEVEL": 3}


def test_targets_follow_the_settings():
    assert str(CudaDriver().tvm_target({}).arch) == "sm_80"
    assert str(CudaDriver().tvm_target(parse_properties("CUDA_ARCH=sm_90;")).arch) == "sm_90"
    default = ArmDriver().tvm_target(parse_properties(""))
    empty = ArmDriver().tvm_target(parse_properties("ARM_MATTR=;"))  # an empty list means the default
    assert list(default.attrs["mattr"]) == list(empty.attrs["mattr"]) == ["+neon"]
    assert str(default.attrs["mtriple"]) == "aarch64-linux-gnu"


@pytest.mark.parametrize("bad", ["TVM_OPT_LEVEL=4", "TVM_NUM_THREADS=0", "CUDA_ARCH=80"])
def test_bad_values_fail_by_name(bad):
    with pytest.raises(nna.NNAdapterError, match=bad.split("=")[0]):
        parse_properties(bad)


def test_a_compile_imports_no_tool():
    """The runtime applies tuning records (runtime/tuning_database.py) without importing the search."""
    code = (
        "import sys, numpy as np, nnadapter_tvm as nna\n"
        "m = nna.Model()\n"
        "x = m.add_operand(nna.OperandType(nna.Precision.FLOAT32, [2]))\n"
        "y = m.add_operand(nna.OperandType(nna.Precision.FLOAT32, [2]))\n"
        "m.add_operation(nna.OperationType.RELU, [x], [y])\n"
        "m.identify_inputs_and_outputs([x], [y]); m.finish()\n"
        "c = nna.Compilation(m, nna.Context([nna.Device.acquire('llvm')])); c.finish()\n"
        "print(sorted(k for k in sys.modules if k.startswith('nnadapter_tvm.tools')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_thread_property_reaches_every_kernel_launch():
    """TVM splits each parallel loop by ``TVM_NUM_THREADS`` as read from the environment at every launch,
    not by the pool's size: the property must set it, whatever was imported before, or a one-thread
    context still hands each kernel to a worker (docs/performance.md, per-call latency)."""
    code = (
        "import os, numpy as np, tvm, nnadapter_tvm as nna\n"
        "assert 'TVM_NUM_THREADS' not in os.environ\n"
        "m = nna.Model()\n"
        "x = m.add_operand(nna.OperandType(nna.Precision.FLOAT32, [2]))\n"
        "y = m.add_operand(nna.OperandType(nna.Precision.FLOAT32, [2]))\n"
        "m.add_operation(nna.OperationType.RELU, [x], [y])\n"
        "m.identify_inputs_and_outputs([x], [y]); m.finish()\n"
        "c = nna.Compilation(m, nna.Context([nna.Device.acquire('llvm')], 'TVM_NUM_THREADS=1;')); c.finish()\n"
        "e = nna.Execution(c); out = np.empty(2, 'float32')\n"
        "e.set_input(0, np.array([-1, 2], 'float32')); e.set_output(0, out); e.compute()\n"
        "print(os.environ.get('TVM_NUM_THREADS'), out.tolist())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "1 [0.0, 2.0]"
