"""``Context``: the devices of a compilation and their ``KEY=VALUE;`` properties."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from nnadapter_tvm.device import Device
from nnadapter_tvm.errors import check, fail
from nnadapter_tvm.properties import switch
from nnadapter_tvm.runtime.tuning_database import TUNING_DATABASE
from nnadapter_tvm.targets import DRIVERS, Property
from nnadapter_tvm.targets.base import TVM_NUM_THREADS, TVM_OPT_LEVEL
from nnadapter_tvm.types import OperationType


class CacheKey(bytes):
    """The HMAC key for signing caches; never printed."""

    def __repr__(self) -> str:
        return "<cache key>"

    __str__ = __repr__


def _key_file(path: str) -> CacheKey:
    try:
        with open(os.path.expanduser(path), "rb") as f:
            key = f.read().strip()
    except OSError as err:
        raise ValueError(f"cannot read the key file ({err.strerror})") from None
    if not key:
        raise ValueError("the key file is empty")
    return CacheKey(key)


def _key_env(name: str) -> CacheKey:
    key = os.environ.get(name, "").encode()
    if not key:
        raise ValueError(f"environment variable {name} is unset or empty")
    return CacheKey(key)


CACHE_KEY_FILE = Property(
    "CACHE_KEY_FILE", "file holding the HMAC-SHA256 key that signs and checks .nnc caches", _key_file, codegen=False
)
CACHE_KEY_ENV = Property("CACHE_KEY_ENV", "environment variable holding the cache signing key", _key_env, codegen=False)
CACHE_WEIGHTS_IN_PLACE = Property(
    "CACHE_WEIGHTS_IN_PLACE",
    "1: a model loaded from a cache file reads its weights from the mapped file for as long as it runs (no copy; "
    "a file changed in place afterwards changes them, a truncated one crashes the process); 0: they are copied "
    "into the process's memory at load (default: 1, and 0 where CACHE_KEY_FILE or CACHE_KEY_ENV is set: a "
    "signature is checked once, at load)",
    switch,
    codegen=False,
)

#: The properties every context accepts, whatever its devices. Each device's own are in its driver's
#: ``properties``. A setting is read as ``PROPERTY.read(context.properties)`` (typed, or its default).
COMMON_PROPERTIES = (
    TVM_OPT_LEVEL,
    TVM_NUM_THREADS,
    CACHE_KEY_FILE,
    CACHE_KEY_ENV,
    CACHE_WEIGHTS_IN_PLACE,
    TUNING_DATABASE,
)


def _operations(text: str) -> frozenset[OperationType]:
    names = [n.strip().upper() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in OperationType.__members__]
    if unknown:
        raise ValueError(f"unknown operation(s) {', '.join(unknown)}")
    return frozenset(OperationType[n] for n in names)


# Keys with a device position <i> (0-based, in the context's device list): they restrict which
# operations that device accepts, e.g. to force a multi-device split.
INDEXED_PROPERTIES = (
    (
        re.compile(r"DEVICE_(\d+)_SUPPORTED_OPERATIONS"),
        Property(
            "DEVICE_<i>_SUPPORTED_OPERATIONS", "comma-separated operations device <i> may run (only these)", _operations
        ),
    ),
    (
        re.compile(r"DEVICE_(\d+)_UNSUPPORTED_OPERATIONS"),
        Property(
            "DEVICE_<i>_UNSUPPORTED_OPERATIONS", "comma-separated operations device <i> must not run", _operations
        ),
    ),
)


def _indexed_property(key: str) -> Property | None:
    return next((prop for pattern, prop in INDEXED_PROPERTIES if pattern.fullmatch(key)), None)


def known_properties() -> dict[str, Property]:
    """Every key a context accepts: the common ones and each device's own."""
    props = {p.key: p for p in COMMON_PROPERTIES}
    for driver in DRIVERS.values():
        props.update({p.key: p for p in driver.properties})
    return props


def parse_properties(text: str) -> dict[str, object]:
    """``"K1=V1;K2=V2;"`` -> {K1: parsed V1, ...}; unknown keys and bad values fail by name.

    The common properties' defaults are filled in (they apply to every context, and so enter its
    codegen properties and token whether given or not); a device's own defaults are left to
    ``Property.read``, so that one device's settings stay out of another's token."""
    known = known_properties()
    result: dict[str, object] = {p.key: p.default for p in COMMON_PROPERTIES if p.default is not None}
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        check(sep, f"context property {item!r} is not KEY=VALUE")
        prop = known.get(key) or _indexed_property(key)
        if prop is None:
            fail(f"unknown context property {key!r}; known: {', '.join(sorted(known))}")
        try:
            result[key] = prop.parse(value)
        except ValueError as err:
            fail(f"context property {key}={value!r}: {err} ({prop.description})")
    return result


class Context:
    """``NNAdapterContext``: devices in priority order plus properties."""

    def __init__(self, devices: Sequence[Device] | Device, properties: str = ""):
        devices = [devices] if isinstance(devices, Device) else list(devices)
        check(devices, "a context needs at least one device")
        for d in devices:
            check(isinstance(d, Device), f"context devices must be Device objects, got {d!r}")
            check(not d.released, f"device {d.name} was released")
        self.devices = devices
        self.properties_text = properties or ""
        self.properties = parse_properties(self.properties_text)
        for key in self.properties:
            match = re.fullmatch(r"DEVICE_(\d+)_\w+", key)
            if match and int(match.group(1)) >= len(devices):
                fail(f"context property {key}: the context has {len(devices)} device(s), numbered from 0")

    def codegen_properties(self) -> dict[str, object]:
        known = known_properties()
        return {k: v for k, v in sorted(self.properties.items()) if (known.get(k) or _indexed_property(k)).codegen}

    @property
    def cache_key(self) -> CacheKey | None:
        """The signing key, when CACHE_KEY_FILE or CACHE_KEY_ENV names one."""
        return CACHE_KEY_FILE.read(self.properties) or CACHE_KEY_ENV.read(self.properties)

    @property
    def weights_in_place(self) -> bool:
        """Whether a cached load leaves the weights in the mapped file (CACHE_WEIGHTS_IN_PLACE)."""
        value = CACHE_WEIGHTS_IN_PLACE.read(self.properties)
        return self.cache_key is None if value is None else value

    def device_accepts(self, index: int, op_type: OperationType) -> bool:
        only = self.properties.get(f"DEVICE_{index}_SUPPORTED_OPERATIONS")
        never = self.properties.get(f"DEVICE_{index}_UNSUPPORTED_OPERATIONS", frozenset())
        return (only is None or op_type in only) and op_type not in never

    def destroy(self) -> None:
        self.devices = []

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
