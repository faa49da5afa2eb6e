"""The model fuzzer's harness (tests/e2e/test_fuzz_models.py and tests/e2e/test_fuzz_corpus.py run it):
random models built through the public API either run or fail with NNAdapterError.

``run_case`` builds a model from its JSON description (drawn by tests/fuzz_model_cases.py, or a corpus
file) through the public API, compiles it for llvm, runs it on random inputs of the declared shapes,
reloads it from its cache buffer and runs it again (same bits expected).
Outcomes: ``ok``, ``nnadapter_error`` (both fine), ``too_big_to_feed`` (it compiled, but its inputs
are too big to make: fine here, tests/runtime/test_resources.py owns that), and the failures: ``bug`` (any
other Python exception), ``crash`` (the process died by a signal or exited), ``timeout``,
``harness_error`` (this file's own fault).

Cases run in a long-lived worker subprocess (many cases per process; restarted after a crash), so a
segfault or abort is a failure, not the end of pytest. Its address space is capped (3 GiB).  A failure
is saved into tests/fuzz_corpus/, one file per signature.

    python tests/fuzz_models.py --run CASE.json...        run cases (or corpus files) in this process
                                                      (address space capped at 3 GiB too)
    python tests/fuzz_models.py --explore 2000 --seed 1   generate and run many, save one case per
                                                      distinct failure into tests/fuzz_corpus/
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
from fuzz_model_cases import cases

HERE = Path(__file__).resolve()
CORPUS = HERE.parent / "fuzz_corpus"
CASE_TIMEOUT = float(os.environ.get("NNA_FUZZ_TIMEOUT", "60"))
MEMORY_LIMIT = 3 << 30  # a fuzzed model is small: 3 GiB is ten times what compiling one takes
FEED_LIMIT = 256 << 20  # bytes of inputs the runner is willing to make
RESULT = "@@RESULT "
FINE = ("ok", "nnadapter_error", "too_big_to_feed")


# =================================================================================================
# The runner: a JSON description -> the public API
# =================================================================================================
def _number(x):
    if isinstance(x, str):
        return float(x)  # "nan", "inf", "-inf"
    return x


def decode_value(spec: dict, dims: list[int], dtype: str):
    """A constant value: explicit ``data``, a ``random`` fill, a ``fill`` or raw ``bytes``."""
    if "bytes" in spec:
        rng = np.random.default_rng(spec.get("seed", 0))
        return rng.integers(0, 256, int(spec["bytes"]), dtype=np.uint8).tobytes()
    dtype = spec.get("dtype") or dtype
    shape = [1 if d < 0 else d for d in dims]
    with np.errstate(all="ignore"):
        if "data" in spec:  # a flat list: its byte length, not its shape, has to match the operand
            data = [_number(x) for x in spec["data"]]
            array = np.array(data, dtype="float64" if any(isinstance(x, float) for x in data) else "int64")
            array = array.astype(dtype)
        elif "fill" in spec:
            array = np.full(shape, _number(spec["fill"])).astype(dtype)
        else:
            array = random_array(shape, dtype, spec.get("seed", 0), spec.get("low", -3), spec.get("high", 6))
    return np.ascontiguousarray(array)


def random_array(shape, dtype: str, seed: int, low: float = -3, high: float = 6, special: bool = False):
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    with np.errstate(all="ignore"):
        if kind == "b":
            return rng.integers(0, 2, shape).astype(bool)
        if kind in "iu":
            info = np.iinfo(dtype)
            return rng.integers(max(int(low), info.min), min(int(high), info.max) + 1, shape).astype(dtype)
        array = rng.uniform(low, high, shape).astype(dtype)
        if special and array.size:
            flat = array.reshape(-1)
            picks = rng.integers(0, flat.size, max(1, flat.size // 8))
            flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype), picks.size)
        return array


def feed_arrays(case: dict, input_types) -> list[np.ndarray] | None:
    """Random inputs of the declared dimensions (unknown ones from the case); None if too big."""
    feeds = case.get("feeds", [])
    arrays = []
    total = 0
    for i, t in enumerate(input_types):
        feed = feeds[i] if i < len(feeds) else {}
        dims = feed.get("dims") or [1 if d == -65535 else d for d in t.dimensions]
        dtype = feed.get("dtype") or t.dtype
        count = int(np.prod(dims, dtype=object))
        total += count * np.dtype(dtype).itemsize
        if total > FEED_LIMIT:
            return None
        if "data" in feed:  # explicit values (a corpus case)
            arrays.append(decode_value({"data": feed["data"]}, dims, dtype).reshape(dims))
            continue
        arrays.append(
            random_array(
                dims, dtype, feed.get("seed", i), feed.get("low", -3), feed.get("high", 6), feed.get("special")
            )
        )
    return arrays


def _dirty_the_heap() -> None:
    """Allocate, fill with a pattern and free blocks of many sizes: freed memory that an output
    is wrongly read from then holds something else than in the previous compute."""
    pattern = np.random.default_rng().integers(1, 255, 1)[0]
    for size in (16, 64, 256, 1024, 4096, 1 << 14, 1 << 16):
        blocks = [np.full(size, pattern, np.uint8) for _ in range(4)]
        del blocks


def _where(tb) -> str:
    """The innermost frame of the library (or TVM) in a traceback: file:function."""
    frames = traceback.extract_tb(tb)
    for frame in reversed(frames):
        if any(part in frame.filename for part in ("nnadapter_tvm", "op_converters", "targets", "/tvm")):
            return f"{Path(frame.filename).name}:{frame.name}"
    return f"{Path(frames[-1].filename).name}:{frames[-1].name}" if frames else "?"


def run_case(case: dict) -> dict:
    """Build, compile, run, reload and run again. Never raises (but may crash the process)."""
    import nnadapter_tvm as nna

    stage = "decode"
    try:
        operands_spec = case["operands"]
        values = {}
        for i, od in enumerate(operands_spec):
            if od.get("value") is not None:
                try:
                    dtype = nna.types.storage_dtype(od["precision"])
                except (ValueError, KeyError):
                    dtype = "float32"  # an invalid precision: the library will say so
                values[i] = decode_value(od["value"], od["dims"], dtype)
    except Exception as err:
        return {"outcome": "harness_error", "stage": stage, "error": f"{type(err).__name__}: {err}"}

    def access_input(memory, operand_type):
        operand_type.dimensions = list(memory.shape)
        return memory

    try:
        stage = "operand"
        model = nna.Model()
        operands = []
        for od in operands_spec:
            t = nna.OperandType(
                od["precision"],
                od["dims"],
                scale=od.get("scale"),
                zero_point=od.get("zero_point"),
                channel_dim=od.get("channel_dim"),
            )
            operands.append(model.add_operand(t))
        stage = "value"
        for i, value in values.items():
            model.set_operand_value(operands[i], value, copy=operands_spec[i].get("copy", True))
        stage = "operation"
        for op in case["operations"]:
            model.add_operation(op["type"], [operands[i] for i in op["inputs"]], [operands[i] for i in op["outputs"]])
        stage = "identify"
        model.identify_inputs_and_outputs([operands[i] for i in case["inputs"]], [operands[i] for i in case["outputs"]])
        stage = "model_finish"
        model.finish()
        stage = "context"
        context = nna.Context([nna.Device.acquire("llvm")], case.get("properties", ""))
        stage = "compile"
        compilation = nna.Compilation(model, context)
        compilation.finish()
        input_types, output_types = compilation.query_inputs_and_outputs()
        stage = "feed"
        feeds = feed_arrays(case, input_types)
        if feeds is None:
            return {"outcome": "too_big_to_feed", "stage": stage}

        def compute(comp) -> list[np.ndarray]:
            outputs: list = [None] * len(output_types)
            execution = nna.Execution(comp)
            for i, x in enumerate(feeds):
                execution.set_input(i, x, access_input)
            for i in range(len(output_types)):

                def access_output(memory, operand_type, i=i):
                    outputs[i] = np.empty(operand_type.dimensions, operand_type.dtype)
                    return outputs[i]

                execution.set_output(i, None, access_output)
            execution.compute()
            return outputs

        stage = "compute"
        first = compute(compilation)
        stage = "check"
        for i, (out, t) in enumerate(zip(first, output_types)):
            assert out is not None, f"output {i} was never written"
            assert out.dtype == np.dtype(t.dtype), f"output {i}: dtype {out.dtype}, declared {t.dtype}"
            assert out.ndim == len(t.dimensions) or not t.dimensions, f"output {i}: shape {out.shape} vs {t.dimensions}"
            for axis, (want, got) in enumerate(zip(t.dimensions, out.shape)):
                assert want in (nna.UNKNOWN, got), f"output {i} axis {axis}: {got}, queried {t.dimensions}"
        stage = "compute"
        _dirty_the_heap()  # so that an output read from uninitialized memory differs next time
        repeated = [compute(compilation) for _ in range(2)]
        stage = "reload"
        again = nna.Compilation(None, context, cache_buffer=compilation.serialize())
        again.finish()
        _dirty_the_heap()
        reloaded = compute(again)
        stage = "check"
        others = [("a second compute", repeated[0]), ("a third compute", repeated[1])]
        for what, other in [*others, ("a reload from the cache buffer", reloaded)]:
            for i, (a, b) in enumerate(zip(first, other)):
                assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"output {i} differs in {what}"
        result = {"outcome": "ok", "stage": "done", "shapes": [list(o.shape) for o in first]}
        if case.get("return_values"):
            result["values"] = [np.where(np.isnan(o), None, o).tolist() if o.dtype.kind == "f" else o.tolist()
                                for o in first]  # fmt: skip
        return result
    except nna.NNAdapterError as err:
        return {"outcome": "nnadapter_error", "stage": stage, "code": err.code.name, "error": str(err)[:300]}
    except Exception as err:
        return {
            "outcome": "bug",
            "stage": stage,
            "error": f"{type(err).__name__}: {str(err)[:1000]}",
            "where": _where(err.__traceback__),
            "traceback": traceback.format_exc()[-4000:],
        }


# =================================================================================================
# The worker subprocess, and its handle in the test process
# =================================================================================================
def worker_main(memory_limit: int) -> None:
    """Read one JSON case per line on stdin, answer one RESULT line each on the original stdout."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else prints (TVM, warnings) goes to stderr
    sys.stdout = sys.stderr
    import nnadapter_tvm  # noqa: F401  (import once, before the first case's clock)

    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        if case.get("selftest") == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if case.get("selftest") == "exception":
            result = {"outcome": "bug", "stage": "selftest", "error": "RuntimeError: selftest", "where": "selftest"}
        elif case.get("selftest") == "hang":
            time.sleep(3600)
        else:
            result = run_case(case)
        answer.write(RESULT + json.dumps(result) + "\n")
        answer.flush()


class Worker:
    """The test process's handle on a worker; restarts it after it dies."""

    def __init__(self, timeout: float = CASE_TIMEOUT, memory_limit: int = MEMORY_LIMIT):
        self.timeout, self.memory_limit = timeout, memory_limit
        self.proc: subprocess.Popen | None = None
        self.cases_run = 0
        self.starts = 0

    def _start(self) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), "--worker", "--memory-limit", str(self.memory_limit)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        self._buffer = b""
        self.starts += 1

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-3000:].decode(errors="replace")

    def run(self, case: dict, timeout: float | None = None) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.cases_run += 1
        timeout = self.timeout if timeout is None else timeout
        try:
            self.proc.stdin.write((json.dumps(case) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(0.0, remaining))[0] if remaining > 0 else []
            if not ready:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                return {"outcome": "timeout", "stage": "?", "error": f"no answer in {timeout:.0f} s"}
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the worker died
                rc = self.proc.wait()
                self.proc = None
                how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
                return {"outcome": "crash", "stage": "?", "error": f"the worker died: {how}", "returncode": rc,
                        "stderr": self._stderr_tail()}  # fmt: skip
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        text = line.decode(errors="replace")
        if not text.startswith(RESULT):
            return {"outcome": "harness_error", "stage": "?", "error": f"unexpected worker output {text[:200]!r}"}
        return json.loads(text[len(RESULT) :])

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# =================================================================================================
# Failures: signatures and the corpus
# =================================================================================================
def op_names(case: dict) -> list[str]:
    import nnadapter_tvm as nna

    names = []
    for op in case.get("operations", []):
        try:
            names.append(nna.OperationType(op["type"]).name)
        except ValueError:
            names.append(f"TYPE{op['type']}")
    return names


def signature(case: dict, result: dict) -> str:
    """What makes two failures the same: the outcome, the stage, where it was raised, the start of
    the message (numbers and names of symbolic dims left out); for a crash or a timeout, where
    nothing more is known, the operation types."""
    error = result.get("error", "")
    head = re.sub(r"[0-9]+|in\d+_d\d+|\[.*?\]|\(.*?\)", "", error)[:48]
    if result["outcome"] in ("crash", "timeout"):
        head += " " + "+".join(sorted(set(op_names(case))))
    return f"{result['outcome']}|{result.get('stage')}|{result.get('where', '')}|{head}"


def save_to_corpus(case: dict, result: dict, found_by: str, corpus: Path = CORPUS) -> Path:
    """One file per signature; a smaller case with the same signature replaces a bigger one."""
    corpus.mkdir(parents=True, exist_ok=True)
    sig = signature(case, result)
    ops = "-".join(sorted(set(op_names(case))))[:60] or "none"
    name = f"{result['outcome']}-{ops}-{hashlib.sha1(sig.encode()).hexdigest()[:8]}.json"
    path = corpus / name
    for old in corpus.glob(f"*-{name.rsplit('-', 1)[1]}"):  # the same signature under other operations
        if old != path:
            with contextlib.suppress(ValueError, KeyError):
                if len(json.dumps(json.loads(old.read_text())["case"], sort_keys=True)) <= len(json.dumps(case)):
                    return old
            old.unlink()
    text = json.dumps(case, sort_keys=True)
    if path.exists():
        with contextlib.suppress(ValueError, KeyError):
            if len(json.dumps(json.loads(path.read_text())["case"], sort_keys=True)) <= len(text):
                return path
    entry = {
        "signature": sig,
        "found_by": found_by,
        "result": {k: v for k, v in result.items() if k != "traceback"},
        "traceback": result.get("traceback", ""),
        "case": case,
    }
    path.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    return path


def describe_failure(case: dict, result: dict, path: Path | None = None) -> str:
    lines = [f"{result['outcome']} at stage {result.get('stage')}: {result.get('error')}"]
    if result.get("traceback"):
        lines.append(result["traceback"])
    if result.get("stderr"):
        lines.append("worker stderr (tail):\n" + result["stderr"])
    if path:
        lines.append(f"saved to {path}; replay: python tests/fuzz_models.py --run {path}")
    lines.append("case: " + json.dumps(case))
    return "\n".join(lines)


# =================================================================================================
# Command line
# =================================================================================================
def explore(count: int, seed: int, corpus: Path | None, timeout: float) -> int:
    """Generate ``count`` cases, run them all, save one (the smallest) per distinct failure."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    worker = Worker(timeout=timeout)
    outcomes: Counter = Counter()
    stages: Counter = Counter()
    failures: dict[str, tuple[dict, dict]] = {}
    started = time.perf_counter()

    @hypothesis_seed(seed)
    @settings(max_examples=count, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])  # fmt: skip
    @given(case=cases())
    def run(case):
        result = worker.run(case)
        outcomes[result["outcome"]] += 1
        stages[(result["outcome"], result.get("stage"))] += 1
        if result["outcome"] not in FINE:
            sig = signature(case, result)
            if sig not in failures or len(json.dumps(case)) < len(json.dumps(failures[sig][0])):
                failures[sig] = (case, result)
            ops = "+".join(op_names(case))
            print(f"[{sum(outcomes.values())}] {sig} [{ops}]: {result.get('error', '')[:200]}", flush=True)

    try:
        run()
    finally:
        worker.close()
    print(f"\n{sum(outcomes.values())} cases in {time.perf_counter() - started:.0f} s; {worker.starts} worker starts")
    print("outcomes:", dict(outcomes))
    print("by stage:", {f"{o}/{s}": n for (o, s), n in sorted(stages.items(), key=str)})
    for sig, (case, result) in sorted(failures.items()):
        where = save_to_corpus(case, result, f"explore seed {seed}", corpus) if corpus else None
        print(f"\n== {sig}\n{result.get('error', '')[:500]}\n{where or ''}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory-limit", type=int, default=MEMORY_LIMIT, help=argparse.SUPPRESS)
    parser.add_argument("--run", nargs="+", metavar="CASE", help="run case or corpus files in this process")
    parser.add_argument("--explore", type=int, metavar="N", help="generate and run N cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="with --explore: where to save (tests/fuzz_corpus)")
    parser.add_argument("--no-save", action="store_true", help="with --explore: do not save")
    parser.add_argument("--timeout", type=float, default=CASE_TIMEOUT)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.memory_limit)
        return 0
    if args.explore:
        return explore(args.explore, args.seed, None if args.no_save else args.corpus, args.timeout)
    if not args.run:
        parser.error("nothing to do: --run or --explore")
    import resource

    # The same cap as the worker's: a case that eats memory fails here rather than the machine.
    resource.setrlimit(resource.RLIMIT_AS, (args.memory_limit, args.memory_limit))
    status = 0
    for name in args.run:
        entry = json.loads(Path(name).read_text())
        case = entry.get("case", entry)
        result = run_case(case)
        print(f"{name}: {result['outcome']} ({result.get('stage')}) {result.get('error', '')}")
        if result.get("traceback"):
            print(result["traceback"])
        status |= result["outcome"] not in FINE
    return status


if __name__ == "__main__":
    sys.exit(main())
