"""Applying a tuning database at build time: what a compilation needs from ``nnadapter-tvm tune``'s output.

A context that names a tuning directory (``TUNING_DATABASE=DIR``) has its CPU builds apply the records
kept there before the default schedules take the rest. The database's fingerprint (a hash of its
records), not its path, enters the model token: tuned and untuned caches never collide, and a
database that gains records gives a new token. The search that writes the records is offline
(``nnadapter_tvm/tools/tuning.py``) and never imported by the runtime.
"""

from __future__ import annotations

import hashlib
import os

from nnadapter_tvm.properties import Property
from nnadapter_tvm.runtime.tvm_runtime import relax, tvm  # imported on first use: a context needs neither

#: The two files of a MetaSchedule JSON database.
WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
#: The records that beat the default schedules, written by ``tools.tuning.select``: what a build applies.
APPLIED = "applied"


def has_database(path: str) -> bool:
    """Whether ``path`` holds a MetaSchedule JSON database (its workloads and its records)."""
    return all(os.path.isfile(os.path.join(path, n)) for n in (WORKLOADS, RECORDS))


class TuningDatabase:
    """A tuning directory as the ``TUNING_DATABASE`` property names it: the records ``tune`` kept in its
    ``applied/`` database, or, for a MetaSchedule database written by other means, all its records."""

    def __init__(self, path: str):
        self.path = os.path.abspath(os.path.expanduser(path))
        applied = os.path.join(self.path, APPLIED)
        self.records_path = applied if has_database(applied) else self.path
        if not has_database(self.records_path):
            raise ValueError(f"{self.path} holds no MetaSchedule database (missing {WORKLOADS} or {RECORDS})")
        h = hashlib.sha256()
        for name in (WORKLOADS, RECORDS):
            with open(os.path.join(self.records_path, name), "rb") as f:
                h.update(f.read())
            h.update(b"\0")
        self.fingerprint = h.hexdigest()[:32]

    def __str__(self) -> str:
        # What the model token sees (json.dumps(default=str)): the records' hash, not where they live.
        return f"metaschedule:{self.fingerprint}"

    __repr__ = __str__

    def open(self):  # -> ms.database.JSONDatabase
        # MetaSchedule's database classes, not its search: importing them pulls in no tuning dependency.
        from tvm.s_tir import meta_schedule as ms

        return ms.database.JSONDatabase(work_dir=self.records_path, allow_missing=False)


def tunable(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each TIR ``Let`` expression replaced by its body, the bound value substituted: the
    form of a kernel that MetaSchedule searches and whose records a build looks up. Its FLOP estimate
    (which the search needs) has no rule for ``Let``, which the CPU's vector math binds intermediates
    with (``targets/cpu/vmath.py``)."""
    import tvm_ffi
    from tvm import tirx

    def expand(let):
        def bound(var):
            return let.value if var.same_as(let.var) else var

        return tvm_ffi.structural_map(let.body, [(tirx.Var, bound)])

    return tvm_ffi.structural_map(mod, [(tirx.Let, expand)])


def apply(fused: tvm.IRModule, target: tvm.target.Target, database: TuningDatabase) -> tvm.IRModule:
    """The kernels of a fused module that the database has records for, replaced by their tuned schedules
    (looked up in their ``tunable`` form); the others are left as they were."""
    import tvm_ffi

    expanded = tunable(fused)
    with target, database.open(), tvm.transform.PassContext(opt_level=3):
        tuned = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(expanded)
    functions = {}
    for gvar, func in tuned.functions_items():
        # A kernel without a record keeps its Let bindings, which keep its lowering fast.
        untouched = isinstance(func, tvm.tirx.PrimFunc) and tvm_ffi.structural_equal(func, expanded[gvar.name_hint])
        functions[gvar] = fused[gvar.name_hint] if untouched else func
    return tvm.IRModule(functions, attrs=tuned.attrs)


#: Declared here, where it is read: a common context property (every device's context accepts it);
#: the CPU builds (``llvm``, ``arm``) apply it.
TUNING_DATABASE = Property(
    "TUNING_DATABASE",
    "MetaSchedule database directory (nnadapter-tvm tune) whose records CPU builds apply; its fingerprint "
    "enters the model token",
    TuningDatabase,
)
