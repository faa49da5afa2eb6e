"""One module per TVM target; ``DRIVERS`` is the device registry the runtime reads."""

from nnadapter_tvm.targets.base import Driver, Program, Property
from nnadapter_tvm.targets.llvm import LlvmDriver

DRIVERS: dict[str, Driver] = {d.name: d for d in (LlvmDriver(),)}

__all__ = ["DRIVERS", "Driver", "Program", "Property"]
