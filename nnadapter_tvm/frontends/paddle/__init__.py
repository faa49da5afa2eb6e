"""Paddle inference models on the ONNX path: find the model and params files, export them with paddle2onnx.

A Paddle inference model is what ``paddle.jit.save`` or ``paddle.static.save_inference_model`` writes: a program
(Paddle 3's ``.json``, or the older protobuf ``.pdmodel``) and its parameters (``.pdiparams``), side by side under
one prefix (``inference.json`` + ``inference.pdiparams``). :func:`locate` finds them from a directory or a file,
:func:`to_onnx` exports them to ONNX bytes with paddle2onnx, which :class:`~nnadapter_tvm.Predictor` then imports,
partitions and compiles as any ONNX model.

paddle2onnx runs in a child process (``_export.py``), by default in this interpreter, or in the interpreter that
``NNADAPTER_TVM_PADDLE_PYTHON`` names: paddle2onnx 2.1.0 declares ``onnx<=1.17`` (with onnxoptimizer and
polygraphy) but its exporter, asked for bytes, uses none of them, so ``pip install --no-deps paddle2onnx`` beside
this project's onnx works; an interpreter of its own works as well. With a cache directory, the exported model is
kept as ``<cache_dir>/paddle2onnx/<key>.onnx`` (the key: a SHA-256 of the program, the parameters, the opset and
the exporter), so that a later run skips the export (and paddle's import, seconds).

Partition configs written for Paddle Lite name Paddle op types (``conv2d``, ``softmax``): paddle2onnx names the
ONNX value each Paddle op ends in ``p2o.pd_op.<op type>.<n>.<k>``, and :func:`translate_partition_config` turns
such a line into one rule per ONNX node that gives that value. Lines naming ONNX op types pass unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
import tempfile

from nnadapter_tvm.errors import fail
from nnadapter_tvm.types import ResultCode

PROGRAM_SUFFIXES = (".json", ".pdmodel")
PARAMS_SUFFIX = ".pdiparams"
DEFAULT_OPSET = 13
PYTHON_ENV = "NNADAPTER_TVM_PADDLE_PYTHON"
INSTALL_HINT = (
    "pip install 'paddlepaddle>=3.0' packaging && pip install --no-deps paddle2onnx==2.1.0 "
    "(paddle2onnx declares onnx<=1.17 but its exporter does not use it; docs/paddle.md)"
)
_EXPORT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_export.py")
# Preferred names in a model directory, as paddle.jit.save and PaddleOCR/PaddleClas exports write them.
_PREFERRED_STEMS = ("inference", "model")


@dataclasses.dataclass(frozen=True)
class PaddleModel:
    """A Paddle inference model's files: the program (``.json`` or ``.pdmodel``) and the parameters (or None)."""

    program: str
    params: str | None

    @property
    def format(self) -> str:
        return "json" if self.program.endswith(".json") else "pdmodel"


def _is_program_file(path: str) -> bool:
    """A ``.pdmodel``, or a ``.json`` holding a PIR program (its head names the ``pir`` magic)."""
    if not os.path.isfile(path):
        return False
    if path.endswith(".pdmodel"):
        return True
    if not path.endswith(".json"):
        return False
    with open(path, "rb") as f:
        head = f.read(256)
    return re.search(rb'"magic"\s*:\s*"pir"', head) is not None


def _params_beside(program: str) -> str | None:
    params = os.path.splitext(program)[0] + PARAMS_SUFFIX
    return params if os.path.isfile(params) else None


def is_paddle_model(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a Paddle program file, or a directory holding one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return any(_is_program_file(os.path.join(path, n)) for n in os.listdir(path))
    return _is_program_file(path)


def locate(path: str | os.PathLike, params: str | os.PathLike | None = None) -> PaddleModel:
    """The program and params files of the model at ``path`` (a directory, or the program file).

    In a directory: the one program file with parameters beside it (``<stem>.pdiparams``), else the one program
    file; among several, ``inference.*`` then ``model.*``, Paddle 3's ``.json`` before ``.pdmodel``. A directory
    in the old layout (``__model__`` with a file per parameter) is refused, naming the re-export that fixes it.
    """
    path = os.fspath(path)
    if params is not None:
        params = os.fspath(params)
        if not os.path.isfile(params):
            fail(f"Paddle model: params file {params} does not exist", ResultCode.INVALID_PARAMETER)
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        programs = [os.path.join(path, n) for n in names if _is_program_file(os.path.join(path, n))]
        if not programs:
            if "__model__" in names:
                fail(
                    f"Paddle model directory {path} is in the pre-2.0 layout (__model__ and a file per parameter): "
                    "load it with paddle.static.load_inference_model and save it again with "
                    "paddle.static.save_inference_model (a .pdmodel and a .pdiparams)"
                )
            fail(
                f"Paddle model directory {path} holds no program file (*.json with a PIR program, or *.pdmodel); "
                f"it has {names[:10]}"
            )
        with_params = [p for p in programs if _params_beside(p)] or programs

        def rank(program: str) -> tuple[int, int, str]:
            stem, suffix = os.path.splitext(os.path.basename(program))
            preferred = _PREFERRED_STEMS.index(stem) if stem in _PREFERRED_STEMS else len(_PREFERRED_STEMS)
            return preferred, PROGRAM_SUFFIXES.index(suffix), program

        with_params.sort(key=rank)
        best = with_params[0]
        stems = {os.path.splitext(p)[0] for p in with_params}
        if len(stems) > 1 and rank(best)[0] == len(_PREFERRED_STEMS):
            fail(
                f"Paddle model directory {path} holds several models {[os.path.basename(p) for p in with_params]}: "
                "give the program file (MODEL.json or MODEL.pdmodel)"
            )
        return PaddleModel(best, params or _params_beside(best))
    if not os.path.exists(path):
        fail(f"Paddle model {path} does not exist")
    if not _is_program_file(path):
        fail(f"{path} is not a Paddle program: expected a .pdmodel, a .json holding a PIR program, or a directory")
    return PaddleModel(path, params or _params_beside(path))


def _python() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


def _exporter_identity(python: str) -> str:
    """What the export depends on besides the files: the interpreter, and paddle2onnx's version when it is ours."""
    if python == sys.executable:
        from importlib import metadata

        try:
            return f"paddle2onnx {metadata.version('paddle2onnx')} paddle {metadata.version('paddlepaddle')}"
        except metadata.PackageNotFoundError:
            return "paddle2onnx missing"
    return python


def cache_key(model: PaddleModel, opset: int = DEFAULT_OPSET) -> str:
    """SHA-256 over the program, the parameters, the opset and the exporter."""
    h = hashlib.sha256()
    for part in (model.program, model.params):
        h.update(b"\0file\0")
        if part is not None:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    h.update(f"\0opset {opset}\0{_exporter_identity(_python())}".encode())
    return h.hexdigest()


def _tidy(data: bytes, names: dict | None) -> bytes:
    """paddle2onnx's model, with ``Identity`` nodes of constants made constants, and (``names``: what a ``.pdmodel``
    program calls its inputs and outputs) Paddle's names put back on the graph's inputs and outputs."""
    import onnx

    model = onnx.load_model_from_string(data)
    _fold_constant_identities(model.graph)
    _declare_reshape_ranks(model)
    if names is not None:
        _rename_io(model.graph, names["inputs"], names["outputs"])
    return model.SerializeToString()


def _fold_constant_identities(graph: object) -> None:
    """``Identity(Constant)`` (paddle2onnx's ``auto.cast`` of a shape, before the ``Reshape`` of a conv's bias)
    becomes the Constant: ONNX shape inference reads a Constant's value as a Reshape's target shape but not
    through an Identity, and without it every rank after the first conv is unknown. The importer folds both
    forms alike; the ranks matter when a partition config puts nodes on the host (their outputs feed subgraphs)."""
    constants = {}
    for node in graph.node:  # type: ignore[attr-defined]
        if node.op_type == "Constant":
            constants[node.output[0]] = node
        elif node.op_type == "Identity" and node.input and node.input[0] in constants:
            output, name = node.output[0], node.name
            node.CopyFrom(constants[node.input[0]])
            node.output[0], node.name = output, name
            constants[output] = node


def _declare_reshape_ranks(model: object) -> None:
    """Declares the rank of each ``Reshape`` output whose target shape is computed (paddle2onnx's ``flatten``:
    ``Shape -> Slice -> Concat``) but of known length: ONNX shape inference leaves it unknown, and with it every
    rank after it, which a subgraph fed from the host cannot take. Ranks only: the dimensions stay open."""
    import onnx

    for _ in range(8):  # each pass can open the way to Reshapes further on
        inferred = onnx.shape_inference.infer_shapes(model).graph  # type: ignore[arg-type]
        known = {
            v.name: v.type.tensor_type
            for v in [*inferred.value_info, *inferred.input, *inferred.output]
            if v.type.tensor_type.HasField("shape")
        }
        added = False
        for node in model.graph.node:  # type: ignore[attr-defined]
            if node.op_type != "Reshape" or len(node.input) < 2 or node.output[0] in known:
                continue
            target = known.get(node.input[1])
            data = known.get(node.input[0])
            if target is None or data is None or len(target.shape.dim) != 1:
                continue
            if not target.shape.dim[0].HasField("dim_value"):
                continue
            rank = target.shape.dim[0].dim_value
            value = onnx.helper.make_tensor_value_info(node.output[0], data.elem_type, [None] * rank)
            model.graph.value_info.append(value)  # type: ignore[attr-defined]
            added = True
        if not added:
            return


def _rename_io(graph: object, inputs: list[str], outputs: list[str]) -> None:
    """The graph's inputs and outputs named as the Paddle program names them (in order); left as they are when
    the counts differ or a name is taken by another value."""
    if len(inputs) != len(graph.input) or len(outputs) != len(graph.output):  # type: ignore[attr-defined]
        return
    values = [*graph.input, *graph.output]  # type: ignore[attr-defined]
    mapping = {v.name: new for v, new in zip(values, [*inputs, *outputs]) if v.name != new}
    nodes = graph.node  # type: ignore[attr-defined]
    taken = {n for node in nodes for n in [*node.input, *node.output]}
    taken |= {t.name for t in graph.initializer}  # type: ignore[attr-defined]
    if not mapping or any(new in taken for new in mapping.values()):
        return
    for node in nodes:
        node.input[:] = [mapping.get(n, n) for n in node.input]
        node.output[:] = [mapping.get(n, n) for n in node.output]
    for value in [*values, *graph.value_info]:  # type: ignore[attr-defined]
        value.name = mapping.get(value.name, value.name)


def cached_onnx_path(model: PaddleModel, cache_dir: str | os.PathLike, opset: int = DEFAULT_OPSET) -> str:
    """Where :func:`to_onnx` keeps the exported model in ``cache_dir``."""
    return os.path.join(os.fspath(cache_dir), "paddle2onnx", cache_key(model, opset) + ".onnx")


def to_onnx(model: PaddleModel, cache_dir: str | os.PathLike | None = None, opset: int = DEFAULT_OPSET) -> bytes:
    """The model exported to ONNX bytes by paddle2onnx (read from ``cache_dir`` when exported before)."""
    cached = None
    if cache_dir is not None:
        cached = cached_onnx_path(model, cache_dir, opset)
        if os.path.isfile(cached):
            with open(cached, "rb") as f:
                return f.read()
    python = _python()
    with tempfile.TemporaryDirectory(prefix="nnadapter-tvm-paddle-") as tmp:
        out = os.path.join(tmp, "model.onnx")
        # paddle2onnx's .pdmodel path writes its translated program beside a temporary copy: give it absolute
        # paths, and no params file ("") when there is none, as it expects.
        args = [python, _EXPORT_SCRIPT, os.path.abspath(model.program), os.path.abspath(model.params or ""), str(opset)]
        try:
            done = subprocess.run([*args, out], capture_output=True, text=True, cwd=tmp)
        except OSError as err:
            fail(f"Paddle model {model.program}: cannot start {python} ({PYTHON_ENV}): {err}")
        if done.returncode == 3:
            fail(
                f"Paddle model {model.program}: paddle2onnx is not importable in {python} "
                f"({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'no message'}); install it: "
                f"{INSTALL_HINT}, or set {PYTHON_ENV} to an interpreter that has paddlepaddle and paddle2onnx",
                ResultCode.INVALID_PARAMETER,
            )
        if done.returncode != 0 or not os.path.isfile(out):
            tail = "\n".join((done.stderr + done.stdout).strip().splitlines()[-15:])
            fail(f"Paddle model {model.program}: paddle2onnx could not export it (exit {done.returncode}):\n{tail}")
        with open(out, "rb") as f:
            data = f.read()
        names = None
        if os.path.isfile(out + ".names.json"):
            import json

            with open(out + ".names.json", encoding="utf-8") as f:
                names = json.load(f)
        data = _tidy(data, names)
    if cached is not None:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        partial = f"{cached}.{os.getpid()}.tmp"
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, cached)  # atomic: a reader never sees half a model
    return data


def export_to_file(path: str | os.PathLike, cache_dir: str | os.PathLike | None) -> str:
    """The ONNX file of the Paddle model at ``path`` (for ``nnadapter-tvm run`` / ``info``): the cached export,
    or a temporary file removed when the process exits (no cache directory)."""
    model = locate(path)
    data = to_onnx(model, cache_dir)
    if cache_dir is not None:
        return cached_onnx_path(model, cache_dir)
    import atexit

    fd, name = tempfile.mkstemp(prefix="nnadapter-tvm-paddle-", suffix=".onnx")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    atexit.register(lambda: os.path.exists(name) and os.unlink(name))
    return name


_P2O_VALUE = re.compile(r"^p2o\.pd_op\.(?P<op>[A-Za-z0-9_]+)\.\d+\.\d+$")
# The ONNX op types a Paddle op's last node has, for the ops whose result is a graph output: paddle2onnx gives
# that value Paddle's fetch name, so the op type must be told from the node.
_LAST_NODE_TYPES = {
    "conv2d": ("Conv",),
    "depthwise_conv2d": ("Conv",),
    "conv2d_transpose": ("ConvTranspose",),
    "pool2d": ("MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"),
    "softmax": ("Softmax",),
    "relu": ("Relu",),
    "relu6": ("Clip",),
    "sigmoid": ("Sigmoid",),
    "tanh": ("Tanh",),
    "batch_norm": ("BatchNormalization",),
    "batch_norm_": ("BatchNormalization",),
    "matmul": ("MatMul", "Gemm"),
    "matmul_v2": ("MatMul", "Gemm"),
    "add": ("Add",),
    "elementwise_add": ("Add",),
    "multiply": ("Mul",),
    "elementwise_mul": ("Mul",),
    "reshape": ("Reshape",),
    "reshape2": ("Reshape",),
    "flatten": ("Reshape", "Flatten"),
    "transpose": ("Transpose",),
    "transpose2": ("Transpose",),
    "concat": ("Concat",),
    "argmax": ("ArgMax",),
    "arg_max": ("ArgMax",),
}


def _paddle_op_groups(graph: object) -> list[tuple[str | None, list]]:
    """The ONNX nodes paddle2onnx made of each Paddle op: (Paddle op type or None, nodes, last node last).

    A group ends in a node giving a ``p2o.pd_op.<op>`` value (or a graph output) and takes in the nodes before it
    whose values have no such name (paddle2onnx's helpers: ``Add.1``, ``helper.slice.0``), Constants excluded."""
    nodes = list(graph.node)  # type: ignore[attr-defined]
    producer = {out: node for node in nodes for out in node.output}
    graph_outputs = {o.name for o in graph.output}  # type: ignore[attr-defined]
    groups = []
    for node in nodes:
        ops = [m.group("op") for m in map(_P2O_VALUE.match, node.output) if m]
        if not ops and not graph_outputs.intersection(node.output):
            continue
        group, stack, seen = [node], list(node.input), set()
        while stack:
            value = stack.pop()
            inner = producer.get(value)
            if value in seen or inner is None or _P2O_VALUE.match(value) or inner.op_type == "Constant":
                continue
            seen.add(value)
            if inner not in group:
                group.insert(0, inner)
                stack.extend(inner.input)
        groups.append((ops[0] if ops else None, group))
    return groups


def translate_partition_config(text: str, onnx_model: object) -> str:
    """A Paddle Lite partition config for the exported model: Paddle op types become ONNX rules.

    A line whose op type is an ONNX operator passes unchanged. A line naming a Paddle op type (``conv2d``,
    ``softmax``; ``feed`` and ``fetch`` are ignored) becomes ``OnnxType::value`` for each ONNX node paddle2onnx
    made of each such op (see ``_paddle_op_groups``) whose inputs hold the line's input names and whose last node
    gives its output names (paddle2onnx keeps Paddle's names for the graph's inputs, outputs and parameters only,
    so those are the names a line can still use). A Paddle op whose result is a graph output is told by its last
    node's ONNX type (``_LAST_NODE_TYPES``)."""
    import onnx

    graph = onnx_model.graph  # type: ignore[attr-defined]
    groups = None
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(":")]
        op_type = parts[0]
        if onnx.defs.has(op_type) or len(parts) > 3:  # ONNX rules, and malformed lines for the parser to report
            lines.append(line)
            continue
        if op_type in ("feed", "fetch"):  # Paddle Lite's I/O ops: nothing to run on the host here
            continue
        ins = [n.strip() for n in (parts[1] if len(parts) > 1 else "").split(",") if n.strip()]
        outs = [n.strip() for n in (parts[2] if len(parts) > 2 else "").split(",") if n.strip()]
        if groups is None:
            groups = _paddle_op_groups(graph)
        for paddle_op, group in groups:
            last = group[-1]
            if paddle_op is None:
                if last.op_type not in _LAST_NODE_TYPES.get(op_type, ()):
                    continue
            elif paddle_op != op_type:
                continue
            inputs = {i for node in group for i in node.input}
            if all(i in inputs for i in ins) and all(o in last.output for o in outs):
                lines.extend(f"{node.op_type}::{node.output[0]}" for node in group)
    return "\n".join(lines) + "\n"
