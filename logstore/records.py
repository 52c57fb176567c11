"""Kafka record batches (magic 2): encoding, decoding, and legacy message-set recognition.

The encoder builds byte-exact batches (docs/formats.md) with the CRC-32C from the native
fast path. The decoder parses batch headers and records; compressed batches are
decoded where a well-kept library for the codec is installed (gzip always; snappy via
cramjam, lz4 via lz4, zstd via zstandard) and raise `UnsupportedCodecError` where not.
Malformed bytes raise `CorruptRecordError` naming the position; legacy magic 0/1
message sets are recognised and decoded when uncompressed, never a crash.
"""

from __future__ import annotations

import dataclasses
import enum
import gzip
import io
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import xxhash

import native

from .errors import CorruptRecordError, UnsupportedCodecError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch outside batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
CRC_START = 21
MAGIC = 2
# Where single fields start, for readers that need one field, not a parsed Batch.
ATTRIBUTES_AT = CRC_START  # int16: the CRC covers from here to the batch's end
MAGIC_AT = 16  # int8, in a batch and in a legacy message alike
PRODUCER_AT = 43  # producerId, producerEpoch, baseSequence, recordsCount (PRODUCER)
PRODUCER = struct.Struct(">qhii")
assert HEADER_SIZE == PRODUCER_AT + PRODUCER.size
_ATTRIBUTES = struct.Struct(">h")

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_TIMESTAMP = -1


class Codec(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Record:
    """One record. `offset`/`timestamp` are absolute; None in input means "assign"."""

    key: bytes | None = None
    value: bytes | None = None
    headers: list[Header] = field(default_factory=list)
    timestamp: int | None = None
    offset: int | None = None


# ---- varints (zigzag, protobuf style) ----


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    z = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Return (value, next position); CorruptRecordError past the end or over 10 bytes."""
    shift = 0
    z = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of the record", position=pos)
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes", position=pos)
    return (z >> 1) ^ -(z & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def _read_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecordError(f"field of {n} bytes runs past the end of the record", position=pos)
    return bytes(buf[pos : pos + n]), pos + n


# ---- codecs ----


def _compress(codec: Codec, data: bytes, level: int | None = None) -> bytes:
    if codec is Codec.NONE:
        return data
    if codec is Codec.GZIP:
        return gzip.compress(data, compresslevel=6 if level in (None, -1) else level, mtime=0)
    try:
        if codec is Codec.LZ4:
            import lz4.frame

            # Independent blocks: the LZ4 frame every Kafka client's reader takes. Its
            # highest level is 16 (Kafka's range ends at 17, the same compression).
            return lz4.frame.compress(data, block_linked=False,
                                      compression_level=0 if level is None else min(level, 16))
        if codec is Codec.ZSTD:
            import zstandard

            return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
        if codec is Codec.SNAPPY:
            import cramjam

            return _xerial_snappy_frame(bytes(cramjam.snappy.compress_raw(data)))
    except ImportError as err:
        raise UnsupportedCodecError(f"codec {codec.name} needs {err.name}, not installed") from err
    raise UnsupportedCodecError(f"unknown codec {codec}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _xerial_snappy_frame(block: bytes) -> bytes:
    # Kafka's Java clients write snappy in xerial's framing: magic, version 1, compat 1,
    # then length-prefixed raw blocks.
    return _XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


def _decompress(codec: Codec, data: bytes | memoryview) -> bytes:
    if codec is Codec.NONE:
        return bytes(data)
    try:
        if codec is Codec.GZIP:
            return gzip.decompress(bytes(data))
        if codec is Codec.LZ4:
            import lz4.frame

            return lz4.frame.decompress(bytes(data))
        if codec is Codec.ZSTD:
            import zstandard

            try:
                with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(data))) as r:
                    return r.read()
            except zstandard.ZstdError as err:
                raise CorruptRecordError(f"ZSTD payload does not decompress: {err}") from err
        if codec is Codec.SNAPPY:
            import cramjam

            raw = bytes(data)
            try:
                if not raw.startswith(_XERIAL_MAGIC):
                    return bytes(cramjam.snappy.decompress_raw(raw))
                out = bytearray()
                pos = 16
                while pos < len(raw):
                    (n,) = struct.unpack_from(">i", raw, pos)
                    out += bytes(cramjam.snappy.decompress_raw(raw[pos + 4 : pos + 4 + n]))
                    pos += 4 + n
                return bytes(out)
            except cramjam.DecompressionError as err:
                raise CorruptRecordError(f"SNAPPY payload does not decompress: {err}") from err
    except ImportError as err:
        raise UnsupportedCodecError(
            f"codec {codec.name} needs the Python package {err.name}, which is not installed"
        ) from err
    except (OSError, EOFError, ValueError, RuntimeError, struct.error, zlib.error) as err:
        raise CorruptRecordError(f"{codec.name} payload does not decompress: {err}") from err
    raise UnsupportedCodecError(f"unknown codec id {int(codec)}")


# Kafka's LZ4 frames in magic 0 messages carry the header checksum its first (0.8)
# writer computed over the frame's magic number too (KAFKA-3160); Kafka still writes
# them so for magic 0 and skips the check when reading magic 0 (Lz4BlockOutputStream's
# useBrokenFlagDescriptorChecksum, Lz4BlockInputStream's ignoreFlagDescriptorChecksum).
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_CONTENT_SIZE_FLAG = 0x08
def _lz4_header_checksum(frame: bytes | bytearray, *, kafka_0_8: bool) -> tuple[int, int]:
    """(where the LZ4 frame's header checksum byte is, its value: over the descriptor, or
    with `kafka_0_8` over the magic number and descriptor, as magic 0 messages hold it);
    CorruptRecordError when `frame` does not start an LZ4 frame."""
    if len(frame) < 7 or frame[:4] != _LZ4_FRAME_MAGIC:
        raise CorruptRecordError("LZ4 payload does not start an LZ4 frame")
    at = 6 + (8 if frame[4] & _LZ4_CONTENT_SIZE_FLAG else 0)
    if at >= len(frame):
        raise CorruptRecordError("LZ4 payload ends in its frame descriptor")
    return at, (xxhash.xxh32_intdigest(bytes(frame[0 if kafka_0_8 else 4:at])) >> 8) & 0xFF


def _legacy_compress(magic: int, codec: Codec, data: bytes) -> bytes:
    """A compressed magic 0/1 wrapper's value as Kafka's MemoryRecordsBuilder writes it:
    LZ4 frames without the content size, their header checksum Kafka 0.8's under magic 0."""
    if codec is not Codec.LZ4:
        return _compress(codec, data)
    try:
        import lz4.frame
    except ImportError as err:
        raise UnsupportedCodecError(f"codec LZ4 needs {err.name}, not installed") from err
    frame = bytearray(lz4.frame.compress(data, block_linked=False, store_size=False))
    if magic == 0:
        at, frame[at] = _lz4_header_checksum(frame, kafka_0_8=True)
    return bytes(frame)


def _legacy_decompress(magic: int, codec: Codec, data: bytes | memoryview) -> bytes:
    """A compressed magic 0/1 wrapper's value, decompressed; a magic 0 LZ4 frame's
    header checksum is not checked (any old writer's is taken, as Kafka does)."""
    if codec is Codec.LZ4 and magic == 0:
        frame = bytearray(data)
        at, frame[at] = _lz4_header_checksum(frame, kafka_0_8=False)
        data = frame
    return _decompress(codec, data)


def compress(codec: Codec, data: bytes) -> bytes:
    """A records area compressed with `codec` as producers write it (the log cleaner's
    rewrite of a compressed batch); UnsupportedCodecError without the codec's library."""
    return _compress(codec, data)


def decompress(codec: Codec, data: bytes | memoryview) -> bytes:
    """A batch's compressed records area, decompressed; CorruptRecordError if it is not
    valid, UnsupportedCodecError without the codec's library."""
    return _decompress(codec, data)


def _whole_v2_batches(view: memoryview) -> Iterator[tuple[int, int]]:
    """(start, end) of each whole magic-2 batch in `view`, in order; legacy messages and
    a cut last batch are stepped over."""
    pos = 0
    while pos + LOG_OVERHEAD <= len(view):
        (length,) = struct.unpack_from(">i", view, pos + 8)
        if length < 0:
            return  # not framing: the caller's data was to be checked first
        end = pos + LOG_OVERHEAD + length
        if view[pos + MAGIC_AT] == MAGIC and end <= len(view):
            yield pos, end
        pos = end


CODEC_OF = {"uncompressed": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY,
            "lz4": Codec.LZ4, "zstd": Codec.ZSTD}  # compression.type's codecs


def recompress(data: bytes | bytearray | memoryview, codec: Codec, level: int | None = None
               ) -> bytes | bytearray | memoryview:
    """`data`'s magic-2 batches with their records in `codec` (a topic's compression.type,
    Kafka's LogValidator): a batch in another codec has its records area decompressed
    and compressed again, and its header's codec, length and CRC rewritten (records,
    offsets, timestamps and producer fields unchanged); a batch already in `codec`, a
    control batch and old Kafka's legacy messages stay as they are; `level` is the
    codec's (compression.<codec>.level, None: the library's default). `data` itself when
    nothing changes. Only for data whose framing and CRCs were checked: a corrupt batch
    must be refused, not given a new CRC. CorruptRecordError for a records area that
    does not decompress, UnsupportedCodecError for a codec id Kafka does not define."""
    view = memoryview(data)
    parts: list[bytes | memoryview] = []
    changed = False
    done = 0
    for pos, end in _whole_v2_batches(view):
        (attributes,) = _ATTRIBUTES.unpack_from(view, pos + ATTRIBUTES_AT)
        old = attributes & ATTR_CODEC_MASK
        if old == codec or attributes & ATTR_CONTROL:
            continue
        if old > Codec.ZSTD:
            raise UnsupportedCodecError(f"batch at {pos}: unknown codec id {old}")
        raw = _decompress(Codec(old), view[pos + HEADER_SIZE:end])
        batch = bytearray(view[pos:pos + HEADER_SIZE]) + _compress(codec, raw, level)
        struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
        _ATTRIBUTES.pack_into(batch, ATTRIBUTES_AT, (attributes & ~ATTR_CODEC_MASK) | codec)
        struct.pack_into(">I", batch, 17, native.crc32c(memoryview(batch)[CRC_START:]))
        parts += [view[done:pos], batch]
        done = end
        changed = True
    if not changed:
        return data
    parts.append(view[done:])
    return b"".join(parts)


MAX_TIMESTAMP_AT = 35  # int64, in a magic-2 batch header
_MAX_TIMESTAMP = struct.Struct(">q")


def stamp_log_append_time(data: bytes | bytearray | memoryview, now_ms: int) -> bytearray:
    """A copy of `data` whose magic-2 batches carry LogAppendTime `now_ms` (a topic's
    message.timestamp.type, Kafka's setMaxTimestamp): the timestamp-type attribute set,
    the max timestamp `now_ms`, the CRC rewritten; records untouched (a reader takes
    the batch's max timestamp for each). Old Kafka's legacy messages stay as they came.
    Only for data whose framing and CRCs were checked."""
    out = bytearray(data)
    view = memoryview(out)
    for pos, end in _whole_v2_batches(view):
        (attributes,) = _ATTRIBUTES.unpack_from(out, pos + ATTRIBUTES_AT)
        _ATTRIBUTES.pack_into(out, pos + ATTRIBUTES_AT, attributes | ATTR_LOG_APPEND_TIME)
        _MAX_TIMESTAMP.pack_into(out, pos + MAX_TIMESTAMP_AT, now_ms)
        struct.pack_into(">I", out, pos + 17, native.crc32c(view[pos + CRC_START:end]))
    view.release()
    return out


# ---- encoding ----


def _as_record(item: Record | tuple) -> Record:
    if isinstance(item, Record):
        return item
    if isinstance(item, tuple) and 1 <= len(item) <= 4:
        return Record(*item)
    raise TypeError(f"expected a Record or (key, value[, headers[, timestamp]]), got {item!r}")


def encode_record(out: bytearray, rec: Record, offset_delta: int, timestamp_delta: int) -> None:
    body = bytearray(b"\x00")  # record attributes: unused
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, rec.key)
    _write_bytes(body, rec.value)
    write_varint(body, len(rec.headers))
    for hkey, hvalue in rec.headers:
        _write_bytes(body, hkey.encode("utf-8"))
        _write_bytes(body, hvalue)
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Iterable[Record | tuple],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    codec: Codec = Codec.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """Encode records as one magic-2 batch. Records without a timestamp get now (ms)."""
    recs = [_as_record(r) for r in records]
    if not recs:
        raise ValueError("a record batch needs at least one record")
    now = int(time.time() * 1000)
    stamps = [r.timestamp if r.timestamp is not None else now for r in recs]
    if base_timestamp is None:
        base_timestamp = stamps[0]
    body = bytearray()
    for i, (rec, ts) in enumerate(zip(recs, stamps, strict=True)):
        delta = rec.offset - base_offset if rec.offset is not None else i
        encode_record(body, rec, delta, ts - base_timestamp)
    last_delta = (recs[-1].offset - base_offset) if recs[-1].offset is not None else len(recs) - 1
    payload = _compress(Codec(codec), bytes(body))
    attributes = int(codec) & ATTR_CODEC_MASK
    if log_append_time:
        attributes |= ATTR_LOG_APPEND_TIME
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    batch = bytearray(HEADER_SIZE) + payload
    HEADER.pack_into(
        batch, 0, base_offset, len(batch) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0,
        attributes, last_delta, base_timestamp, max(stamps), producer_id, producer_epoch,
        base_sequence, len(recs),
    )
    struct.pack_into(">I", batch, 17, native.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


# ---- decoding ----


@dataclass(frozen=True)
class Batch:
    """A decoded magic-2 batch header over its bytes; `records()` decodes lazily."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    data: memoryview = field(repr=False)

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & ATTR_CODEC_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    def crc_valid(self) -> bool:
        return native.crc32c(self.data[CRC_START:]) == self.crc

    def records(self) -> list[Record]:
        try:
            codec = self.codec
        except ValueError as err:
            raise UnsupportedCodecError(
                f"batch at {self.position}: unknown codec id {self.attributes & 7}"
            ) from err
        payload = memoryview(_decompress(codec, self.data[HEADER_SIZE:]))
        out = []
        pos = 0
        for _ in range(self.records_count):
            length, pos = read_varint(payload, pos)
            end = pos + length
            if length < 0 or end > len(payload):
                raise CorruptRecordError(
                    f"batch at {self.position}: record of {length} bytes runs past the batch",
                    position=self.position,
                )
            pos += 1  # record attributes
            ts_delta, pos = read_varint(payload, pos)
            off_delta, pos = read_varint(payload, pos)
            key, pos = _read_bytes(payload, pos)
            value, pos = _read_bytes(payload, pos)
            nheaders, pos = read_varint(payload, pos)
            headers: list[Header] = []
            for _ in range(max(nheaders, 0)):
                hkey, pos = _read_bytes(payload, pos)
                hvalue, pos = _read_bytes(payload, pos)
                headers.append(((hkey or b"").decode("utf-8", "replace"), hvalue))
            if pos != end:
                raise CorruptRecordError(
                    f"batch at {self.position}: record length {length} disagrees with its fields",
                    position=self.position,
                )
            timestamp = (
                self.max_timestamp if self.log_append_time else self.base_timestamp + ts_delta
            )
            out.append(Record(key, value, headers, timestamp, self.base_offset + off_delta))
        if pos != len(payload):
            raise CorruptRecordError(  # Kafka's "records still remaining"
                f"batch at {self.position}: {len(payload) - pos} bytes of records past its "
                f"{self.records_count} records",
                position=self.position,
            )
        return out


@dataclass(frozen=True)
class LegacyMessage:
    """One magic 0/1 message (old Kafka), recognised so readers can report it."""

    position: int
    offset: int
    size: int
    magic: int
    crc: int
    attributes: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def last_offset(self) -> int:
        return self.offset

    def messages(self, *, verify_crc: bool = False) -> list[LegacyMessage]:
        """The messages this one stands for: itself, or a compressed wrapper's inner
        ones with their absolute offsets (magic 1 stores them relative to the wrapper's,
        which is the last one's; magic 0 stores them absolute), and under LogAppendTime
        the wrapper's timestamp, as Kafka's deep iterator gives them. CorruptRecordError
        when the wrapper does not decompress or frame, or with `verify_crc` when an inner
        message's CRC-32 is wrong (Kafka's LogValidator checks them on a produce);
        UnsupportedCodecError without the codec's library."""
        if not self.codec:
            return [self]
        raw = _legacy_decompress(self.magic, Codec(self.codec), self.value or b"")
        inner = list(iter_batches(raw, base_position=self.position, verify_crc=False))
        if not all(isinstance(m, LegacyMessage) for m in inner):
            raise CorruptRecordError(f"legacy wrapper at {self.position} holds a record batch",
                                     position=self.position, reason="magic")
        if verify_crc:
            at = 0
            for m in inner:
                if zlib.crc32(memoryview(raw)[at + _LEGACY_CRC_AT:at + m.size]) != m.crc:
                    raise CorruptRecordError(
                        f"legacy wrapper at {self.position}: inner message at {m.offset} "
                        "fails its CRC-32", position=self.position, reason="crc")
                at += m.size
        if self.magic == 1 and inner:
            last = inner[-1].offset
            stamped = self.attributes & ATTR_LOG_APPEND_TIME
            inner = [dataclasses.replace(m, offset=self.offset - last + m.offset,
                                         timestamp=self.timestamp if stamped else m.timestamp)
                     for m in inner]
        return inner


def _decode_legacy(view: memoryview, pos: int, position: int) -> LegacyMessage:
    offset, size, crc, magic, attributes = struct.unpack_from(">qiIbb", view, pos)
    cur = pos + 18
    timestamp = None
    if magic == 1:
        (timestamp,) = struct.unpack_from(">q", view, cur)
        cur += 8
    (klen,) = struct.unpack_from(">i", view, cur)
    cur += 4
    key = None if klen < 0 else bytes(view[cur : cur + klen])
    cur += max(klen, 0)
    (vlen,) = struct.unpack_from(">i", view, cur)
    cur += 4
    value = None if vlen < 0 else bytes(view[cur : cur + vlen])
    return LegacyMessage(position, offset, size + LOG_OVERHEAD, magic, crc, attributes,
                         timestamp, key, value)


# ---- old clients' message sets (Produce v0-2, Fetch v0-3) ----

_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LEGACY_CRC_AT = 16  # a legacy message's CRC-32 covers from its magic on


def legacy_to_batch(buf: bytes | memoryview) -> bytes:
    """A Produce v0-2 request's message set (magic 0/1) as one magic-2 batch, as Kafka 3.x's
    leader up-converts it (LogValidator): each message's key and value, its timestamp
    (none, -1, under magic 0), offsets from 0, in the codec of the compressed wrappers.
    CorruptRecordError when a message's CRC-32 is wrong, when a magic-2 batch is among
    them, or when there is no message."""
    view = memoryview(buf)
    recs: list[Record] = []
    codec = Codec.NONE
    for m in iter_batches(view, verify_crc=False):
        if not isinstance(m, LegacyMessage):
            raise CorruptRecordError(f"a record batch at {m.position} in a magic 0/1 message set",
                                     position=m.position, reason="magic")
        crc = zlib.crc32(view[m.position + _LEGACY_CRC_AT:m.position + m.size])
        if crc != m.crc:
            raise CorruptRecordError(f"message at {m.position}: CRC-32 mismatch",
                                     position=m.position, reason="crc")
        if m.codec:
            codec = Codec(m.codec)
        for inner in m.messages(verify_crc=True):
            stamp = inner.timestamp if inner.timestamp is not None else NO_TIMESTAMP
            recs.append(Record(inner.key, inner.value, [], stamp))
    if not recs:
        raise CorruptRecordError("an empty message set", position=0, reason="length")
    return build_batch(recs, codec=codec)


def decode_legacy(buf: bytes | memoryview, position: int = 0) -> LegacyMessage:
    """The magic 0/1 message at buf[0] (its file `position` for messages)."""
    return _decode_legacy(memoryview(buf), 0, position)


def legacy_wrapper(wrapper: LegacyMessage, inner: list[LegacyMessage]) -> bytearray:
    """A compressed magic 0/1 wrapper like `wrapper` (its magic, codec and timestamp
    type) holding the messages `inner` (absolute offsets, as `LegacyMessage.messages`
    gives them), as Kafka's MemoryRecordsBuilder writes one: magic 1 stores the inner
    offsets relative to the first, magic 0 absolute; the wrapper's offset is the last
    one's, its timestamp the largest (or, under LogAppendTime, its own)."""
    magic = wrapper.magic
    first = inner[0].offset
    body = bytearray()
    for m in inner:
        _legacy_message(body, magic, m.offset - first if magic == 1 else m.offset,
                        m.attributes & ~ATTR_CODEC_MASK, _stamp(m.timestamp), m.key, m.value)
    if magic == 1 and not wrapper.attributes & ATTR_LOG_APPEND_TIME:
        stamp = max(_stamp(m.timestamp) for m in inner)
    else:
        stamp = _stamp(wrapper.timestamp)
    out = bytearray()
    _legacy_message(out, magic, inner[-1].offset, wrapper.attributes, stamp, None,
                    _legacy_compress(magic, Codec(wrapper.codec), bytes(body)))
    return out


def _stamp(timestamp: int | None) -> int:
    return NO_TIMESTAMP if timestamp is None else timestamp


def _legacy_message(out: bytearray, magic: int, offset: int, attributes: int,
                    timestamp: int, key: bytes | None, value: bytes | None) -> None:
    """Append one magic 0/1 message to `out`, its size and CRC-32 filled in."""
    start = len(out)
    out += _LEGACY_HEAD.pack(offset, 0, 0, magic, attributes)
    if magic == 1:
        out += struct.pack(">q", timestamp)
    for data in (key, value):
        if data is None:
            out += b"\xff\xff\xff\xff"
        else:
            out += struct.pack(">i", len(data))
            out += data
    struct.pack_into(">iI", out, start + 8, len(out) - start - LOG_OVERHEAD,
                     zlib.crc32(memoryview(out)[start + _LEGACY_CRC_AT:]))


def batches_to_legacy(buf: bytes | memoryview, magic: int, first_offset: int) -> bytes:
    """Read log bytes as magic `magic` (0 or 1) messages for a Fetch v0-3, as Kafka's
    RecordsUtil.downConvert does: a legacy message of `magic` or older goes as it is
    stored; any other is rebuilt in `magic`, keys, values and (magic 1) timestamps and
    timestamp type kept, headers dropped (the old formats have none). A compressed batch
    becomes one wrapper in its codec holding all its records (the client steps over those
    before its fetch offset; inner offsets relative to the first under magic 1, absolute
    under magic 0, the wrapper's the last one's); an uncompressed one a message per record
    from `first_offset`. Control batches are left out. The old formats have no zstd: a
    zstd batch ends the answer, and one before any record raises UnsupportedCodecError
    (Kafka's UNSUPPORTED_COMPRESSION_TYPE). A torn last batch (a read cut at its size
    limit) ends the answer, as the client would drop it."""
    out = bytearray()
    try:
        for b in iter_batches(buf, verify_crc=False):
            if isinstance(b, LegacyMessage):
                if b.magic <= magic:
                    out += memoryview(buf)[b.position:b.position + b.size]
                    continue
                stamped = bool(b.attributes & ATTR_LOG_APPEND_TIME)
                kept = [(m.offset, _stamp(m.timestamp), m.key, m.value) for m in b.messages()]
                _legacy_converted(out, magic, Codec(b.codec), stamped, _stamp(b.timestamp),
                                  kept, first_offset)
                continue
            if b.is_control:
                continue
            if b.codec == Codec.ZSTD:
                if not out:
                    raise UnsupportedCodecError(
                        f"batch at offset {b.base_offset}: down-conversion of zstd-compressed "
                        f"batches to magic {magic} is not supported")
                break
            if not b.codec and b.last_offset < first_offset:
                continue
            kept = []
            for r in b.records():
                assert r.offset is not None and r.timestamp is not None
                kept.append((r.offset, r.timestamp, r.key, r.value))
            _legacy_converted(out, magic, Codec(b.codec), b.log_append_time, b.max_timestamp,
                              kept, first_offset)
    except CorruptRecordError as err:
        if err.reason != "torn":
            raise
    return bytes(out)


def _legacy_converted(out: bytearray, magic: int, codec: Codec, log_append_time: bool,
                      max_timestamp: int,
                      records: list[tuple[int, int, bytes | None, bytes | None]],
                      first_offset: int) -> None:
    """Append a batch's `records` (offset, timestamp, key, value) to `out` as magic
    `magic` messages, as Kafka's MemoryRecordsBuilder writes them (batches_to_legacy):
    uncompressed, one message per record from `first_offset`; compressed, one wrapper in
    `codec` of them all. Under LogAppendTime (magic 1) each carries the batch's time."""
    attributes = ATTR_LOG_APPEND_TIME if log_append_time and magic else 0
    if log_append_time:
        records = [(o, max_timestamp, k, v) for o, _, k, v in records]
    if not codec:
        for offset, timestamp, key, value in records:
            if offset >= first_offset:
                _legacy_message(out, magic, offset, attributes, timestamp, key, value)
        return
    if not records:
        return
    first = records[0][0]
    body = bytearray()
    for offset, timestamp, key, value in records:
        _legacy_message(body, magic, offset - first if magic else offset, attributes,
                        timestamp, key, value)
    stamp = max_timestamp if log_append_time else max(t for _, t, _, _ in records)
    _legacy_message(out, magic, records[-1][0], attributes | codec, stamp, None,
                    _legacy_compress(magic, codec, bytes(body)))


def batch_attributes(buf: bytes | memoryview) -> int | None:
    """The attributes of the batch at buf[0], None when `buf` is too short to hold them."""
    if len(buf) < ATTRIBUTES_AT + _ATTRIBUTES.size:
        return None
    return _ATTRIBUTES.unpack_from(buf, ATTRIBUTES_AT)[0]


def batch_log_append_time(buf: bytes | memoryview) -> int:
    """The LogAppendTime the batch at buf[0] was stamped with (its max timestamp), -1
    for a CreateTime batch or when `buf` is shorter than a batch header."""
    if len(buf) < HEADER_SIZE or not _ATTRIBUTES.unpack_from(buf, ATTRIBUTES_AT)[0] \
            & ATTR_LOG_APPEND_TIME:
        return -1
    return _MAX_TIMESTAMP.unpack_from(buf, MAX_TIMESTAMP_AT)[0]


def batch_producer(buf: bytes | memoryview) -> tuple[int, int, int, int] | None:
    """(producerId, producerEpoch, baseSequence, recordsCount) of the batch at buf[0];
    None when `buf` is shorter than a batch header. Framing is not checked."""
    if len(buf) < HEADER_SIZE:
        return None
    return PRODUCER.unpack_from(buf, PRODUCER_AT)


CONTROL_ABORT = 0  # a control record's type (its key): Kafka's ControlRecordType
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def control_batch(producer_id: int, producer_epoch: int, *, commit: bool,
                  coordinator_epoch: int, timestamp: int | None = None) -> bytes:
    """A transaction marker as a transaction coordinator has it written (Kafka's
    EndTransactionMarker): a control batch of one record whose key is (version 0, type
    COMMIT or ABORT) and whose value is (version 0, coordinator epoch)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch([Record(key, value, timestamp=timestamp)], producer_id=producer_id,
                       producer_epoch=producer_epoch, transactional=True, control=True)


def control_record(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """(type, coordinator epoch) of the control batch at buf[pos] (never compressed: its
    first record is read in place); (-1, -1) for a control record that is not a
    transaction marker or does not parse."""
    view = memoryview(buf)
    try:
        at = pos + HEADER_SIZE
        _, at = read_varint(view, at)  # record length
        at += 1  # attributes
        _, at = read_varint(view, at)  # timestamp delta
        _, at = read_varint(view, at)  # offset delta
        key_len, at = read_varint(view, at)
        if key_len < _CONTROL_KEY.size:
            return -1, -1
        _, kind = _CONTROL_KEY.unpack_from(view, at)
        at += key_len
        value_len, at = read_varint(view, at)
        epoch = _CONTROL_VALUE.unpack_from(view, at)[1] if value_len >= _CONTROL_VALUE.size \
            else -1
    except (struct.error, IndexError, ValueError, CorruptRecordError):
        return -1, -1
    return (kind, epoch) if kind in (CONTROL_ABORT, CONTROL_COMMIT) else (-1, -1)


def parse_batch_header(buf: bytes | memoryview, pos: int = 0, position: int | None = None) -> Batch:
    """Decode the batch starting at buf[pos]; checks framing, not the CRC."""
    view = memoryview(buf)
    where = pos if position is None else position
    if len(view) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at {where}: {len(view) - pos} bytes left, a header needs {HEADER_SIZE}",
            position=where, reason="torn",
        )
    fields = HEADER.unpack_from(view, pos)
    base_offset, batch_length, ple, magic = fields[:4]
    if magic != MAGIC:
        raise CorruptRecordError(f"batch at {where}: magic {magic}, expected 2", position=where,
                                 reason="magic")
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at {where}: batchLength {batch_length} below {MIN_BATCH_LENGTH}",
            position=where, reason="length",
        )
    end = pos + batch_length + LOG_OVERHEAD
    if end > len(view):
        raise CorruptRecordError(
            f"batch at {where}: {batch_length + LOG_OVERHEAD} bytes, only {len(view) - pos} left",
            position=where, reason="torn",
        )
    return Batch(where, *fields, data=view[pos:end])


def iter_batches(buf: bytes | memoryview, *, base_position: int = 0,
                 verify_crc: bool = True) -> Iterator[Batch | LegacyMessage]:
    """Yield each batch (or legacy message) in buf; CorruptRecordError at the first bad one."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        position = base_position + pos
        if len(view) - pos > MAGIC_AT and view[pos + MAGIC_AT] in (0, 1):
            try:
                msg = _decode_legacy(view, pos, position)
            except struct.error as err:
                raise CorruptRecordError(f"legacy message at {position} is truncated",
                                         position=position, reason="torn") from err
            if msg.size < 26 or pos + msg.size > len(view):
                raise CorruptRecordError(f"legacy message at {position}: bad size {msg.size}",
                                         position=position, reason="length")
            yield msg
            pos += msg.size
            continue
        batch = parse_batch_header(view, pos, position)
        if verify_crc and not batch.crc_valid():
            raise CorruptRecordError(f"batch at {position}: CRC-32C mismatch", position=position,
                                     reason="crc")
        yield batch
        pos += batch.size


RecordErrors = list[tuple[int, str]]  # (the record's index in its batch, why)


def check_compressed_records(buf: bytes | bytearray | memoryview) -> None:
    """Kafka's LogValidator reading a leader's compressed batches without their keys and
    values (skipKeyValueIterator): each one's records area must decompress and frame
    exactly its header's count of records. CorruptRecordError names the first that does
    not (UnsupportedCodecError: a codec without its library). Uncompressed and control
    batches are not read; an old magic 0/1 wrapper's messages are."""
    for batch in iter_batches(buf, verify_crc=False):
        if isinstance(batch, LegacyMessage):
            if batch.codec:
                batch.messages()
            continue
        if batch.is_control or not batch.attributes & ATTR_CODEC_MASK:
            continue
        try:
            codec = batch.codec
        except ValueError as err:
            raise UnsupportedCodecError(
                f"batch at {batch.position}: unknown codec id {batch.attributes & 7}") from err
        payload = _decompress(codec, batch.data[HEADER_SIZE:])
        pos, end, count = 0, len(payload), 0
        while pos < end:
            length, pos = read_varint(payload, pos)
            if length <= 0:
                break
            pos += length
            count += 1
        if pos != end or count != batch.records_count:
            raise CorruptRecordError(
                f"batch at {batch.position}: its {codec.name} records area holds "
                f"{count} records in {end} bytes where its header says {batch.records_count}",
                position=batch.position)


def record_errors(buf: bytes | memoryview, where: str, *, keys: bool,
                  bounds: tuple[int, int] | None) -> tuple[int, RecordErrors, bool] | None:
    """Kafka's LogValidator.validateRecord over a leader's incoming batches: the first
    batch (its position) holding records Kafka refuses, with each such record's index
    in the batch and Kafka's words for it, and whether a timestamp was among the
    reasons (Kafka then answers INVALID_TIMESTAMP); None when every record passes. `keys`: a
    record needs a key (a compacted topic). `bounds`: (lowest, highest) CreateTime
    timestamp taken, in ms (message.timestamp.before/after.max.ms around now); records
    without a timestamp pass, as Kafka's. Control batches are skipped. Framing errors
    raise CorruptRecordError, as the decoder does."""
    for batch in iter_batches(buf, verify_crc=False):
        if isinstance(batch, LegacyMessage):
            found = [(m.offset, m.key, m.timestamp) for m in batch.messages()]
        elif batch.is_control:
            continue
        else:
            found = [(r.offset, r.key, r.timestamp) for r in batch.records()]
        errors = []
        timestamps = False
        for index, (offset, key, timestamp) in enumerate(found):
            if keys and key is None:
                errors.append((index, "Compacted topic cannot accept message without key in "
                                      f"topic partition {where}"))
            elif bounds is not None and timestamp not in (None, NO_TIMESTAMP) \
                    and not bounds[0] <= timestamp <= bounds[1]:
                timestamps = True
                errors.append((index, f"Timestamp {timestamp} of message with offset {offset} "
                                      "is out of range. The timestamp should be within "
                                      f"[{bounds[0]}, {bounds[1]}]"))
        if errors:
            return batch.position, errors, timestamps
    return None
