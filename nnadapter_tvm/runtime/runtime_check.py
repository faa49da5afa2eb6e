"""``RuntimeCheck``: a condition compiled code asserts at execution, recorded in the ``.nnc`` so that a
failed execution names the operation that refused its input (loading needs it; converting makes it)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

from nnadapter_tvm.errors import TVM_ERRORS
from nnadapter_tvm.runtime.tvm_runtime import LazyModule, tvm

# Imported on first use: a cache's checks are read as text at load and parsed only to explain a failure.
tirx = LazyModule("tvm.tirx")

VALUE = "{value}"
"""Placeholder in a data check's message: the value the failed guard found (an out-of-range index)."""

DATA_CHECKS_ENV = "NNADAPTER_TVM_DATA_CHECKS"


def data_checks_enabled() -> bool:
    """Whether converters emit checks on run-time *data* values (GATHER's indices): on unless the
    environment sets ``NNADAPTER_TVM_DATA_CHECKS=0``.  Turning them off exists only to measure what the
    checks cost (docs/reliability.md): an unchecked model wraps an out-of-range index silently.  The
    switch is read at compile time and is not part of the model token, so measure without a cache."""
    return os.environ.get(DATA_CHECKS_ENV, "1").strip() not in ("0", "off", "false", "no")


@dataclasses.dataclass(frozen=True)
class RuntimeCheck:
    """A condition the compiled code asserts at execution (a ``require`` guard), kept so that a failed
    execution can say which operation refused its input and why.

    ``condition`` is a TIR boolean over the function's symbolic dimensions (``in{input}_d{axis}``), or,
    for a data check, over a value the compiled code computed from a tensor; ``message`` names the
    operation and operand (a data check's ``{value}`` stands for the value found at execution). A check
    read from a cache holds the condition as its JSON text until ``expr()`` is asked for it: parsing TIR
    needs TVM's compiler library, which loading a cache does not import.
    """

    condition: tirx.PrimExpr | str
    message: str

    def expr(self) -> tirx.PrimExpr:
        """The condition as a TIR expression (parsed from its JSON text on each call where read from a cache)."""
        return tvm.ir.load_json(self.condition) if isinstance(self.condition, str) else self.condition

    def to_json(self) -> list[str]:
        condition = self.condition
        return [condition if isinstance(condition, str) else tvm.ir.save_json(condition), self.message]

    @staticmethod
    def from_json(item: Sequence[str]) -> RuntimeCheck:
        condition, message = item
        if not isinstance(condition, str) or not isinstance(message, str):
            raise TypeError(f"a runtime check is [condition JSON, message], got {item!r}")
        return RuntimeCheck(condition, message)

    def fails_for(self, shapes: Sequence[Sequence[int]]) -> bool:
        """Whether the condition is false for the subgraph's input ``shapes``; False where that cannot be
        told (a dimension that only the computation itself knows, e.g. FILL's output)."""
        from tvm.tirx.analysis import undefined_vars

        analyzer = tvm.sym.Analyzer()
        by_name = {f"in{i}_d{a}": int(d) for i, shape in enumerate(shapes) for a, d in enumerate(shape)}
        try:
            condition = self.expr()
            for var in undefined_vars(condition):
                if var.name not in by_name:
                    return False
                analyzer.bind(var, tirx.const(by_name[var.name], str(var.ty)))
            value = analyzer.simplify(condition)
        except TVM_ERRORS:
            return False
        return isinstance(value, tirx.IntImm) and not value.value

    @staticmethod
    def numbered(checks: Sequence[RuntimeCheck], error_text: str) -> RuntimeCheck | None:
        """The check whose guard failed, told by the numbers in TVM's match_cast message: dimension 0 was
        found ``d0`` where the failed guard computed ``d0 + k`` for check number ``k`` (``d0 - k`` for a
        data check's value guard on a positive value, so that it cannot overflow).  A data check's value
        guard matches a shape (``ty=R.Shape``) whose dimension 0 is the value itself: its ``{value}`` is
        filled in with it."""
        found = re.search(r"\((-?\d+) vs\. (-?\d+)\).*match_cast", error_text)
        if not found:
            return None
        value = int(found.group(1))
        k = abs(int(found.group(2)) - value)
        if not 1 <= k <= len(checks):
            return None
        check = checks[k - 1]
        if VALUE in check.message:
            shown = str(value) if "ty=R.Shape" in error_text else "a value outside that range"
            check = dataclasses.replace(check, message=check.message.replace(VALUE, shown))
        return check
