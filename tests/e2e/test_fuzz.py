"""Fuzzed models: random models built through the public API either run or fail with NNAdapterError.

A hypothesis strategy (``cases()``) draws a JSON description of a model, biased toward the operand
table (``nnadapter_tvm.operations``): mostly the right operand counts and precisions with random shapes
(zero-sized, rank 0, huge, unknown) and attribute values (NaN, inf, extremes), plus a fraction of
deliberately wrong ones (unknown operation, wrong count, precision, byte length, dtype, cycles...).

``run_case`` builds the model through the public API, compiles it for llvm, runs it on random inputs
of the declared shapes, reloads it from its cache buffer and runs it again (same bits expected).
Outcomes: ``ok``, ``nnadapter_error`` (both fine), ``too_big_to_feed`` (it compiled, but its inputs
are too big to make: fine here, tests/runtime/test_resources.py owns that), and the failures: ``bug`` (any
other Python exception), ``crash`` (the process died by a signal or exited), ``timeout``,
``harness_error`` (this file's own fault).

By default (CI) ``test_fuzz_models`` runs 500 examples, derandomized: the same ones on every run, about
25 s on two cores, the corpus replays in about as much again. docs/reliability.md has the figures of the
longer runs and the bugs they found.

Cases run in a long-lived worker subprocess (many cases per process; restarted after a crash), so a
segfault or abort is a failure, not the end of pytest. Its address space is capped (3 GiB).

    python tests/e2e/test_fuzz.py --run CASE.json...        run cases (or corpus files) in this process
                                                        (address space capped at 3 GiB too)
    python tests/e2e/test_fuzz.py --explore 2000 --seed 1   generate and run many, save one case per
                                                        distinct failure into tests/fuzz_corpus/
    NNA_FUZZ_EXAMPLES=2000 NNA_FUZZ_SEED=7 pytest tests/e2e/test_fuzz.py    a bigger, random run
    NNA_FUZZ_SHRINK=1 ...                               let hypothesis shrink a failing case first

Every file in tests/fuzz_corpus/ is replayed by ``test_corpus_case``.
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
import pytest

HERE = Path(__file__).resolve()
CORPUS = HERE.parents[1] / "fuzz_corpus"
EXAMPLES = int(os.environ.get("NNA_FUZZ_EXAMPLES", "500"))
SEED = os.environ.get("NNA_FUZZ_SEED")  # unset: the same examples every run (derandomized)
CASE_TIMEOUT = float(os.environ.get("NNA_FUZZ_TIMEOUT", "60"))
CORPUS_TIMEOUT = 30.0  # a corpus case is one small model: compiled and run in a few seconds
MEMORY_LIMIT = 3 << 30  # a fuzzed model is small: 3 GiB is ten times what compiling one takes
SHRINK = os.environ.get("NNA_FUZZ_SHRINK") == "1"  # off by default: a crash costs seconds per try
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
        lines.append(f"saved to {path}; replay: python tests/e2e/test_fuzz.py --run {path}")
    lines.append("case: " + json.dumps(case))
    return "\n".join(lines)


# =================================================================================================
# The generator (hypothesis strategies)
# =================================================================================================
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
HUGE_DIMS = [1 << 16, 1 << 20, INT32_MAX, 1 << 40]
UNKNOWN = -65535
# Operand slots that carry data rather than attributes.
DATA_NAMES = {
    "input", "input0", "input1", "inputs", "x", "y", "condition", "filter", "weight", "offset", "mask",
    "grid", "rois", "bboxes", "scores", "image", "indices", "batch_indices",
}  # fmt: skip
# Operations on [N, C, H, W] (name fragments): their data input is drawn 4-D most of the time.
FOUR_D_OPS = ("POOL_2D", "CONV_2D", "RESIZE", "GRID_SAMPLE", "CHANNEL_SHUFFLE", "ROI_ALIGN", "LRN", "BATCH_NORM",
              "INSTANCE_NORM", "GROUP_NORM", "PRIOR_BOX", "YOLO_BOX")  # fmt: skip
CHANNEL_VECTORS = {"bias", "scale", "mean", "variance"}
ANY_PRECISIONS = [10, 10, 10, 5, 7, 0, 9, 1, 2, 11, 3]  # FLOAT32 (x3), INT32, INT64, BOOL8, FLOAT16, ...
WRONG_KINDS = [
    "op_type", "count", "precision", "byte_length", "value_dtype", "quant", "rank", "huge", "reuse",
    "attribute", "model", "feed", "properties",
]  # fmt: skip
FLOAT_SPECIALS = ["nan", "inf", "-inf", 0.0, -0.0, 1e-30, 3.4e38, -1.0]
INT_EXTREMES = [INT32_MIN, INT32_MAX, -1, 0, 1 << 20, -(1 << 20), 1 << 30]


def _strategies():
    """Build the strategies (hypothesis is imported here, so --run works without it)."""
    from hypothesis import strategies as st

    import nnadapter_tvm as nna
    from nnadapter_tvm import operations
    from nnadapter_tvm.model import assign_slots
    from nnadapter_tvm.types import QUANT_ASYMM, QUANT_PER_CHANNEL, is_quantized, storage_dtype

    P = nna.Precision
    # The enum's operations and the extensions versioned with the package (codes below 2000); the
    # built-in extensions from 2000 have their own op tests.
    table = {e.operation_type: e.schema for e in operations.entries() if e.code < 2000}
    op_types = sorted(table, key=int)
    valid_precisions = [int(p) for p in P]

    class Builder:
        def __init__(self, draw):
            self.draw = draw
            # One case in five is deliberately wrong, in one way (at one or more places).
            self.wrong_kind = self.pick(WRONG_KINDS) if self.chance(20) else None
            self.operands: list[dict] = []
            self.operations: list[dict] = []
            self.inputs: list[int] = []
            self.feeds: list[dict] = []
            self.produced: list[int] = []  # op outputs, in order
            self.consumed: set[int] = set()

        # -- small draws ----------------------------------------------------------------------
        def chance(self, percent: int) -> bool:
            return self.draw(st.integers(0, 99)) < percent

        def wrong(self, kind: str, percent: int = 50) -> bool:
            """Whether to make this place wrong (only in a case drawn wrong in this way)."""
            return self.wrong_kind == kind and self.chance(percent)

        def pick(self, items):
            return self.draw(st.sampled_from(list(items)))

        def int_(self, lo: int, hi: int) -> int:
            return self.draw(st.integers(lo, hi))

        def dim(self, allow_unknown: bool) -> int:
            roll = self.int_(0, 99)
            if roll < 2:
                return 0
            if roll < 7 and allow_unknown:
                return UNKNOWN
            if self.wrong("huge", 20):
                return self.pick(HUGE_DIMS)
            return self.int_(1, 5)

        def dims(self, allow_unknown: bool = False, rank: int | None = None) -> list[int]:
            if rank is None:
                rank = self.pick([0, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 4, 5]) if not self.wrong("rank", 20) else 9
            return [self.dim(allow_unknown) for _ in range(rank)]

        def float_values(self, n: int) -> list:
            if self.chance(15):
                return [self.pick(FLOAT_SPECIALS) if self.chance(50) else self._float() for _ in range(n)]
            return [self._float() for _ in range(n)]

        def _float(self) -> float:
            return round(self.draw(st.floats(-4, 4, allow_nan=False)), 3)

        def int_values(self, n: int, lo: int = -2, hi: int = 5) -> list[int]:
            extreme = self.chance(8)
            return [self.pick(INT_EXTREMES) if extreme and self.chance(40) else self.int_(lo, hi) for _ in range(n)]

        # -- operands -------------------------------------------------------------------------
        def quant_params(self, precision: int, dims: list[int]) -> dict:
            if not is_quantized(precision):
                return {}
            wrong = self.wrong("quant")
            if precision in QUANT_PER_CHANNEL:
                axis = self.int_(0, max(len(dims) - 1, 0))
                channels = dims[axis] if dims and dims[axis] not in (UNKNOWN,) and dims[axis] <= 64 else 1
                count = channels + (self.int_(-1, 1) if wrong else 0)
                return {
                    "scale": [round(0.01 * self.int_(1, 100), 3) for _ in range(max(count, 0))],
                    "channel_dim": axis,
                }
            params = {"scale": self.pick([0.0, -1.0, None]) if wrong else round(0.005 * self.int_(1, 200), 4)}
            if precision in QUANT_ASYMM:
                params["zero_point"] = self.int_(0, 255) if not wrong else self.int_(-300, 300)
            return params

        def add_operand(self, precision: int, dims: list[int], value: dict | None = None) -> int:
            od = {"precision": precision, "dims": dims, **self.quant_params(precision, dims)}
            if value is not None:
                od["value"] = value
                if self.chance(10):
                    od["copy"] = False
            self.operands.append(od)
            return len(self.operands) - 1

        def model_input(self, precision: int, dims: list[int]) -> int:
            index = self.add_operand(precision, dims)
            self.inputs.append(index)
            feed = {"seed": self.int_(0, 1000)}
            if UNKNOWN in dims:
                feed["dims"] = [self.int_(0, 4) if d == UNKNOWN else d for d in dims]
            if self.chance(10):
                feed["special"] = True
            if self.wrong("feed"):  # another rank or dtype
                if self.chance(50):
                    feed["dims"] = [*dims, 2] if UNKNOWN not in dims else [2]
                else:
                    feed["dtype"] = self.pick(["float64", "int32", "uint8"])
            if precision in valid_precisions and storage_dtype(precision) in ("int32", "int64"):
                feed["low"], feed["high"] = -3, 6
            self.feeds.append(feed)
            return index

        def constant(self, precision: int, dims: list[int]) -> int:
            dims = [1 if d == UNKNOWN else d for d in dims]
            count = int(np.prod(dims, dtype=object)) if dims else 1
            if count > (1 << 22):  # no huge constants (the value itself would be huge)
                dims, count = [1], 1
            dtype = storage_dtype(precision) if precision in valid_precisions else "float32"
            value: dict
            if self.wrong("byte_length", 30):
                value = {"bytes": max(0, count * np.dtype(dtype).itemsize + self.pick([-1, 1, -4, 4, 100]))}
            elif count <= 16:
                if np.dtype(dtype).kind == "f":
                    data = self.float_values(count)
                elif np.dtype(dtype).kind == "b":
                    data = [self.int_(0, 1) for _ in range(count)]
                elif is_quantized(precision) or np.dtype(dtype).itemsize < 4:
                    info = np.iinfo(dtype)
                    data = [self.int_(max(info.min, -20), min(info.max, 20)) for _ in range(count)]
                else:
                    data = self.int_values(count)
                value = {"data": data}
            else:
                value = {"seed": self.int_(0, 1000)}
                if np.dtype(dtype).kind in "iu" and not is_quantized(precision):
                    value.update(low=-3, high=6)
            if self.wrong("value_dtype", 30):  # a value of another dtype than the operand's
                value["dtype"] = self.pick(["float64", "int16", "int64", "float32"])
            return self.add_operand(precision, dims, value)

        def attribute(self, name: str, precision: int, base: list[int], op) -> int:
            """A constant attribute, shaped and valued after its name."""
            rank = len(base)
            kind = np.dtype(storage_dtype(precision)).kind if precision in valid_precisions else "f"
            if kind == "f":
                if name == "scales":
                    n = self.pick([2, 2, 4, 1, 0])
                    return self._const_data(precision, [n], [round(0.5 * self.int_(1, 6), 2) for _ in range(n)])
                n = 1 if not self.chance(10) else self.int_(0, 4)
                return self._const_data(precision, [n] if not self.chance(10) else [], self.float_values(n))
            if kind == "b":
                return self._const_data(precision, [1], [self.int_(0, 1)])
            # integers
            if name in ("axes",):
                n = self.int_(0, max(rank, 1))
                values = [self.int_(-rank - 1, max(rank, 1)) for _ in range(n)]
            elif name == "perm":
                values = list(self.draw(st.permutations(range(rank)))) if not self.chance(15) else self.int_values(rank)
            elif name in ("shape", "output_shape"):
                n = self.int_(1, 4) if name == "shape" else 2
                values = [self.pick([-1, 0, 1, 2, 3, 4, 6]) for _ in range(n)]
                if self.chance(10):
                    values = self.int_values(n)
            elif name in ("pads",):
                n = self.pick([4, 4, 4, 2, 0, 2 * rank])
                values = [self.int_(0, 2) for _ in range(n)]
            elif name in ("strides", "dilations", "kernel_shape", "output_padding"):
                lo = 0 if name == "output_padding" else 1
                values = [self.int_(lo, 3) for _ in range(self.pick([2, 2, 1, 3]))]
            elif name in ("repeats",):
                values = [self.int_(1, 3) for _ in range(rank)]
            elif name in ("starts", "ends", "steps", "shifts"):
                values = self.int_values(self.int_(1, max(rank, 1)), -4, 5)
            elif name in ("split",):
                values = [self.int_(0, 3) for _ in range(self.int_(1, 3))]
            elif name in ("dtype", "return_indices_dtype"):
                values = [self.pick([5, 7, 5, 7, 10, 0, 1, 2, 3, 9, 11, 24, 99, -1])]
            elif name == "fuse_code":
                values = [self.pick([0, 0, 1, 2, 3, 4, -1])]
            elif name == "auto_pad":
                values = [self.pick([0, 0, 1, 2, 3])]
            elif name in ("group", "groups", "deformable_group"):
                values = [self.pick([1, 1, 2, base[1] if rank > 1 and 0 < base[1] < 64 else 1, 0, -1])]
            elif name in ("axis", "begin_norm_axis", "start_axis", "end_axis"):
                values = [self.int_(-rank - 1, max(rank, 1))]
            elif name == "k":
                values = [self.int_(0, 4)]
            else:
                values = self.int_values(1)
            shape = [len(values)]
            if len(values) == 1 and self.chance(10):
                shape = []
            return self._const_data(precision, shape, values)

        def _const_data(self, precision: int, dims: list[int], data: list) -> int:
            if self.wrong("byte_length", 30):
                dims = [len(data) + 1]
            return self.add_operand(precision, dims, {"data": data})

        # -- one operation --------------------------------------------------------------------
        def operation(self) -> None:
            op_type = self.pick(op_types)
            schema = table[op_type]
            type_value = int(op_type)
            if self.wrong("op_type"):
                type_value = self.pick([-1, 96, 97, 200, INT32_MAX])
            count = self._count(schema.inputs)
            try:
                slots = [a for _, a in assign_slots(op_type.name, "input", schema.inputs, count)]
            except nna.NNAdapterError:
                slots = [schema.inputs[i % len(schema.inputs)] for i in range(count)]
            four_d = any(part in op_type.name for part in FOUR_D_OPS)
            base = self.dims(allow_unknown=True, rank=4 if four_d and self.chance(85) else None)
            chosen: dict[str, int] = {}
            inputs: list[int] = []
            dims_of: dict[str, list[int]] = {}
            for pos, arg in enumerate(slots):
                precision = self._precision(arg, chosen)
                chosen.setdefault(arg.name, precision)
                inputs.append(self._input(pos, arg, precision, base, dims_of, op_type))
            out_slots = self._out_slots(schema)
            outputs = []
            first_precision = chosen.get(slots[0].name) if slots else None
            for arg in out_slots:
                allowed = [int(p) for p in arg.precisions] or ANY_PRECISIONS
                keep = first_precision in allowed and self.chance(80)
                precision = first_precision if keep else self.pick(allowed)
                if self.wrong("precision", 20):
                    precision = self.pick(valid_precisions)
                outputs.append(self.add_operand(precision, self._out_dims()))
            if self.wrong("reuse") and self.produced:
                outputs[0] = self.pick(self.produced)  # an operand already produced (or a cycle)
            elif self.wrong("reuse") and inputs:
                outputs[-1] = self.pick(inputs)  # an output that is also an input
            self.operations.append({"type": type_value, "inputs": inputs, "outputs": outputs})
            self.produced.extend(outputs)

        def _count(self, args) -> int:
            required = [a for a in args if not a.optional]
            if any(a.variadic for a in args):
                count = len(args) - 1 + self.int_(1, 4)
                count -= sum(1 for a in args if a.optional) if self.chance(50) else 0
            else:
                count = self.int_(len(required), len(args))
            if self.wrong("count"):
                count = max(0, count + self.pick([-2, -1, 1, 2]))
            return count

        def _precision(self, arg, chosen: dict[str, int]) -> int:
            if self.wrong("precision", 20):
                return self.pick([*valid_precisions, 12, 99])
            if arg.same_as and arg.same_as in chosen and self.chance(95):
                return chosen[arg.same_as]
            return self.pick([int(p) for p in arg.precisions] or ANY_PRECISIONS)

        def _input(self, pos: int, arg, precision: int, base: list[int], dims_of: dict, op_type) -> int:
            name = arg.name
            is_data = pos == 0 or name in DATA_NAMES or (name == "alpha" and op_type == nna.OperationType.PRELU)
            if is_data:
                candidates = [o for o in self.produced if self.operands[o]["precision"] == precision]
                if candidates and self.chance(60):
                    chosen = self.pick(candidates)
                    self.consumed.add(chosen)
                    return chosen
                dims = self._data_dims(name, base, dims_of)
                dims_of.setdefault(name, dims)
                if self.chance(65 if pos == 0 else 40):
                    return self.model_input(precision, dims)
                return self.constant(precision, dims)
            if name in CHANNEL_VECTORS and self.chance(70):
                channels = base[1] if len(base) > 1 else 1
                if name == "bias" and "filter" in dims_of and dims_of["filter"]:
                    channels = dims_of["filter"][0]
                if name == "bias" and "weight" in dims_of and dims_of["weight"]:
                    channels = dims_of["weight"][0]
                return self.constant(precision, [channels if channels != UNKNOWN else 1])
            if self.wrong("attribute", 30):  # an attribute that is not a constant
                return self.model_input(precision, [1])
            if self.wrong("attribute", 30):  # an attribute shaped like a tensor
                return self.constant(precision, self.dims())
            return self.attribute(name, precision, [1 if d == UNKNOWN else d for d in base], op_type)

        def _data_dims(self, name: str, base: list[int], dims_of: dict) -> list[int]:
            rank = len(base)
            channels = base[1] if rank > 1 and base[1] != UNKNOWN else 2
            roll = self.int_(0, 99)
            if name == "filter" and roll < 70:
                return [self.int_(1, 4), max(1, channels), self.int_(1, 3), self.int_(1, 3)]
            if name == "weight" and roll < 70:
                return [self.int_(1, 4), base[-1] if rank and base[-1] != UNKNOWN else 3]
            if name == "y" and "x" in dims_of and roll < 60:
                x = dims_of["x"]
                return [*x[:-2], x[-1], self.int_(1, 4)] if len(x) >= 2 else list(x)
            if roll < 60:
                return list(base)
            if roll < 75 and rank:
                return base[self.int_(0, rank) :]
            if roll < 85 and rank > 1:
                return [base[1]]
            return self.dims(allow_unknown=True)

        def _out_slots(self, schema) -> list:
            slots = []
            for arg in schema.outputs:
                if arg.variadic:
                    slots.extend([arg] * self.int_(1, 4))
                elif not arg.optional or self.chance(50):
                    slots.append(arg)
            if self.wrong("count"):
                slots = slots[:-1] if self.chance(50) else [*slots, schema.outputs[-1]]
            return slots or [schema.outputs[0]]

        def _out_dims(self) -> list[int]:
            roll = self.int_(0, 99)
            if roll < 80:
                return []  # not declared: the compiler infers (rank 0 declared checks nothing)
            if roll < 90:
                return [UNKNOWN] * self.int_(1, 4)
            return self.dims()

        # -- the model ------------------------------------------------------------------------
        def case(self) -> dict:
            for _ in range(self.pick([1, 1, 1, 1, 2, 2, 3])):
                self.operation()
            outputs = [o for o in self.produced if o not in self.consumed]
            outputs += [o for o in self.produced if o in self.consumed and self.chance(20)]
            outputs = list(dict.fromkeys(outputs))
            inputs = list(self.inputs)
            if self.wrong("model", 100):
                roll = self.int_(0, 4)
                if roll == 0:
                    outputs = []
                elif roll == 1 and inputs:
                    inputs.append(inputs[0])
                elif roll == 2 and inputs:
                    inputs.pop()  # an operand used but never defined
                elif roll == 3:
                    outputs.append(len(self.operands) - 1)
                else:
                    consts = [i for i, o in enumerate(self.operands) if "value" in o]
                    if consts:
                        inputs.append(consts[0])
            case = {"operands": self.operands, "operations": self.operations, "inputs": inputs, "outputs": outputs}
            case["feeds"] = [self.feeds[self.inputs.index(i)] if i in self.inputs else {} for i in inputs]
            if self.wrong("properties", 100):
                case["properties"] = self.pick(["TVM_OPT_LEVEL=9;", "BOGUS=1;", "TVM_OPT_LEVEL=x;", "LLVM_MCPU=;"])
            elif self.chance(10):
                case["properties"] = self.pick(["TVM_OPT_LEVEL=0;", "TVM_OPT_LEVEL=1;", "TVM_OPT_LEVEL=2;"])
            return case

    @st.composite
    def cases(draw) -> dict:
        return Builder(draw).case()

    return cases()


def cases():
    return _strategies()


# =================================================================================================
# The tests
# =================================================================================================
@pytest.fixture(scope="module")
def fuzz_worker():
    worker = Worker()
    yield worker
    worker.close()


def test_worker_tells_fine_from_failing(fuzz_worker):
    """The harness itself: NNAdapterError is fine, a Python exception is a bug, a signal is a crash,
    a hang is a timeout; the worker comes back after each death."""
    assert fuzz_worker.run({"operands": [], "operations": [], "inputs": [], "outputs": []})["outcome"] == (
        "nnadapter_error"
    )
    assert fuzz_worker.run({"selftest": "exception"})["outcome"] == "bug"
    crash = fuzz_worker.run({"selftest": "segfault"})
    assert crash["outcome"] == "crash" and crash["returncode"] == -signal.SIGSEGV, crash
    assert fuzz_worker.run({"selftest": "hang"}, timeout=5)["outcome"] == "timeout"
    relu = {
        "operands": [{"precision": 10, "dims": [2, 3]}, {"precision": 10, "dims": [2, 3]}],
        "operations": [{"type": 65, "inputs": [0], "outputs": [1]}],
        "inputs": [0],
        "outputs": [1],
        "feeds": [{"seed": 1, "special": True}],
    }
    assert fuzz_worker.run(relu) == {"outcome": "ok", "stage": "done", "shapes": [[2, 3]]}


def test_fuzz_models(fuzz_worker, record_property):
    """Random models: each runs or fails with NNAdapterError (NNA_FUZZ_EXAMPLES, NNA_FUZZ_SEED)."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import HealthCheck, Phase, given, settings

    outcomes: Counter = Counter()
    started = time.perf_counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=SEED is None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, *([Phase.shrink] if SHRINK else [])],
        print_blob=False,
    )
    @given(case=cases())
    def check(case):
        result = fuzz_worker.run(case)
        outcomes[result["outcome"]] += 1
        if result["outcome"] not in FINE:
            path = save_to_corpus(case, result, f"test_fuzz_models (seed {SEED or 'derandomized'})")
            raise AssertionError(describe_failure(case, result, path))

    if SEED is not None:
        check = hypothesis.seed(int(SEED))(check)
    try:
        check()
    finally:
        figures = dict(examples=sum(outcomes.values()), seconds=round(time.perf_counter() - started, 1))
        figures.update({f"outcome_{k}": v for k, v in sorted(outcomes.items())})
        for key, value in figures.items():
            record_property(key, value)
        print("\nFIGURES fuzz " + " ".join(f"{k}={v}" for k, v in figures.items()))


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_case(path, fuzz_worker):
    """Every failure once found: it must now run or fail with NNAdapterError. An entry may narrow
    that: ``expect`` lists the outcomes allowed, ``expect_values`` the outputs (NaN as null)."""
    entry = json.loads(path.read_text())
    case = dict(entry["case"], return_values="expect_values" in entry)
    result = fuzz_worker.run(case, timeout=CORPUS_TIMEOUT)
    assert result["outcome"] in entry.get("expect", FINE), describe_failure(case, result)
    if "expect_values" in entry and result["outcome"] == "ok":
        assert result["values"] == entry["expect_values"], describe_failure(case, result)


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
