"""Shared by the ``arm`` tests (tests/e2e/test_arm_build.py, test_arm_deploy.py, test_arm_board.py): whether
this host can cross-build for aarch64, an ``arm`` context, a free port, the module blob of a cache file, and
the softmax model with its numpy reference (linked here by zig, run on the board by each toolchain)."""

from __future__ import annotations

import shutil
import socket

import numpy as np
import pytest

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.targets import toolchain
from nnadapter_tvm.targets.arm import host_is_aarch64

EM_AARCH64 = 183
HAS_ZIG = not host_is_aarch64() and toolchain.zig_executable() is not None
CAN_EXPORT = host_is_aarch64() or shutil.which("aarch64-linux-gnu-g++") is not None or HAS_ZIG
NO_CROSS = "needs an aarch64 cross compiler: apt-get install g++-aarch64-linux-gnu, or pip install ziglang"
needs_cross = pytest.mark.skipif(not CAN_EXPORT, reason=NO_CROSS)


def arm_context(properties: str = "") -> nna.Context:
    return nna.Context([nna.Device.acquire("arm")], properties)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def module_blob(path) -> bytes:
    container = cache.unpack(cache.read_file(path), str(path))
    (sub,) = container.meta["subgraphs"]
    return bytes(container.blobs[sub["blob"]])


def softmax_model() -> nna.Model:
    """y = softmax(x, axis=1) with x: [N, 7]; reference ``softmax_reference``."""
    model = nna.Model()
    x = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [nna.UNKNOWN, 7]))
    axis = model.add_operand(nna.OperandType(nna.Precision.INT32, [1]))
    model.set_operand_value(axis, np.array([1], "int32"))
    y = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [nna.UNKNOWN, 7]))
    model.add_operation(nna.OperationType.SOFTMAX, [x, axis], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model


def softmax_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype("float64") - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype("float32")
