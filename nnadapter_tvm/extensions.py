"""Operations beyond the standard set: registered by a call or by a package's entry point.

NNAdapter fixes its standard operations; a framework meets others. This is our version of PPLNN's four
steps for a custom operator (docs/custom_operations.md):

1. **Definition**: a name and a code. User codes are 10000 and up (``USER_CODES``), a range upstream's
   enum (below 1000) and nnadapter-tvm's built-in extensions (1000-9999) never use, so a user's code can
   never collide with either. ``OperationType(code)`` then gives the operation's member.
2. **Parameters**: the operand schema, ``Arg`` slots by name (``nnadapter_tvm.operations``) (attributes are
   constant operands, as in every NNAdapter operation); ``Model.add_operation`` validates against it.
3. **Shape inference** (optional): ``infer(input_shapes, input_values) -> output shapes`` (shapes as
   tuples with None for a size known only at execution; values: a constant input's array, else None), for
   importers that must know an output's shape before anything is compiled (the ONNX importer asks it
   for a node of a domain ONNX's shape inference does not know). The model API needs none: its caller
   declares the output operands.
4. **Kernel**: the converter into Relax, ``converter(args: OpArgs) -> relax.Expr | list``, exactly as the
   standard operations' converters are written (op_converters/README.md); optionally a default CPU
   schedule for the kernels it emits with ``args.emit_te``.

The model token covers each extension's name, code and ``version``; a compiled model's cache records
them, and loading it in a process that lacks one (or has another version) fails naming it.

A package registers its operations in code (``register_operation(...)`` when imported) or declares an
entry point in the group ``nnadapter_tvm.operations``: a callable run once, the first time an unknown
operation code is met (``OperationType(code)``) or ``load_entry_points()`` is called.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from nnadapter_tvm.errors import check
from nnadapter_tvm.operations import table
from nnadapter_tvm.operations.schema import Arg, OpSchema
from nnadapter_tvm.operations.table import USER_CODES, Infer, Operation
from nnadapter_tvm.types import OperationType

__all__ = ["USER_CODES", "Arg", "OpSchema", "Operation", "load_entry_points", "register_operation"]

ENTRY_POINT_GROUP = "nnadapter_tvm.operations"
# The function attribute that names an extension's CPU schedule on the kernels its converter emits.
SCHEDULE_ATTR = "nnadapter_tvm.extension_schedule"

_LOCK = threading.RLock()
_LOADED = False


def register_operation(
    name: str,
    code: int,
    inputs: Sequence[Arg],
    outputs: Sequence[Arg],
    converter: Callable,
    *,
    infer: Infer | None = None,
    schedule: Callable | None = None,
    version: str = "1",
) -> OperationType:
    """Register operation ``name`` (upper snake case) with ``code`` (in ``USER_CODES``), its operand slots
    ``inputs`` / ``outputs`` (``Arg``s, in order; attributes are constant operands), its converter into
    Relax, and optionally its shape inference and a default CPU schedule (``schedule(sch, target)`` on a
    ``tvm.s_tir.Schedule`` of one kernel the converter emitted with ``args.emit_te(...,
    primfunc_attrs=extension_kernel(name))``). ``version`` enters the model token and the cache: change
    it when the converter's result changes. Returns the operation's ``OperationType`` member.

    This is the path nnadapter-tvm's own extensions take: ``operations.table.define`` (their definitions
    live in ``nnadapter_tvm/operations/``), then ``attach`` of the converter (``op_converters/``). A name
    or code already taken (a standard operation, a built-in extension, another registration) raises
    ``ValueError`` naming both.
    """
    with _LOCK:
        origin = getattr(converter, "__module__", "?")
        entry = table.define(
            name, code, inputs, outputs, infer=infer, version=str(version), kind="custom", origin=origin
        )
        table.attach(entry.operation_type, converter, schedule)
    return entry.operation_type


def extension_kernel(name: str) -> dict:
    """``primfunc_attrs`` for a kernel an extension's converter emits with ``args.emit_te``: the CPU
    pipeline then schedules it with the extension's ``schedule`` (and never fuses it with neighbours,
    whose loops that schedule would not know)."""
    return {SCHEDULE_ATTR: name, "op_pattern": 8}  # 8: kOpaque


def schedule_of(name: str) -> Callable | None:
    """The default CPU schedule registered with custom operation ``name`` (``extension_kernel``), or None."""
    member = OperationType.__members__.get(name)
    entry = member and table.lookup(member)
    return entry and entry.schedule


def used_by(operation_types: Sequence[OperationType]) -> list[list]:
    """The identities (name, code, version) of the versioned operations among ``operation_types`` (the
    built-in extensions from 2000 and custom operations), by code."""
    used = (table.lookup(c) for c in sorted({int(t) for t in operation_types}))
    return [e.identity() for e in used if e is not None and e.version is not None]


def check_available(recorded: Sequence[Sequence], source: str) -> None:
    """Fail naming each operation a cached model was compiled with that this process lacks, or has in
    another version (``recorded``: identities as ``used_by`` gives them). Entry points are loaded only
    where one is missing; nothing here imports the converters."""
    if any(table.lookup(int(code)) is None for _, code, _ in recorded):
        load_entry_points()
    for name, code, version in recorded:
        entry = table.lookup(int(code))
        check(
            entry is not None and entry.name == name,
            f"{source} needs the custom operation {name} (code {code}), which this process has not registered "
            f"(install and import the package that registers it, or declare its '{ENTRY_POINT_GROUP}' entry point)",
        )
        check(
            entry.version == version,
            f"{source} was compiled with version {version} of the custom operation {name}; this process has "
            f"version {entry.version} (from {entry.origin}): recompile the model",
        )


def load_entry_points() -> None:
    """Run every ``nnadapter_tvm.operations`` entry point, once (each registers its operations)."""
    global _LOADED
    with _LOCK:
        if _LOADED:
            return
        _LOADED = True
        from importlib.metadata import entry_points

        for point in entry_points(group=ENTRY_POINT_GROUP):
            registrar = point.load()
            if callable(registrar):
                registrar()


table.set_entry_point_loader(load_entry_points)
