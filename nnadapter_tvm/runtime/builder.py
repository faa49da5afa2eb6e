"""``ConvertBlockBuilder``: the block builder the converters emit into, whose ``match_cast`` never binds a
symbolic variable to an expression that leads back to it (the pattern that sends TVM 0.27's
``CanonicalizeBindings`` into unbounded recursion and kills the process)."""

from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.tirx.analysis import undefined_vars

# Added to the value's dimension in a guard's ``select`` where equality fails when the operation emitting it
# recorded no run-time check: far beyond any check number, so that RuntimeCheck.numbered does not take TVM's
# "(d vs. d + GUARD_OFFSET)" for another operation's check.
GUARD_OFFSET = 1 << 40


class ConvertBlockBuilder(relax.BlockBuilder):
    """A ``relax.BlockBuilder`` whose ``match_cast`` asserts, rather than binds, a symbolic variable where
    binding it would make it depend on itself.

    A ``match_cast`` binds each bare TIR variable of its pattern to the value's dimension at the same
    position.  TVM 0.27's ``CanonicalizeBindings`` (run by ``KillAfterLastUse`` in every ``tvm.compile``,
    on every target) records those bindings and substitutes them into later shapes; where a variable ends
    up bound to an expression that contains it, directly (``x: [select(d == 1, N, d), 3]`` cast to
    ``[N, 3]``: ADD unifying an EXPAND result with its input; ``N + 1`` cast to ``N``) or through earlier
    bindings (``M := N + 1``, then ``N := M + 1``), it recurses without end and the process dies of a
    stack overflow (SIGSEGV, ~42,000 frames in libtvm_compiler.so), no exception raised.  Binding through
    a fresh variable (``K := select(...)``, then ``N := K``) avoids the recursion but not the next bug:
    the pass then folds K's now-trivial ``match_cast`` away while later shapes already name K, and
    VMShapeLower fails ("PrimExpr ... has not been computed").

    So each binding a cast would make is followed through the bindings this builder made before; where it
    leads back to its own variable (always an already defined one: it occurs in a value), that position
    becomes a guard, ``select(N == d, d, d + k)`` (equal to the value's ``d`` exactly when ``N == d``, as
    ``ConvertContext.require``'s guards are; k: see ``checks``), and a no-copy view gives the result the pattern's
    shape.  The execution fails at the guard where the sizes differ; every other cast is emitted as it is.
    The test is conservative: some such cycles compile (``n := m + 1``, ``m := n - 1``, which the
    simplifier folds to ``n``), but all are guarded rather than bisected against TVM's simplifier.
    """

    def __init__(self, mod: tvm.IRModule | None = None):
        super().__init__(mod)
        # TIR variable -> the dimension a match_cast of this builder bound it to (other than itself).
        self._bound: dict[tirx.Var, tirx.PrimExpr] = {}
        # The conversion's recorded run-time checks, and how many there were when the operation being
        # converted began (convert.py sets both): a guard emitted for an operation that recorded a check
        # (ADD's "must equal", recorded just before its cast) adds that check's number k, so that a failed
        # execution names it (RuntimeCheck.numbered reads k from TVM's "(d vs. d + k)").
        self.checks: list | None = None
        self.operation_checks_from = 0
        # The value each match_cast of this builder cast (``bound_value``).
        self._cast_values: dict[relax.Var, relax.Expr] = {}

    def match_cast(self, value: relax.Expr, ty: relax.Type, name_hint: str = "") -> relax.Var:
        value = self.normalize(value)
        pattern, found = _dims(ty), _dims(value.ty)
        if pattern is None or found is None or len(pattern) != len(found):
            return self._cast(value, ty, name_hint)
        guarded, cyclic = list(pattern), False
        recorded = len(self.checks) if self.checks is not None else 0
        offset = recorded if recorded > self.operation_checks_from else GUARD_OFFSET
        for i, (p, f) in enumerate(zip(pattern, found)):
            if not isinstance(p, tirx.Var) or (isinstance(f, tirx.Var) and f.same_as(p)):
                continue
            if self._leads_to(f, p):
                guarded[i] = tirx.Select(p == f, f, f + offset)
                cyclic = True
            else:
                # CanonicalizeBindings keeps a variable's first binding (later ones are checked against it).
                self._bound.setdefault(p, f)
        if not cyclic:
            return self._cast(value, ty, name_hint)
        checked = self._cast(value, _with_dims(ty, guarded))
        if isinstance(ty, relax.ShapeType):
            return self.emit(relax.ShapeExpr(pattern), name_hint)
        return self.emit(relax.op.memory.view(checked, relax.ShapeExpr(pattern)), name_hint)

    def _cast(self, value: relax.Expr, ty: relax.Type, name_hint: str = "") -> relax.Var:
        var = super().match_cast(value, ty, name_hint)
        self._cast_values[var] = value
        return var

    def bound_value(self, var: relax.Var) -> relax.Expr | None:
        """The value ``var`` was bound to in this builder, by a plain binding or a match_cast
        (``lookup_binding`` finds only the former), or None (a parameter)."""
        bound = self.lookup_binding(var)
        return bound if bound is not None else self._cast_values.get(var)

    def _leads_to(self, dim: tirx.PrimExpr, var: tirx.Var) -> bool:
        """Whether ``dim``, with the bindings made so far substituted (transitively), mentions ``var``."""
        seen: list[tirx.Var] = []
        todo = [] if isinstance(dim, tirx.IntImm) else list(undefined_vars(dim))
        while todo:
            v = todo.pop()
            if v.same_as(var):
                return True
            if any(v.same_as(s) for s in seen):
                continue
            seen.append(v)
            bound = self._bound.get(v)
            if bound is not None and not isinstance(bound, tirx.IntImm):
                todo.extend(undefined_vars(bound))
        return False


def _dims(ty: relax.Type) -> list | None:
    """The dimensions a tensor or shape type spells out, or None (unknown rank or shape, other types)."""
    if isinstance(ty, relax.ShapeType):
        return None if ty.values is None else list(ty.values)
    if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
        return list(ty.shape.values)
    return None


def _with_dims(ty: relax.Type, dims: list) -> relax.Type:
    if isinstance(ty, relax.ShapeType):
        return relax.ShapeType(dims)
    return relax.TensorType(dims, ty.dtype, ty.vdevice)
