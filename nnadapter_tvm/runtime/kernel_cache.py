"""The kernel cache: each compiled kernel's object code on disk, shared by every model on the machine.

A model's first compile builds every kernel; the same kernel in another model (ResNet's blocks in every
ResNet, a BERT layer in every BERT of that width, the same model in a fresh ``cache_dir``) is then read,
not scheduled, lowered and compiled again. An entry is keyed by the kernel as the schedules receive it
(its TIR, structurally: names of buffers and variables aside), the target, the library versions and a
fingerprint of the code that schedules and lowers it (``salt``, given by the target's pipeline), so that
a change to any of them is a miss, never a stale kernel.

Where: ``kernels`` in the model cache's default directory (``$NNADAPTER_TVM_CACHE_DIR/kernels``, else
``~/.cache/nnadapter-tvm/kernels``), or ``$NNADAPTER_TVM_KERNEL_CACHE`` when it names a directory;
``NNADAPTER_TVM_KERNEL_CACHE=0`` (or ``off``) turns it off. ``nnadapter-tvm kernels --clear`` empties it.

The trust rules are the ``.nnc`` cache's (``runtime.cache``): an entry is one ``cache.pack`` container
(checksummed; signed when the context has a cache key), read without following a symlink, written to a
temporary file and renamed. It holds the object file and the kernel's TIR, which a hit must equal
structurally (the name is a hash: a collision would otherwise link the wrong kernel); an entry that fails
any check is a miss, reported in the log and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass, field

import tvm_ffi

from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.tvm_runtime import tvm  # imported on first use: the TIR (de)serializer

log = logging.getLogger("nnadapter_tvm")

ENV = "NNADAPTER_TVM_KERNEL_CACHE"
SUFFIX = ".nnk"
#: Kernels take this prefix and the entry's name as their symbol, the same in every model.
SYMBOL_PREFIX = "nnak_"
_OFF = ("0", "off", "false", "no")


def default_dir() -> str | None:
    """The kernel cache's directory, or None when ``$NNADAPTER_TVM_KERNEL_CACHE`` turns it off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in _OFF:
        return None
    if value and value.lower() not in ("1", "on", "true", "yes"):
        return value
    return os.path.join(cache.default_cache_dir(), "kernels")


@dataclass
class Stats:
    """What one build found: kernels read from the cache, built and stored, and entries refused."""

    hits: int = 0
    misses: int = 0
    refused: list[str] = field(default_factory=list)


class KernelCache:
    """One directory of kernel entries, for one target (``target``) and build code (``salt``).

    ``key``, when set, signs each entry written and is required of each entry read, as a context's
    ``cache_key`` does for ``.nnc`` files."""

    def __init__(self, directory: str, target: str, salt: str, key: bytes | None = None):
        self.directory = directory
        self.key = key
        self.stats = Stats()
        versions = json.dumps(cache.library_versions(), sort_keys=True)
        self._prefix = f"{target}\n{versions}\n{salt}\n".encode()

    @classmethod
    def open(cls, target: str, salt: str, key: bytes | None = None) -> KernelCache | None:
        """The machine's kernel cache for ``target``, or None when it is turned off."""
        directory = default_dir()
        return None if directory is None else cls(directory, target, salt, key)

    def name(self, func: tvm.tirx.PrimFunc) -> str:
        """The entry's name for ``func`` (32 hex digits): its structure, the target, versions and salt."""
        digest = hashlib.sha256(self._prefix + str(tvm_ffi.structural_hash(func)).encode()).hexdigest()
        return digest[:32]

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name + SUFFIX)

    def read(self, name: str, func: tvm.tirx.PrimFunc) -> bytes | None:
        """The object code stored for ``func`` under ``name``, or None (a miss: absent, or refused)."""
        path = self._path(name)
        if not os.path.lexists(path):
            self.stats.misses += 1
            return None
        try:
            data = cache.read_file(path)
        except cache.CacheError as err:  # a symlink, or unreadable
            return self._refuse(path, str(err))
        try:
            container = cache.unpack(data, path, key=self.key)
            meta = container.meta
            if meta.get("kind") != "kernel" or len(container.blobs) != 2:
                return self._refuse(path, "not a kernel entry")
            stored = tvm.ir.load_json(bytes(container.blobs[1]).decode())
        except cache.CacheError as err:
            return self._refuse(path, str(err))
        except Exception as err:  # a TIR text this TVM cannot read back
            return self._refuse(path, f"its kernel cannot be read: {err}")
        if not tvm_ffi.structural_equal(stored, func):
            return self._refuse(path, "a different kernel under the same name (hash collision)")
        self.stats.hits += 1
        return bytes(container.blobs[0])

    def _refuse(self, path: str, why: str) -> None:
        log.info("kernel cache: %s is not used (%s); the kernel is built again", path, why)
        self.stats.refused.append(path)
        self.stats.misses += 1
        return None

    def write(self, name: str, func: tvm.tirx.PrimFunc, obj: bytes) -> None:
        """Stores ``obj``, the object code of ``func``; a cache that cannot be written is only logged."""
        meta = {"kind": "kernel", "name": name, "versions": cache.library_versions()}
        data = cache.pack(meta, [obj, tvm.ir.save_json(func).encode()], key=self.key)
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            cache.write_atomic(self._path(name), data, sync=False)
        except OSError as err:
            log.warning("kernel cache: cannot write %s: %s", self._path(name), err)


def entries(directory: str | None = None) -> list[str]:
    """The entry files of the kernel cache (regular files only: a symlink is not the cache's)."""
    directory = directory or default_dir()
    if directory is None or not os.path.isdir(directory):
        return []
    found = []
    for entry in os.scandir(directory):
        with contextlib.suppress(OSError):
            if entry.name.endswith(SUFFIX) and stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                found.append(entry.path)
    return sorted(found)


def clear(directory: str | None = None) -> int:
    """Deletes every entry of the kernel cache; returns how many."""
    removed = 0
    for path in entries(directory):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed += 1
    return removed
