"""DOT rendering of a model (paste into any Graphviz viewer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nnadapter_tvm.model import Model


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def model_to_dot(model: Model, colors: dict[int, str] | None = None) -> str:
    """Operations are boxes, operands ellipses; ``colors`` maps operation index to a fill colour."""
    lines = ["digraph model {", "  rankdir=TB;", "  node [fontsize=10];"]
    used = {o.index for op in model.operations for o in op.inputs + op.outputs}
    used |= {o.index for o in model.inputs + model.outputs}
    for operand in model.operands:
        if operand.index not in used:
            continue
        label = f"#{operand.index}\n{operand.type.describe()}"
        style = "filled" if operand.is_constant else "solid"
        shape = "ellipse"
        if operand in model.inputs or operand in model.outputs:
            shape = "doubleoctagon"
        lines.append(f"  o{operand.index} [label={_quote(label)} shape={shape} style={style} fillcolor=lightgrey];")
    for op in model.operations:
        fill = (colors or {}).get(op.index, "white")
        label = f"{op.type.name}\n#{op.index}"
        lines.append(f"  n{op.index} [label={_quote(label)} shape=box style=filled fillcolor={_quote(fill)}];")
        for i, o in enumerate(op.inputs):
            lines.append(f"  o{o.index} -> n{op.index} [label={i}];")
        for i, o in enumerate(op.outputs):
            lines.append(f"  n{op.index} -> o{o.index} [label={i}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
