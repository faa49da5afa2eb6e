"""Auto-tuning with MetaSchedule (offline): ``tune`` searches schedules for a model's kernels and ``select``
keeps, per kernel, the best one only where it beats the default CPU schedule. A compilation whose
context names the directory (``TUNING_DATABASE=DIR``) applies what was kept through
``nnadapter_tvm/runtime/tuning_database.py``, which the runtime imports instead of this module.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Sequence

import tvm
import tvm_ffi

from nnadapter_tvm.errors import fail, tvm_error_text
from nnadapter_tvm.runtime.tuning_database import APPLIED, RECORDS, WORKLOADS, TuningDatabase, apply, tunable
from nnadapter_tvm.runtime.tvm_runtime import usable_cpus
from nnadapter_tvm.targets.toolchain import Linker
from nnadapter_tvm.types import ResultCode

# What a build needs to apply the records lives in the runtime (runtime/tuning_database.py); re-exported
# here so that the search and its callers name one module.
__all__ = [
    "APPLIED",
    "MIN_GAIN",
    "RECORDS",
    "SELECTION",
    "WORKLOADS",
    "TuningDatabase",
    "apply",
    "kernels",
    "make_builder",
    "make_runner",
    "record_count",
    "select",
    "tune",
    "with_core_count",
]

SELECTION = "selection.json"
#: A tuned kernel replaces the default schedule only when it is this much faster (measurement noise).
MIN_GAIN = 0.03


SCHEDULER_LOG = "tvm.s_tir.meta_schedule.logging.task_scheduler.log"
_DISPATCHED = re.compile(rb"Sending (\d+) sample\(s\) to builder")


def _dispatched(scheduler_log: str, offset: int) -> int:
    """Candidates MetaSchedule's task scheduler has sent to the builder since ``offset`` in its log."""
    try:
        with open(scheduler_log, "rb") as f:
            f.seek(offset)
            return sum(int(n) for n in _DISPATCHED.findall(f.read()))
    except OSError:
        return 0


def record_count(work_dir: str) -> int:
    path = os.path.join(work_dir, RECORDS)
    if not os.path.isfile(path):
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _meta_schedule():
    try:
        from tvm.s_tir import meta_schedule as ms
        from tvm.s_tir.meta_schedule import relax_integration  # noqa: F401  (needs xgboost, psutil)
    except ImportError as err:
        fail(
            f"tuning needs MetaSchedule's dependencies (pip install 'nnadapter-tvm[bench]'): {err}",
            ResultCode.FEATURE_NOT_SUPPORTED,
        )
    return ms


def with_core_count(target: tvm.target.Target, cores: int | None = None) -> tvm.target.Target:
    """MetaSchedule's search needs the core count it may parallelize over in the target: ``cores``, or
    this machine's when not given."""
    if "num-cores" in target.attrs and cores is None:
        return target
    if cores is None:
        cores = usable_cpus()
    config = dict(target.export())
    config["num-cores"] = int(cores)
    return tvm.target.Target(config)


def kernels(fused_modules: Sequence[tvm.IRModule], target: tvm.target.Target) -> list[tuple[str, tvm.IRModule, int]]:
    """The distinct kernels of ``fused_modules`` as ``(name, PrimFunc module, times used)``; kernels that
    arrive scheduled by hand (the recurrent layers' own loops) are not searched."""
    from tvm.s_tir.meta_schedule import relax_integration

    from nnadapter_tvm.targets.base import is_scheduled

    found: dict[int, list] = {}
    for mod in fused_modules:
        for task in relax_integration.extract_tasks(mod, target):
            kernel = tunable(task.dispatched[0])
            if any(is_scheduled(f) for f in kernel.functions.values() if isinstance(f, tvm.tirx.PrimFunc)):
                continue
            entry = found.setdefault(tvm_ffi.structural_hash(kernel), [task.task_name, kernel, 0])
            entry[2] += int(task.weight)
    return [tuple(entry) for entry in found.values()]


def _export_with(cxx: Linker, mod: tvm.runtime.Module) -> str:
    """MetaSchedule's export step, linked by ``cxx`` (the aarch64 cross compiler when tuning for a board)."""
    import tempfile

    from tvm.support import cc

    path = os.path.join(tempfile.mkdtemp(prefix="nnadapter-tune-"), "kernel.so")
    mod.export_library(path, fcompile=cc.cross_compiler(cxx))
    return path


def _build(mod: tvm.IRModule, target: tvm.target.Target, _params: object) -> tvm.runtime.Module:
    """MetaSchedule's ``default_build`` without its ``import tvm.s_tir.tensor_intrin``: that import takes
    ~18 s, and the builder starts fresh worker processes for every batch of candidates, so it cost more
    than the builds themselves. A candidate arrives with its tensorization already applied."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.driver.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def make_builder(cross_compiler: Linker | None = None):  # -> ms.builder.Builder
    """MetaSchedule's builder; with ``cross_compiler`` the candidates are linked for another machine."""
    ms = _meta_schedule()
    export = None if cross_compiler is None else functools.partial(_export_with, cross_compiler)
    return ms.builder.LocalBuilder(f_build=_build, f_export=export)


def make_runner(rpc_config: object | None = None, repeat: int = 1):  # -> ms.runner.Runner
    """MetaSchedule's runner: this machine, or the board behind an RPC tracker (``ms.runner.RPCConfig``)."""
    ms = _meta_schedule()
    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=repeat, min_repeat_ms=100)
    if rpc_config is None:
        return ms.runner.LocalRunner(evaluator_config=evaluator)
    return ms.runner.RPCRunner(rpc_config=rpc_config, evaluator_config=evaluator)


def tune(
    fused_modules: Sequence[tvm.IRModule],
    target: tvm.target.Target,
    work_dir: str,
    trials: int,
    progress: Callable[[int, int], None] | None = None,
    rpc_config: object | None = None,
    cross_compiler: Linker | None = None,
) -> dict:
    """One MetaSchedule search over every kernel of ``fused_modules``, ``trials`` measured candidates in
    all. An existing database in ``work_dir`` is resumed: its records count towards ``trials`` and seed
    the search. Kernels MetaSchedule cannot build a search space for are left out (``failed_kernels``)."""
    ms = _meta_schedule()
    target = with_core_count(target)
    os.makedirs(work_dir, exist_ok=True)
    before = record_count(work_dir)
    remaining = max(trials - before, 0)
    summary = {
        "work_dir": os.path.abspath(work_dir),
        "records_before": before,
        "trials_asked": trials,
        "resumed": before > 0,
        "failed_kernels": [],
    }
    contexts, weights = [], []
    found = kernels(fused_modules, target)
    # One log per kernel in work_dir/logs: MetaSchedule's own account of each search round. Its console
    # handler takes the package logger's level when it is made: WARNING keeps the per-round INFO tables
    # in the logs and off the terminal, where the progress bar is.
    package_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    if package_logger.level == logging.NOTSET:
        package_logger.setLevel(logging.WARNING)
    # MetaSchedule's logging config lists the package logger's handlers by name: one without a name (an
    # application's, or pytest's capture handler) made a second tune in a process fail. Such handlers
    # sit out the configuration and come back after it.
    unnamed = [h for h in package_logger.handlers if not h.get_name()]
    for handler in unnamed:
        package_logger.removeHandler(handler)
    try:
        loggers = ms.logging.get_loggers_from_work_dir(work_dir, [name for name, _, _ in found])
    finally:
        for handler in unnamed:
            package_logger.addHandler(handler)
    for (name, kernel, uses), logger in zip(found, loggers):
        context = ms.TuneContext(
            mod=kernel,
            target=target,
            space_generator="post-order-apply",
            search_strategy="evolutionary",
            task_name=name,
            logger=logger,
            num_threads="physical",
        )
        try:
            context.generate_design_space()
        except Exception as err:  # TVM's internal errors arrive as plain exceptions
            summary["failed_kernels"].append(f"{name}: {tvm_error_text(err)[:160]}")
            continue
        contexts.append(context)
        weights.append(float(uses))
    summary["kernels"] = len(contexts)
    start = time.perf_counter()
    if remaining and contexts:
        stop = threading.Event()
        scheduler_log = os.path.join(work_dir, "logs", SCHEDULER_LOG)
        log_start = os.path.getsize(scheduler_log) if os.path.isfile(scheduler_log) else 0

        def poll() -> None:
            while not stop.wait(1.0):
                if progress:
                    # Records land only when a kernel's next round starts (the first round visits every
                    # kernel), so progress counts the candidates the scheduler has sent to the builder.
                    done = max(record_count(work_dir) - before, _dispatched(scheduler_log, log_start))
                    progress(min(done, remaining), remaining)

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        builder, runner = make_builder(cross_compiler), make_runner(rpc_config)  # held: see _measure
        try:
            ms.tune.tune_tasks(
                tasks=contexts,
                task_weights=weights,
                work_dir=work_dir,
                max_trials_global=remaining,
                # MetaSchedule's canonical 64 per search round where the budget allows; smaller rounds cost as much
                # search time each (evolution, cost-model training) for fewer measurements.
                num_trials_per_iter=min(64, max(16, remaining // len(contexts))),
                builder=builder,
                runner=runner,
            )
        finally:
            stop.set()
            watcher.join()
        if progress:
            progress(remaining, remaining)
    summary.update(records_after=record_count(work_dir), seconds=time.perf_counter() - start)
    return summary


def _measure(
    mods: list[tvm.IRModule], target: tvm.target.Target, rpc_config: object | None, cross_compiler: Linker | None
) -> list[float]:
    """Median run time of each single-kernel module, in seconds (inf where it fails to build or run)."""
    ms = _meta_schedule()
    built = make_builder(cross_compiler).build([ms.builder.BuilderInput(mod, target) for mod in mods])
    times = [float("inf")] * len(mods)
    runnable = [(k, b) for k, b in enumerate(built) if b.error_msg is None]
    args = ms.arg_info.ArgInfo.from_prim_func
    # Held until the results are in: a runner whose last reference drops inside one of its own pool's
    # threads fails to shut that pool down ("cannot join current thread").
    runner = make_runner(rpc_config, repeat=5)
    futures = runner.run([ms.runner.RunnerInput(b.artifact_path, "cpu", args(mods[k]["main"])) for k, b in runnable])
    for (k, _), future in zip(runnable, futures):
        result = future.result()
        if result.error_msg is None:
            times[k] = statistics.median(float(s) for s in result.run_secs)
    for _, b in runnable:
        shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
    return times


def select(
    fused_modules: Sequence[tvm.IRModule],
    target: tvm.target.Target,
    work_dir: str,
    default_schedule: Callable[[tvm.tirx.PrimFunc], tvm.tirx.PrimFunc],
    rpc_config: object | None = None,
    cross_compiler: Linker | None = None,
) -> list[dict]:
    """Measure each tuned kernel's best record against its ``default_schedule`` on the same runner and keep
    (in ``work_dir/applied``, the database a build applies) only those at least ``MIN_GAIN`` faster: with
    a small budget most records lose, and tuning must never make a model slower. Returns one row per
    kernel with both times (also written to ``work_dir/selection.json``)."""
    ms = _meta_schedule()
    target = with_core_count(target)
    raw = ms.database.JSONDatabase(work_dir=work_dir, allow_missing=False)
    rows, records, mods = [], [], []
    for name, kernel, uses in kernels(fused_modules, target):
        top = raw.get_top_k(raw.commit_workload(kernel), 1) if raw.has_workload(kernel) else []
        if not top:
            continue
        tuned = raw.query_schedule(kernel, target, workload_name="main")
        mods += [tvm.IRModule({"main": default_schedule(kernel["main"])}), tuned.mod]
        records.append((kernel, top[0]))
        rows.append({"kernel": name, "uses": uses})
    times = _measure(mods, target, rpc_config, cross_compiler) if mods else []
    applied = os.path.join(work_dir, APPLIED)
    staging = f"{applied}.tmp{os.getpid()}"
    os.makedirs(staging)
    kept = ms.database.JSONDatabase(work_dir=staging)
    for k, (row, (kernel, record)) in enumerate(zip(rows, records)):
        default_s, tuned_s = times[2 * k], times[2 * k + 1]
        row.update(default_us=default_s * 1e6, tuned_us=tuned_s * 1e6, kept=tuned_s < default_s * (1 - MIN_GAIN))
        if row["kept"]:
            workload = kept.commit_workload(kernel)
            kept.commit_tuning_record(
                ms.database.TuningRecord(record.trace, workload, record.run_secs, target, record.args_info)
            )
    # Swapped in whole, so a build never applies a half-written selection.
    if os.path.isdir(applied):
        old = f"{applied}.old{os.getpid()}"
        os.rename(applied, old)
        os.rename(staging, applied)
        shutil.rmtree(old)
    else:
        os.rename(staging, applied)
    with open(os.path.join(work_dir, SELECTION), "w") as f:
        json.dump(rows, f, indent=1)
    return rows
