"""Speed of the C fast path against what a Python program would otherwise use, timed
in the same run (see conftest.py): CRC-32C vs the crc32c package, the batch scan vs a
bare crc32c pass over the same bytes, positional reads vs os.pread, and the space probe
vs os.statvfs and psutil.disk_usage.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c as crc32c_pkg
import psutil
import pytest

import native

HEADER = struct.Struct(">qiiBIhiqqqhii")


def make_batches(total: int, batch_size: int) -> bytes:
    """total bytes of valid magic-2 batches of batch_size each, CRCs from crc32c."""
    payload = bytes(range(256)) * (batch_size // 256 + 1)
    out = bytearray()
    for i in range(total // batch_size):
        body = payload[:batch_size - HEADER.size]
        batch = bytearray(HEADER.pack(i * 10, batch_size - 12, 0, 2, 0, 0, 9, 1_700_000_000_000,
                                      1_700_000_000_009, -1, -1, -1, 10) + body)
        struct.pack_into(">I", batch, 17, crc32c_pkg.crc32c(bytes(batch[21:])))
        out += batch
    return bytes(out)


@pytest.mark.parametrize("size", [256, 16 << 10, 1 << 20], ids=["256B", "16KiB", "1MiB"])
def test_crc32c_vs_package(ratio, size: int) -> None:
    data = os.urandom(size)
    assert native.crc32c(data) == crc32c_pkg.crc32c(data)
    # Tiny buffers are dominated by the cffi call (~0.2 us): reported, no target.
    target = None if size < 4096 else 1.0
    ratio(f"crc32c {size} B [{native.crc32c_active()}]", lambda: native.crc32c(data),
          lambda: crc32c_pkg.crc32c(data), target=target, unit_bytes=size,
          baseline_label="crc32c pkg")


def test_scan_4mib_of_16kib_batches_vs_crc_alone(ratio) -> None:
    data = make_batches(4 << 20, 16 << 10)
    res = native.scan_batches(data)
    assert res.status is native.ScanStatus.OK and len(res) == 256
    ratio("scan 4 MiB / 16 KiB batches", lambda: native.scan_batches(data),
          lambda: crc32c_pkg.crc32c(data), target=0.8, unit_bytes=len(data),
          baseline_label="crc32c pkg, same bytes")


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[int]:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(os.urandom(4 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def test_pread_1mib_vs_os_pread(ratio, segment: int) -> None:
    assert native.pread(segment, 1 << 20, 4096) == os.pread(segment, 1 << 20, 4096)
    ratio("pread 1 MiB (page cache)", lambda: native.pread(segment, 1 << 20, 4096),
          lambda: os.pread(segment, 1 << 20, 4096), target=0.9, unit_bytes=1 << 20,
          baseline_label="os.pread")


def test_space_probe_vs_statvfs(ratio, tmp_path: Path) -> None:
    where = str(tmp_path)
    ratio("space_probe latency vs statvfs", lambda: native.space_probe(where),
          lambda: os.statvfs(where), target=1.0, higher_is_better=False,
          baseline_label="os.statvfs")


def test_space_probe_vs_psutil(ratio, tmp_path: Path) -> None:
    where = str(tmp_path)
    ratio("space_probe latency vs psutil", lambda: native.space_probe(where),
          lambda: psutil.disk_usage(where), target=1.0, higher_is_better=False,
          baseline_label="psutil.disk_usage")
