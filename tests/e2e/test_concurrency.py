"""Concurrency: one Compilation shared by Executions computing at once, and processes racing
to create the same ``<token>.nnc`` in one cache directory.

The figures (threads, computes, processes, rounds) are printed (visible with ``-s``) and recorded
with ``record_property`` (in the JUnit XML with ``--junitxml``), for docs/reliability.md.

This file is also the worker of the process race: ``python tests/e2e/test_concurrency.py --worker ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.tools import builtin_model

THREADS = 8
COMPUTES_PER_THREAD = 250  # add_relu: 8 x 250 = 2000 computes at once
CNN_COMPUTES_PER_THREAD = 25  # the built-in CNN: 8 x 25 = 200 computes at once
PROCESSES = 4
# Each round, every process compiles the same model under a fresh token: in rounds 0 and 1 all at
# once (all race to write), in rounds 2 and 3 process i starts i x STAGGER s late (readers meet a
# file being written or just renamed). Even rounds: the tiny model; odd: the CNN.
ROUNDS = 4
STAGGER = 0.1
MAX_BATCH = 16

HERE = Path(__file__).resolve()
build_add_relu = builtin_model.build_tiny
add_relu_ref = builtin_model.tiny_reference


def compute(compilation: nna.Compilation, x: np.ndarray, execution: nna.Execution | None = None) -> np.ndarray:
    """One compute through the access callbacks: the input sets its dynamic batch."""
    execution = execution or nna.Execution(compilation)
    result: dict[str, np.ndarray] = {}

    def access_input(memory, operand_type):
        operand_type.dimensions = list(memory.shape)
        return memory

    def access_output(memory, operand_type):
        result["y"] = np.empty(operand_type.dimensions, operand_type.dtype)
        return result["y"]

    execution.set_input(0, x, access_input)
    execution.set_output(0, None, access_output)
    execution.compute()
    return result["y"]


def report(record_property, **figures) -> None:
    for key, value in figures.items():
        record_property(key, value)
    print("\nFIGURES " + " ".join(f"{k}={v}" for k, v in figures.items()))


def run_threads(target, count: int) -> list[BaseException]:
    """Start ``count`` threads on ``target(i, barrier)`` at once; the exceptions they raised."""
    barrier = threading.Barrier(count, timeout=120)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            target(i, barrier)
        except threading.BrokenBarrierError:
            pass  # another thread failed: its error is the one reported
        except BaseException as err:
            errors.append(err)
            barrier.abort()  # release the threads waiting for this one

    threads = [threading.Thread(target=body, args=(i,), name=f"compute-{i}") for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a compute thread hung"
    return errors


def make_inputs(seed: int, count: int, shape_tail: tuple[int, ...], max_batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.uniform(-3, 3, (int(rng.integers(1, max_batch + 1)), *shape_tail)).astype("float32") for _ in range(count)
    ]


# -- threads --------------------------------------------------------------------------------------
def test_threads_share_one_compilation(record_property):
    compilation = nna.Compilation(build_add_relu(), nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    inputs = [make_inputs(100 + i, COMPUTES_PER_THREAD, (3,), MAX_BATCH) for i in range(THREADS)]
    # One at a time first: the reference the concurrent run must reproduce bit for bit.
    sequential = [[compute(compilation, x) for x in xs] for xs in inputs]
    results: list[list[np.ndarray | None]] = [[None] * COMPUTES_PER_THREAD for _ in range(THREADS)]

    def work(i: int, barrier: threading.Barrier) -> None:
        shared = nna.Execution(compilation)  # half the computes reuse one Execution, half make a new one
        barrier.wait()
        for n, x in enumerate(inputs[i]):
            results[i][n] = compute(compilation, x, shared if n % 2 else None)

    start = time.perf_counter()
    errors = run_threads(work, THREADS)
    seconds = time.perf_counter() - start
    assert not errors, errors
    batches = set()
    for i in range(THREADS):
        for n, x in enumerate(inputs[i]):
            got = results[i][n]
            batches.add(x.shape[0])
            assert got.shape == x.shape, (i, n)
            np.testing.assert_array_equal(got, sequential[i][n], err_msg=f"thread {i} compute {n}")
            np.testing.assert_array_equal(got, add_relu_ref(x), err_msg=f"thread {i} compute {n}")
    assert len(batches) > 1  # dynamic batch sizes really varied
    report(
        record_property,
        model="add_relu",
        threads=THREADS,
        computes=THREADS * COMPUTES_PER_THREAD,
        batch_sizes=f"1..{MAX_BATCH}",
        seconds=round(seconds, 2),
    )


@pytest.mark.slow
def test_threads_share_one_compilation_cnn(record_property):
    """The built-in CNN (convolutions, pooling, softmax: TVM's parallel loops inside each call)."""
    compilation = nna.Compilation(builtin_model.build(), nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    inputs = [make_inputs(200 + i, CNN_COMPUTES_PER_THREAD, builtin_model.INPUT_SHAPE, 4) for i in range(THREADS)]
    sequential = [[compute(compilation, x) for x in xs] for xs in inputs]
    results: list[list[np.ndarray | None]] = [[None] * CNN_COMPUTES_PER_THREAD for _ in range(THREADS)]

    def work(i: int, barrier: threading.Barrier) -> None:
        execution = nna.Execution(compilation)
        barrier.wait()
        for n, x in enumerate(inputs[i]):
            results[i][n] = compute(compilation, x, execution)

    errors = run_threads(work, THREADS)
    assert not errors, errors
    for i in range(THREADS):
        for n, x in enumerate(inputs[i]):
            assert results[i][n].shape == (x.shape[0], builtin_model.CLASSES)
            np.testing.assert_array_equal(results[i][n], sequential[i][n], err_msg=f"thread {i} compute {n}")
    report(record_property, model="builtin_cnn", threads=THREADS, computes=THREADS * CNN_COMPUTES_PER_THREAD)


def test_threads_each_compiling_their_own(record_property):
    """Compilations made and finished at once from several threads (TVM's compiler is shared)."""
    count, rounds = 4, 3
    xs = make_inputs(300, count * rounds, (3,), MAX_BATCH)
    results: list[np.ndarray | None] = [None] * (count * rounds)

    def work(i: int, barrier: threading.Barrier) -> None:
        for r in range(rounds):
            model = build_add_relu()
            compilation = nna.Compilation(model, nna.Context([nna.Device.acquire("llvm")]))
            barrier.wait()
            compilation.finish()
            results[r * count + i] = compute(compilation, xs[r * count + i])

    errors = run_threads(work, count)
    assert not errors, "".join("".join(traceback.format_exception(e)) for e in errors[:2])
    for x, got in zip(xs, results):
        np.testing.assert_array_equal(got, add_relu_ref(x))
    report(record_property, concurrent_compilations=count, rounds=rounds)


# -- processes racing on one cache directory ------------------------------------------------------
def token_for(round_: int) -> str:
    return f"concurrency{round_:02d}".ljust(32, "0")


def model_for(round_: int) -> tuple[nna.Model, np.ndarray]:
    """Alternate the tiny model and the CNN (a longer compile, a bigger file to write)."""
    if round_ % 2:
        return builtin_model.build(), builtin_model.sample_input(2, seed=round_)
    return build_add_relu(), np.linspace(-3, 3, 12, dtype="float32").reshape(4, 3)


def file_barrier(directory: Path, name: str, me: int, count: int, timeout: float = 120.0) -> None:
    """Wait until ``count`` processes have reached barrier ``name``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.{me}").touch()
    deadline = time.monotonic() + timeout
    while len(list(directory.glob(f"{name}.*"))) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name}: only {len(list(directory.glob(f'{name}.*')))} of {count}")
        time.sleep(0.001)


def worker(cache_dir: Path, sync_dir: Path, me: int, count: int, rounds: int, out: Path) -> None:
    context = nna.Context([nna.Device.acquire("llvm")])
    report = []
    for r in range(rounds):
        model, x = model_for(r)
        compilation = nna.Compilation(model, context, cache_token=token_for(r), cache_dir=cache_dir)
        file_barrier(sync_dir, f"round{r}", me, count)
        if r >= 2:
            time.sleep(me * STAGGER)
        compilation.finish()
        y = compute(compilation, x)
        report.append({"round": r, "loaded_from_cache": compilation.loaded_from_cache, "y": y.tolist()})
    out.write_text(json.dumps(report))


def test_processes_race_on_one_cache_dir(tmp_path, record_property):
    cache_dir, sync_dir = tmp_path / "cache", tmp_path / "sync"
    cache_dir.mkdir()
    procs = []
    for i in range(PROCESSES):
        args = [sys.executable, str(HERE), "--worker", str(cache_dir), str(sync_dir), str(i), str(PROCESSES)]
        args += [str(ROUNDS), str(tmp_path / f"out{i}.json")]
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"process {i} exited {p.returncode}:\n{outputs[i]}"

    reports = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(PROCESSES)]
    compiled = loaded = 0
    for r in range(ROUNDS):
        model, x = model_for(r)
        reference = compute(_compile(model), x)
        if r % 2 == 0:
            np.testing.assert_array_equal(reference, add_relu_ref(x))
        for i, rep in enumerate(reports):
            assert rep[r]["round"] == r
            np.testing.assert_array_equal(np.asarray(rep[r]["y"], "float32"), reference, err_msg=f"process {i} r{r}")
            loaded += rep[r]["loaded_from_cache"]
            compiled += not rep[r]["loaded_from_cache"]

    # Exactly one valid .nnc per token, nothing else (no temporary file left behind).
    names = sorted(os.listdir(cache_dir))
    assert names == sorted(token_for(r) + cache.SUFFIX for r in range(ROUNDS)), names
    for name in names:
        container = cache.unpack(cache.read_file(str(cache_dir / name)), name)
        assert container.blobs and container.meta["input_types"]
        # ...and it loads with no model at hand.
        context = nna.Context([nna.Device.acquire("llvm")])
        again = nna.Compilation(None, context, cache_token=name[:32], cache_dir=cache_dir)
        again.finish()
        assert again.loaded_from_cache
    report(
        record_property,
        processes=PROCESSES,
        rounds=ROUNDS,
        stagger_s=STAGGER,
        compiled_by_a_racer=compiled,
        loaded_from_a_racer=loaded,
    )


def _compile(model: nna.Model) -> nna.Compilation:
    compilation = nna.Compilation(model, nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    return compilation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", nargs=6, metavar=("CACHE_DIR", "SYNC_DIR", "INDEX", "COUNT", "ROUNDS", "OUT"))
    args = parser.parse_args()
    cache_dir, sync_dir, me, count, rounds, out = args.worker
    worker(Path(cache_dir), Path(sync_dir), int(me), int(count), int(rounds), Path(out))


if __name__ == "__main__":
    main()
