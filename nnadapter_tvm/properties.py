"""Typed context properties: what a device (or the runtime) reads from the ``KEY=VALUE;`` string a context
is created with. A target driver declares its own (``targets/``); the context parses them
(``context.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Property:
    """A context property a device understands (``KEY=VALUE;`` in the properties string).

    Read a setting as ``PROPERTY.read(props)``: the value ``parse`` gave it, or ``default`` where the
    context does not set it. ``props`` holds parsed (typed) values: ``Context.properties``."""

    key: str
    description: str
    parse: Callable[[str], object]
    default: object = None
    codegen: bool = True  # changes the compiled code, so it enters the model token

    def read(self, props: Mapping[str, object]) -> Any:
        """This setting in the parsed properties ``props``, or its declared default."""
        value = props.get(self.key)
        return self.default if value is None else value


def switch(text: str) -> bool:
    """A ``1``/``0`` (``on``/``off``, ``true``/``false``, ``yes``/``no``) property's value."""
    value = text.strip().lower()
    if value in ("1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise ValueError("must be 1 or 0")
