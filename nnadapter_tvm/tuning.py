"""Auto-tuning with MetaSchedule: ``tune`` writes a database, and a compilation whose context names it
(``TUNING_DATABASE=DIR``) applies its records before the default CPU schedules take the rest.

The database's fingerprint (a hash of its records), not its path, enters the model token: tuned and
untuned caches never collide, and a database that gains records gives a new token.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence

import tvm
from tvm import relax

from nnadapter_tvm.errors import fail
from nnadapter_tvm.types import ResultCode

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"


class TuningDatabase:
    """A MetaSchedule JSON database directory, as the ``TUNING_DATABASE`` property names it."""

    def __init__(self, path: str):
        self.path = os.path.abspath(os.path.expanduser(path))
        missing = [n for n in (WORKLOADS, RECORDS) if not os.path.isfile(os.path.join(self.path, n))]
        if missing:
            raise ValueError(f"{self.path} holds no MetaSchedule database (missing {', '.join(missing)})")
        h = hashlib.sha256()
        for name in (WORKLOADS, RECORDS):
            with open(os.path.join(self.path, name), "rb") as f:
                h.update(f.read())
            h.update(b"\0")
        self.fingerprint = h.hexdigest()[:32]

    def __str__(self) -> str:
        # What the model token sees (json.dumps(default=str)): the records' hash, not where they live.
        return f"metaschedule:{self.fingerprint}"

    __repr__ = __str__

    def open(self):  # -> ms.database.JSONDatabase
        from tvm.s_tir import meta_schedule as ms

        return ms.database.JSONDatabase(work_dir=self.path, allow_missing=False)


def apply(fused: tvm.IRModule, target: tvm.target.Target, database: TuningDatabase) -> tvm.IRModule:
    """The kernels of a fused module that the database has records for, replaced by their tuned schedules."""
    with target, database.open(), tvm.transform.PassContext(opt_level=3):
        return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)


def record_count(work_dir: str) -> int:
    path = os.path.join(work_dir, RECORDS)
    if not os.path.isfile(path):
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def tune(
    fused_modules: Sequence[tvm.IRModule],
    target: tvm.target.Target,
    work_dir: str,
    trials: int,
    progress: Callable[[int, int], None] | None = None,
    runner: object = "local",
) -> dict:
    """MetaSchedule over every kernel of ``fused_modules`` (their functions merged), ``trials`` measured
    candidates in all. An existing database in ``work_dir`` is resumed: its records count towards
    ``trials`` and seed the search."""
    try:
        from tvm.s_tir.meta_schedule import relax_integration
    except ImportError as err:
        fail(
            f"tuning needs MetaSchedule's dependencies (pip install 'nnadapter-tvm[bench]'): {err}",
            ResultCode.FEATURE_NOT_SUPPORTED,
        )
    if "num-cores" not in target.attrs:
        # MetaSchedule's search needs the core count it may parallelize over.
        config = dict(target.export())
        config["num-cores"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        target = tvm.target.Target(config)
    os.makedirs(work_dir, exist_ok=True)
    before = record_count(work_dir)
    remaining = max(trials - before, 0)
    summary = {"work_dir": os.path.abspath(work_dir), "records_before": before, "trials_asked": trials}
    if remaining == 0:
        summary.update(records_after=before, seconds=0.0, resumed=before > 0)
        return summary
    stop = threading.Event()
    failed: list[str] = []

    def poll() -> None:
        while not stop.wait(1.0):
            if progress:
                progress(min(record_count(work_dir) - before, remaining), remaining)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    start = time.perf_counter()
    try:
        # Kernel by kernel, the budget shared: MetaSchedule's design-space generation fails on some
        # kernels (a failed task is reported and skipped, the others still tune).
        tasks = [(mod, t.task_name) for mod in fused_modules for t in relax_integration.extract_tasks(mod, target)]
        for k, (mod, name) in enumerate(tasks):
            share = remaining // len(tasks) + (1 if k < remaining % len(tasks) else 0)
            if share == 0:
                continue
            try:
                relax_integration.tune_relax(
                    mod,
                    {},
                    target,
                    work_dir,
                    max_trials_global=share,
                    num_trials_per_iter=min(64, share),
                    op_names=[name],
                    runner=runner,
                )
            except Exception as err:  # MetaSchedule raises TVM's internal errors as plain exceptions
                failed.append(f"{name}: {str(err).strip().splitlines()[-1][:160]}")
    finally:
        stop.set()
        watcher.join()
    if progress:
        progress(remaining, remaining)
    summary.update(
        records_after=record_count(work_dir),
        seconds=time.perf_counter() - start,
        resumed=before > 0,
        failed_tasks=failed,
    )
    return summary
