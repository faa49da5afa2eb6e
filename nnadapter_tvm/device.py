"""Devices: ``Device.acquire(name)`` over the drivers registered in ``targets``."""

from __future__ import annotations

from nnadapter_tvm.errors import fail
from nnadapter_tvm.targets import DRIVERS, Driver
from nnadapter_tvm.types import DeviceType, ResultCode


def list_devices() -> list[str]:
    """Names accepted by ``Device.acquire``."""
    return list(DRIVERS)


class Device:
    """An acquired device (``NNAdapterDevice``)."""

    def __init__(self, driver: Driver):
        self.driver = driver
        self.released = False

    @classmethod
    def acquire(cls, name: str) -> Device:
        driver = DRIVERS.get(name)
        if driver is None:
            fail(f"no device named {name!r}; available: {', '.join(DRIVERS)}", ResultCode.DEVICE_NOT_FOUND)
        return cls(driver)

    @staticmethod
    def check(name: str) -> bool:
        return name in DRIVERS

    @property
    def name(self) -> str:
        return self.driver.name

    @property
    def vendor(self) -> str:
        return self.driver.vendor

    @property
    def type(self) -> DeviceType:
        return self.driver.type

    @property
    def version(self) -> int:
        return self.driver.version

    def release(self) -> None:
        self.released = True

    destroy = release

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<Device {self.driver.describe()}>"
