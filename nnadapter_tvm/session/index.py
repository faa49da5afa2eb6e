"""The Predictor's shortcut past the import: ``<cache_dir>/<key>.nnp`` maps the bytes of an ONNX file (and
everything else that shapes its plan and code) to the model token of its compiled ``.nnc``.

Without it a cached load still imports the ONNX graph (folding constants, building the NNAdapter model)
and hashes every weight into the model token before it can look the token up. Only plans that are one
subgraph whose inputs and outputs are the graph's are indexed: those run without the graph.

The entry is a cache container (checksummed, and signed like the ``.nnc`` files when the context has a
cache key); a missing, stale or unreadable entry only means the long way round.

Hashing the ONNX file is a pass over every weight (0.08 s for resnet50's 103 MB, 0.4 s for vgg19's
575 MB), paid by every load. A file model therefore also gets a first-level entry keyed by the file's
identity instead of its bytes, ``<cache_dir>/<identity key>.nnf``: device, inode, size, modification
and change times (``st_ctime``, set by the kernel on every write or metadata change and settable by no
system call short of changing the clock), with the same setup as the content key. It holds the same
record plus that identity, and is written only after a load that hashed the file, when the file's
last change is at least ``SETTLED_SECONDS`` older than the ``fstat`` taken before the hash and a
``stat`` after it finds the file unchanged. Why that is safe: any later change to the file, in place or
by replacing it, gives another identity, since its change time is later by more than the file system's
timestamp granularity (a jiffy on ext4, 2 s on FAT) and writes through a shared writable mapping,
which update the times only when a clean page is first written, are flushed within the kernel's
dirty-page expiry (30 s by default). A file changed by someone who can set the clock, or on a file
system whose ``st_ctime`` is not the change time (FAT's is its creation time), could be served a
stale entry: its token names the ``.nnc`` of the file's previous content (still checksummed; the
compiled model is the old one). Models with external data are never given one (``key`` is None).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import stat
import threading
from dataclasses import dataclass

import numpy as np

from nnadapter_tvm.context import Context
from nnadapter_tvm.errors import check, fail
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.token import codegen_setup
from nnadapter_tvm.types import NNAdapterError

SUFFIX = ".nnp"
IDENTITY_SUFFIX = ".nnf"
# 2: entries record the subgraph's input and output order (an entry of 1 would be read as the graph's order).
_VERSION = 2
#: A file's identity keys an entry only once its last change is this old (seconds): longer than any file
#: system's timestamp granularity and than the kernel's dirty-page expiry (see the module's docstring).
SETTLED_SECONDS = 60.0
#: Present in any model whose tensors live in external files, which the key would not cover.
_EXTERNAL_DATA = b"location"


@dataclass
class Port:
    """A graph input or output as the caller sees it (name, element type, dims with None where open)."""

    name: str
    dtype: np.dtype | None  # None: the model does not say
    shape: tuple | None
    dim_names: tuple | None = None  # the ONNX dim_param of each open dimension (None: unnamed)

    def to_json(self) -> list:
        dtype = None if self.dtype is None else np.dtype(self.dtype).str
        names = None if self.dim_names is None else list(self.dim_names)
        return [self.name, dtype, None if self.shape is None else list(self.shape), names]

    @classmethod
    def from_json(cls, data: list) -> Port:
        name, dtype, shape, names = (*data, None) if len(data) == 3 else data
        return cls(
            str(name),
            None if dtype is None else np.dtype(dtype),
            None if shape is None else tuple(shape),
            None if names is None else tuple(names),
        )

    def check(self, array: np.ndarray) -> np.ndarray:
        """``array`` as this input takes it; errors name the input and what it expects."""
        where = f"input '{self.name}'"
        if array.dtype != self.dtype:
            fail(f"{where} must be {self.dtype}, got {array.dtype}")
        if self.shape is not None:
            dims = "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"
            if array.ndim != len(self.shape):
                fail(f"{where} must have rank {len(self.shape)} {dims}, got shape {list(array.shape)}")
            for axis, (want, got) in enumerate(zip(self.shape, array.shape)):
                if want is not None and want != got:
                    fail(f"{where} dimension {axis} must be {want} {dims}, got shape {list(array.shape)}")
        return np.ascontiguousarray(array)


@dataclass
class Entry:
    """An ``.nnp`` entry's record (the container's metadata): the token of the compiled ``.nnc``, the
    graph inputs as the caller sees them, the graph output names, and where the compiled subgraph orders
    them otherwise, its input k is graph input ``input_order[k]`` and graph output j its output
    ``output_order[j]`` (None: the graph's order)."""

    token: str
    inputs: list[Port]
    outputs: list[str]
    input_order: tuple[int, ...] | None = None
    output_order: tuple[int, ...] | None = None

    def to_json(self) -> dict:
        return {
            "plan_version": _VERSION,
            "token": self.token,
            "inputs": [p.to_json() for p in self.inputs],
            "outputs": self.outputs,
            "input_order": None if self.input_order is None else list(self.input_order),
            "output_order": None if self.output_order is None else list(self.output_order),
        }

    @classmethod
    def from_json(cls, meta: dict) -> Entry:
        """The entry a container's metadata holds; NNAdapterError, KeyError, TypeError or ValueError
        where it is of another plan version or malformed."""
        check(meta.get("plan_version") == _VERSION, "another plan version")
        inputs, outputs = [Port.from_json(p) for p in meta["inputs"]], [str(n) for n in meta["outputs"]]
        orders = []
        for name, count in (("input_order", len(inputs)), ("output_order", len(outputs))):
            order = meta[name]
            if order is not None:
                order = tuple(int(k) for k in order)
                check(sorted(order) == list(range(count)), f"{name} {list(order)} is not an order of {count}")
            orders.append(order)
        return cls(cache.validate_token(meta["token"]), inputs, outputs, *orders)


def key(source: bytes | mmap.mmap | None, context: Context, options: dict) -> str | None:
    """The entry's name for this model source, context and import ``options``; None when it cannot be
    keyed (no bytes at hand, or weights in external files)."""
    if source is None:
        return None
    h = hashlib.sha256()
    # Two passes over the model (575 MB for vgg19), chunk by chunk (``cache.chunks``: a mapped file's pages
    # leave the resident set once read): the hash releases the GIL, so it runs in a thread while this one
    # looks for external data. find(), not `in`: `in` on an mmap tests it byte by byte.
    external, position, overlap = False, 0, len(_EXTERNAL_DATA) - 1
    for chunk in cache.chunks(source):
        hashing = threading.Thread(target=h.update, args=(chunk,), daemon=True)
        hashing.start()
        external = external or source.find(_EXTERNAL_DATA, position, position + len(chunk) + overlap) >= 0
        hashing.join()
        position += len(chunk)
    if external:
        return None
    h.update(_setup(context, options))
    return h.hexdigest()[:32]


def _setup(context: Context, options: dict) -> bytes:
    """What besides the model shapes its plan and code (both keys hash it)."""
    setup = {"version": _VERSION, "codegen": codegen_setup(context), "options": options}
    return json.dumps(setup, sort_keys=True, default=str).encode()


def identity(info: os.stat_result | None) -> dict | None:
    """A regular file's identity (device, inode, size, modification and change times in ns) as an
    entry records it; None where there is no file or its times are not usable."""
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_ino == 0 or info.st_ctime_ns <= 0:
        return None
    return {
        "dev": info.st_dev,
        "ino": info.st_ino,
        "size": info.st_size,
        "mtime_ns": info.st_mtime_ns,
        "ctime_ns": info.st_ctime_ns,
    }


def identity_key(ident: dict, context: Context, options: dict) -> str:
    """The name of the identity entry of a file model (``identity``) for this context and ``options``."""
    h = hashlib.sha256(b"nnadapter-tvm file identity\0")
    h.update(json.dumps(ident, sort_keys=True).encode())
    h.update(_setup(context, options))
    return h.hexdigest()[:32]


def settled(ident: dict, seen_ns: int) -> bool:
    """Whether a file whose identity was taken at ``seen_ns`` (``time.time_ns()`` before the ``fstat``)
    had its last change long enough before it to key an entry (see the module's docstring)."""
    return seen_ns - int(ident["ctime_ns"]) >= SETTLED_SECONDS * 1e9


def path(cache_dir: str, entry_key: str) -> str:
    return os.path.join(cache_dir, cache.validate_token(entry_key) + SUFFIX)


def read(cache_dir: str, entry_key: str, context: Context) -> Entry | None:
    try:
        container = cache.unpack(cache.read_file(path(cache_dir, entry_key)), entry_key, key=context.cache_key)
        return Entry.from_json(container.meta)
    except (NNAdapterError, KeyError, TypeError, ValueError):  # CacheError among them
        return None


def write(cache_dir: str, entry_key: str, entry: Entry, context: Context) -> None:
    """Best effort: the compiled ``.nnc`` is what matters; a failed index write only costs the shortcut."""
    with contextlib.suppress(OSError):
        cache.write_atomic(path(cache_dir, entry_key), cache.pack(entry.to_json(), [], key=context.cache_key))


def identity_path(cache_dir: str, ident_key: str) -> str:
    return os.path.join(cache_dir, cache.validate_token(ident_key) + IDENTITY_SUFFIX)


def read_identity(cache_dir: str, ident: dict, context: Context, options: dict) -> Entry | None:
    """The entry the file of identity ``ident`` was indexed under, None when there is none (or it is
    unreadable, badly signed, or records another identity)."""
    try:
        ident_key = identity_key(ident, context, options)
        data = cache.read_file(identity_path(cache_dir, ident_key))
        container = cache.unpack(data, ident_key, key=context.cache_key)
        if container.meta.get("identity") != ident:
            return None
        return Entry.from_json(container.meta)
    except (NNAdapterError, KeyError, TypeError, ValueError):  # CacheError among them
        return None


def write_identity(
    cache_dir: str, ident: dict, seen_ns: int, now: dict | None, entry: Entry, context: Context, options: dict
) -> bool:
    """Index ``entry`` under the file's identity ``ident`` (taken at ``seen_ns``, before its bytes were
    hashed) when the file had settled then and ``now`` (its identity after the hash) is the same;
    best effort, like ``write``. Returns whether it was written."""
    if now != ident or not settled(ident, seen_ns):
        return False
    record = dict(entry.to_json(), identity=ident)
    try:
        data = cache.pack(record, [], key=context.cache_key)
        # No fsync: a load pays for it (10-100 ms on a busy disk), and an entry lost in a crash is a miss.
        cache.write_atomic(identity_path(cache_dir, identity_key(ident, context, options)), data, sync=False)
    except OSError:
        return False
    return True
