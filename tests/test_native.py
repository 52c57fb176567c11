"""The C fast path through its Python API: CRC-32C implementations against the crc32c
package, the batch scan against real Kafka segments, hand-made corruptions and a
pure-Python reference scanner, in-place offset assignment, whole-transfer IO on real
files (errors included), and the space and availability probes on real directories.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import random
import struct
import subprocess
import sys
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path

import crc32c as crc32c_pkg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import native
from native import BatchInfo, ScanStatus

REPO = Path(__file__).resolve().parents[1]
CHECK = 0xE3069283  # CRC-32C of b"123456789" (docs/formats.md)
SUPPORTED = [impl for impl in native.CRC32C_IMPLS if native.crc32c_supported(impl)]
# Every implementation, those this CPU cannot run skipped with the reason in the report
# (the AVX-512 ones on an AVX2-only CPU, say), so a run shows what it did not check.
ALL_IMPLS = [
    pytest.param(impl, marks=pytest.mark.skipif(impl not in SUPPORTED,
                                                reason=f"this CPU cannot run {impl}"))
    for impl in native.CRC32C_IMPLS
]
HYPO = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _rand(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


# ---- CRC-32C ----------------------------------------------------------------------


def test_portable_is_always_supported_and_active_is_supported() -> None:
    assert "portable" in SUPPORTED
    assert native.crc32c_active() in SUPPORTED


def test_calibration_times_every_supported_impl_and_keeps_one_of_them() -> None:
    timed = native.crc32c_calibration()
    # The portable one is left out whenever anything else runs: it is never faster.
    want = [impl for impl in SUPPORTED if impl != "portable"]
    assert list(timed) == want
    assert all(c.small_gbps > 0 and c.large_gbps > 0 for c in timed.values())
    # Each score adds two times relative to the fastest of a round: at least 2.
    assert all(c.score >= 2.0 - 1e-6 for c in timed.values())
    if want:
        # The choice is the latest implementation whose score is within the tie of the
        # lowest (CRC32C_IMPLS runs by class, narrow to wide).
        low = min(c.score for c in timed.values())
        tied = [impl for impl in want
                if timed[impl].score <= low * native.CRC32C_CALIBRATION_TIE + 1e-6]
        assert native.crc32c_active() == tied[-1], timed


@contextlib.contextmanager
def forced(impl: str | None) -> Iterator[None]:
    native.crc32c_force(impl)
    try:
        yield
    finally:
        native.crc32c_force(None)


@pytest.mark.parametrize("impl", SUPPORTED)
def test_force_routes_crc32c_through_each_impl(impl: str) -> None:
    calibrated = native.crc32c_active()
    data = _rand(100_000, 11)
    with forced(impl):
        assert native.crc32c_active() == impl
        assert native.crc32c(b"123456789") == CHECK
        assert native.crc32c(data) == crc32c_pkg.crc32c(data)
    assert native.crc32c_active() == calibrated
    assert native.crc32c(data) == crc32c_pkg.crc32c(data)


def test_force_refuses_unknown_and_unsupported_impls() -> None:
    with pytest.raises(ValueError, match="unknown CRC-32C implementation"):
        native.crc32c_force("avx9")
    missing = [impl for impl in native.CRC32C_IMPLS if impl not in SUPPORTED]
    if missing:
        with pytest.raises(OSError) as info:
            native.crc32c_force(missing[0])
        assert info.value.errno == errno.ENOTSUP
    assert native.crc32c_active() in SUPPORTED


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **env}, timeout=60)


def test_first_use_from_many_threads_calibrates_once() -> None:
    # A fresh process, so the threads race the calibration itself.
    code = """
import threading, crc32c, native
data = bytes(range(256)) * 400
want = crc32c.crc32c(data)
start = threading.Barrier(8)
got = []
def work():
    start.wait()
    got.append((native.crc32c(data), native.crc32c_active()))
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert len(got) == 8 and all(crc == want for crc, _ in got), got
assert len({impl for _, impl in got}) == 1, got
print(got[0][1])
"""
    proc = _run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in SUPPORTED


@pytest.mark.parametrize("impl", SUPPORTED)
def test_env_var_forces_the_impl(impl: str) -> None:
    proc = _run_python("import native; print(native.crc32c_active(), native.crc32c(b'123456789'))",
                       LOGKEEPER_CRC32C=impl)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [impl, str(CHECK)]


def test_env_var_with_an_unknown_impl_fails_the_import_naming_it() -> None:
    proc = _run_python("import native", LOGKEEPER_CRC32C="avx9")
    assert proc.returncode != 0
    assert "LOGKEEPER_CRC32C=avx9" in proc.stderr


# RFC 3720 (iSCSI) B.4 and the usual check value: CRC-32C of known inputs.
KNOWN_VECTORS = [
    (b"", 0x00000000),
    (b"123456789", CHECK),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


@pytest.mark.parametrize("impl", ALL_IMPLS)
def test_crc_known_vectors(impl: str) -> None:
    for data, want in KNOWN_VECTORS:
        assert native.crc32c_using(impl, data) == want, data
        # The same bytes at every misalignment of a 64-byte line.
        backing = bytearray(64 + len(data))
        for start in range(64):
            backing[start:start + len(data)] = data
            part = memoryview(backing)[start:start + len(data)]
            assert native.crc32c_using(impl, part) == want, (data, start)


_LENGTHS_MAX = 4096
_STARTS = range(0, 64, 7)  # 0, 7, ..., 63: every residue mod 8 and several mod 16, 32, 64
_BACKING = _rand(_LENGTHS_MAX + 64, 12)


@pytest.fixture(scope="module")
def portable_every_length() -> dict[tuple[int, int], int]:
    """The portable CRC of _BACKING[start:start + n] (crc n) for every start and length,
    computed once for all implementations."""
    view = memoryview(_BACKING)
    return {(start, n): native.crc32c_using("portable", view[start:start + n], n)
            for start in _STARTS for n in range(_LENGTHS_MAX + 1)}


@pytest.mark.parametrize("impl", ALL_IMPLS)
def test_crc_every_length_to_4096_and_misalignment_matches_portable(
        impl: str, portable_every_length: dict[tuple[int, int], int]) -> None:
    # Every length crosses each implementation's hand-over points (128, 256, 512, 1024,
    # 2048 bytes) and its loop strides at every alignment of the start.
    view = memoryview(_BACKING)
    for start in _STARTS:
        for n in range(_LENGTHS_MAX + 1):
            assert native.crc32c_using(impl, view[start:start + n], n) == \
                portable_every_length[start, n], (start, n)


@pytest.mark.parametrize("impl", ALL_IMPLS)
def test_crc_large_odd_sizes_match_portable(impl: str) -> None:
    # Odd sizes at odd starts: whole fused chunks (their stream caps are 8 KiB a stream),
    # a ragged last chunk and a tail of every kind.
    backing = _rand((3 << 20) + 64, 15)
    view = memoryview(backing)
    for start, size in ((1, 4097), (3, 12_289), (5, 65_537), (7, 100_003), (13, 262_147),
                        (31, 1_000_003), (63, (3 << 20) - 1)):
        part = view[start:start + size]
        crc = size * 2654435761 % 2**32
        assert native.crc32c_using(impl, part, crc) == native.crc32c_using(
            "portable", part, crc), (start, size)


@pytest.mark.parametrize("impl", ALL_IMPLS)
def test_crc_random_large_buffers_match_portable(impl: str) -> None:
    # Sizes across the chunk caps of the multi-stream paths (24 KiB, ~110 KiB).
    rng = random.Random(13)
    backing = _rand(1 << 20, 14)
    view = memoryview(backing)
    for _ in range(25):
        start = rng.randrange(64)
        size = rng.randrange(1024, len(backing) - start)
        part = view[start:start + size]
        crc = rng.randrange(2**32)
        assert native.crc32c_using(impl, part, crc) == native.crc32c_using(
            "portable", part, crc), (start, size)


@pytest.mark.parametrize("impl", ALL_IMPLS)
def test_crc_check_value_and_empty(impl: str) -> None:
    assert native.crc32c_using(impl, b"123456789") == CHECK
    assert native.crc32c_using(impl, b"") == 0
    assert native.crc32c_using(impl, b"", 0xDEADBEEF) == 0xDEADBEEF


@pytest.mark.parametrize("impl", ALL_IMPLS)
def test_crc_every_length_to_1024_matches_package(impl: str) -> None:
    data = _rand(1024 + 16, 1)
    for n in range(1025):
        assert native.crc32c_using(impl, data[:n]) == crc32c_pkg.crc32c(data[:n]), n
        assert native.crc32c_using(impl, data[:n], n * 7919) == crc32c_pkg.crc32c(
            data[:n], n * 7919), n


@pytest.mark.parametrize("impl", ALL_IMPLS)
@pytest.mark.parametrize("size", [2047, 2048, 6143, 6144, 6145, 16384, 65536 + 13,
                                  (1 << 20) + 7, 3 * (1 << 20)])
def test_crc_large_sizes_match_package(impl: str, size: int) -> None:
    data = _rand(size, size)
    assert native.crc32c_using(impl, data) == crc32c_pkg.crc32c(data)
    assert native.crc32c_using(impl, data, 0x12345678) == crc32c_pkg.crc32c(data, 0x12345678)


@pytest.mark.parametrize("impl", ALL_IMPLS)
def test_crc_unaligned_starts(impl: str) -> None:
    backing = bytearray(_rand(70_000, 3))
    view = memoryview(backing)
    for start in range(16):
        for length in (0, 1, 15, 63, 255, 1000, 4097, 65_000):
            part = view[start:start + length]
            assert native.crc32c_using(impl, part) == crc32c_pkg.crc32c(bytes(part)), (
                start, length)


@pytest.mark.parametrize("impl", ALL_IMPLS)
def test_crc_running_chains(impl: str) -> None:
    data = _rand(200_000, 4)
    rng = random.Random(5)
    for _ in range(20):
        cuts = sorted(rng.sample(range(len(data)), rng.randint(1, 8)))
        crc = 0
        for lo, hi in zip([0, *cuts], [*cuts, len(data)], strict=True):
            crc = native.crc32c_using(impl, data[lo:hi], crc)
        assert crc == crc32c_pkg.crc32c(data)


def test_crc_accepts_every_buffer_kind_without_copying() -> None:
    data = _rand(10_000, 6)
    want = crc32c_pkg.crc32c(data)
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert native.crc32c(mm) == want
    assert native.crc32c(data) == want
    assert native.crc32c(bytearray(data)) == want
    assert native.crc32c(memoryview(data)) == want
    assert native.crc32c(array("I", data[:8000])) == crc32c_pkg.crc32c(data[:8000])
    with pytest.raises(TypeError):
        native.crc32c("not bytes")  # type: ignore[arg-type]


def test_crc_refuses_bad_arguments() -> None:
    with pytest.raises(OverflowError):
        native.crc32c(b"x", 2**32)
    with pytest.raises(OverflowError):
        native.crc32c(b"x", -1)
    with pytest.raises(TypeError):
        native.crc32c()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        native.crc32c(b"x", 0, 0)  # type: ignore[call-arg]
    with pytest.raises(BufferError):
        native.crc32c(memoryview(b"abcdef")[::2])  # not contiguous
    assert native.crc32c(b"123456789", 0) == CHECK
    assert native.crc32c(b"", 2**32 - 1) == 2**32 - 1


def test_crc_from_many_threads_at_once() -> None:
    # cffi drops the GIL around each call: concurrent callers must not disturb each other.
    from concurrent.futures import ThreadPoolExecutor

    blobs = [_rand(256 << 10, seed) for seed in range(8)]
    want = [crc32c_pkg.crc32c(b) for b in blobs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            assert list(pool.map(native.crc32c, blobs)) == want


def test_crc_unknown_impl_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown CRC-32C implementation 'avx9'"):
        native.crc32c_using("avx9", b"x")
    with pytest.raises(ValueError):
        native.crc32c_supported("avx9")


def test_crc_unsupported_impl_raises_enotsup() -> None:
    """An implementation this CPU lacks answers ENOTSUP, and the dispatch never picks it.
    On a CPU that has them all, LOGKEEPER_CRC32C_DISABLE takes the widest ones out, as
    a CPU without AVX-512 (and one without VPCLMULQDQ) would lack them."""
    missing = [impl for impl in native.CRC32C_IMPLS if impl not in SUPPORTED]
    if missing:
        with pytest.raises(OSError) as info:
            native.crc32c_using(missing[0], b"x")
        assert info.value.errno == errno.ENOTSUP
    probe = ("import errno, native\n"
             "out = [i for i in native.CRC32C_IMPLS if native.crc32c_supported(i)]\n"
             "try:\n    native.crc32c_using('vpclmul512', b'x')\n"
             "except OSError as e:\n    assert e.errno == errno.ENOTSUP\n"
             "else:\n    raise AssertionError('vpclmul512 ran')\n"
             "assert native.crc32c(b'123456789') == 0xE3069283\n"
             "print(','.join(out)); print(native.crc32c_active())\n")
    for disabled in (["vpclmul512", "vpclmul512_sse42"],
                     [i for i in native.CRC32C_IMPLS if "vpclmul" in i]):
        proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                              text=True, env={**os.environ,
                                              native.CRC32C_DISABLE_ENV: ",".join(disabled)})
        assert proc.returncode == 0, proc.stderr
        left, active = proc.stdout.split()
        assert set(left.split(",")) == set(SUPPORTED) - set(disabled)
        assert active in left.split(",") and active not in disabled
    proc = subprocess.run([sys.executable, "-c", "import native"], cwd=REPO, text=True,
                          capture_output=True,
                          env={**os.environ, native.CRC32C_DISABLE_ENV: "portable"})
    assert proc.returncode != 0 and "every CPU's fallback" in proc.stderr


@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1))
@HYPO
def test_crc_property_every_impl_matches_package(data: bytes, crc: int) -> None:
    want = crc32c_pkg.crc32c(data, crc)
    assert native.crc32c(data, crc) == want
    for impl in SUPPORTED:
        assert native.crc32c_using(impl, data, crc) == want


def test_fold_constants_header_matches_the_math() -> None:
    script = REPO / "native" / "crc32c_constants.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


# ---- Batches built by hand (docs/formats.md layout) ------------------------------------

HEADER = struct.Struct(">qiiBIhiqqqhii")
assert HEADER.size == 61


def make_batch(*, base_offset: int = 0, records: int = 1, last_offset_delta: int | None = None,
               payload: bytes = b"r" * 20, leader_epoch: int = -1, timestamp: int = 1_700_000,
               magic: int = 2, attributes: int = 0, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1,
               fix_crc: bool = True) -> bytearray:
    """A magic-2 batch whose records area is an opaque payload (the scan never parses
    records), with a correct CRC-32C unless fix_crc is false."""
    delta = records - 1 if last_offset_delta is None else last_offset_delta
    length = 61 - 12 + len(payload)
    buf = bytearray(HEADER.pack(base_offset, length, leader_epoch, magic, 0, attributes,
                                delta, timestamp, timestamp + delta, producer_id,
                                producer_epoch, base_sequence, records) + payload)
    if fix_crc:
        struct.pack_into(">I", buf, 17, crc32c_pkg.crc32c(bytes(buf[21:])))
    return buf


def make_log(n: int, seed: int = 0) -> bytearray:
    rng = random.Random(seed)
    out = bytearray()
    offset = 0
    for _ in range(n):
        records = rng.randint(1, 5)
        out += make_batch(base_offset=offset, records=records,
                          payload=rng.randbytes(rng.randint(0, 300)))
        offset += records
    return out


def reference_scan(data: bytes, base: int = 0, max_batch_size: int = 2**31 - 1,
                   verify_crc: bool = True) -> tuple[ScanStatus, int, list[tuple], int]:
    """The scan's contract in plain Python: (status, valid_bytes, batches, bad_value)."""
    pos, batches = 0, []
    while pos < len(data):
        left = len(data) - pos
        if left < 17:
            return ScanStatus.TORN, pos, batches, None
        length = struct.unpack_from(">i", data, pos + 8)[0]
        magic = data[pos + 16]
        if magic in (0, 1):
            if length >= (14 if magic == 0 else 22):
                return ScanStatus.LEGACY, pos, batches, magic
            return ScanStatus.BAD_LENGTH, pos, batches, length
        if magic != 2:
            return ScanStatus.BAD_MAGIC, pos, batches, magic
        size = length + 12
        if length < 49 or size > max_batch_size:
            return ScanStatus.BAD_LENGTH, pos, batches, length
        if size > left:
            return ScanStatus.TORN, pos, batches, length
        f = HEADER.unpack_from(data, pos)
        if verify_crc and crc32c_pkg.crc32c(bytes(data[pos + 21:pos + size])) != f[4]:
            return ScanStatus.BAD_CRC, pos, batches, 0
        if f[12] < 0 or f[6] < 0:
            return ScanStatus.BAD_COUNT, pos, batches, f[12] if f[12] < 0 else f[6]
        batches.append(BatchInfo(base + pos, f[0], size, f[2], f[6], f[12], f[7], f[8], f[9],
                                 f[10], f[5], f[11], f[4]))
        pos += size
    return ScanStatus.OK, pos, batches, 0


def assert_matches_reference(data: bytes, **kw: int) -> native.ScanResult:
    res = native.scan_batches(data, **kw)
    status, valid, batches, bad = reference_scan(
        data, kw.get("base_position", 0), kw.get("max_batch_size", 2**31 - 1),
        kw.get("verify_crc", True))
    assert (res.status, res.valid_bytes) == (status, valid)
    assert list(res) == batches
    assert len(res) == len(batches)
    if bad is not None and status not in (ScanStatus.OK, ScanStatus.BAD_CRC):
        assert res.bad_value == bad
    return res


# ---- Scan: real Kafka segments ----------------------------------------------------

FIXTURE_SEGMENTS = [
    ("kafka-2.7.1/__consumer_offsets-17/00000000000000000000.log", 1, 1),
    ("kafka-2.7.1/__consumer_offsets-17/00000000000000000001.log", 2, 2),
    ("kafka-2.7.1/__consumer_offsets-28/00000000000000000000.log", 1, 1),
    ("kafka-2.7.1/__consumer_offsets-28/00000000000000000002.log", 1, 1),
    ("kafka-2.7.1/__consumer_offsets-39/00000000000000000000.log", 3, 3),
    ("kafka-2.7.1/__consumer_offsets-39/00000000000000000018.log", 1, 2),
    ("kafka-3.0.0/my-first-topic-0/00000000000000000000.log", 10, 11),
    ("kafka-3.0.0/__consumer_offsets-13/00000000000000000000.log", 1339, 3093),
]


@pytest.mark.parametrize(("rel", "batches", "records"), FIXTURE_SEGMENTS)
def test_scan_real_kafka_segments(kafka_fixtures: Path, rel: str, batches: int,
                                  records: int) -> None:
    path = kafka_fixtures / rel
    data = path.read_bytes()
    res = assert_matches_reference(data)
    assert res.status is ScanStatus.OK and res.error_position is None
    assert res.valid_bytes == len(data)
    assert len(res) == batches
    assert sum(b.records_count for b in res) == records
    segment_base = int(path.stem)
    assert res[0].position == 0 and res[0].base_offset >= segment_base
    for prev, cur in zip(res, res[1:], strict=False):
        assert cur.position == prev.position + prev.size
        assert cur.base_offset > prev.last_offset  # compaction leaves gaps, never overlaps
    assert res[-1].next_offset == res[-1].last_offset + 1
    # Framing alone finds the same batches.
    assert list(native.scan_batches(data, verify_crc=False)) == list(res)


def test_scan_fixture_through_mmap_with_base_position(kafka_fixtures: Path) -> None:
    path = kafka_fixtures / FIXTURE_SEGMENTS[-1][0]
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        res = native.scan_batches(mm, base_position=1000)
        assert len(res) == 1339
        assert res[0].position == 1000
        assert res[-1].position + res[-1].size == 1000 + len(mm)


# ---- Scan: hand-made corruptions --------------------------------------------------


def test_scan_flipped_byte_is_bad_crc_at_that_batch() -> None:
    log = make_log(5)
    clean = native.scan_batches(log)
    third = clean[2]
    log[third.position + 40] ^= 0x01  # inside the CRC-covered header
    res = assert_matches_reference(bytes(log))
    assert res.status is ScanStatus.BAD_CRC
    assert res.error_position == third.position and res.valid_bytes == third.position
    assert len(res) == 2
    assert res.stored_crc == third.crc
    assert res.computed_crc == crc32c_pkg.crc32c(
        bytes(log[third.position + 21:third.position + third.size]))
    assert res.detail == (f"crc mismatch at position {third.position}: stored "
                          f"0x{res.stored_crc:08x}, computed 0x{res.computed_crc:08x}")
    # Framing-only scans do not look at the CRC.
    assert native.scan_batches(log, verify_crc=False).status is ScanStatus.OK


def test_scan_flipped_base_offset_is_not_covered_by_crc() -> None:
    log = make_log(3)
    log[3] ^= 0xFF  # baseOffset lies outside the CRC (the log assigns it)
    assert native.scan_batches(log).status is ScanStatus.OK


def test_scan_truncated_is_torn() -> None:
    log = make_log(4)
    batches = native.scan_batches(log)
    last = batches[-1]
    cut = bytes(log[:last.position + 100])
    res = assert_matches_reference(cut, base_position=4096)
    assert res.status is ScanStatus.TORN
    assert res.valid_bytes == last.position and res.error_position == 4096 + last.position
    assert res.detail == (f"torn tail: batch of {last.size} bytes at {4096 + last.position} "
                          f"runs past end (100 bytes left)")
    short = assert_matches_reference(bytes(log[:last.position + 10]))
    assert short.status is ScanStatus.TORN and len(short) == 3
    assert "fewer than the 17 needed" in short.detail


def test_scan_small_batch_length_and_over_max_size_are_bad_length() -> None:
    log = make_log(2)
    second = native.scan_batches(log)[1]
    struct.pack_into(">i", log, second.position + 8, 12)
    res = assert_matches_reference(bytes(log))
    assert res.status is ScanStatus.BAD_LENGTH and res.bad_value == 12
    assert res.detail == f"batchLength 12 below 49 at position {second.position}"

    big = make_batch(payload=b"x" * 1000)
    res = native.scan_batches(big, max_batch_size=1000)
    assert res.status is ScanStatus.BAD_LENGTH and res.bad_value == len(big) - 12
    assert "over max_batch_size 1000" in res.detail
    assert native.scan_batches(big, max_batch_size=len(big)).status is ScanStatus.OK


def test_scan_zero_filled_tail_is_bad_length_not_legacy() -> None:
    log = make_log(2) + bytes(4096)
    res = assert_matches_reference(bytes(log))
    assert res.status is ScanStatus.BAD_LENGTH and res.bad_value == 0 and len(res) == 2


@pytest.mark.parametrize("magic", [0, 1])
def test_scan_legacy_magic(magic: int) -> None:
    # offset, size, crc, magic, attributes, [timestamp], key -1, value "hi"
    body = struct.pack(">IBb", 0, magic, 0) + (struct.pack(">q", 5) if magic else b"") + \
        struct.pack(">ii", -1, 2) + b"hi"
    legacy = struct.pack(">qi", 0, len(body)) + body
    log = make_log(1) + legacy
    res = assert_matches_reference(bytes(log))
    assert res.status is ScanStatus.LEGACY and res.bad_value == magic
    assert res.detail == f"legacy magic {magic} message set at position {len(log) - len(legacy)}"


def test_scan_unknown_magic() -> None:
    res = assert_matches_reference(bytes(make_batch(magic=7)))
    assert res.status is ScanStatus.BAD_MAGIC and res.bad_value == 7
    assert res.error_position == 0 and "unknown magic 7" in res.detail


def test_scan_negative_counts_are_bad_count() -> None:
    res = assert_matches_reference(bytes(make_log(1) + make_batch(records=-3, last_offset_delta=0)))
    assert res.status is ScanStatus.BAD_COUNT and res.bad_value == -3
    assert "negative recordsCount -3" in res.detail
    res = native.scan_batches(make_batch(records=1, last_offset_delta=-1))
    assert res.status is ScanStatus.BAD_COUNT and "negative lastOffsetDelta -1" in res.detail


def test_scan_max_batches_stops_full_and_resumes() -> None:
    log = bytes(make_log(10))
    everything = list(native.scan_batches(log))
    got: list[BatchInfo] = []
    pos = 0
    while True:
        res = native.scan_batches(log[pos:], base_position=pos, max_batches=3)
        got += list(res)
        pos += res.valid_bytes
        if res.status is not ScanStatus.FULL:
            break
        assert res.error_position is None and len(res) == 3
    assert res.status is ScanStatus.OK and got == everything
    zero = native.scan_batches(log, max_batches=0)
    assert zero.status is ScanStatus.FULL and zero.valid_bytes == 0 and len(zero) == 0


def test_scan_result_indexing() -> None:
    res = native.scan_batches(make_log(5))
    assert res[-1] == list(res)[-1] and res[1:3] == list(res)[1:3]
    with pytest.raises(IndexError):
        res[5]
    assert native.scan_batches(b"").status is ScanStatus.OK and len(native.scan_batches(b"")) == 0


def test_scan_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        native.scan_batches(b"", max_batch_size=0)
    with pytest.raises(ValueError):
        native.scan_batches(b"", max_batches=-1)


@st.composite
def mutated_logs(draw: st.DrawFn) -> bytes:
    log = make_log(draw(st.integers(0, 6)), seed=draw(st.integers(0, 2**16)))
    for _ in range(draw(st.integers(0, 3))):
        if not log:
            break
        i = draw(st.integers(0, len(log) - 1))
        log[i] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        log = log[:draw(st.integers(0, len(log)))]
    return bytes(log)


@given(st.one_of(st.binary(max_size=400), mutated_logs()), st.booleans(),
       st.integers(61, 600))
@HYPO
def test_scan_property_matches_reference(data: bytes, verify: bool, max_size: int) -> None:
    assert_matches_reference(data, verify_crc=verify, max_batch_size=max_size,
                             base_position=12345)


# ---- assign_offsets ---------------------------------------------------------------


def test_assign_offsets_numbers_batches_in_place_and_keeps_crcs() -> None:
    buf = make_batch(records=1) + make_batch(records=5) + make_batch(records=3)
    assert native.assign_offsets(buf, 100, 7) == 109
    res = native.scan_batches(buf)  # CRCs still valid: both fields lie outside them
    assert res.status is ScanStatus.OK
    assert [b.base_offset for b in res] == [100, 101, 106]
    assert [b.partition_leader_epoch for b in res] == [7, 7, 7]
    assert native.assign_offsets(bytearray(), 42, 0) == 42


def test_assign_offsets_rejects_bad_buffers_unchanged() -> None:
    buf = make_batch() + make_batch()
    torn = bytearray(buf[:-5])
    before = bytes(torn)
    with pytest.raises(OSError) as info:
        native.assign_offsets(torn, 0, 0)
    assert info.value.errno == errno.EINVAL and "(from assign_offsets)" in str(info.value)
    assert torn == before
    with pytest.raises(TypeError):
        native.assign_offsets(bytes(buf), 0, 0)


# ---- File IO ----------------------------------------------------------------------


@contextlib.contextmanager
def opened(path: Path, flags: int) -> Iterator[int]:
    fd = os.open(path, flags, 0o644)
    try:
        yield fd
    finally:
        os.close(fd)


def test_io_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    data = _rand(300_000, 9)
    with opened(path, os.O_RDWR | os.O_CREAT) as fd:
        assert native.write_all(fd, data[:1000]) == 1000
        assert native.write_all(fd, memoryview(data)[1000:]) == len(data) - 1000
        assert native.pwrite_all(fd, b"HEAD", 0) == 4
        native.fdatasync(fd)
        expect = b"HEAD" + data[4:]
        assert native.pread(fd, len(data), 0) == expect
        buf = bytearray(5000)
        assert native.pread_into(fd, buf, 100) == 5000 and buf == expect[100:5100]
        # Short only at end of file; empty past it.
        assert native.pread(fd, 100, len(data) - 10) == expect[-10:]
        assert native.pread(fd, 100, len(data)) == b""
        assert native.pread_into(fd, bytearray(8), len(data) + 5) == 0
        assert native.pread(fd, 0, 0) == b""
        native.fallocate(fd, 0, 1 << 20)
        assert os.fstat(fd).st_size == 1 << 20
    assert path.read_bytes()[:len(data)] == expect


def test_io_errors_name_the_operation_and_path(tmp_path: Path) -> None:
    path = tmp_path / "ro.log"
    path.write_bytes(b"x" * 10)
    with opened(path, os.O_RDONLY) as fd:
        with pytest.raises(OSError) as info:
            native.pwrite_all(fd, b"y", 0, path=path)
        assert info.value.errno == errno.EBADF
        assert info.value.filename == str(path)
        assert info.value.strerror == f"{os.strerror(errno.EBADF)} (from pwrite)"
        with pytest.raises(OSError, match=r"\(from write\)"):
            native.write_all(fd, b"y")
        with pytest.raises(OSError, match=r"\(from fallocate\)"):
            native.fallocate(fd, 0, 4096)
        with pytest.raises(OSError) as info:
            native.pread(fd, 1, -1)
        assert info.value.errno == errno.EINVAL
    with opened(path, os.O_WRONLY) as fd, pytest.raises(OSError) as info:
        native.pread(fd, 4, 0, path=str(path))
    assert info.value.errno == errno.EBADF and "(from pread)" in str(info.value)
    closed = os.open(path, os.O_RDONLY)
    os.close(closed)
    for call, op in ((lambda: native.fdatasync(closed), "fdatasync"),
                     (lambda: native.pread_into(closed, bytearray(4), 0), "pread")):
        with pytest.raises(OSError) as info:
            call()
        assert info.value.errno == errno.EBADF and f"(from {op})" in str(info.value)


def test_io_rejects_read_only_target_buffers(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    with opened(path, os.O_RDONLY) as fd, pytest.raises(TypeError, match="writable"):
        native.pread_into(fd, b"xyz", 0)


# ---- Probes -----------------------------------------------------------------------


def test_space_probe_matches_statvfs(tmp_path: Path) -> None:
    space = native.space_probe(tmp_path)
    st_ = os.statvfs(tmp_path)
    assert space.total_bytes == st_.f_blocks * st_.f_frsize
    assert space.total_inodes == st_.f_files
    slack = 64 << 20  # other writers share the filesystem
    assert abs(space.free_bytes - st_.f_bfree * st_.f_frsize) < slack
    assert abs(space.avail_bytes - st_.f_bavail * st_.f_frsize) < slack
    assert abs(space.free_inodes - st_.f_ffree) < 10_000
    assert space.avail_bytes <= space.free_bytes <= space.total_bytes


def test_space_probe_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError) as info:
        native.space_probe(missing)
    assert info.value.filename == str(missing) and "(from space_probe)" in str(info.value)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        native.space_probe(tmp_path / "file" / "below")  # a path through a regular file


def test_availability_probe_writes_and_reads_back(tmp_path: Path) -> None:
    latency = native.availability_probe(tmp_path)
    assert isinstance(latency, int) and latency > 0
    probe = tmp_path / ".logkeeper-probe"
    first = probe.read_bytes()
    assert len(first) == 4096
    assert native.availability_probe(str(tmp_path), 1000) > 0
    # A fresh nonce each time: the canary changes.
    assert probe.read_bytes()[:1000] != first[:1000]
    with pytest.raises(ValueError):
        native.availability_probe(tmp_path, 0)


def test_availability_probe_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        native.availability_probe(tmp_path / "gone")
    assert "(from availability_probe)" in str(info.value)


@contextlib.contextmanager
def read_only_dir(base: Path) -> Iterator[tuple[Path, int]]:
    """A directory the probe cannot write: a read-only tmpfs as root (root ignores
    permission bits), a mode-0555 directory otherwise."""
    target = base / "ro"
    target.mkdir()
    if os.geteuid() != 0:
        target.chmod(0o555)
        try:
            yield target, errno.EACCES
        finally:
            target.chmod(0o755)
        return
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs: {proc.stderr.strip()}")
    try:
        yield target, errno.EROFS
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_availability_probe_read_only_dir(tmp_path: Path) -> None:
    with read_only_dir(tmp_path) as (target, code):
        with pytest.raises(OSError) as info:
            native.availability_probe(target)
        assert info.value.errno == code
        assert info.value.filename == str(target)
        # The space probe only reads, so it still works there.
        assert native.space_probe(target).total_bytes >= 0


# ---- The allocator -----------------------------------------------------------------

# Six threads each malloc and hold a block, then glibc's malloc_info counts the arenas
# (its <heap nr=...> elements). A new thread's first malloc takes a new arena while
# there are fewer than the cap (8 a core by default).
_ARENAS = """
import ctypes, os, sys, tempfile, threading
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
{setup}
start = threading.Barrier(6)
held = []
def work():
    start.wait()
    held.append(libc.malloc(4096))
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
path = tempfile.mktemp()
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, f)
libc.fclose(f)
print(open(path).read().count("<heap nr="))
os.unlink(path)
"""


def _arenas(setup: str, **env: str) -> int:
    """The arenas of a fresh process that ran `setup` and then the six threads, under
    the suite's environment less any MALLOC_ARENA_MAX of its own, plus `env`."""
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    proc = subprocess.run([sys.executable, "-c", _ARENAS.format(setup=setup)],
                          capture_output=True, text=True, cwd=REPO, env={**base, **env},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


@pytest.mark.skipif(os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc's malloc only")
def test_the_daemon_keeps_one_malloc_arena_unless_malloc_arena_max_says_otherwise() -> None:
    assert _arenas("") > 1  # glibc's default: the threads got arenas of their own
    assert _arenas("import native; assert native.malloc_arena_max(1)") == 1
    daemon_start = "from daemon import app; app._limit_malloc_arenas()"
    assert _arenas(daemon_start) == 1
    # An operator's MALLOC_ARENA_MAX is glibc's to apply, and the daemon leaves it be.
    assert _arenas(daemon_start, MALLOC_ARENA_MAX="3") == 3
    with pytest.raises(ValueError, match=">= 1"):
        native.malloc_arena_max(0)


def _legacy_message(magic: int, attributes: int, value: bytes) -> bytes:
    """One old-format message (magic 0 or 1) with its offset and size; CRC left 0."""
    body = bytes([magic, attributes]) + (b"\0" * 8 if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    return struct.pack(">qi", 0, 4 + len(body)) + struct.pack(">I", 0) + body


def test_holds_compressed_reads_every_batch_header() -> None:
    from logstore.records import Codec, Record, build_batch
    plain = build_batch([Record(b"k", b"v" * 100, [], 1)])
    gzip = build_batch([Record(b"k", b"v" * 100, [], 1)], codec=Codec.GZIP)
    zstd = build_batch([Record(b"k", b"v" * 100, [], 1)], codec=Codec.ZSTD)
    assert not native.holds_compressed(plain)
    assert not native.holds_compressed(plain * 3)
    assert native.holds_compressed(gzip)
    assert native.holds_compressed(zstd)
    # The compressed one anywhere in the buffer, from bytes, bytearray or a memoryview.
    assert native.holds_compressed(plain + plain + gzip)
    assert native.holds_compressed(bytearray(plain + gzip))
    assert native.holds_compressed(memoryview(b"xx" + plain + gzip)[2:])
    # Old clients' messages: the attributes byte's codec bits.
    for magic in (0, 1):
        assert not native.holds_compressed(_legacy_message(magic, 0, b"abc"))
        assert native.holds_compressed(_legacy_message(magic, 2, b"abc"))
        assert native.holds_compressed(_legacy_message(magic, 0, b"a") + _legacy_message(magic, 1, b"b"))
    # A torn tail, a zero length or nothing at all ends the walk without a verdict.
    assert not native.holds_compressed(b"")
    assert not native.holds_compressed(plain + gzip[:20])
    assert not native.holds_compressed(plain + b"\0" * 64 + gzip)
    with pytest.raises(TypeError):
        native.holds_compressed("not bytes")
