"""What a CPU target offers the schedules: SIMD lanes and registers, and the block and tile sizes derived
from them (the channel block a packed weight is laid out in, the rows of a register tile)."""

from __future__ import annotations

import tvm
from tvm.target import codegen

#: The register tile's rows along a symbolic axis (see ``symbolic_tile``).
SYMBOLIC_TILE = 8


def _has(feature: str, target: tvm.target.Target) -> bool:
    try:
        return bool(codegen.target_has_features(feature, target))
    except Exception:  # a target LLVM cannot describe: assume the baseline
        return False


def vector_lanes(target: tvm.target.Target, dtype_bits: int = 32) -> int:
    """SIMD lanes of ``dtype_bits`` elements: 512-bit vectors with AVX-512, 256 with AVX2, else 128."""
    if _has("avx512f", target):
        bits = 512
    elif _has("avx2", target) or _has("avx", target):
        bits = 256
    else:
        bits = 128  # NEON, SSE
    return max(bits // dtype_bits, 1)


def has_fma(target: tvm.target.Target) -> bool:
    """Fused multiply-add on vectors: x86's FMA3 (AVX2 machines on), every aarch64."""
    mtriple = str(target.attrs.get("mtriple", ""))
    return _has("fma", target) or mtriple.startswith(("aarch64", "arm64"))


def vector_registers(target: tvm.target.Target) -> int:
    """Architectural SIMD registers (32 on AVX-512 and aarch64, 16 on AVX2/SSE)."""
    if _has("avx512f", target) or _has("neon", target):
        return 32
    mtriple = str(target.attrs.get("mtriple", ""))
    return 32 if mtriple.startswith(("aarch64", "arm64")) else 16


def first_divisor(extent: int, candidates: list[int]) -> int:
    """The first of ``candidates`` that divides ``extent`` (1 if none)."""
    return next((c for c in candidates if c >= 1 and extent % c == 0), 1)


def channel_block(extent: int, lanes: int) -> int:
    """The block of a channel (or column) axis that the packed weight and the register tile use: two
    vectors, one, half or a quarter of one, or 2, whichever divides ``extent`` first."""
    return first_divisor(extent, [2 * lanes, lanes, lanes // 2, lanes // 4, 2])


def vector_padded(extent: int, lanes: int) -> int:
    """``extent`` rounded up to whole vectors when it spans more than one and is not a multiple: a channel
    count like 1000 is padded (zero weights, the extra outputs sliced off) rather than blocked 8-wide."""
    return -(-extent // lanes) * lanes if extent > lanes and extent % lanes else extent


def tile_budget(registers: int, vectors: int) -> int:
    """Rows a register tile of ``vectors`` SIMD vectors per row may have: its accumulators take all
    registers but 4 (left for the operands of the tile's multiply-adds)."""
    return max((registers - 4) // vectors, 1)


def symbolic_tile(registers: int, vectors: int) -> int:
    """Register-tile rows (output pixels of a row, matrix rows) for an extent known only at run time.

    A static extent gets the largest divisor within the register budget (``row_tile``); a symbolic
    one is rounded up to a multiple of this tile instead (see ``compute.padded``), so the tile is kept
    short: at most ``SYMBOLIC_TILE - 1`` rows wasted per row of output.  8 divides the widths of inputs
    sized in multiples of 32 (OCR, detectors: 16, 32, 40, 80...) and of 224-pixel inputs down to 56; 7,
    14 and 28 compute 14% extra.  7 (the 224-input widths exactly) computed 16 columns as 21 (+31%: a
    64x64 classifier measured 1.18x); 4 lost up to 1.4x on a grouped conv (too few accumulators)."""
    return min(tile_budget(registers, vectors), SYMBOLIC_TILE)


def padded_rows(extent: int, budget: int, lo: int = 4) -> int:
    """A static extent that no register tile of ``lo`` to ``budget`` rows divides, rounded up to the multiple
    of the tile in that range that wastes least (the largest tile on a tie); else ``extent`` itself.

    The tile of such an extent was one row (``row_tile``): ViT's 197 tokens (prime) ran its products at
    a quarter of the tiled speed, and with AVX2's budget of 6 rows a 7- or 14-pixel row of output (deep
    3x3 convolutions) had one-column tiles.  Padded (clamped reads, then a crop: ``compute.padded``),
    197 computes 198 rows in tiles of 11 (AVX-512) and 7 computes 8 in tiles of 4 (AVX2)."""
    if budget < lo or extent <= budget or row_tile(extent, budget, lo) >= lo:
        return extent
    tile = min(range(lo, budget + 1), key=lambda t: (-(-extent // t) * t, -t))
    return -(-extent // tile) * tile


def row_tile(extent: int | None, budget: int, lo: int = 4) -> int:
    """Rows of a register tile: the largest divisor of ``extent`` within ``budget`` (at least ``lo``
    when one exists), or ``extent`` itself when it is small."""
    if extent is None:
        return 1
    if extent <= budget:
        return extent
    best = max((d for d in range(1, budget + 1) if extent % d == 0), default=1)
    return best if best >= lo else 1
