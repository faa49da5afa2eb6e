"""Operations beyond the standard set: registered by a call or by a package's entry point.

NNAdapter fixes its standard operations; a framework meets others. This is our version of PPLNN's four
steps for a custom operator (docs/custom_operations.md):

1. **Definition**: a name and a code. User codes are 10000 and up (``USER_CODES``), a range upstream's
   enum (below 1000) and nnadapter-tvm's built-in extensions (1000-9999) never use, so a user's code can
   never collide with either. ``OperationType(code)`` then gives the operation's member.
2. **Parameters**: the operand schema, an ``op_schema.OpSchema`` of ``Arg`` slots by name (attributes are
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

import dataclasses
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from nnadapter_tvm.errors import check
from nnadapter_tvm.op_schema import SCHEMAS, Arg, OpSchema
from nnadapter_tvm.types import OperationType, add_operation_type, set_extension_loader

__all__ = ["USER_CODES", "Arg", "Extension", "OpSchema", "load_entry_points", "register_operation"]

USER_CODES = range(10000, 2**31)
BUILTIN_CODES = range(1000, 10000)
ENTRY_POINT_GROUP = "nnadapter_tvm.operations"
# The function attribute that names an extension's CPU schedule on the kernels its converter emits.
SCHEDULE_ATTR = "nnadapter_tvm.extension_schedule"

Infer = Callable[[list[Any], list[Any]], list[Any]]


@dataclasses.dataclass(frozen=True)
class Extension:
    """A registered operation: what ``register_operation`` was given."""

    operation_type: OperationType
    schema: OpSchema
    converter: Callable
    infer: Infer | None
    schedule: Callable | None
    version: str
    origin: str  # the module that registered it

    @property
    def name(self) -> str:
        return self.operation_type.name

    def identity(self) -> list:
        """What enters the model token and the cache record."""
        return [self.name, int(self.operation_type), self.version]


_EXTENSIONS: dict[int, Extension] = {}
_LOCK = threading.RLock()
_LOADED = False
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


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

    A name or code already taken (a standard operation, a built-in extension, another registration)
    raises ``ValueError`` naming both.
    """
    return _register(name, code, inputs, outputs, converter, infer, schedule, version, USER_CODES)


def register_builtin(
    name: str,
    code: int,
    inputs: Sequence[Arg],
    outputs: Sequence[Arg],
    converter: Callable,
    *,
    infer: Infer | None = None,
    version: str = "1",
) -> OperationType:
    """``register_operation`` for nnadapter-tvm's own extensions (codes 1000-9999)."""
    return _register(name, code, inputs, outputs, converter, infer, None, version, BUILTIN_CODES)


def _register(name, code, inputs, outputs, converter, infer, schedule, version, codes: range) -> OperationType:
    if not _NAME.match(str(name)):
        raise ValueError(f"operation name {name!r} must be upper snake case (e.g. MY_OPERATION)")
    if not isinstance(code, int) or isinstance(code, bool) or code not in codes:
        raise ValueError(f"{name}: code {code!r} is outside [{codes.start}, {codes.stop - 1}]")
    with _LOCK:
        taken = OperationType._value2member_map_.get(code)
        if taken is not None:
            raise ValueError(f"{name}: code {code} is taken by {taken.name}")
        same_name = [m for m in (*OperationType, *(e.operation_type for e in _EXTENSIONS.values())) if m.name == name]
        if same_name:
            raise ValueError(f"{name}: the name is taken by operation code {int(same_name[0])}")
        schema = OpSchema(tuple(inputs), tuple(outputs))
        for arg in (*schema.inputs, *schema.outputs):
            if not isinstance(arg, Arg):
                raise ValueError(f"{name}: operands are described by op_schema.Arg, got {arg!r}")
        op_type = add_operation_type(name, code)
        SCHEMAS[op_type] = schema
        origin = getattr(converter, "__module__", "?")
        _EXTENSIONS[code] = Extension(op_type, schema, converter, infer, schedule, str(version), origin)
    return op_type


def extension_kernel(name: str) -> dict:
    """``primfunc_attrs`` for a kernel an extension's converter emits with ``args.emit_te``: the CPU
    pipeline then schedules it with the extension's ``schedule`` (and never fuses it with neighbours,
    whose loops that schedule would not know)."""
    return {SCHEDULE_ATTR: name, "op_pattern": 8}  # 8: kOpaque


def get(op_type: OperationType | int) -> Extension | None:
    """The registration of ``op_type``, or None for the enum's own operations."""
    return _EXTENSIONS.get(int(op_type))


def registered(codes: range | None = None) -> list[Extension]:
    """The registered operations (those with a code in ``codes``), by code."""
    return [e for c, e in sorted(_EXTENSIONS.items()) if codes is None or c in codes]


def schedule_of(name: str) -> Callable | None:
    ext = next((e for e in _EXTENSIONS.values() if e.name == name), None)
    return ext and ext.schedule


def used_by(operation_types: Sequence[OperationType]) -> list[list]:
    """The identities (name, code, version) of the extensions among ``operation_types``, by code."""
    codes = sorted({int(t) for t in operation_types if int(t) in _EXTENSIONS})
    return [_EXTENSIONS[c].identity() for c in codes]


def check_available(recorded: Sequence[Sequence], source: str) -> None:
    """Fail naming each extension a cached model was compiled with that this process lacks, or has in
    another version (``recorded``: identities as ``used_by`` gives them).  The registrations are loaded
    only where one is missing: a cached load of standard operations never imports the converters."""
    if any(int(code) not in _EXTENSIONS for _, code, _ in recorded):
        load_entry_points()
    for name, code, version in recorded:
        ext = _EXTENSIONS.get(int(code))
        check(
            ext is not None and ext.name == name,
            f"{source} needs the custom operation {name} (code {code}), which this process has not registered "
            f"(install and import the package that registers it, or declare its '{ENTRY_POINT_GROUP}' entry point)",
        )
        check(
            ext.version == version,
            f"{source} was compiled with version {version} of the custom operation {name}; this process has "
            f"version {ext.version} (from {ext.origin}): recompile the model",
        )


def load_entry_points() -> None:
    """Register nnadapter-tvm's built-in extensions (importing the converters, which register them) and run
    every ``nnadapter_tvm.operations`` entry point, once (each registers its operations)."""
    global _LOADED
    with _LOCK:
        if _LOADED:
            return
        _LOADED = True
        import importlib
        from importlib.metadata import entry_points

        importlib.import_module("nnadapter_tvm.op_converters")  # not at module level: it loads TVM's Relax

        for point in entry_points(group=ENTRY_POINT_GROUP):
            registrar = point.load()
            if callable(registrar):
                registrar()


set_extension_loader(load_entry_points)
