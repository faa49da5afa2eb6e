"""``llvm``: the host CPU."""

from __future__ import annotations

import tvm
from nnadapter_tvm.targets.base import Driver, Property


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


class LlvmDriver(Driver):
    name = "llvm"
    properties = (
        Property("LLVM_MCPU", "CPU model for code generation, e.g. skylake-avx512 (default: the host's)", str),
        Property("LLVM_MATTR", "comma-separated LLVM features, e.g. +avx2,+fma", _csv),
    )

    def can_run_here(self) -> tuple[bool, str]:
        return True, "host CPU"

    def tvm_target(self, props: dict) -> tvm.target.Target:
        config: dict = {"kind": "llvm"}
        if props.get("LLVM_MCPU"):
            config["mcpu"] = props["LLVM_MCPU"]
        if props.get("LLVM_MATTR"):
            config["mattr"] = list(props["LLVM_MATTR"])
        return tvm.target.Target(config)

    def tvm_device(self) -> tvm.runtime.Device:
        return tvm.cpu(0)
