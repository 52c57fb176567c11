"""Builds the C fast path with cffi; everything else lives in pyproject.toml.

Two plain extensions are Python entry points where a cffi call's own cost mattered:
native._crc32c for CRC-32C (a cffi call costs twice a METH_FASTCALL one, which lost to
the crc32c package at 1 KiB) and native._append for the append path (the cffi call and
reading its answer back were a tenth of a 16 KiB append). They hold no CRC or append
code (see native/crc32c_py.c and native/append_py.c).
"""

from setuptools import Extension, setup

setup(
    cffi_modules=["native/build_fastpath.py:ffibuilder"],
    ext_modules=[Extension("native._crc32c", ["native/crc32c_py.c"],
                           extra_compile_args=["-O2", "-Wall", "-Wextra"]),
                 Extension("native._append", ["native/append_py.c"], include_dirs=["native"],
                           depends=["native/fastpath.h"],
                           extra_compile_args=["-O2", "-Wall", "-Wextra",
                                               "-Wno-unused-parameter"])],
)
