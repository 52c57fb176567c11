"""Streaming scan of a `.log` file through one fixed buffer and the native batch scan.

Recovery, `verify` (dump-log, the Spark audit) and the log's own lookups walk batches
here, so the rules for a torn tail versus corruption live in one place: a batch that
runs past the end of the file is a torn tail; any other stop is corruption. A batch
larger than the buffer grows the buffer to that batch only. OSErrors propagate (the
caller runs this inside its IoGuard or reports them itself).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

import native
from native import BatchInfo, ScanResult, ScanStatus

DEFAULT_BUFFER = 1 << 20
_LENGTH = struct.Struct(">qi")


@dataclass(frozen=True)
class FileScan:
    """How a scan of [start, file_size) ended."""

    file_size: int
    valid_end: int  # file position just past the last whole valid batch
    status: ScanStatus  # OK, TORN (torn tail) or the corruption found
    detail: str
    stored_crc: int = 0
    computed_crc: int = 0
    bad_value: int = 0

    @property
    def clean(self) -> bool:
        return self.status is ScanStatus.OK

    @property
    def error_position(self) -> int | None:
        return None if self.clean else self.valid_end


def scan_file(
    fd: int,
    *,
    start: int = 0,
    end: int | None = None,
    buffer_size: int = DEFAULT_BUFFER,
    verify_crc: bool = True,
    on_batches: Callable[[ScanResult], int | None] | None = None,
    path: str | None = None,
    max_batch_size: int = 1 << 30,
    on_bad_crc: Callable[[BatchInfo, ScanResult], None] | None = None,
    legacy: bool = False,
) -> FileScan:
    """Scan batches in fd from `start` to `end` (default: the file size).

    `legacy`: old Kafka's magic 0/1 messages are batches of their own (the log's own
    walks: recovery, lookups), where without it they stop the scan with status LEGACY
    (verify reports them).

    `on_batches` gets each chunk's ScanResult (its batches' positions are file
    positions); returning a file position stops the scan there, with status OK and
    `valid_end` that position.

    A batch whose CRC fails ends the scan (recovery cuts there), unless `on_bad_crc` is
    given: then a batch whose framing is intact (length, magic, counts: what Kafka's
    batch iterator checks) is passed to it, with the failed chunk's ScanResult (its
    CRCs and detail), and the scan goes on after it, as Kafka's DumpLogSegments does.
    The result then says how the scan ended past such batches.
    """
    file_size = os.fstat(fd).st_size if end is None else end
    buf = bytearray(max(buffer_size, 64))
    pos = start
    while pos < file_size:
        want = min(len(buf), file_size - pos)
        view = memoryview(buf)[:want]
        got = native.pread_into(fd, view, pos, path=path)
        if got < want:  # the file shrank under us: what is there is all there is
            file_size = pos + got
            view = view[:got]
        res = native.scan_batches(view, base_position=pos, verify_crc=verify_crc,
                                  legacy=legacy)
        if len(res) and on_batches is not None:
            stop = on_batches(res)
            if stop is not None:
                return FileScan(file_size, stop, ScanStatus.OK, "stopped early")
        pos += res.valid_bytes
        if res.status is ScanStatus.OK:
            continue
        if res.status is ScanStatus.BAD_CRC and on_bad_crc is not None:
            framed = native.scan_batches(view[res.valid_bytes:], base_position=pos,
                                         verify_crc=False, max_batches=1, legacy=legacy)
            if len(framed) == 1:
                on_bad_crc(framed[0], res)
                pos += framed[0].size
                continue
        if res.status is not ScanStatus.TORN:
            return FileScan(file_size, pos, res.status, res.detail, res.stored_crc,
                            res.computed_crc, res.bad_value)
        # TORN inside this chunk: either the chunk ended mid-batch (read on), or the
        # batch runs past the end of the file (a torn tail).
        left = file_size - pos
        if left < 17:
            return FileScan(file_size, pos, ScanStatus.TORN,
                            f"torn tail: {left} bytes at {pos}, less than a batch header")
        header = native.pread(fd, 12, pos, path=path)
        _, batch_length = _LENGTH.unpack(header)
        size = batch_length + 12
        if size > left:
            return FileScan(file_size, pos, ScanStatus.TORN,
                            f"torn tail: batch of {size} bytes at {pos}, {left} bytes left in file")
        if size > max_batch_size:
            return FileScan(file_size, pos, ScanStatus.BAD_LENGTH,
                            f"batch at {pos} claims {size} bytes, over the {max_batch_size} limit",
                            bad_value=batch_length)
        if res.valid_bytes == 0 and size > len(buf):
            buf = bytearray(size)
    return FileScan(file_size, pos, ScanStatus.OK, "")
