"""Operand slots: how an operation's schema names its operands and the precisions each takes.

``Arg`` is one slot, ``OpSchema`` an operation's inputs and outputs in order; the precision groups below
are the sets the spec's appendix uses. ``Model.add_operation`` validates operands against an operation's
schema and converters read operands by its slot names.
"""

from __future__ import annotations

import dataclasses

from nnadapter_tvm.precision import Precision as P

F32 = (P.FLOAT32,)
F32_Q8 = (P.FLOAT32, P.QUANT_INT8_SYMM_PER_LAYER)
# Extension beyond the spec's CONV_2D and FULLY_CONNECTED: activations quantized to uint8 with a zero point
# as well (QDQ models' activations, Paddle Lite's ASYMM_QUANT_UINT8 drivers), computed on integers
# (op_converters/quant_integer.py).
F32_Q8_U8 = (P.FLOAT32, P.QUANT_INT8_SYMM_PER_LAYER, P.QUANT_UINT8_ASYMM_PER_LAYER)
F32_INT32 = (P.FLOAT32, P.INT32)
F32_INT32_Q8 = (P.FLOAT32, P.INT32, P.QUANT_INT8_SYMM_PER_LAYER)
F32_INT_Q8 = (P.FLOAT32, P.INT32, P.INT64, P.QUANT_INT8_SYMM_PER_LAYER)
INT32 = (P.INT32,)
INT32_64 = (P.INT32, P.INT64)
BOOL = (P.BOOL8,)
FLOAT_SCALAR = (P.FLOAT32,)
# Filters of CONV_2D-like operations may also be quantized per channel.
FILTER = (P.FLOAT32, P.QUANT_INT8_SYMM_PER_LAYER, P.QUANT_INT8_SYMM_PER_CHANNEL)
BIAS = (P.FLOAT32, P.QUANT_INT32_SYMM_PER_LAYER, P.QUANT_INT32_SYMM_PER_CHANNEL)
# Inputs of the comparisons (EQUAL, GREATER, ...), which all give BOOL8.
COMPARABLE = (P.FLOAT32, P.BOOL8, P.INT32, P.INT64, P.QUANT_INT8_SYMM_PER_LAYER)
CASTABLE = (P.BOOL8, P.INT8, P.UINT8, P.INT16, P.INT32, P.INT64, P.FLOAT16, P.FLOAT32, P.FLOAT64)
FILL_VALUE = (P.FLOAT32, P.INT32, P.INT64, P.BOOL8)
# The spec also names QUANT_UINT8_ASYMM_PER_CHANNEL, which the precision enum does not have.
QUANT8 = (P.QUANT_INT8_SYMM_PER_LAYER, P.QUANT_INT8_SYMM_PER_CHANNEL, P.QUANT_UINT8_ASYMM_PER_LAYER)
ANY = ()  # no precision restriction beyond what the converter checks
INT8_UINT8 = (P.INT8, P.UINT8)  # the integer operands of CONV_2D_INTEGER and MAT_MUL_INTEGER


@dataclasses.dataclass(frozen=True)
class Arg:
    """One operand slot.  ``precisions`` empty means any precision."""

    name: str
    precisions: tuple[P, ...] = ANY
    optional: bool = False
    variadic: bool = False  # this slot takes 1..n operands (e.g. CONCAT's inputs)
    same_as: str | None = None  # must have the same precision as the named input


@dataclasses.dataclass(frozen=True)
class OpSchema:
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]

    def input_index(self, name: str) -> int:
        return [a.name for a in self.inputs].index(name)
