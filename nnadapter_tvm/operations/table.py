"""The table of operations: one ``Operation`` entry per code, for the upstream enum's operations, the
built-in extensions and a user's custom operations alike.

Entries are made at import for upstream's enum (``standard.py``, from which ``OperationType`` is made
here) and by ``define`` for every other code: the built-in extensions in this package's family modules,
a user's through ``nnadapter_tvm.extensions.register_operation``. The converters attach their kernel to
an entry with ``attach``. Nothing here imports TVM: the model, its schema checks, the token and a cached
load read the table without loading a compiler.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any

from nnadapter_tvm.operations import standard
from nnadapter_tvm.operations.schema import Arg, OpSchema

# Shape inference of an operation beyond ONNX's: ``infer(input_shapes, input_values) -> output shapes``.
Infer = Callable[[list[Any], list[Any]], list[Any]]

UPSTREAM_CODES = range(0, 1000)
BUILTIN_CODES = range(1000, 10000)
USER_CODES = range(10000, 2**31)
KINDS = ("standard", "upstream", "extension", "custom")
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclasses.dataclass
class Operation:
    """One operation: ``name`` and ``code`` (its ``OperationType`` member), its operand ``schema``, its
    ``kind`` (``standard``: the spec's 93; ``upstream``: the rest of upstream's enum; ``extension``:
    nnadapter-tvm's own, codes 1000-9999; ``custom``: a user's, 10000 and up), ``version`` (entered in
    the model token and the cache record where not None: the built-in extensions' and custom
    operations'; the others change with the package's version, which the token has too), optional
    shape inference, and what ``attach`` hangs on it: the converter and a default CPU schedule."""

    operation_type: OperationType
    schema: OpSchema
    kind: str
    version: str | None = None
    infer: Infer | None = None
    converter: Callable | None = None
    schedule: Callable | None = None
    origin: str = "nnadapter_tvm"  # the module that registered a custom operation

    @property
    def name(self) -> str:
        return self.operation_type.name

    @property
    def code(self) -> int:
        return int(self.operation_type)

    def identity(self) -> list:
        """What enters the model token and the cache record (for entries with a ``version``)."""
        return [self.name, self.code, self.version]


class _OperationTypeBase(IntEnum):
    @classmethod
    def _missing_(cls, value: object) -> Any:
        # A code defined beyond the enum: its member, made by ``define``; registrations that packages
        # declare as entry points are loaded on the first unknown code.
        if isinstance(value, int) and not isinstance(value, bool):
            if value not in _TABLE and _ENTRY_POINT_LOADER is not None:
                _ENTRY_POINT_LOADER()
            entry = _TABLE.get(value)
            return entry.operation_type if entry is not None else None
        return None


_TABLE: dict[int, Operation] = {}
_LOCK = threading.RLock()
_ENTRY_POINT_LOADER: Callable[[], None] | None = None


def _define_upstream() -> type[IntEnum]:
    """``OperationType`` from upstream's enum (``standard.py``), with the table entries of its operations
    (kind ``standard`` for the spec's 93, else ``upstream``)."""
    members = [(name, code) for code, name in enumerate(standard.UPSTREAM_ORDER)]
    enum = _OperationTypeBase("OperationType", members, module=__name__, qualname="OperationType")
    enum.__doc__ = "Operation codes: upstream's enum (positional there), then those ``define`` adds."
    for name, code in members:
        kind = "standard" if name in standard.STANDARD else "upstream"
        _TABLE[code] = Operation(enum(code), _checked_schema(name, standard.SCHEMAS[name]), kind)
    return enum


def define(
    name: str,
    code: int,
    inputs: Sequence[Arg],
    outputs: Sequence[Arg],
    *,
    infer: Infer | None = None,
    version: str | None = "1",
    kind: str = "extension",
    origin: str = "nnadapter_tvm",
) -> Operation:
    """Add operation ``name`` (upper snake case) with ``code`` beyond upstream's enum: its operand slots
    ``inputs`` / ``outputs`` (``Arg``s in order; attributes are constant operands), shape inference and
    version. ``kind`` ``extension`` takes codes 1000-9999, ``custom`` 10000 and up. Its member is then
    ``OperationType(code)`` and ``OperationType.<name>`` (iterating the enum lists upstream's only).
    A name or code already taken raises ``ValueError`` naming both."""
    codes = {"extension": BUILTIN_CODES, "custom": USER_CODES}.get(kind)
    if codes is None:
        raise ValueError(f"{name}: kind {kind!r} must be 'extension' or 'custom'")
    if not _NAME.match(str(name)):
        raise ValueError(f"operation name {name!r} must be upper snake case (e.g. MY_OPERATION)")
    if not isinstance(code, int) or isinstance(code, bool) or code not in codes:
        raise ValueError(f"{name}: code {code!r} is outside [{codes.start}, {codes.stop - 1}]")
    schema = _checked_schema(name, OpSchema(tuple(inputs), tuple(outputs)))
    with _LOCK:
        if code in _TABLE:
            raise ValueError(f"{name}: code {code} is taken by {_TABLE[code].name}")
        taken = next((e for e in _TABLE.values() if e.name == name), None)
        if taken is not None:
            raise ValueError(f"{name}: the name is taken by operation code {taken.code}")
        version = None if version is None else str(version)
        entry = Operation(_add_member(name, code), schema, kind, version, infer, origin=origin)
        _TABLE[code] = entry
    return entry


def attach(op_type: int, converter: Callable, schedule: Callable | None = None) -> None:
    """Attach ``converter`` (and a default CPU ``schedule``) to ``op_type``'s entry; a second converter
    for the same operation raises."""
    with _LOCK:
        entry = lookup(op_type)
        if entry is None:
            raise ValueError(f"no operation has code {int(op_type)}: define it before attaching a converter")
        if entry.converter is not None:
            raise RuntimeError(
                f"{entry.name} already has a converter: {_where(entry.converter)} ({_where(converter)} too)"
            )
        entry.converter, entry.schedule = converter, schedule


def lookup(op_type: int) -> Operation | None:
    """The entry of ``op_type`` (a member or a code), or None."""
    return _TABLE.get(int(op_type))


def schema_of(op_type: int) -> OpSchema | None:
    entry = _TABLE.get(int(op_type))
    return entry and entry.schema


def entries(kinds: Sequence[str] = KINDS) -> list[Operation]:
    """The entries of ``kinds``, by code."""
    return [e for _, e in sorted(_TABLE.items()) if e.kind in kinds]


def set_entry_point_loader(loader: Callable[[], None]) -> None:
    """The hook ``OperationType(code)`` runs on an unknown code (``nnadapter_tvm.extensions``)."""
    global _ENTRY_POINT_LOADER
    _ENTRY_POINT_LOADER = loader


def _add_member(name: str, code: int) -> Any:
    member = int.__new__(OperationType, code)
    member._name_ = name
    member._value_ = code
    OperationType._value2member_map_[code] = member
    OperationType._member_map_[name] = member  # OperationType[name] and `in` find it; iteration does not
    type.__setattr__(OperationType, name, member)
    return member


def _checked_schema(name: str, schema: OpSchema) -> OpSchema:
    for arg in (*schema.inputs, *schema.outputs):
        if not isinstance(arg, Arg):
            raise ValueError(f"{name}: operands are described by operations.Arg, got {arg!r}")
    return schema


def _where(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


OperationType = _define_upstream()
