"""cffi (API mode) builder of the C fast path, `native._fastpath`.

setup.py names `ffibuilder` in `cffi_modules`, so `pip install -e . --no-deps` (or any
pip install of the project) builds it; there is deliberately no second way to build, so
no stale copy of the module can shadow the installed one. The declarations come from
native/fastpath.h between the CDEF markers, so each one is written once; a header
without the markers fails the build with a message naming the file. Compiler errors
surface as the usual setuptools/cffi build failure.

The C files need no special flags: every SIMD function carries its own target
attribute and is only called after cpuid says the CPU (and OS) can run it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADER = HERE / "fastpath.h"
SOURCES = ("crc32c.c", "crc32c_x86.c", "scan.c", "index.c", "append.c", "lookup.c", "io.c",
           "probe.c", "records.c", "verify.c", "malloc.c")


def read_cdef(header: Path = HEADER) -> str:
    """The declarations between /* CDEF-BEGIN */ and /* CDEF-END */ of the header."""
    text = header.read_text()
    match = re.search(r"/\* CDEF-BEGIN \*/(.*?)/\* CDEF-END \*/", text, re.S)
    if match is None:
        raise RuntimeError(f"{header}: no /* CDEF-BEGIN */ ... /* CDEF-END */ block")
    return match.group(1)


def _rel(path: Path) -> str:
    # setuptools wants sources relative to the project root, the cwd of setup.py.
    return os.path.relpath(path, os.getcwd())


ffibuilder = FFI()
ffibuilder.cdef(read_cdef())
ffibuilder.set_source(
    "native._fastpath",
    '#include "fastpath.h"',
    sources=[_rel(HERE / name) for name in SOURCES],
    include_dirs=[_rel(HERE)],
    depends=[_rel(HERE / name) for name in ("fastpath.h", "internal.h", "crc32c_consts.h")],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)
