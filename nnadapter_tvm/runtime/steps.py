"""A compiled model as the runtime holds it, however it came (compiled now or loaded from a cache): its
subgraphs in execution order (``Step``: a device's module, the operand keys it reads and writes, its
run-time checks), the model's input and output keys and types, and the ``.nnc`` bytes."""

from __future__ import annotations

import dataclasses
import mmap
from collections.abc import Sequence

import numpy as np

from nnadapter_tvm.errors import TVM_ERRORS, fail, tvm_error_text
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.runtime_check import RuntimeCheck
from nnadapter_tvm.targets import Driver, Program
from nnadapter_tvm.types import NNAdapterError, OperandType, ResultCode


class Step:
    """One subgraph: its device, the operand keys it reads and writes, its module."""

    def __init__(
        self, driver: Driver, inputs: list[int], outputs: list[int], blob: bytes, checks: Sequence[RuntimeCheck] = ()
    ):
        self.driver, self.inputs, self.outputs, self.blob = driver, inputs, outputs, blob
        self.checks = list(checks)
        self.program: Program | None = None
        self.path: str | None = None  # the blob already written out, while a cached load stages it
        self.weights: list[np.ndarray] | None = None  # main's last parameter (runtime.weights)

    def execution_error(self, arguments: Sequence[object], err: BaseException) -> NNAdapterError:
        """What a failed run of this subgraph means: a runtime check of an operation that the inputs'
        dimensions violate (INVALID_DIMENSIONS, the operation's own message), memory that could not be
        allocated (OUT_OF_MEMORY: a dimension known only at execution made a tensor too big), a function the
        loaded TVM runtime lacks (DEVICE_INTERNAL_ERROR), or else TVM's own message (INVALID_DIMENSIONS: the
        shapes the compiled code asserts did not hold)."""
        shapes = [[int(d) for d in getattr(x, "shape", ())] for x in arguments]
        text = tvm_error_text(err)
        failed = next((c for c in self.checks if c.fails_for(shapes)), None) or RuntimeCheck.numbered(self.checks, text)
        if failed is not None:
            return NNAdapterError(
                ResultCode.INVALID_DIMENSIONS, f"{failed.message} (input dimensions at execution: {shapes})"
            )
        if isinstance(err, MemoryError) or "bad_alloc" in text or "out of memory" in text.lower():
            return NNAdapterError(
                ResultCode.OUT_OF_MEMORY,
                f"execution on {self.driver.name} ran out of memory ({text}): the dimensions given at execution "
                f"{shapes} make a tensor larger than this machine can allocate",
            )
        if "Cannot find function" in text:
            # Not the inputs' fault: the loaded TVM runtime lacks a function the compiled code calls.
            return NNAdapterError(
                ResultCode.DEVICE_INTERNAL_ERROR,
                f"execution on {self.driver.name} failed: {text}: the TVM runtime this process loaded does not provide "
                "a function the compiled model calls",
            )
        return NNAdapterError(ResultCode.INVALID_DIMENSIONS, f"execution failed: {text} (input dimensions {shapes})")

    def load(self, props: dict) -> None:
        # The file a cached load staged, else the library's bytes (the driver writes them out for dlopen).
        try:
            self.program = self.driver.load(self.path or memoryview(self.blob), props, self.weights)
        except (*TVM_ERRORS, OSError) as err:
            fail(
                f"the {self.driver.name} module does not load: {tvm_error_text(err)}",
                ResultCode.DEVICE_INTERNAL_ERROR,
            )


@dataclasses.dataclass
class CompiledModel:
    """What ``compile.compile_model`` and ``load.load_cached`` give ``Compilation``."""

    steps: list[Step]
    model_inputs: list[int]
    model_outputs: list[int]
    input_types: list[OperandType]
    output_types: list[OperandType]
    buffer: bytes | mmap.mmap | cache.Pieces  # the .nnc: packed by a compile, the file or buffer a load read
    compile_seconds: float | None = None


def load_programs(steps: Sequence[Step], props: dict) -> None:
    """Load now the subgraphs that can run in this process; the rest (e.g. aarch64 code on x86) only ship."""
    for step in steps:
        if step.driver.can_run_here()[0]:
            step.load(props)
