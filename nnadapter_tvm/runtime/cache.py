"""The ``.nnc`` cache container: versioned, checksummed, written atomically.

Layout (little endian)::

    magic "NNATVMC\\0" | u32 format version | u64 payload length | sha256(payload)
    payload = u32 metadata length | metadata (JSON, UTF-8) | pad | blob 0 | pad | blob 1 | ...
    [signature trailer: "NNATVMS\\0" | HMAC-SHA256(key, header + payload)]   (when a key is set)

From format version 2 each blob starts at a multiple of ``BLOB_ALIGNMENT`` bytes in the file (the pads
are zeros): a subgraph's weights blob (``runtime.weights``) is handed to TVM in place, from the mapped
file; and the signature covers the header, which holds the payload's SHA-256, instead of every byte a
second time. Version 1 (no pads, the signature over header and payload) is still read.

The metadata is a ``Manifest`` (JSON through ``to_json``/``from_json``): the model's input/output
operand types and operand indices, the library versions, the token, and per subgraph a
``SubgraphRecord`` (device, target, codegen properties, where its exported module lies among the
blobs, the operands it reads and writes, its run-time checks). ``pack``/``unpack`` handle the
container and hand the metadata over as a plain dict: the ONNX frontend's ``.nnp`` plan index
stores its own record in the same container.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import mmap
import os
import re
import stat
import struct
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import tvm_ffi

from nnadapter_tvm.errors import check
from nnadapter_tvm.runtime.runtime_check import RuntimeCheck
from nnadapter_tvm.runtime.tvm_runtime import tvm_version
from nnadapter_tvm.types import NNAdapterError, OperandType, ResultCode
from nnadapter_tvm.version import __version__

MAGIC = b"NNATVMC\0"
SIGNATURE_MAGIC = b"NNATVMS\0"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
BLOB_ALIGNMENT = 64  # TVM's kernels assume 64-byte aligned data (runtime.weights.ALIGNMENT)
_HEADER = struct.Struct("<8sIQ32s")
_TRAILER_SIZE = len(SIGNATURE_MAGIC) + 32
_TOKEN = re.compile(r"[0-9A-Za-z]{32}")
SUFFIX = ".nnc"
#: A pass over a mapped file (a checksum) reads it in chunks of this many bytes and releases each
#: chunk's pages from the process once read (``chunks``).
RELEASE_CHUNK = 64 << 20


class CacheError(NNAdapterError):
    """A cache that cannot be used: truncated, corrupted, foreign or built for something else."""

    def __init__(self, message: str):
        super().__init__(ResultCode.INVALID_PARAMETER, message)


def library_versions() -> dict[str, str]:
    """The versions a cache must have been built with to be loaded here."""
    return {"nnadapter_tvm": __version__, "tvm": tvm_version(), "tvm_ffi": tvm_ffi.__version__}


def validate_token(token: object) -> str:
    """A token is exactly 32 characters of [0-9A-Za-z]; checked before any file is touched."""
    check(
        isinstance(token, str) and _TOKEN.fullmatch(token) is not None,
        f"cache token must be exactly 32 characters of [0-9A-Za-z], got {token!r}",
    )
    return token  # type: ignore[return-value]


def default_cache_dir() -> str:
    """Where compiled models are cached unless told otherwise: ``$NNADAPTER_TVM_CACHE_DIR``, else
    ``nnadapter-tvm`` in the user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    if os.environ.get("NNADAPTER_TVM_CACHE_DIR"):
        return os.environ["NNADAPTER_TVM_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nnadapter-tvm")


def cache_path(cache_dir: str | os.PathLike, token: str) -> str:
    return os.path.join(os.fspath(cache_dir), validate_token(token) + SUFFIX)


@dataclass
class Container:
    meta: dict
    blobs: list[memoryview]  # views into the container's bytes
    offsets: list[int] = field(default_factory=list)  # where each blob starts in the container's bytes


@dataclass
class SubgraphRecord:
    """One compiled subgraph in a manifest: the device and target it was built for, the codegen
    properties it was built with (JSON values), which blob holds its exported module (and which its
    weights, where they are kept out of it), the operand indices it reads and writes, and the run-time
    checks that explain its failures."""

    device: str
    target: str
    blob: int
    inputs: list[int]
    outputs: list[int]
    properties: dict[str, object] = field(default_factory=dict)
    checks: list[RuntimeCheck] = field(default_factory=list)
    # What the target was made from (Driver.target_key): a load whose context gives the same key needs no
    # tvm.target.Target to check ``target``. None in caches written before it was recorded.
    target_key: list | None = None
    # The blob of the weights lifted out of the module (runtime.weights), and [dtype, shape, offset] per
    # weight, in the order ``main`` takes them; None where the module keeps all its constants.
    weights_blob: int | None = None
    weights: list[list] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "target": self.target,
            **({"target_key": self.target_key} if self.target_key is not None else {}),
            "properties": self.properties,
            "blob": self.blob,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "checks": [c.to_json() for c in self.checks],
            **({"weights_blob": self.weights_blob, "weights": self.weights} if self.weights_blob is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict) -> SubgraphRecord:
        return cls(
            device=str(data["device"]),
            target=str(data["target"]),
            blob=int(data["blob"]),
            inputs=[int(i) for i in data["inputs"]],
            outputs=[int(i) for i in data["outputs"]],
            properties=dict(data.get("properties", {})),
            checks=[RuntimeCheck.from_json(c) for c in data.get("checks", [])],
            target_key=None if data.get("target_key") is None else list(data["target_key"]),
            weights_blob=None if data.get("weights_blob") is None else int(data["weights_blob"]),
            weights=list(data.get("weights", [])),
        )


@dataclass
class Manifest:
    """What an ``.nnc`` says about the compiled model besides its modules (the container's metadata)."""

    input_types: list[OperandType]
    output_types: list[OperandType]
    model_inputs: list[int]  # operand index of each model input, in order
    model_outputs: list[int]
    subgraphs: list[SubgraphRecord]
    library: dict[str, str] = field(default_factory=library_versions)
    token: str | None = None
    compile_seconds: float | None = None
    # The custom operations the model was compiled with: [name, code, version] each (nnadapter_tvm.extensions).
    extensions: list[list] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "input_types": [t.to_dict() for t in self.input_types],
            "output_types": [t.to_dict() for t in self.output_types],
            "model_inputs": self.model_inputs,
            "model_outputs": self.model_outputs,
            "library": self.library,
            "compile_seconds": self.compile_seconds,
            "subgraphs": [s.to_json() for s in self.subgraphs],
            "token": self.token,
            **({"extensions": self.extensions} if self.extensions else {}),
        }

    @classmethod
    def from_json(cls, meta: dict, source: str) -> Manifest:
        """The manifest of a container's metadata; anything missing or mistyped is a ``CacheError``."""
        try:
            seconds = meta.get("compile_seconds")
            return cls(
                input_types=[OperandType.from_dict(d) for d in meta["input_types"]],
                output_types=[OperandType.from_dict(d) for d in meta["output_types"]],
                model_inputs=[int(i) for i in meta["model_inputs"]],
                model_outputs=[int(i) for i in meta["model_outputs"]],
                subgraphs=[SubgraphRecord.from_json(s) for s in meta["subgraphs"]],
                library=dict(meta["library"]),
                token=meta.get("token"),
                compile_seconds=None if seconds is None else float(seconds),
                extensions=[[str(n), int(c), str(v)] for n, c, v in meta.get("extensions", [])],
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError, NNAdapterError) as err:
            # RuntimeError/NNAdapterError: a check or an operand type that does not parse.
            raise CacheError(f"{source}: malformed metadata ({err})") from None

    def check_origin(self, source: str, token: str | None) -> None:
        """Refuse a manifest of another model (a renamed file) or of other library versions."""
        if token and self.token and self.token != token:
            raise CacheError(f"{source}: holds the model of token {self.token}, not {token} (renamed file?)")
        versions = library_versions()
        if self.library != versions:
            raise CacheError(f"{source}: built with {self.library}, this process has {versions}")


def json_properties(properties: dict[str, object]) -> dict[str, object]:
    """Parsed context properties as JSON values: sets as sorted lists of names, other objects (a
    tuning database) as their text."""

    def jsonable(value: object) -> object:
        if isinstance(value, (set, frozenset)):
            return sorted(getattr(v, "name", v) for v in value)
        if isinstance(value, (list, tuple)):
            return list(value)
        return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)

    return {k: jsonable(v) for k, v in properties.items()}


def _signature(key: bytes, signed: bytes) -> bytes:
    return hmac.new(key, signed, hashlib.sha256).digest()


def _signed(data: memoryview, end: int, version: int) -> memoryview:
    """What the signature covers: the header (whose digest covers the payload), or in format 1 all of it."""
    return data[: _HEADER.size] if version >= 2 else data[:end]


class Pieces(list):
    """A container as the buffers it is made of, in order: hashed and written (``write_atomic``) without
    being joined, since a model's weights are hundreds of MB; ``bytes(pieces)`` joins them for a caller
    that wants one buffer."""

    def __bytes__(self) -> bytes:
        return b"".join(self)

    @property
    def nbytes(self) -> int:
        return sum(memoryview(piece).nbytes for piece in self)


def pack_pieces(meta: dict, blobs: Sequence[bytes | list], key: bytes | None = None) -> Pieces:
    """The container as ``Pieces``; signed with HMAC-SHA256 when ``key`` is given. A blob is a bytes-like
    object or a list of them (written one after the other: ``runtime.weights.pack``)."""
    blobs = [blob if isinstance(blob, list) else [blob] for blob in blobs]
    lengths = [sum(memoryview(piece).nbytes for piece in blob) for blob in blobs]
    meta = dict(meta, format_version=FORMAT_VERSION, blob_lengths=lengths)
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    pieces = Pieces([struct.pack("<I", len(meta_bytes)), meta_bytes])
    position = _HEADER.size + 4 + len(meta_bytes)
    for blob, n in zip(blobs, lengths):
        pad = -position % BLOB_ALIGNMENT
        pieces += [bytes(pad), *blob]
        position += pad + n
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, position - _HEADER.size, digest.digest())
    pieces.insert(0, header)
    if key:
        pieces += [SIGNATURE_MAGIC, _signature(key, header)]
    return pieces


def pack(meta: dict, blobs: Sequence[bytes | list], key: bytes | None = None) -> bytes:
    """The container's bytes (``pack_pieces``, joined)."""
    return bytes(pack_pieces(meta, blobs, key))


def _frame(data: bytes | mmap.mmap, source: str, key: bytes | None) -> tuple[memoryview, int, bytes, int]:
    """The container's bytes as a view, where its payload ends, the payload's recorded digest and the
    format version; the header, the length and the trailer's shape checked (not yet the digest nor the
    signature)."""
    data = memoryview(data).cast("B")  # slices below are views: a module of 100s of MB is not copied
    if len(data) < _HEADER.size:
        raise CacheError(f"{source}: {len(data)} bytes is too short for an .nnc header (truncated or not a cache)")
    magic, version, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CacheError(f"{source}: not an nnadapter-tvm cache (bad magic {magic!r})")
    if version not in READABLE_VERSIONS:
        raise CacheError(f"{source}: cache format version {version}, this library reads {READABLE_VERSIONS}")
    end = _HEADER.size + length
    trailer = data[end:]
    if trailer and (len(trailer) != _TRAILER_SIZE or bytes(trailer[: len(SIGNATURE_MAGIC)]) != SIGNATURE_MAGIC):
        raise CacheError(f"{source}: {len(data)} bytes where the header announces {end} (truncated or appended to)")
    if key is not None and not trailer:
        raise CacheError(f"{source}: unsigned, and this context requires caches signed with its key")
    if len(data) < end:
        raise CacheError(f"{source}: payload is {len(data) - _HEADER.size} bytes, header says {length} (truncated?)")
    return data, end, digest, version


def chunks(data: bytes | mmap.mmap, start: int = 0, end: int | None = None) -> Iterator[memoryview]:
    """``data[start:end]`` as views of at most ``RELEASE_CHUNK`` bytes, for one pass over every byte. Where
    ``data`` is a mapping, each chunk's pages leave this process's resident set when the caller asks for
    the next one (``MADV_DONTNEED``; the kernel's page cache keeps them, and a later read faults them back
    in from it): a checksum of vgg19's 895 MB ``.nnc`` otherwise left every page of it resident, the
    transformed Winograd weights' originals (read only for non-finite outputs) and the module's bytes
    (copied out by the kernel) included, and the hash of a 575 MB ONNX file before a cached load doubled
    that load's peak. Only for a mapping nothing has written to: released pages of a private mapping are
    read again from the file."""
    end = len(data) if end is None else end
    view = memoryview(data).cast("B")
    release = isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED")
    for first in range(start, end, RELEASE_CHUNK):
        last = min(first + RELEASE_CHUNK, end)
        yield view[first:last]
        if release:
            low = first - first % mmap.PAGESIZE
            with contextlib.suppress(OSError, ValueError):  # advice only: a refusal costs memory, not data
                data.madvise(mmap.MADV_DONTNEED, low, last - low)


def verify(data: bytes | mmap.mmap, source: str, key: bytes | None = None) -> None:
    """The integrity checks: with ``key``, the signature (an unsigned or mis-signed container is refused);
    then the payload's SHA-256. Every defect is a ``CacheError`` naming ``source``. These are the passes
    over every byte: ``unpack(..., integrity=False)`` leaves them to a caller that runs them beside other
    work (a load writes the module out meanwhile) and acts on nothing before they pass."""
    framed, end, digest, version = _frame(data, source, key)
    if key is not None and not hmac.compare_digest(
        bytes(framed[end + len(SIGNATURE_MAGIC) :]), _signature(key, _signed(framed, end, version))
    ):
        raise CacheError(f"{source}: signature mismatch (signed with another key, or tampered with)")
    payload = hashlib.sha256()
    for chunk in chunks(data, _HEADER.size, end):
        payload.update(chunk)
    if payload.digest() != digest:
        raise CacheError(f"{source}: checksum mismatch (the file is corrupted)")


def unpack(data: bytes | mmap.mmap, source: str, key: bytes | None = None, integrity: bool = True) -> Container:
    """Parse a container; every defect is a ``CacheError`` naming ``source``.

    With ``key``, an unsigned or mis-signed container is refused before anything else is read. With
    ``integrity=False`` the signature and the checksum are not checked: the caller runs ``verify``
    itself, before it uses anything of the container."""
    if integrity:
        verify(data, source, key)
    data, end, _, version = _frame(data, source, key)
    payload = data[_HEADER.size : end]
    try:
        (meta_len,) = struct.unpack_from("<I", payload)
        meta = json.loads(bytes(payload[4 : 4 + meta_len]).decode())
        lengths = [int(n) for n in meta["blob_lengths"]]
    except (struct.error, ValueError, KeyError, TypeError) as err:
        raise CacheError(f"{source}: unreadable metadata ({err})") from None
    align = BLOB_ALIGNMENT if version >= 2 else 1
    position = _HEADER.size + 4 + meta_len  # in the file
    starts = []
    for n in lengths:
        position += -position % align
        starts.append(position)
        position += n
    if position != end or any(n < 0 for n in lengths):
        raise CacheError(f"{source}: blob lengths do not add up to the payload")
    blobs = [data[start : start + n] for start, n in zip(starts, lengths)]
    return Container(meta, blobs, starts)


def read_file(path: str) -> bytes:
    """Read without following a symlink at ``path`` itself: a cache entry must be a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise CacheError(f"{path}: cannot be read as a regular file ({err.strerror}; symlinks are refused)") from None
    with os.fdopen(fd, "rb") as f:
        return f.read()


class MappedFile(mmap.mmap):
    """A file mapped (``map_file``) that keeps a descriptor of the file it maps until ``release`` (or until
    it is collected): a load copies its module out of that very file in the kernel (``copy_out``), not
    out of a file that may have replaced it at the same path since."""

    fd: int | None = None
    _closer: weakref.finalize | None = None  # closes ``fd`` once: at release() or when collected

    def release(self) -> None:
        """Close the descriptor (the mapping stays)."""
        self.fd = None
        if self._closer is not None:
            self._closer()


def copy_out(source: bytes | mmap.mmap, offset: int, length: int, target: str) -> None:
    """Write ``source[offset:offset + length]`` to a new file ``target`` (mode 0600). From a
    ``MappedFile`` whose descriptor is still open the kernel copies it (``copy_file_range``: no pass
    over the bytes in this process, 0.035 s against a ``write``'s 0.10-0.17 s for resnet50's 103 MB
    here, and a reflink on file systems that share extents); else, or where the file systems refuse
    (another file system on older kernels), a plain write of the view."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        source_fd = getattr(source, "fd", None)
        done = 0
        if source_fd is not None and hasattr(os, "copy_file_range"):
            with contextlib.suppress(OSError):
                while done < length:
                    n = os.copy_file_range(source_fd, fd, length - done, offset + done, done)
                    if n <= 0:  # the source ended early (it cannot: it is mapped whole); write the rest
                        break
                    done += n
        # The rest (all of it without a descriptor) written after what the kernel copied: copy_file_range
        # with an explicit target offset leaves the descriptor's own position at 0.
        os.lseek(fd, done, os.SEEK_SET)
        view = memoryview(source)[offset + done : offset + length]
        while len(view):
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def map_file(path: str) -> mmap.mmap | bytes:
    """The file at ``path`` mapped, as ``read_file`` refuses a symlink: a load hashes and slices the
    pages the kernel already caches instead of copying hundreds of MB into a ``bytes`` first (vgg19's
    548 MB ``.nnc``: a 0.3 s copy, and a second copy of the model held for the compilation's lifetime),
    and hands its weights to TVM in place (``runtime.weights``). The mapping is private (copy-on-write):
    writable, which TVM requires of a tensor's memory, while the file itself is never written through
    it, and its pages stay the shared page cache until something writes one (nothing does). Our
    writers replace a cache by renaming (``write_atomic``): the mapped
    file itself never changes under the mapping. An empty file is ``b""`` (it cannot be mapped)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise CacheError(f"{path}: cannot be read as a regular file ({err.strerror}; symlinks are refused)") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CacheError(f"{path}: not a regular file")
        if info.st_size == 0:
            return b""
        try:
            mapped = MappedFile(fd, 0, access=mmap.ACCESS_COPY)
        except (OSError, ValueError):  # a file system that cannot map: read it
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read()
        # Kept for copy_out; the finalizer holds the number, not the mapping (which it would keep alive).
        mapped.fd, mapped._closer, fd = fd, weakref.finalize(mapped, os.close, fd), -1
        return mapped
    finally:
        if fd >= 0:
            os.close(fd)


def write_atomic(path: str, data: bytes | Pieces, sync: bool = True) -> None:
    """Write to a temporary file beside ``path``, fsync (unless ``sync`` is False: an index entry,
    whose loss or truncation in a crash only fails its checksum and costs the shortcut), then rename
    over it."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in data if isinstance(data, Pieces) else [data]:
                f.write(piece)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
