"""cffi bindings over the committed C header ``include/torchtpu.h``.

The declarations are read from the header itself (minus preprocessor
lines), so the Python side cannot drift from the ABI. The library is found
through ``$TORCHTPU_LIB``, next to this package, or in the repository's
``target/release``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import cffi

_PKG = Path(__file__).resolve().parent
_REPO = _PKG.parents[2]


def _find_header() -> Path:
    for p in (_PKG / "include" / "torchtpu.h", _REPO / "include" / "torchtpu.h"):
        if p.exists():
            return p
    raise ImportError(f"torchtpu.h not found next to {_PKG} or in {_REPO / 'include'}")


def _cdef_source(text: str) -> str:
    """The header as cffi's cdef accepts it: no comments, no preprocessor
    lines except integer #defines, no C++-only blocks, and no deprecation
    attributes (`TTPU_DEPRECATED("...")` before a declaration)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'TTPU_DEPRECATED\("[^"]*"\)\s*', "", text)
    out = []
    cplusplus_only = False
    for line in text.splitlines():
        line = re.sub(r"//.*", "", line)
        s = line.strip()
        if s.startswith("#ifdef __cplusplus"):
            cplusplus_only = True
            continue
        if s.startswith("#endif"):
            cplusplus_only = False
            continue
        if cplusplus_only:
            continue
        if s.startswith("#"):
            m = re.match(r"#define\s+(\w+)\s+(-?\d+)\s*$", s)
            if m:
                out.append(f"#define {m.group(1)} {m.group(2)}")
            continue
        out.append(line)
    return "\n".join(out)


def _find_library() -> Path:
    candidates = []
    if os.environ.get("TORCHTPU_LIB"):
        candidates.append(Path(os.environ["TORCHTPU_LIB"]))
    candidates += [_PKG / "libtorchtpu.so", _REPO / "target" / "release" / "libtorchtpu.so"]
    for p in candidates:
        if p.exists():
            return p
    tried = "\n  ".join(str(p) for p in candidates)
    raise ImportError(f"libtorchtpu.so not found. Tried:\n  {tried}\nBuild it with `scripts/setup.sh` or set TORCHTPU_LIB.")


ffi = cffi.FFI()
ffi.cdef(_cdef_source(_find_header().read_text()))
LIB_PATH = _find_library()
lib = ffi.dlopen(str(LIB_PATH))


class TorchTPUError(RuntimeError):
    """An error from libtorchtpu, carrying its abseil status code."""

    code = 2

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message


class InvalidArgumentError(TorchTPUError, ValueError):
    code = 3


class DeadlineExceededError(TorchTPUError, TimeoutError):
    """A call ran out of its time or fuel (e.g. a plugin that loops)."""

    code = 4


class NotFoundError(TorchTPUError, LookupError):
    code = 5


class ResourceExhaustedError(TorchTPUError):
    code = 8


class FailedPreconditionError(TorchTPUError):
    code = 9


class AbortedError(TorchTPUError):
    """The call was aborted (e.g. a plugin trapped)."""

    code = 10


class OutOfRangeError(TorchTPUError, IndexError):
    code = 11


class UnimplementedError(TorchTPUError, NotImplementedError):
    code = 12


class InternalError(TorchTPUError):
    code = 13


_BY_CODE = {c.code: c for c in (InvalidArgumentError, DeadlineExceededError, NotFoundError, ResourceExhaustedError,
                                  FailedPreconditionError, AbortedError, OutOfRangeError, UnimplementedError,
                                  InternalError)}


def check(err) -> None:
    """Raises the exception for an error pointer (and frees it); NULL is success."""
    if err == ffi.NULL:
        return
    code = int(lib.ttpu_error_code(err))
    message = ffi.string(lib.ttpu_error_message(err)).decode("utf-8", "replace")
    lib.ttpu_error_destroy(err)
    raise _BY_CODE.get(code, TorchTPUError)(message, code)
