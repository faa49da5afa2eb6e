"""Kernels under the default CPU schedules (targets/cpu/) whose symbolic extent is 0 at execution: the
outputs match numpy and nothing is written or read outside a zero-size buffer.

A schedule that runs a vector or tile loop once over an extent of 0 writes past (or before) its output
without failing; glibc notices only when the heap is next freed ("munmap_chunk(): invalid pointer" at
exit), so each case runs in a child process under ``MALLOC_CHECK_=3`` (abort at the first corrupted free)
and must exit cleanly after running its model a few times and collecting the garbage.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from oputil import UNKNOWN, In, Out, b8, check_op, f32, fuse, i32, rand

import nnadapter_tvm as nna

OP = nna.OperationType
EXACT = {"rtol": 0, "atol": 0}
TOL = {"rtol": 1e-5, "atol": 1e-5}
INT_MAX, INT_MIN = 2**31 - 1, -(2**31)


def _pool_inputs(x: In, op: nna.OperationType) -> list:
    head = [x, i32([int(nna.AutoPad.NONE)]), i32([0, 1, 0, 1]), i32([2, 2]), i32([1, 1]), b8([False])]
    if op == OP.MAX_POOL_2D:
        return [*head, b8([False]), i32([int(nna.Precision.INT32)]), fuse(0)]
    return [*head, b8([False]), fuse(0)]


def _pool_ref(x: np.ndarray, kind: str) -> np.ndarray:
    """2x2 window, stride 1, one row and column of padding after (excluded from means, -inf for max)."""
    fill = -np.inf if kind == "max" else np.nan
    padded = np.pad(x, [(0, 0), (0, 0), (0, 1), (0, 1)], constant_values=fill)
    h, w = x.shape[2:]
    windows = np.stack([padded[:, :, i : i + h, j : j + w] for i in (0, 1) for j in (0, 1)])
    return (np.max(windows, 0) if kind == "max" else np.nanmean(windows, 0)).astype("float32")


def _slice(x: np.ndarray, dims: list, start: int, end: int, step: int, axis: int) -> tuple:
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, end, step)
    out_dims = [UNKNOWN if a == axis else d for a, d in enumerate(dims)]
    ins = [In(x, dims=dims), i32([axis]), i32([start]), i32([end]), i32([step])]
    return OP.SLICE, ins, [x[tuple(index)]], [Out(dims=out_dims)], EXACT


#: name -> () -> (operation, inputs, expected outputs, declared outputs, tolerances).
CASES: dict[str, Callable[[], tuple]] = {}


def _case(fn: Callable[[], tuple]) -> Callable[[], tuple]:
    CASES[fn.__name__.removeprefix("_").replace("_", "-")] = fn
    return fn


EMPTY_INNER = np.zeros((2, 0), "float32")  # an inner (vectorized) axis fed 0
EMPTY_OUTER = np.zeros((0, 20), "float32")  # an outer (parallel) axis fed 0
FIVE = np.arange(10, dtype="float32").reshape(2, 5)


@_case
def _elementwise_inner() -> tuple:
    e = EMPTY_INNER
    return (
        OP.ADD,
        [In(e, dims=[2, UNKNOWN]), In(e, dims=[2, UNKNOWN]), fuse(0)],
        [e + e],
        [Out(dims=[2, UNKNOWN])],
        EXACT,
    )


@_case
def _elementwise_outer() -> tuple:
    b = EMPTY_OUTER
    return OP.RELU, [In(b, dims=[UNKNOWN, 20])], [np.maximum(b, 0)], [Out(dims=[UNKNOWN, 20])], EXACT


@_case
def _concat() -> tuple:
    e, other = EMPTY_INNER, rand(2, 3)
    ins = [In(e, dims=[2, UNKNOWN]), In(other, dims=[2, 3]), i32([1])]
    return OP.CONCAT, ins, [np.concatenate([e, other], 1)], [Out(dims=[2, UNKNOWN])], EXACT


@_case
def _pad() -> tuple:
    b = EMPTY_OUTER
    ins = [In(b, dims=[UNKNOWN, 20]), i32([0, 0, 1, 2]), i32([int(nna.PadMode.CONSTANT)]), f32([1.5])]
    return OP.PAD, ins, [np.pad(b, [(0, 0), (1, 2)], constant_values=1.5)], [Out(dims=[UNKNOWN, 23])], EXACT


@_case
def _slice_of_empty() -> tuple:
    return _slice(EMPTY_INNER, [2, UNKNOWN], 1, INT_MAX, 1, 1)


@_case
def _slice_forward_empty() -> tuple:
    return _slice(FIVE, [2, UNKNOWN], -1, 3, 1, 1)  # x[-1:3] of 5 elements


@_case
def _slice_backward_empty() -> tuple:
    return _slice(FIVE, [2, UNKNOWN], -8, -5, -1, 1)  # x[-8:-5:-1] of 5 elements


@_case
def _slice_outer_empty() -> tuple:
    return _slice(rand(5, 20), [UNKNOWN, 20], 4, 2, 1, 0)


@_case
def _reduce_to_empty() -> tuple:
    b = EMPTY_OUTER
    return OP.REDUCE_SUM, [In(b, dims=[UNKNOWN, 20]), i32([1]), b8([False])], [b.sum(1)], [Out(dims=[UNKNOWN])], EXACT


@_case
def _reduce_over_empty_float() -> tuple:
    """A sum over an axis of size 0 is 0: TIR writes a reduction's initial value on its first iteration,
    which an empty axis never runs (targets/cpu/reduction_init.py)."""
    x = np.zeros((5, 0), "float32")
    return OP.REDUCE_SUM, [In(x, dims=[5, UNKNOWN]), i32([1]), b8([False])], [x.sum(1)], [Out(dims=[5])], EXACT


@_case
def _reduce_over_empty_int() -> tuple:
    x = np.zeros((3, 0), "int64")
    ins = [In(x, nna.Precision.INT64, dims=[3, UNKNOWN]), i32([1]), b8([False])]
    return OP.REDUCE_SUM, ins, [x.sum(1)], [Out(nna.Precision.INT64, dims=[3])], EXACT


@_case
def _reduce_inner_empty() -> tuple:
    x = np.zeros((0, 3, 20), "float32")
    ins = [In(x, dims=[UNKNOWN, 3, 20]), i32([1]), b8([True])]
    return OP.REDUCE_MAX, ins, [np.zeros((0, 1, 20), "float32")], [Out(dims=[UNKNOWN, 1, 20])], EXACT


@_case
def _matmul_empty_batch() -> tuple:
    x, y = np.zeros((0, 2, 3), "float32"), rand(3, 20)
    return OP.MAT_MUL, [In(x, dims=[UNKNOWN, 2, 3]), f32(y)], [x @ y], [Out(dims=[UNKNOWN, 2, 20])], TOL


@_case
def _matmul_empty_rows() -> tuple:
    x, y = np.zeros((0, 3), "float32"), rand(3, 20)
    ins = [In(x, dims=[UNKNOWN, 3]), In(y, dims=[3, UNKNOWN])]
    return OP.MAT_MUL, ins, [x @ y], [Out(dims=[UNKNOWN, UNKNOWN])], TOL


@_case
def _max_pool() -> tuple:
    x = np.zeros((0, 3, 4, 5), "float32")
    ins = _pool_inputs(In(x, dims=[UNKNOWN, 3, 4, 5]), OP.MAX_POOL_2D)
    return OP.MAX_POOL_2D, ins, [_pool_ref(x, "max")], [Out(dims=[UNKNOWN, 3, 4, 5])], EXACT


@_case
def _average_pool() -> tuple:
    x = np.zeros((0, 3, 4, 5), "float32")
    ins = _pool_inputs(In(x, dims=[UNKNOWN, 3, 4, UNKNOWN]), OP.AVERAGE_POOL_2D)
    return OP.AVERAGE_POOL_2D, ins, [_pool_ref(x, "avg")], [Out(dims=[UNKNOWN, 3, 4, UNKNOWN])], TOL


@_case
def _transpose() -> tuple:
    x = np.zeros((20, 0), "float32")
    return OP.TRANSPOSE, [In(x, dims=[20, UNKNOWN]), i32([1, 0])], [x.T], [Out(dims=[UNKNOWN, 20])], EXACT


@_case
def _conv() -> tuple:
    x = np.zeros((0, 3, 4, 5), "float32")
    head = [In(x, dims=[UNKNOWN, 3, 4, 5]), f32(rand(16, 3, 3, 3)), f32(rand(16)), i32([int(nna.AutoPad.NONE)])]
    ins = [*head, i32([1, 1, 1, 1]), i32([1, 1]), i32([1]), i32([1, 1]), fuse(0)]
    return OP.CONV_2D, ins, [np.zeros((0, 16, 4, 5), "float32")], [Out(dims=[UNKNOWN, 16, 4, 5])], TOL


def run_case(name: str) -> None:
    """Run case ``name`` three times in this process and compare with numpy (the child's side)."""
    import gc

    for _ in range(3):
        op, ins, expected, outs, tol = CASES[name]()
        check_op(op, ins, expected, outs, **tol)
        gc.collect()
        noise = [np.ones(n, "float32") for n in (1, 7, 64, 4096)]  # freed and reused: checked by glibc
        del noise
        gc.collect()
    print("ok", name)


@pytest.mark.parametrize("name", list(CASES))
def test_zero_extent_kernel_stays_in_bounds(name: str) -> None:
    """The case's model runs clean in a child under MALLOC_CHECK_=3 with the default CPU schedules."""
    tests = Path(__file__).parent
    # This file's folder (the child imports it) and tests/ (its helpers: oputil).
    path = os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, MALLOC_CHECK_="3", MALLOC_PERTURB_="165", PYTHONPATH=path)
    code = f"import test_cpu_schedule_empty as t; t.run_case({name!r})"
    child = subprocess.run(
        [sys.executable, "-c", code], cwd=tests, env=env, capture_output=True, text=True, timeout=600
    )
    tail = (child.stdout + child.stderr)[-3000:]
    assert child.returncode == 0, f"{name}: exit status {child.returncode}\n{tail}"
    assert f"ok {name}" in child.stdout, tail
