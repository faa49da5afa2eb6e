"""Weights kept out of a compiled module: their layout in the cache, and tensors over them at load.

A CPU build lifts every constant of at least ``MIN_BYTES`` out of ``main`` (``relax_passes.lift_weights``):
``main`` takes them as one more, last, parameter, a tuple. The cache stores them beside the module as
one blob per subgraph, each array at an offset that is a multiple of ``ALIGNMENT`` (the container puts
the blob itself at such an offset, ``cache.pack``), described by ``[dtype, shape, offset]`` records.

Why: a constant inside the module is part of the shared library's bytes. A load then writes the whole
library to a temporary file (dlopen needs one), and TVM deserializes every constant into memory of its
own: resnet50's 100 MB of weights were written, mapped and copied once per load. A weight outside the
module is a view of the mapped cache file, handed to TVM without a copy (DLPack): the kernels read the
page cache, shared by every process that loads the model. The mapping is private and copy-on-write
(``cache.map_file``): TVM needs writable memory to accept it, and the kernels never write a weight.

This module needs numpy and ``tvm_ffi`` only (a load never imports TVM's compiler).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import tvm_ffi

#: TVM's kernels assume 64-byte aligned data and do not guard misaligned access.
ALIGNMENT = 64
#: Smaller constants stay in the module: each lifted weight costs a tuple read per call (within the noise
#: for section 5's Loop model, whose 16 KB weight runs 8 times a call: 85-88 us lifted or not), and they
#: are a small share of a large model's bytes (resnet50: 0.24 of 158 MB below 64 KB, vgg19 0.07 of 895 MB).
MIN_BYTES = 65536
#: Element types a weight may have outside the module: those numpy shares with TVM over DLPack.
DTYPES = frozenset(
    ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
)


def nbytes(dtype: str, shape: Sequence[int]) -> int:
    """The bytes of an array of ``dtype`` (one of ``DTYPES``) and ``shape`` (Python integers: no overflow)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def liftable(dtype: str, shape: Sequence[int]) -> bool:
    """Whether a constant of ``dtype`` and ``shape`` leaves the module."""
    return dtype in DTYPES and nbytes(dtype, shape) >= MIN_BYTES


def aligned_empty(nbytes: int) -> np.ndarray:
    """A new uint8 buffer of ``nbytes`` whose data starts at a multiple of ``ALIGNMENT``."""
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    # The address through DLPack: 0.2 us, where ``raw.ctypes.data`` takes 0.8 (inputs are staged per call).
    offset = -tvm_ffi.from_dlpack(raw).data_ptr() % ALIGNMENT
    return raw[offset : offset + nbytes]


def layout(arrays: Sequence[np.ndarray]) -> tuple[int, list[list]]:
    """The blob's size and a ``[dtype, shape, offset]`` record per array: each at the next aligned offset."""
    records, size = [], 0
    for array in arrays:
        size += -size % ALIGNMENT
        records.append([str(array.dtype), [int(d) for d in array.shape], size])
        size += array.nbytes
    return size, records


def pack(arrays: Sequence[np.ndarray]) -> tuple[list, list[list]]:
    """The arrays laid out as the cache's blob, as the pieces to write one after the other (``cache.pack``
    takes such a list as one blob), and their records. Nothing is copied: a model's weights (hundreds of
    MB) are read once to hash and once to write them; the padding is zeros, so the bytes are a function
    of the model."""
    _, records = layout(arrays)
    pieces: list = []
    end = 0
    for array, (_, _, offset) in zip(arrays, records):
        if offset > end:
            pieces.append(bytes(offset - end))
        pieces.append(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        end = offset + array.nbytes
    return pieces, records


def check_records(records: object, blob_size: int) -> list[list]:
    """``records`` as read from a cache's metadata, each checked to lie inside a blob of ``blob_size``
    bytes at an aligned offset; ``ValueError`` naming the first that does not."""
    if not isinstance(records, list):
        raise ValueError(f"weights must be a list of [dtype, shape, offset], got {type(records).__name__}")
    checked = []
    for k, record in enumerate(records):
        try:
            dtype, shape, offset = record
            dtype, shape, offset = str(dtype), [int(d) for d in shape], int(offset)
        except (TypeError, ValueError):
            raise ValueError(f"weight {k}: {record!r} is not [dtype, shape, offset]") from None
        if dtype not in DTYPES or any(d < 0 for d in shape) or offset < 0 or offset % ALIGNMENT:
            raise ValueError(
                f"weight {k}: {record!r} has an unknown element type, a negative size or a misaligned offset"
            )
        if offset + nbytes(dtype, shape) > blob_size:
            raise ValueError(f"weight {k}: {record!r} ends past the weights' {blob_size} bytes")
        checked.append([dtype, shape, offset])
    return checked


def views(blob: np.ndarray | memoryview | bytes, records: Sequence[list]) -> list[np.ndarray]:
    """Each weight as an array over ``blob`` (no copy), from records ``check_records`` passed."""
    data = blob if isinstance(blob, np.ndarray) else np.frombuffer(blob, np.uint8)
    return [data[offset : offset + nbytes(dtype, shape)].view(dtype).reshape(shape) for dtype, shape, offset in records]


def host_tensors(arrays: Sequence[np.ndarray]) -> tvm_ffi.Array:
    """The tuple ``main`` takes: a CPU tensor per array, sharing its memory where it is aligned and
    writable (a view of the mapped cache), else over an aligned copy (a cache handed over as bytes)."""
    tensors = []
    for array in arrays:
        if not (array.flags.writeable and array.flags.c_contiguous and array.ctypes.data % ALIGNMENT == 0):
            copy = aligned_empty(array.nbytes).view(array.dtype).reshape(array.shape)
            np.copyto(copy, array)
            array = copy
        tensors.append(tvm_ffi.from_dlpack(array))
    return tvm_ffi.convert(tensors)
