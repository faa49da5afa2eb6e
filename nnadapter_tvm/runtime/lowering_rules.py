"""Where converters and targets meet besides the Relax they exchange: a converter module that needs a
Relax operator lowered its own way registers a rule here (``register_legalize``), and every target
pipeline's legalization (``targets.relax_passes.legalize_ops``) applies the rules registered. Neither
side imports the other; this module imports neither, nor TVM.

A rule wraps an operator's lowering: ``rule(default)`` returns the lowering to use, ``default`` being
TVM's own ``FLegalize`` or the rule registered before. The rules are never registered on TVM's operators
(``tvm.ir.register_op_attr(..., "FLegalize", level=11)`` would change the lowering for the whole
process): another user of TVM in the same process sees TVM's own.
"""

from __future__ import annotations

from collections.abc import Callable

Rule = Callable[[Callable], Callable]

#: op name -> rules over the op's lowering, applied in order (the first wraps TVM's own).
_RULES: dict[str, list[Rule]] = {}


def register_legalize(op_name: str, rule: Rule) -> None:
    """Add ``rule`` over ``op_name``'s lowering in every pipeline of ours. Registering the same ``rule``
    again (a reloaded module) replaces it rather than stacking it."""
    rules = _RULES.setdefault(op_name, [])
    key = getattr(rule, "__qualname__", None), getattr(rule, "__module__", None)
    rules[:] = [r for r in rules if (getattr(r, "__qualname__", None), getattr(r, "__module__", None)) != key]
    rules.append(rule)


def registered() -> dict[str, list[Rule]]:
    """The rules registered so far, per op name, in the order they apply (a copy)."""
    return {name: list(rules) for name, rules in _RULES.items()}
