"""``opencl``: placeholder until the targets issue lands (a helper replaces this file)."""

from __future__ import annotations

import tvm

from nnadapter_tvm.targets.base import Driver


class OpenclDriver(Driver):
    name = "opencl"

    def can_run_here(self) -> tuple[bool, str]:
        return False, "not implemented yet"

    def tvm_target(self, props: dict) -> tvm.target.Target:
        raise NotImplementedError

    def tvm_device(self) -> tvm.runtime.Device:
        raise NotImplementedError
