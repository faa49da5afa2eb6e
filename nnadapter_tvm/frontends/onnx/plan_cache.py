"""The Predictor's shortcut past the import: ``<cache_dir>/<key>.nnp`` maps the bytes of an ONNX file (and
everything else that shapes its plan and code) to the model token of its compiled ``.nnc``.

Without it a cached load still imports the ONNX graph (folding constants, building the NNAdapter model)
and hashes every weight into the model token before it can look the token up. Only plans that are one
subgraph whose inputs and outputs are the graph's are indexed: those run without the graph.

The entry is a cache container (checksummed, and signed like the ``.nnc`` files when the context has a
cache key); a missing, stale or unreadable entry only means the long way round.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import threading
from dataclasses import dataclass

import numpy as np

from nnadapter_tvm.context import Context
from nnadapter_tvm.errors import check, fail
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.token import codegen_setup
from nnadapter_tvm.types import NNAdapterError

SUFFIX = ".nnp"
_VERSION = 1
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
    graph inputs as the caller sees them, the graph output names."""

    token: str
    inputs: list[Port]
    outputs: list[str]

    def to_json(self) -> dict:
        return {
            "plan_version": _VERSION,
            "token": self.token,
            "inputs": [p.to_json() for p in self.inputs],
            "outputs": self.outputs,
        }

    @classmethod
    def from_json(cls, meta: dict) -> Entry:
        """The entry a container's metadata holds; NNAdapterError, KeyError, TypeError or ValueError
        where it is of another plan version or malformed."""
        check(meta.get("plan_version") == _VERSION, "another plan version")
        return cls(
            cache.validate_token(meta["token"]),
            [Port.from_json(p) for p in meta["inputs"]],
            [str(n) for n in meta["outputs"]],
        )


def key(source: bytes | mmap.mmap | None, context: Context, options: dict) -> str | None:
    """The entry's name for this model source, context and import ``options``; None when it cannot be
    keyed (no bytes at hand, or weights in external files)."""
    if source is None:
        return None
    h = hashlib.sha256()
    # Two passes over the model (575 MB for vgg19): the hash releases the GIL, so it runs in a thread
    # while this one looks for external data. find(), not `in`: `in` on an mmap tests it byte by byte.
    hashing = threading.Thread(target=h.update, args=(source,), daemon=True)
    hashing.start()
    external = source.find(_EXTERNAL_DATA) >= 0
    hashing.join()
    if external:
        return None
    setup = {"version": _VERSION, "codegen": codegen_setup(context), "options": options}
    h.update(json.dumps(setup, sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


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
