"""The linker of aarch64 modules exported on another machine (``arm``, and ``opencl`` with ``OPENCL_HOST=aarch64``).

TVM writes the module's code as object files; exporting links them into the shared library a board
loads. On an x86 host that needs an aarch64 linker, found in this order:

1. ``$NNADAPTER_TVM_ARM_CXX``: a command (``my-aarch64-g++``, or with arguments, split like a shell
   would: ``python -m ziglang cc -target aarch64-linux-gnu.2.17``), or ``zig`` for the zig below;
2. the system cross compiler ``<triple>-g++`` (Debian's ``g++-aarch64-linux-gnu``), preferred when
   installed;
3. zig from the ``ziglang`` wheel (``pip install ziglang``): ``zig cc -target aarch64-linux-gnu.2.28``,
   a clang with the target's C library stubs built in, so nothing but pip is needed.

zig links with ``cc``, not ``c++``: TVM's generated objects reference only C symbols (libc, libm and the
TVM FFI's C API, resolved from the runtime when the board loads the module), the same ``NEEDED`` set
(``libm.so.6``, ``libc.so.6``) as Debian's g++ gives, and ``zig c++`` would build libc++ for nothing
(a minute and a half on first use). ``.2.28`` is the glibc the symbols are versioned against: the
apache-tvm aarch64 wheel is ``manylinux_2_28``, so any board that runs TVM's wheel has it, and it
binds ``expf`` to glibc 2.27's implementation as g++ does rather than the 2.17 compatibility wrapper.
zig links with ``-z now`` (g++ binds lazily): every undefined symbol must resolve when the module is
loaded, which TVM's runtime guarantees. Its first link for a target builds the C library stubs into
zig's cache (``~/.cache/zig``; about 15 s), later links take well under a second.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from nnadapter_tvm.errors import fail
from nnadapter_tvm.types import ResultCode

#: Overrides the aarch64 linker: a command, or ``zig`` for the ziglang wheel's zig.
CXX_ENV = "NNADAPTER_TVM_ARM_CXX"
#: The glibc version zig links against for ``*-linux-gnu`` triples (the apache-tvm wheel's manylinux_2_28).
ZIG_GLIBC = "2.28"
_INSTALL_HINT = "apt-get install g++-aarch64-linux-gnu, or pip install ziglang"


@dataclass(frozen=True)
class Linker:
    """An ``fcompile`` for ``export_library``: runs ``argv`` with ``-shared -fPIC -o OUTPUT`` as TVM's
    ``cc.create_shared`` does, but with a command of several words (``zig cc -target ...``), which TVM's
    own ``cc.cross_compiler(str)`` cannot run. A plain class so MetaSchedule's builder processes can
    pickle it."""

    argv: tuple[str, ...]
    #: Where it comes from, for messages: ``system``, ``zig`` or ``NNADAPTER_TVM_ARM_CXX``.
    origin: str = "system"

    def __call__(self, output: str, objects: str | list[str], options: list[str] | None = None) -> None:
        objects = [objects] if isinstance(objects, str) else list(objects)
        cmd = [*self.argv, "-shared", "-fPIC", "-o", output, *(options or []), *objects]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            # The same text as TVM's compiler errors: callers already turn those into NNAdapterErrors.
            out = proc.stdout.decode("utf-8", errors="replace")
            raise RuntimeError(f"Compilation error:\n{out}\nCommand line: {shlex.join(cmd)}")

    def __str__(self) -> str:
        return shlex.join(self.argv)


def zig_executable() -> str | None:
    """The ``zig`` binary of the ``ziglang`` wheel, None when the package is not installed."""
    spec = importlib.util.find_spec("ziglang")
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "zig")
    return path if os.access(path, os.X_OK) else None


def zig_target(triple: str) -> str | None:
    """zig's ``-target`` for an LLVM triple (``aarch64-linux-gnu`` -> ``aarch64-linux-gnu.2.28``,
    ``aarch64-unknown-linux-musl`` -> ``aarch64-linux-musl``); None where zig has no C library for it."""
    parts = triple.split("-")
    arch = {"arm64": "aarch64"}.get(parts[0], parts[0])
    if "linux" not in parts[1:]:
        return None
    abi = parts[-1] if parts[-1] != "linux" else "gnu"
    if abi == "gnu":
        return f"{arch}-linux-gnu.{ZIG_GLIBC}"
    if abi == "musl":
        return f"{arch}-linux-musl"
    return None


def zig_linker(triple: str) -> Linker | None:
    """zig from the ``ziglang`` wheel linking for ``triple``; None without the wheel or for a triple zig
    has no C library for."""
    zig, target = zig_executable(), zig_target(triple)
    if zig is None or target is None:
        return None
    return Linker((zig, "cc", "-target", target), origin="zig")


def cross_linker(triple: str, who: str, code: ResultCode = ResultCode.DEVICE_INTERNAL_ERROR) -> Linker:
    """The linker of ``triple`` code exported on another machine: ``$NNADAPTER_TVM_ARM_CXX``, else the
    system's ``<triple>-g++``, else the ``ziglang`` wheel's zig (see the module's docstring).

    ``who`` names the device in the error raised (with ``code``) when there is none, which gives both
    ways out: Debian's cross compiler and ``pip install ziglang``."""
    override = os.environ.get(CXX_ENV, "").strip()
    if override == "zig":
        linker = zig_linker(triple)
        if linker is None:
            why = "zig has no C library for it" if zig_target(triple) is None else "pip install ziglang"
            fail(f"{who}: {CXX_ENV}=zig asks for the ziglang wheel's zig to link {triple}, and it is not "
                 f"usable ({why})", code)  # fmt: skip
        return linker
    if override:
        # A path to a compiler (even one with spaces) is one word; anything else is a command line.
        argv = [override] if shutil.which(override) else shlex.split(override)
        if shutil.which(argv[0]) is None:
            fail(
                f"{who}: the aarch64 cross compiler {argv[0]!r} given by {CXX_ENV} is not on PATH: fix {CXX_ENV}, "
                f"or unset it to use {triple}-g++ or zig ({_INSTALL_HINT})",
                code,
            )
        return Linker(tuple(argv), origin=CXX_ENV)
    system = f"{triple}-g++"
    if shutil.which(system):
        return Linker((system,))
    linker = zig_linker(triple)
    if linker is not None:
        return linker
    hint = _INSTALL_HINT if zig_target(triple) else f"install {system} (zig has no C library for {triple})"
    fail(
        f"{who}: exporting {triple} code needs a cross compiler, and neither {system!r} is on PATH nor the "
        f"ziglang package installed: {hint} (or set {CXX_ENV} to a compiler command)",
        code,
    )
