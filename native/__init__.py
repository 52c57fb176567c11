"""The C fast path of logkeeper: CRC-32C, record batch scans, the append path (one call
per append: `Appender`) and the segment state and indexes it keeps in C structs,
segment lookups for reads, whole-transfer file IO and log-directory probes, wrapped for
Python. This module is the only importer of the compiled `native._fastpath` (built by
native/build_fastpath.py from native/fastpath.h).

Errors: every C function returns -errno on failure; `_oserror` turns that into
`OSError(errno, "<strerror> (from <op>)", path)`, so Python picks the subclass
(FileNotFoundError, PermissionError, ...) and the message names the operation and,
when the caller passed it, the path. Bad Python arguments (a negative size, an
unknown CRC implementation name) raise ValueError before any C runs. A scan that finds
a torn or corrupt batch is a result (`ScanResult.status`), not an exception.

CRC-32C has one implementation per CPU class (CRC32C_IMPLS); the first `crc32c` call
times each one this CPU supports and keeps the fastest (`crc32c_active`,
`crc32c_calibration`). `crc32c_force` or the environment variable LOGKEEPER_CRC32C=<name>
pins one; an unknown or unsupported name there fails the import with ImportError.

Buffers go to C without copying: `bytes` directly, anything else with the buffer
protocol (bytearray, memoryview, mmap) through `ffi.from_buffer`. cffi releases the
GIL around every C call (crc32c, below 16 KiB, holds it: see native/crc32c_py.c), so
all functions here may be called from several threads;
the ones that take a buffer must not see it resized or written concurrently. The
segment and index states (`new_segment`, `new_index`) and an `Appender` belong to one
log, whose calls are serialised: they are not thread-safe.
"""

from __future__ import annotations

import enum
import errno
import os
import struct
from array import array
from collections.abc import Iterator
from operator import itemgetter
from typing import Any, NamedTuple, overload

try:
    from native import _append as _append_ext
    from native import _crc32c as _crc32c_ext
    from native._fastpath import ffi as _ffi
    from native._fastpath import lib as _lib
except ImportError as err:  # pragma: no cover - only on a tree that was never built
    raise ImportError(
        "native._fastpath is not built: run `pip install -e . --no-deps` in the repo root "
        "(needs gcc and the Python headers)"
    ) from err

__all__ = [
    "CRC32C_IMPLS", "INDEX_ADDED", "INDEX_FULL", "INDEX_PENDING_BYTES", "INDEX_SKIPPED",
    "LEGACY_MIN_SIZE", "ROLL_BASE_UNKNOWN", "AppendStatus", "Appender", "Crc32cCalibration", "BatchInfo",
    "FINGERPRINT_SIZE", "ScanResult", "ScanStatus",
    "Space", "VerifyWalk", "address_of", "ascending", "assign_offsets",
    "availability_probe", "batches_end", "crc32c", "crc32c_active", "crc32c_calibration",
    "crc32c_force", "crc32c_supported", "crc32c_using", "decode_offset_index", "find_batch",
    "read_range",
    "fallocate", "fdatasync", "holds_compressed", "index_add", "index_batch", "index_flush", "index_map",
    "index_pending", "index_search", "index_truncate", "index_unmap", "malloc_arena_max",
    "new_index", "new_segment", "parse_records", "pread", "pread_into", "pwrite_all", "scan_batches",
    "space_probe", "write_all",
]

Buffer = Any  # bytes, bytearray, memoryview, mmap: anything with the buffer protocol
PathArg = str | os.PathLike[str] | None

BATCH_HEADER_SIZE = 61
FINGERPRINT_SIZE = 32  # ScanResult.fingerprints: 4 big-endian int64s a batch
LEGACY_MIN_SIZE = 26  # the smallest legacy (magic 0) message: 12 + messageSize 14
# Big arrays of batch infos are malloc'd without zeroing: the scan writes every entry
# it reports, and clearing an upper-bound array would cost more than the scan itself.
_alloc_uncleared = _ffi.new_allocator(should_clear_after_alloc=False)


def _oserror(rc: int, op: str, path: PathArg = None) -> OSError:
    """The OSError for a C function's -errno `rc`, naming `op` and `path`."""
    code = -rc
    where = os.fspath(path) if path is not None else None
    return OSError(code, f"{os.strerror(code)} (from {op})", where)


def _cbuf(data: Buffer) -> tuple[Any, int]:
    """`data` as something a `const uint8_t *` parameter takes, and its length in bytes."""
    if type(data) is bytes:
        return data, len(data)
    cdata = _ffi.from_buffer(data)
    return cdata, len(cdata)


def _wbuf(buf: Buffer, op: str) -> tuple[Any, int]:
    """Like _cbuf for a buffer C writes into; TypeError (as readinto) when read-only."""
    try:
        cdata = _ffi.from_buffer(buf, require_writable=True)
    except BufferError as err:
        raise TypeError(f"{op} needs a writable buffer, got {type(buf).__name__}") from err
    return cdata, len(cdata)


# ---- CRC-32C ----------------------------------------------------------------------

# In fastpath.h's LK_CRC_* order: by CPU class, roughly slowest to fastest.
CRC32C_IMPLS: tuple[str, ...] = (
    "portable", "sse42", "sse42_clmul", "pclmul", "pclmul_sse42", "sse42_pclmul",
    "vpclmul256", "vpclmul256_sse42", "sse42_vpclmul256", "vpclmul512", "vpclmul512_sse42",
)
assert len(CRC32C_IMPLS) == _lib.LK_CRC_COUNT
# An operator's override of the calibrated choice, read once at import.
CRC32C_ENV = "LOGKEEPER_CRC32C"
# Implementations to leave out, as if the CPU lacked them (a comma list, read once at
# import, before the first CRC): what another CPU class would run, on this one.
CRC32C_DISABLE_ENV = "LOGKEEPER_CRC32C_DISABLE"
# Sizes the calibration times (fastpath.h: lk_crc32c_calibration).
CRC32C_CALIBRATION_SIZES = (16 << 10, 64 << 10)
# Calibration scores within this factor of the lowest tie; the later implementation in
# CRC32C_IMPLS wins a tie (native/crc32c.c: LK_CALIB_TIE).
CRC32C_CALIBRATION_TIE = 1.02


class Crc32cCalibration(NamedTuple):
    """What the calibration measured of one implementation."""

    small_gbps: float  # best of the rounds at CRC32C_CALIBRATION_SIZES[0]
    large_gbps: float  # best of the rounds at CRC32C_CALIBRATION_SIZES[1]
    # The median over the rounds of its time relative to the round's fastest, both sizes
    # added: 2.0 is the fastest at both. The choice is made on this.
    score: float


def _impl_index(impl: str) -> int:
    try:
        return CRC32C_IMPLS.index(impl)
    except ValueError:
        raise ValueError(
            f"unknown CRC-32C implementation {impl!r}; known: {', '.join(CRC32C_IMPLS)}"
        ) from None


# The hottest call in the package goes through a METH_FASTCALL function bound to the cffi
# module's lk_crc32c: a cffi call's own cost (~0.2 us) lost to the crc32c package at 1 KiB.
_crc32c_ext.bind(int(_ffi.cast("uintptr_t", _ffi.addressof(_lib, "lk_crc32c"))))
_append_ext.bind(int(_ffi.cast("uintptr_t", _ffi.addressof(_lib, "lk_segment_append"))))
crc32c = _crc32c_ext.crc32c
# Whether any batch (magic 2) or old message (magic 0/1) of a buffer is compressed, from
# the headers alone; a torn tail ends the walk. Log.append asks it before every leader's
# append (native/append_py.c).
holds_compressed = _append_ext.holds_compressed


def crc32c_supported(impl: str) -> bool:
    """Whether this CPU (and OS) can run the named implementation."""
    return bool(_lib.lk_crc32c_supported(_impl_index(impl)))


def crc32c_active() -> str:
    """The implementation `crc32c` dispatches to: the one forced, else the fastest the
    calibration found (the first call of either calibrates, a few hundred microseconds)."""
    return CRC32C_IMPLS[_lib.lk_crc32c_active()]


def crc32c_force(impl: str | None) -> None:
    """Make `crc32c` use `impl` from now on, process-wide (tests, benchmarks, an
    operator's override); None goes back to the calibrated choice. OSError(ENOTSUP)
    when the CPU lacks it. Safe while other threads compute CRCs."""
    rc = _lib.lk_crc32c_force(-1 if impl is None else _impl_index(impl))
    if rc < 0:
        raise _oserror(rc, f"crc32c_force({impl})")


def crc32c_calibration() -> dict[str, Crc32cCalibration]:
    """What the calibration measured (calibrating first if it never ran), for each
    implementation it timed: every supported one but the portable, when there is one."""
    out = _ffi.new("uint64_t[]", 3 * len(CRC32C_IMPLS))
    rc = _lib.lk_crc32c_calibration(out, len(out))
    if rc < 0:
        raise _oserror(rc, "crc32c_calibration")
    small, large = CRC32C_CALIBRATION_SIZES
    return {impl: Crc32cCalibration(small / out[3 * i], large / out[3 * i + 1],
                                    out[3 * i + 2] / 1e6)
            for i, impl in enumerate(CRC32C_IMPLS) if out[3 * i]}


def crc32c_using(impl: str, data: Buffer, crc: int = 0) -> int:
    """`crc32c` with one named implementation; OSError(ENOTSUP) when the CPU lacks it."""
    cdata, size = _cbuf(data)
    out = _ffi.new("uint32_t *")
    rc = _lib.lk_crc32c_with(_impl_index(impl), crc, cdata, size, out)
    if rc < 0:
        raise _oserror(rc, f"crc32c_using({impl})")
    return int(out[0])


def _force_from_env() -> None:
    for name in filter(None, (n.strip() for n in os.environ.get(CRC32C_DISABLE_ENV, "").split(","))):
        try:
            rc = _lib.lk_crc32c_disable(_impl_index(name))
        except ValueError as err:
            raise ImportError(f"{CRC32C_DISABLE_ENV}: {err}") from err
        if rc < 0:
            why = ("the portable implementation is every CPU's fallback" if name == "portable"
                   else str(_oserror(rc, "lk_crc32c_disable")))
            raise ImportError(f"{CRC32C_DISABLE_ENV}: cannot leave out {name}: {why}")
    name = os.environ.get(CRC32C_ENV)
    if not name:
        return
    try:
        crc32c_force(name)
    except (ValueError, OSError) as err:
        raise ImportError(f"{CRC32C_ENV}={name}: {err}") from err


_force_from_env()


# ---- Record batch scan ------------------------------------------------------------


class ScanStatus(enum.IntEnum):
    """What stopped a scan (fastpath.h's LK_SCAN_*)."""

    OK = 0  # the buffer ends exactly at a batch boundary
    TORN = 1  # the last batch runs past the end of the buffer
    BAD_LENGTH = 2  # batchLength < 49, or the batch is over max_batch_size
    BAD_MAGIC = 3  # magic is not 0, 1 or 2
    LEGACY = 4  # a magic 0/1 message set: recognised, not scanned
    BAD_CRC = 5  # stored CRC differs from the computed one
    FULL = 6  # max_batches filled; scan again from valid_bytes
    BAD_COUNT = 7  # recordsCount < 0 or lastOffsetDelta < 0


_STATUSES = tuple(ScanStatus)


class BatchInfo(NamedTuple):
    """The header of one record batch, and where it starts: magic 2, or (scanned with
    `legacy`) one legacy message of old Kafka logs, as a batch of one record whose base
    and last offset are its offset, with no leader epoch or producer."""

    position: int  # base_position + offset of the batch in the scanned buffer
    base_offset: int
    size: int  # whole batch: batchLength + 12
    partition_leader_epoch: int
    last_offset_delta: int
    records_count: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    attributes: int
    base_sequence: int
    crc: int  # as stored
    magic: int = 2

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


# struct lk_batch_info as Python's struct sees it; checked against cffi's layout below.
_INFO_FIELDS = (
    "position", "base_offset", "base_timestamp", "max_timestamp", "producer_id", "size",
    "partition_leader_epoch", "last_offset_delta", "records_count", "base_sequence", "crc",
    "producer_epoch", "attributes", "magic",
)
_INFO_SIZE = _ffi.sizeof("struct lk_batch_info")
_INFO_STRUCT = struct.Struct(f"=5q5iI2hb{_INFO_SIZE - struct.calcsize('=5q5iI2hb')}x")


def _check_layout() -> None:
    pos = 0
    for name, code in zip(_INFO_FIELDS, "qqqqqiiiiiIhhb", strict=True):
        if _ffi.offsetof("struct lk_batch_info", name) != pos:
            raise ImportError(f"struct lk_batch_info: field {name} is not at offset {pos}")
        pos += struct.calcsize("=" + code)


_check_layout()
_TO_BATCH = itemgetter(*(_INFO_FIELDS.index(f) for f in BatchInfo._fields))
_new_tuple = tuple.__new__


class ScanResult:
    """The outcome of `scan_batches`: why it stopped, how far it got, and the batches
    before that point, decoded from the C array only when indexed or iterated."""

    __slots__ = ("status", "valid_bytes", "count", "bad_value", "stored_crc", "computed_crc",
                 "base_position", "max_batch_size", "_infos", "_view", "_detail")

    def __init__(self, status: ScanStatus, valid_bytes: int, count: int, *, bad_value: int = 0,
                 stored_crc: int = 0, computed_crc: int = 0, base_position: int = 0,
                 max_batch_size: int = 2**31 - 1, infos: Any = None, detail: str | None = None,
                 ) -> None:
        self.status = status
        self.valid_bytes = valid_bytes
        self.count = count
        self.bad_value = bad_value
        self.stored_crc = stored_crc
        self.computed_crc = computed_crc
        self.base_position = base_position
        self.max_batch_size = max_batch_size
        self._infos = infos
        self._view = _ffi.buffer(infos, count * _INFO_SIZE) if count else b""
        self._detail = detail

    @property
    def error_position(self) -> int | None:
        """Where the bad or torn batch starts; None when the scan stopped cleanly."""
        if self.status is ScanStatus.OK or self.status is ScanStatus.FULL:
            return None
        return self.base_position + self.valid_bytes

    @property
    def detail(self) -> str:
        """What stopped the scan, in words, with the position."""
        if self._detail is None:
            end = self.base_position + self.valid_bytes
            if self.status is ScanStatus.FULL:
                self._detail = (f"stopped after {self.count} batches (max_batches); "
                                f"scan again from position {end}")
            else:
                self._detail = (f"ok: {self.count} batches in {self.valid_bytes} bytes, "
                                f"ending at position {end}")
        return self._detail

    def __len__(self) -> int:
        return self.count

    def fingerprints(self) -> bytearray:
        """Each batch's position, base offset, last offset and stored CRC as big-endian
        int64s, 32 bytes a batch: what the audit compares across replicas (a new buffer,
        the caller's to keep)."""
        out = bytearray(FINGERPRINT_SIZE * self.count)
        if self.count:
            _lib.lk_batch_fingerprints(self._infos, self.count, _ffi.from_buffer(out))
        return out

    def _decode(self, i: int) -> BatchInfo:
        return _new_tuple(BatchInfo, _TO_BATCH(_INFO_STRUCT.unpack_from(self._view,
                                                                        i * _INFO_SIZE)))

    @overload
    def __getitem__(self, index: int) -> BatchInfo: ...

    @overload
    def __getitem__(self, index: slice) -> list[BatchInfo]: ...

    def __getitem__(self, index: int | slice) -> BatchInfo | list[BatchInfo]:
        if isinstance(index, slice):
            return [self._decode(i) for i in range(*index.indices(self.count))]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(f"batch {index} out of range: the scan found {self.count}")
        return self._decode(index)

    def __iter__(self) -> Iterator[BatchInfo]:
        for fields in _INFO_STRUCT.iter_unpack(self._view):
            yield _new_tuple(BatchInfo, _TO_BATCH(fields))

    def __repr__(self) -> str:
        return (f"ScanResult(status={self.status.name}, valid_bytes={self.valid_bytes}, "
                f"count={self.count}, detail={self.detail!r})")


def _error_detail(status: ScanStatus, data: Any, size: int, valid: int, base: int,
                  bad_value: int, stored: int, computed: int, max_batch_size: int) -> str:
    """Words for a scan that stopped on a torn or bad batch at offset `valid` of data."""
    at = base + valid
    left = size - valid
    if status is ScanStatus.TORN:
        if left < 17:
            return (f"torn tail: {left} bytes at {at}, fewer than the 17 needed to read a "
                    f"batch's magic")
        return (f"torn tail: batch of {bad_value + 12} bytes at {at} runs past end "
                f"({left} bytes left)")
    if status is ScanStatus.BAD_LENGTH:
        if bad_value < 49:
            return f"batchLength {bad_value} below 49 at position {at}"
        return (f"batch of {bad_value + 12} bytes at position {at} is over max_batch_size "
                f"{max_batch_size}")
    if status is ScanStatus.BAD_MAGIC:
        return f"unknown magic {bad_value} at position {at}"
    if status is ScanStatus.LEGACY:
        return f"legacy magic {bad_value} message set at position {at}"
    if status is ScanStatus.BAD_CRC:
        return (f"crc mismatch at position {at}: stored 0x{stored:08x}, "
                f"computed 0x{computed:08x}")
    if status is ScanStatus.BAD_COUNT:
        records = int.from_bytes(bytes(data[valid + 57:valid + 61]), "big", signed=True)
        field = "recordsCount" if records < 0 else "lastOffsetDelta"
        return f"negative {field} {bad_value} at position {at}"
    raise AssertionError(f"no error detail for {status!r}")


def scan_batches(data: Buffer, *, base_position: int = 0, max_batch_size: int = 2**31 - 1,
                 verify_crc: bool = True, max_batches: int | None = None,
                 legacy: bool = False) -> ScanResult:
    """Walk `data` as consecutive magic-2 record batches, checking framing (and CRCs
    unless verify_crc is false), up to the first batch that is not whole and valid.
    Positions in the result are `base_position` + offsets into data. With max_batches
    the scan stops with status FULL after that many; scan again from valid_bytes.
    A legacy (magic 0/1) message stops the scan with status LEGACY, unless `legacy`:
    then each one is a batch of its own (`BatchInfo.magic` 0 or 1; see fastpath.h)."""
    cdata, size = _cbuf(data)
    if max_batches is None:
        # Every batch is at least a header (a legacy message at least LEGACY_MIN_SIZE).
        cap = size // (LEGACY_MIN_SIZE if legacy else BATCH_HEADER_SIZE) + 1
    elif max_batches < 0:
        raise ValueError(f"max_batches must be >= 0, got {max_batches}")
    else:
        cap = max_batches
    if not 0 < max_batch_size < 2**31:
        raise ValueError(f"max_batch_size must be in 1..2**31-1, got {max_batch_size}")
    infos = _alloc_uncleared("struct lk_batch_info[]", cap)
    res = _ffi.new("struct lk_scan_result *")
    count = _lib.lk_scan_batches(cdata, size, base_position, max_batch_size,
                                 1 if verify_crc else 0, 1 if legacy else 0, infos, cap, res)
    if count < 0:
        raise _oserror(count, "scan_batches")
    if cap > 1024 and count < cap // 2:
        # Keep at most twice what is used alive in the result, not the upper bound.
        small = _alloc_uncleared("struct lk_batch_info[]", count)
        _ffi.memmove(small, infos, count * _INFO_SIZE)
        infos = small
    status = _STATUSES[res.status]
    valid = res.valid_bytes
    detail = None
    if status is not ScanStatus.OK and status is not ScanStatus.FULL:
        detail = _error_detail(status, data, size, valid, base_position, res.bad_value,
                               res.stored_crc, res.computed_crc, max_batch_size)
    return ScanResult(status, valid, count, bad_value=res.bad_value, stored_crc=res.stored_crc,
                      computed_crc=res.computed_crc, base_position=base_position,
                      max_batch_size=max_batch_size, infos=infos, detail=detail)


def decode_offset_index(data: Buffer, base: int, file_size: int) -> tuple[array, array, bool]:
    """An offset index's entries as stored (8 bytes each) as absolute offsets and
    positions, and whether they are as Kafka writes them (see lk_offset_index_decode)."""
    cdata, size = _cbuf(data)
    if size % 8:
        raise ValueError(f"an offset index is whole 8-byte entries, got {size} bytes")
    n = size // 8
    offsets, positions = array("q", bytes(8 * n)), array("q", bytes(8 * n))
    in_order = _lib.lk_offset_index_decode(cdata, n, base, file_size,
                                           _ffi.from_buffer("int64_t[]", offsets),
                                           _ffi.from_buffer("int64_t[]", positions))
    return offsets, positions, bool(in_order)


def ascending(values: array) -> bool:
    """Whether an int64 array ('q') rises strictly from each value to the next."""
    if values.typecode != "q":
        raise ValueError(f"ascending takes an int64 ('q') array, got {values.typecode!r}")
    return bool(_lib.lk_ascending(_ffi.from_buffer("int64_t[]", values), len(values)))


class VerifyWalk:
    """`lk_verify_walk` over one segment (logstore/verify.py): the offset index as
    ascending offsets and positions, the time index as offsets and timestamps in file
    order, and the walk's state in `state` (struct lk_verify_walk: prev_last,
    batch_count, record_count, max_timestamp, offset_gaps, index_next, time_next),
    which the caller reads and sets between calls."""

    __slots__ = ("state", "_keep", "_index", "_time")

    def __init__(self, index_offsets: array, index_positions: array, time_offsets: array,
                 time_stamps: array) -> None:
        if len(index_offsets) != len(index_positions) or len(time_offsets) != len(time_stamps):
            raise ValueError("index offsets and positions (or time offsets and timestamps) "
                             "differ in length")
        for a in (index_offsets, index_positions, time_offsets, time_stamps):
            if a.typecode != "q":
                raise ValueError(f"index arrays hold int64 ('q'), got {a.typecode!r}")
        self._keep = (index_offsets, index_positions, time_offsets, time_stamps)
        self._index = (_ffi.from_buffer("int64_t[]", index_offsets),
                       _ffi.from_buffer("int64_t[]", index_positions), len(index_offsets))
        self._time = (_ffi.from_buffer("int64_t[]", time_offsets),
                      _ffi.from_buffer("int64_t[]", time_stamps), len(time_offsets))
        self.state = _ffi.new("struct lk_verify_walk *")

    def walk(self, res: ScanResult, start: int) -> int:
        """Walk res's batches from `start` while verify has nothing to say about them;
        returns the index of the first one it would (len(res) when none)."""
        if not 0 <= start <= res.count:
            raise IndexError(f"start {start} outside 0..{res.count}")
        if start == res.count:
            return start
        return int(_lib.lk_verify_walk(res._infos, start, res.count, *self._index,
                                       *self._time, self.state))


# ---- Records inside a batch (the log cleaner) ----------------------------------------

# struct lk_record_info: offset_delta, timestamp_delta, start, ts_at, after_ts, end,
# key_at, key_len, value_len, reserved.
_RECORD_STRUCT = struct.Struct("=2q8i")
assert _RECORD_STRUCT.size == _ffi.sizeof("struct lk_record_info")


def parse_records(records: Buffer, count: int) -> list[tuple[int, ...]] | None:
    """The first `count` records of an uncompressed records area (a batch's bytes from
    61 on), each as (offset_delta, timestamp_delta, start, ts_at, after_ts, end, key_at,
    key_len, value_len, 0): positions in `records`, key_at -1 for a null key,
    value_len -1 for a null value. None when the records do not decode (a result, as a
    scan's corrupt batch is, not an exception)."""
    if count < 0:
        return None
    cdata, size = _cbuf(records)
    out = _alloc_uncleared("struct lk_record_info[]", max(count, 1))
    n = _lib.lk_parse_records(cdata, size, count, out, count)
    if n < 0:
        return None
    return list(_RECORD_STRUCT.iter_unpack(_ffi.buffer(out, n * _RECORD_STRUCT.size)))


def assign_offsets(buf: Buffer, first_offset: int, leader_epoch: int) -> int:
    """Write baseOffset (first_offset onwards, batch after batch) and
    partitionLeaderEpoch into every batch of the writable, already validated `buf`,
    in place; returns the offset after the last batch. A buffer that is not whole
    batches raises OSError(EINVAL) and is left unchanged."""
    cdata, size = _wbuf(buf, "assign_offsets")
    next_offset = _ffi.new("int64_t *")
    rc = _lib.lk_assign_offsets(cdata, size, first_offset, leader_epoch, next_offset)
    if rc < 0:
        raise _oserror(rc, "assign_offsets")
    return int(next_offset[0])


# ---- The append path ----------------------------------------------------------------


class AppendStatus(enum.IntEnum):
    """How `Appender.append` ended (fastpath.h's LK_APPEND_*)."""

    OK = 0  # every batch written
    ROLL = 1  # `batches` written (maybe none): the rest needs a new segment
    INVALID = 2  # nothing written: the scan refused the buffer (`scan`)
    BAD_COUNT = 3  # nothing written: recordsCount <= 0 or lastOffsetDelta < recordsCount - 1
    BAD_OFFSET = 4  # nothing written: a follower batch below the expected offset
    TOO_LARGE = 5  # nothing written: a batch over max_batch_size
    EMPTY = 6  # nothing written: no batch at all


ROLL_BASE_UNKNOWN = _lib.LK_ROLL_BASE_UNKNOWN


# ---- Segment indexes ----------------------------------------------------------------

INDEX_PENDING_BYTES = _lib.LK_INDEX_PENDING_BYTES
INDEX_SKIPPED = _lib.LK_INDEX_SKIPPED  # the entry breaks the index's order: not added
INDEX_ADDED = _lib.LK_INDEX_ADDED
INDEX_FULL = _lib.LK_INDEX_FULL  # the entry would be added, but the index is full


def new_index(fd: int, entry_size: int, base_offset: int, max_entries: int,
              entries: int) -> Any:
    """The C state (`struct lk_index`) of an index file whose first `entries` entries are
    written; entry_size 8 is an offset index, 12 a time index. The caller keeps fd open."""
    if entry_size not in (_lib.LK_INDEX_OFFSET, _lib.LK_INDEX_TIME):
        raise ValueError(f"index entry size must be 8 or 12, got {entry_size}")
    ix = _ffi.gc(_ffi.new("struct lk_index *"), _lib.lk_index_release)  # frees its buffer
    ix.fd = fd
    ix.entry_size = entry_size
    ix.base_offset = base_offset
    ix.max_entries = max_entries
    ix.entries = ix.flushed = entries
    return ix


def index_batch(ix: Any, batched: bool) -> None:
    """Whether `ix`'s new entries wait in memory and reach the file together (an active
    segment's index; the buffer is allocated at its first entry, so an idle partition
    holds none) or are each written at once (an inactive segment's, rebuilt by
    recovery: a broker's many inactive segments hold no buffer). Turning it off frees the
    buffer, and needs every entry written first: ValueError otherwise."""
    if batched:
        ix.batched = 1
        return
    if ix.flushed != ix.entries:
        raise ValueError(f"{ix.entries - ix.flushed} index entries not written yet")
    _lib.lk_index_release(ix)


def index_pending(ix: Any) -> Any:
    """A view of `ix`'s pending entries (entries flushed.. of it), for reading; valid until
    the next add, flush or index_batch(ix, False). Only read when some are pending."""
    return _ffi.buffer(ix.pending, _lib.LK_INDEX_PENDING_BUFFER)


def index_map(ix: Any, mapping: Buffer) -> Any:
    """Let `ix`'s searches read the file through `mapping` (a read-only mmap of it).
    Returns the handle to give `index_unmap` before the mapping is closed."""
    handle = _ffi.from_buffer(mapping)
    ix.map = _ffi.cast("const uint8_t *", handle)
    ix.map_len = len(handle)
    return handle


def index_unmap(ix: Any, handle: Any) -> None:
    """Stop reading through the mapping `index_map` gave `handle` for (before it closes)."""
    ix.map = _ffi.NULL
    ix.map_len = 0
    _ffi.release(handle)


def index_search(ix: Any, field: int, key: int, *, path: PathArg = None) -> int:
    """The number of the greatest entry whose field (0 or 1, as stored) is <= key, or -1."""
    rc = _lib.lk_index_search(ix, field, key)
    if rc < 0:
        raise _oserror(rc, "index read", path)
    return rc - 1


def index_add(ix: Any, a: int, b: int, *, reserve_last: bool = False,
              path: PathArg = None) -> int:
    """Add (offset, position) to an offset index or (timestamp, offset) to a time index by
    Kafka's rules (fastpath.h: lk_index_add); returns INDEX_SKIPPED, INDEX_ADDED or
    INDEX_FULL. An OSError from writing the pending entries leaves the entry in the index."""
    rc = _lib.lk_index_add(ix, a, b, reserve_last)
    if rc < 0:
        raise _oserror(rc, "index write", path)
    return rc


def index_flush(ix: Any, *, path: PathArg = None) -> None:
    """Write the index's pending entries, in one pwrite. Does not sync."""
    rc = _lib.lk_index_flush(ix)
    if rc < 0:
        raise _oserror(rc, "index write", path)


def index_truncate(ix: Any, n: int) -> None:
    """Keep the index's first n entries (n <= its entries)."""
    rc = _lib.lk_index_truncate(ix, n)
    if rc < 0:
        raise _oserror(rc, f"index truncate to {n} of {ix.entries} entries")


# ---- The append path ----------------------------------------------------------------


def address_of(cdata: Any) -> int:
    """The address of a struct cffi allocated, for native._append (the caller keeps the
    cdata alive as long as the address is used)."""
    return int(_ffi.cast("uintptr_t", cdata))


def new_segment(fd: int, base_offset: int, index_interval: int, offset_index: Any,
                time_index: Any, created_ms: int) -> Any:
    """The C state (`struct lk_segment`) of a segment's .log at fd with its two indexes'
    states (new_index), empty; the caller fills size and the running state. The caller
    keeps the fd and the index states alive as long as this."""
    s = _ffi.new("struct lk_segment *")
    s.created_ms = created_ms
    s.fd = fd
    s.base_offset = base_offset
    s.index_interval = index_interval
    s.offset_index = offset_index
    s.time_index = time_index
    s.next_offset = -1
    s.max_timestamp = -1
    s.offset_of_max_timestamp = base_offset
    s.roll_base_timestamp = ROLL_BASE_UNKNOWN
    s.next_read_offset = s.next_read_position = -1
    return s


def find_batch(segment: Any, offset: int, start_position: int | None = None, *,
               path: PathArg = None) -> BatchInfo | None:
    """The first batch of the segment whose last offset is >= offset, or None (see
    fastpath.h: lk_segment_find_batch); its header is read from the .log."""
    rc = _lib.lk_segment_find_batch(segment, offset,
                                    -1 if start_position is None else start_position)
    if rc < 0:
        raise _oserror(rc, "read", path)
    if not rc:
        return None
    view = _ffi.buffer(_ffi.addressof(segment, "found"), _INFO_SIZE)
    return _new_tuple(BatchInfo, _TO_BATCH(_INFO_STRUCT.unpack_from(view)))


def batches_end(segment: Any, start: int, limit: int, *, path: PathArg = None) -> int:
    """The end of the last whole batch from `start` that ends by `limit` (at least the
    batch at start's); see fastpath.h: lk_segment_batches_end."""
    rc = _lib.lk_segment_batches_end(segment, start, limit)
    if rc < 0:
        raise _oserror(rc, "read", path)
    return rc


def read_range(segment: Any, offset: int, max_bytes: int, max_offset: int | None, *,
               path: PathArg = None) -> tuple[int, int] | None:
    """Where a fetch from `offset` reads in the segment: (start, end) of whole batches
    (equal when there is nothing to read), or None when the segment holds no batch at or
    past offset; see fastpath.h: lk_segment_read_range."""
    if max_offset is None:
        rc = _lib.lk_segment_read_range(segment, offset, max_bytes, 0, 0)
    else:
        rc = _lib.lk_segment_read_range(segment, offset, max_bytes, 1, max_offset)
    if rc < 0:
        raise _oserror(rc, "read", path)
    return (segment.range_start, segment.range_end) if rc else None


class Appender:
    """One C call per append (`lk_segment_append`): roll check, validate, fit, assign,
    write, index.

    Holds its C structs and arrays between calls, so an append allocates nothing in the
    common case. Not thread-safe: one per log (whose calls are serialised anyway).
    `result` (struct lk_append: status, batches, position, bytes_written, first_offset,
    last_offset, records, append_max_timestamp, epoch_runs, first_epoch, error_batch,
    scan) describes the last call until the next one.
    """

    __slots__ = ("result", "grown", "_infos", "_cap", "_address")

    # The batch infos an Appender keeps between calls: room for MIN at first (a
    # producer's request carries one batch a partition), doubled up to KEEP as appends
    # ask for more. A call with more batches than fit gets a bigger array (C counts the
    # frames first: -ENOBUFS), which `shrink` drops once the caller has read it past
    # KEEP: a log holds 64 x 72 bytes at most, not an array sized for the most batches
    # any one append ever carried (a follower's 1 MiB of small batches took ~1.2 MiB,
    # kept per partition).
    MIN = 4
    KEEP = 64

    def __init__(self, *, segment_bytes: int, segment_ms: int, max_batch_size: int) -> None:
        self.result: Any = _ffi.new("struct lk_append *")
        self._address = address_of(self.result)
        self._cap = 0
        self._infos: Any = None
        self.grown = False  # holds an array past KEEP for the last call: see shrink
        self._grow(0)
        self.configure(segment_bytes=segment_bytes, segment_ms=segment_ms,
                       max_batch_size=max_batch_size)

    def configure(self, *, segment_bytes: int, segment_ms: int, max_batch_size: int) -> None:
        """The log's settings every append checks (segment.bytes, segment.ms,
        max.message.bytes: 0 is valid, as in Kafka, and refuses every batch)."""
        if not 0 <= max_batch_size < 2**31:
            raise ValueError(f"max_batch_size must be in 0..2**31-1, got {max_batch_size}")
        a = self.result
        a.segment_bytes = segment_bytes
        a.segment_ms = segment_ms
        a.max_batch_size = max_batch_size

    def append(self, segment: int, data: Buffer, leader_epoch: int, assign_offsets: bool,
               verify_crc: bool = True, path: PathArg = None) -> tuple[int, ...]:
        """Append what fits of `data` to the segment at address `segment` (`address_of` a
        `new_segment` state, moved forward by what is written); see fastpath.h. Returns
        the leading out fields of `result` in one tuple: first_offset, last_offset,
        records, append_max_timestamp, log_append_time, position, bytes_written
        (Log.append's AppendInfo), then status (an AppendStatus value), epoch_runs,
        first_epoch. An OSError from a read or write is raised (part of the data may
        then be in the .log past the segment's size). The call goes through
        native._append (native/append_py.c), not cffi: see there why."""
        out = _append_ext.append(segment, self._address, data, leader_epoch, assign_offsets,
                                 verify_crc)
        if type(out) is int:
            if out == -errno.ENOBUFS:  # more batches than infos: nothing was done
                self._grow(max(self.result.infos_needed, min(2 * self._cap, self.KEEP)))
                out = _append_ext.append(segment, self._address, data, leader_epoch,
                                         assign_offsets, verify_crc)
            if type(out) is int:
                raise _oserror(out, "append", path)
        return out

    def shrink(self) -> None:
        """Drop an array grown past KEEP infos for the last call (`grown`), once the
        caller has read what it needed of it (`batch`)."""
        if self.grown:
            self._grow(0)

    def _grow(self, count: int) -> None:
        self._cap = max(count, self.MIN)
        self.grown = self._cap > self.KEEP
        self._infos = _alloc_uncleared("struct lk_batch_info[]", self._cap)
        self.result.infos = self._infos
        self.result.infos_cap = self._cap

    def batch(self, i: int) -> BatchInfo:
        """Batch i of the last call's buffer as validated (offsets and epoch as they are
        or would be written; position in the file); i must be below the batches the
        call decoded (every written one, and the refused one, `error_batch`)."""
        view = _ffi.buffer(self._infos + i, _INFO_SIZE)
        return _new_tuple(BatchInfo, _TO_BATCH(_INFO_STRUCT.unpack_from(view)))

    def scan(self, data: Buffer) -> ScanResult:
        """The validation scan of the last call, whose buffer was `data` (why INVALID
        refused it), with positions relative to the buffer."""
        res = self.result.scan
        status = _STATUSES[res.status]
        size = len(memoryview(data).cast("B"))
        detail = None
        if status is not ScanStatus.OK and status is not ScanStatus.FULL:
            detail = _error_detail(status, data, size, res.valid_bytes, 0, res.bad_value,
                                   res.stored_crc, res.computed_crc, 2**31 - 1)
        return ScanResult(status, res.valid_bytes, 0, bad_value=res.bad_value,
                          stored_crc=res.stored_crc, computed_crc=res.computed_crc,
                          detail=detail)


# ---- File IO ----------------------------------------------------------------------


def write_all(fd: int, data: Buffer, *, path: PathArg = None) -> int:
    """Write all of data at the fd's position; returns its length. Does not sync."""
    cdata, size = _cbuf(data)
    rc = _lib.lk_write_all(fd, cdata, size)
    if rc < 0:
        raise _oserror(rc, "write", path)
    return rc


def pwrite_all(fd: int, data: Buffer, offset: int, *, path: PathArg = None) -> int:
    """Write all of data at `offset`; returns its length. Does not sync."""
    cdata, size = _cbuf(data)
    rc = _lib.lk_pwrite_all(fd, cdata, size, offset)
    if rc < 0:
        raise _oserror(rc, "pwrite", path)
    return rc


def pread_into(fd: int, buf: Buffer, offset: int, *, path: PathArg = None) -> int:
    """Fill the writable buf from `offset`; returns the bytes read (short only at EOF)."""
    cdata, size = _wbuf(buf, "pread_into")
    rc = _lib.lk_pread_full(fd, cdata, size, offset)
    if rc < 0:
        raise _oserror(rc, "pread", path)
    return rc


def pread(fd: int, size: int, offset: int, *, path: PathArg = None) -> bytes:
    """Up to `size` bytes from `offset` (fewer only at end of file)."""
    if size < 0:
        raise ValueError(f"pread size must be >= 0, got {size}")
    # os.pread reads straight into the new bytes object (retrying EINTR); going through
    # C would cost a second copy out of a cffi buffer. C finishes a short read.
    try:
        data = os.pread(fd, size, offset)
    except OSError as err:
        raise _oserror(-err.errno, "pread", path) from err
    if len(data) == size or not data:
        return data
    rest = bytearray(size - len(data))
    got = pread_into(fd, rest, offset + len(data), path=path)
    return data + bytes(memoryview(rest)[:got])


def fdatasync(fd: int, *, path: PathArg = None) -> None:
    """fdatasync(2) the fd."""
    rc = _lib.lk_fdatasync(fd)
    if rc < 0:
        raise _oserror(rc, "fdatasync", path)


def fallocate(fd: int, offset: int, length: int, *, path: PathArg = None) -> None:
    """Allocate [offset, offset + length) on disk, extending the file size if needed."""
    rc = _lib.lk_fallocate(fd, offset, length)
    if rc < 0:
        raise _oserror(rc, "fallocate", path)


# ---- Probes -----------------------------------------------------------------------


class Space(NamedTuple):
    """Space and inodes of the filesystem holding a path (statvfs)."""

    total_bytes: int
    free_bytes: int  # free to root
    avail_bytes: int  # free to unprivileged users
    total_inodes: int
    free_inodes: int


_SPACE_STRUCT = struct.Struct("=5Q")
assert _SPACE_STRUCT.size == _ffi.sizeof("struct lk_space")


def space_probe(path: str | os.PathLike[str]) -> Space:
    """statvfs of the filesystem holding path: one syscall, cheap enough for every interval."""
    out = _ffi.new("struct lk_space *")
    rc = _lib.lk_space_probe(os.fsencode(path), out)
    if rc < 0:
        raise _oserror(rc, "space_probe", path)
    return _new_tuple(Space, _SPACE_STRUCT.unpack(_ffi.buffer(out)))


def availability_probe(path: str | os.PathLike[str], block_size: int = 4096) -> int:
    """Write a fresh canary block to <path>/.logkeeper-probe, fdatasync it, drop it from
    the page cache, read it back and compare; returns the whole probe's latency in ns.
    A mismatch raises OSError(EIO); any failing call raises its errno."""
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    latency = _ffi.new("int64_t *")
    rc = _lib.lk_availability_probe(os.fsencode(path), block_size, latency)
    if rc < 0:
        raise _oserror(rc, "availability_probe", path)
    return int(latency[0])


def malloc_arena_max(n: int) -> bool:
    """Cap glibc malloc's arenas at `n` for the rest of the process (mallopt
    M_ARENA_MAX); call it before threads start. False where the libc is not glibc
    (nothing changes there); ValueError for n < 1."""
    if n < 1:
        raise ValueError(f"malloc arenas must be >= 1, got {n}")
    rc = _lib.lk_malloc_arena_max(n)
    if rc == -errno.ENOSYS:
        return False
    if rc < 0:
        raise _oserror(rc, "malloc_arena_max")
    return True
