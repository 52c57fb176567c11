"""Builds the C fast path with cffi; everything else lives in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["native/build_fastpath.py:ffibuilder"])
