"""Helpers that raise ``NNAdapterError`` with messages naming what was wrong."""

from __future__ import annotations

from typing import NoReturn

from nnadapter_tvm.types import NNAdapterError, ResultCode


def fail(message: str, code: ResultCode = ResultCode.INVALID_PARAMETER) -> NoReturn:
    raise NNAdapterError(code, message)


def check(condition: object, message: str, code: ResultCode = ResultCode.INVALID_PARAMETER) -> None:
    if not condition:
        fail(message, code)
