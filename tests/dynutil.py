"""One-operation models with dimensions UNKNOWN until execution: compiled once, run at several sizes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from oputil import Out, build_model, execute

import nnadapter_tvm as nna


def compile_op(op_type, inputs: Sequence, outputs: Sequence[Out], device: str = "llvm") -> nna.Compilation:
    """Build and compile ``op_type`` once; every ``Out`` must declare its ``dims`` (UNKNOWN where they vary)."""
    model = build_model(op_type, inputs, outputs, [None] * len(outputs))
    compilation = nna.Compilation(model, nna.Context([nna.Device.acquire(device)]))
    compilation.finish()
    return compilation


def check_sizes(
    compilation: nna.Compilation,
    cases: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]],
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    """Run one compilation on each (feeds, expected outputs) case and compare shapes, dtypes and values
    (NaN where the reference has NaN)."""
    for feeds, expected in cases:
        got = execute(compilation, feeds)
        sizes = [f.shape for f in feeds]
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert g.shape == e.shape, f"inputs {sizes}, output {i}: shape {g.shape} != reference {e.shape}"
            assert g.dtype == e.dtype, f"inputs {sizes}, output {i}: dtype {g.dtype} != reference {e.dtype}"
            if e.dtype.kind == "f":
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"inputs {sizes}, output {i}")
            else:
                np.testing.assert_array_equal(g, e, err_msg=f"inputs {sizes}, output {i}")
