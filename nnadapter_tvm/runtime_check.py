"""``RuntimeCheck``: a condition compiled code asserts at execution, recorded in the ``.nnc`` so that a
failed execution names the operation that refused its input (loading needs it; converting makes it)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import tvm
from tvm import tirx
from tvm.tirx.analysis import undefined_vars

from nnadapter_tvm.errors import TVM_ERRORS


@dataclasses.dataclass(frozen=True)
class RuntimeCheck:
    """A condition the compiled code asserts at execution (a ``require`` guard), kept so that a failed
    execution can say which operation refused its input and why.

    ``condition`` is a TIR boolean over the function's symbolic dimensions (``in{input}_d{axis}``);
    ``message`` names the operation and operand.
    """

    condition: tirx.PrimExpr
    message: str

    def to_json(self) -> list[str]:
        return [tvm.ir.save_json(self.condition), self.message]

    @staticmethod
    def from_json(item: Sequence[str]) -> RuntimeCheck:
        condition, message = item
        if not isinstance(condition, str) or not isinstance(message, str):
            raise TypeError(f"a runtime check is [condition JSON, message], got {item!r}")
        return RuntimeCheck(tvm.ir.load_json(condition), message)

    def fails_for(self, shapes: Sequence[Sequence[int]]) -> bool:
        """Whether the condition is false for the subgraph's input ``shapes``; False where that cannot be
        told (a dimension that only the computation itself knows, e.g. FILL's output)."""
        analyzer = tvm.sym.Analyzer()
        by_name = {f"in{i}_d{a}": int(d) for i, shape in enumerate(shapes) for a, d in enumerate(shape)}
        try:
            for var in undefined_vars(self.condition):
                if var.name not in by_name:
                    return False
                analyzer.bind(var, tirx.const(by_name[var.name], str(var.ty)))
            value = analyzer.simplify(self.condition)
        except TVM_ERRORS:
            return False
        return isinstance(value, tirx.IntImm) and not value.value

    @staticmethod
    def numbered(checks: Sequence[RuntimeCheck], error_text: str) -> RuntimeCheck | None:
        """The check whose guard failed, told by the numbers in TVM's match_cast message: dimension 0 was
        found ``d0`` where the failed guard computed ``d0 + k`` for check number ``k``."""
        found = re.search(r"\((-?\d+) vs\. (-?\d+)\).*match_cast", error_text)
        if not found:
            return None
        k = int(found.group(2)) - int(found.group(1))
        return checks[k - 1] if 1 <= k <= len(checks) else None
