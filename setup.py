"""Builds the C fast path with cffi; everything else lives in pyproject.toml.

The one plain extension, native._crc32c, is CRC-32C's Python entry point: a cffi call
costs twice a METH_FASTCALL one, which lost to the crc32c package at 1 KiB. It holds no
CRC code (see native/crc32c_py.c).
"""

from setuptools import Extension, setup

setup(
    cffi_modules=["native/build_fastpath.py:ffibuilder"],
    ext_modules=[Extension("native._crc32c", ["native/crc32c_py.c"],
                           extra_compile_args=["-O2", "-Wall", "-Wextra"])],
)
