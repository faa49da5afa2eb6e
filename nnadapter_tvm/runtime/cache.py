"""The ``.nnc`` cache container: versioned, checksummed, written atomically.

Layout (little endian)::

    magic "NNATVMC\\0" | u32 format version | u64 payload length | sha256(payload)
    payload = u32 metadata length | metadata (JSON, UTF-8) | blob 0 | blob 1 | ...
    [signature trailer: "NNATVMS\\0" | HMAC-SHA256(key, header + payload)]   (when a key is set)

The metadata holds the input/output operand types and, per subgraph, the device, the
target, the library versions and where its exported module lies among the blobs.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import struct
import tempfile
from dataclasses import dataclass

import tvm
import tvm_ffi

from nnadapter_tvm.errors import check
from nnadapter_tvm.types import NNAdapterError, ResultCode

MAGIC = b"NNATVMC\0"
SIGNATURE_MAGIC = b"NNATVMS\0"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")
_TRAILER_SIZE = len(SIGNATURE_MAGIC) + 32
_TOKEN = re.compile(r"[0-9A-Za-z]{32}")
SUFFIX = ".nnc"


class CacheError(NNAdapterError):
    """A cache that cannot be used: truncated, corrupted, foreign or built for something else."""

    def __init__(self, message: str):
        super().__init__(ResultCode.INVALID_PARAMETER, message)


def library_versions() -> dict[str, str]:
    from nnadapter_tvm import __version__

    return {"nnadapter_tvm": __version__, "tvm": tvm.__version__, "tvm_ffi": tvm_ffi.__version__}


def validate_token(token: object) -> str:
    """A token is exactly 32 characters of [0-9A-Za-z]; checked before any file is touched."""
    check(
        isinstance(token, str) and _TOKEN.fullmatch(token) is not None,
        f"cache token must be exactly 32 characters of [0-9A-Za-z], got {token!r}",
    )
    return token  # type: ignore[return-value]


def cache_path(cache_dir: str | os.PathLike, token: str) -> str:
    return os.path.join(os.fspath(cache_dir), validate_token(token) + SUFFIX)


@dataclass
class Container:
    meta: dict
    blobs: list[memoryview]  # views into the container's bytes


def _signature(key: bytes, signed: bytes) -> bytes:
    return hmac.new(key, signed, hashlib.sha256).digest()


def pack(meta: dict, blobs: list[bytes], key: bytes | None = None) -> bytes:
    """The container bytes; signed with HMAC-SHA256 when ``key`` is given."""
    meta = dict(meta, format_version=FORMAT_VERSION, blob_lengths=[len(b) for b in blobs])
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    payload = b"".join([struct.pack("<I", len(meta_bytes)), meta_bytes, *blobs])
    data = _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload), hashlib.sha256(payload).digest()) + payload
    return data + SIGNATURE_MAGIC + _signature(key, data) if key else data


def unpack(data: bytes, source: str, key: bytes | None = None) -> Container:
    """Parse a container; every defect is a ``CacheError`` naming ``source``.

    With ``key``, an unsigned or mis-signed container is refused before anything else is read."""
    data = memoryview(data).cast("B")  # slices below are views: a module of 100s of MB is not copied
    if len(data) < _HEADER.size:
        raise CacheError(f"{source}: {len(data)} bytes is too short for an .nnc header (truncated or not a cache)")
    magic, version, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CacheError(f"{source}: not an nnadapter-tvm cache (bad magic {magic!r})")
    if version != FORMAT_VERSION:
        raise CacheError(f"{source}: cache format version {version}, this library reads {FORMAT_VERSION}")
    end = _HEADER.size + length
    trailer = data[end:]
    if trailer and (len(trailer) != _TRAILER_SIZE or bytes(trailer[: len(SIGNATURE_MAGIC)]) != SIGNATURE_MAGIC):
        raise CacheError(f"{source}: {len(data)} bytes where the header announces {end} (truncated or appended to)")
    if key is not None:
        if not trailer:
            raise CacheError(f"{source}: unsigned, and this context requires caches signed with its key")
        if not hmac.compare_digest(bytes(trailer[len(SIGNATURE_MAGIC) :]), _signature(key, data[:end])):
            raise CacheError(f"{source}: signature mismatch (signed with another key, or tampered with)")
    payload = data[_HEADER.size : end]
    if len(payload) != length:
        raise CacheError(f"{source}: payload is {len(payload)} bytes, header says {length} (truncated?)")
    if hashlib.sha256(payload).digest() != digest:
        raise CacheError(f"{source}: checksum mismatch (the file is corrupted)")
    try:
        (meta_len,) = struct.unpack_from("<I", payload)
        meta = json.loads(bytes(payload[4 : 4 + meta_len]).decode())
        lengths = [int(n) for n in meta["blob_lengths"]]
    except (struct.error, ValueError, KeyError, TypeError) as err:
        raise CacheError(f"{source}: unreadable metadata ({err})") from None
    offset = 4 + meta_len
    if offset + sum(lengths) != len(payload) or any(n < 0 for n in lengths):
        raise CacheError(f"{source}: blob lengths do not add up to the payload")
    blobs = []
    for n in lengths:
        blobs.append(payload[offset : offset + n])
        offset += n
    return Container(meta, blobs)


def read_file(path: str) -> bytes:
    """Read without following a symlink at ``path`` itself: a cache entry must be a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise CacheError(f"{path}: cannot be read as a regular file ({err.strerror}; symlinks are refused)") from None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write_atomic(path: str, data: bytes) -> None:
    """Write to a temporary file beside ``path``, fsync, then rename over it."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
