"""Helpers that raise ``NNAdapterError`` with messages naming what was wrong."""

from __future__ import annotations

from typing import NoReturn

from nnadapter_tvm.types import NNAdapterError, ResultCode


def fail(message: str, code: ResultCode = ResultCode.INVALID_PARAMETER) -> NoReturn:
    raise NNAdapterError(code, message)


def check(condition: object, message: str, code: ResultCode = ResultCode.INVALID_PARAMETER) -> None:
    if not condition:
        fail(message, code)


# TVM 0.27 raises its errors through tvm-ffi as Python built-in exceptions (a bad shape is a
# ValueError, an internal check a tvm.error.InternalError, itself a RuntimeError).
# NNAdapterError derives from none of them, so catching these never swallows our own errors.
TVM_ERRORS: tuple[type[Exception], ...] = (RuntimeError, ValueError, TypeError, IndexError)


def tvm_error_text(err: BaseException) -> str:
    """What a TVM error says, for our messages: the last non-blank line of its text.

    TVM 0.27 (through tvm-ffi) puts a C++ traceback before the message, so the last line is the
    reason (``Check failed: ... ``); an exception without text is named by its type."""
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else type(err).__name__
