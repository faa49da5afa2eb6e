"""NNAdapter's operand precisions, with the values of upstream ``nnadapter.h`` (a module of its own: the
operation table below ``types`` names them)."""

from __future__ import annotations

from enum import IntEnum


class Precision(IntEnum):
    BOOL8 = 0
    INT8 = 1
    UINT8 = 2
    INT16 = 3
    UINT16 = 4
    INT32 = 5
    UINT32 = 6
    INT64 = 7
    UINT64 = 8
    FLOAT16 = 9
    FLOAT32 = 10
    FLOAT64 = 11
    QUANT_INT8_SYMM_PER_LAYER = 24
    QUANT_INT8_SYMM_PER_CHANNEL = 25
    QUANT_UINT8_ASYMM_PER_LAYER = 26
    QUANT_INT16_SYMM_PER_LAYER = 27
    QUANT_INT16_SYMM_PER_CHANNEL = 28
    QUANT_UINT16_ASYMM_PER_LAYER = 29
    QUANT_INT32_SYMM_PER_LAYER = 30
    QUANT_INT32_SYMM_PER_CHANNEL = 31
    QUANT_UINT32_ASYMM_PER_LAYER = 32
