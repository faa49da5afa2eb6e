"""One module per TVM target; ``DRIVERS`` is the device registry the runtime reads."""

from nnadapter_tvm.properties import Property
from nnadapter_tvm.targets.arm import ArmDriver
from nnadapter_tvm.targets.base import Driver, Program
from nnadapter_tvm.targets.cuda import CudaDriver
from nnadapter_tvm.targets.llvm import LlvmDriver
from nnadapter_tvm.targets.opencl import OpenclDriver

DRIVERS: dict[str, Driver] = {d.name: d for d in (LlvmDriver(), ArmDriver(), CudaDriver(), OpenclDriver())}

__all__ = ["DRIVERS", "Driver", "Program", "Property"]
