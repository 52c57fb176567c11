"""The two messages that carry record bytes, coded by hand so the records are never copied.

Most other messages go through kafka-python's classes (daemon.api.protocol). These two
carry the bulk of the bytes, and kafka-python copies records at each step (a slice when
decoding, a join and a bytearray when encoding), so:

- `decode_produce` reads a Produce request (v0-v8) with each partition's records as a
  memoryview slice of the request frame, handed as it is to the log's append;
  `encode_produce` writes its answer (`ProduceAnswer`) with one struct per partition,
  since kafka-python's generic encoder of the small answer cost more than the append.
- `encode_fetch` writes a Fetch response (v0-v12) as a list of parts: bytes for the
  header and each partition's framing, and each partition's records as they came from
  the read (`SplicedRecords` that daemon.api.connections splices from pipes to the
  socket, or bytes: under SPLICE_MIN written inline with the framing). It is the one
  Fetch response encoder, for consumers and followers alike.
- `decode_fetch` reads a Fetch response (a follower's fetcher) with each partition's
  records as a memoryview slice of the response frame.
- `decode_fetch_request` reads a Fetch request (v0-v12), the request every consumer
  and follower sends: kafka-python's generic decoder of it was the largest single
  part of a fetch's time on the event loop (about 80 us of a 64 KiB fetch's 570).

The layouts are Kafka's FetchRequest.json, FetchResponse.json, ProduceRequest.json and
ProduceResponse.json at the versions
`protocol.SUPPORTED` serves (Fetch v12 is flexible: compact strings and arrays, tagged
fields; topic ids, v13+, are not served); tests/test_protocol.py checks them byte for
byte against kafka-python's encoder and decoder.

Errors: the decoders raise ValueError (or struct.error, IndexError) on bytes that do not
decode; daemon.api.protocol turns that into ProtocolError, which closes only the
connection it came on.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from ..storage.spliced import SPLICE_MIN, SplicedRecords
from .codec import I16 as _I16
from .codec import I32 as _I32
from .codec import put_count, put_name, put_string, response_head, seal_frame, uvarint

_I8 = struct.Struct(">b")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_PRODUCED = struct.Struct(">ihqq")  # index, error, base offset, log append time
_PRODUCED_V0 = struct.Struct(">ihq")  # index, error, base offset (v0-1)
_PARTITION_V0 = struct.Struct(">ihq")  # index, error, high watermark (Fetch v0-3)
_EPOCH_END = struct.Struct(">iq")

Records = bytes | memoryview | SplicedRecords


# ---- Produce requests ----


class ProducePartition(NamedTuple):
    index: int
    records: memoryview | None


class ProduceTopic(NamedTuple):
    name: str
    partition_data: list[ProducePartition]


@dataclass
class ProduceBody:
    """What a Produce request says (the names are kafka-python's, which handlers read)."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopic]


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int = 0):
        self.buf = buf
        self.pos = pos

    def int8(self) -> int:
        (v,) = _I8.unpack_from(self.buf, self.pos)
        self.pos += 1
        return v

    def int16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def int32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def int64(self) -> int:
        (v,) = _I64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("varint longer than 5 bytes")

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"{n} bytes at {self.pos} run past the {len(self.buf)}-byte frame")
        v = self.buf[self.pos:self.pos + n]
        self.pos += n
        return v

    def string(self, compact: bool = False) -> str | None:
        n = self.uvarint() - 1 if compact else self.int16()
        if n < 0:
            return None
        return str(self.take(n), "utf-8")

    def nbytes(self, compact: bool = False) -> memoryview | None:
        n = self.uvarint() - 1 if compact else self.int32()
        return None if n < 0 else self.take(n)

    def array_len(self, compact: bool = False) -> int:
        n = self.uvarint() - 1 if compact else self.int32()
        if n > len(self.buf) - self.pos:
            raise ValueError(f"array of {n} entries in a {len(self.buf)}-byte frame")
        return n

    def skip_tags(self) -> dict[int, memoryview]:
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags


def decode_produce(frame: bytes, body_at: int, version: int) -> ProduceBody:
    """A Produce request v0-v8 whose body starts at `body_at` (past the header)."""
    r = _Reader(memoryview(frame), body_at)
    transactional_id = r.string() if version >= 3 else None
    acks = r.int16()
    timeout_ms = r.int32()
    topics = []
    for _ in range(max(r.array_len(), 0)):
        name = r.string()
        if name is None:
            raise ValueError("a null topic name")
        parts = [ProducePartition(r.int32(), r.nbytes()) for _ in range(max(r.array_len(), 0))]
        topics.append(ProduceTopic(name, parts))
    return ProduceBody(transactional_id, acks, timeout_ms, topics)


# ---- Fetch requests ----


class FetchRequestPartition(NamedTuple):
    """One partition of a Fetch request (the names are kafka-python's, which handlers
    read); a field the request's version lacks has Kafka's default."""

    partition: int
    current_leader_epoch: int  # v9+
    fetch_offset: int
    last_fetched_epoch: int  # v12+
    log_start_offset: int  # v5+
    partition_max_bytes: int


class FetchRequestTopic(NamedTuple):
    topic: str
    partitions: list[FetchRequestPartition]


class ForgottenTopic(NamedTuple):
    topic: str
    partitions: list[int]


@dataclass
class FetchBody:
    """What a Fetch request says (kafka-python's names); Kafka's defaults where its
    version lacks a field. A follower's fetcher builds one to send (`encode_fetch_request`,
    through protocol.encode_request and daemon.wire.peer)."""

    API_KEY: ClassVar[int] = 1
    name: ClassVar[str] = "FetchRequest"

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int = 0x7FFFFFFF  # v3+
    isolation_level: int = 0  # v4+
    session_id: int = 0  # v7+
    session_epoch: int = -1  # v7+
    topics: list[FetchRequestTopic] = field(default_factory=list)
    forgotten_topics_data: list[ForgottenTopic] = field(default_factory=list)  # v7+
    rack_id: str = ""  # v11+
    cluster_id: str | None = None  # v12+, tagged field 0


# A partition's fixed fields by version: their struct, how its fields become a
# FetchRequestPartition's (Kafka's default, -1, for one the version lacks), and back.
_FETCH_PARTITION: tuple[tuple[struct.Struct, Any, Any], ...] = (
    (struct.Struct(">iqi"), lambda f: (f[0], -1, f[1], -1, -1, f[2]),  # v0-4
     lambda p: (p.partition, p.fetch_offset, p.partition_max_bytes)),
    (struct.Struct(">iqqi"), lambda f: (f[0], -1, f[1], -1, f[2], f[3]),  # v5-8
     lambda p: (p.partition, p.fetch_offset, p.log_start_offset, p.partition_max_bytes)),
    (struct.Struct(">iiqqi"), lambda f: (f[0], f[1], f[2], -1, f[3], f[4]),  # v9-11
     lambda p: (p.partition, p.current_leader_epoch, p.fetch_offset, p.log_start_offset,
                p.partition_max_bytes)),
    (struct.Struct(">iiqiqi"), lambda f: f, lambda p: p),  # v12: every field, in order
)


def _fetch_partition_layout(version: int) -> tuple[struct.Struct, Any, Any]:
    return _FETCH_PARTITION[0 if version < 5 else 1 if version < 9 else 2 if version < 12
                            else 3]


_FETCH_HEADER = struct.Struct(">hhi")  # api key, version, correlation id
_FETCH_HEAD = struct.Struct(">iii")  # replica id, max wait, min bytes
_FETCH_SESSION = struct.Struct(">ii")  # session id, session epoch (v7+)


def decode_fetch_request(frame: bytes | bytearray, body_at: int, version: int) -> FetchBody:
    """A Fetch request v0-v12 whose header's client id ends at `body_at` (v12's header
    tagged fields, request header v2, are read here)."""
    flexible = version >= 12
    r = _Reader(memoryview(frame), body_at)
    if flexible:
        r.skip_tags()  # the request header's
    replica_id, max_wait_ms, min_bytes = _FETCH_HEAD.unpack_from(r.buf, r.pos)
    r.pos += _FETCH_HEAD.size
    body = FetchBody(replica_id, max_wait_ms, min_bytes)
    if version >= 3:
        body.max_bytes = r.int32()
    if version >= 4:
        body.isolation_level = r.int8()
    if version >= 7:
        body.session_id, body.session_epoch = _FETCH_SESSION.unpack_from(r.buf, r.pos)
        r.pos += _FETCH_SESSION.size
    layout, fields_of, _ = _fetch_partition_layout(version)
    unpack, size, make = layout.unpack_from, layout.size, FetchRequestPartition._make
    for _ in range(max(r.array_len(flexible), 0)):
        topic = r.string(flexible)
        if topic is None:
            raise ValueError("a null topic name")
        partitions = []
        for _ in range(max(r.array_len(flexible), 0)):
            partitions.append(make(fields_of(unpack(r.buf, r.pos))))
            r.pos += size
            if flexible:
                r.skip_tags()
        body.topics.append(FetchRequestTopic(topic, partitions))
        if flexible:
            r.skip_tags()
    if version >= 7:
        for _ in range(max(r.array_len(flexible), 0)):
            topic = r.string(flexible)
            if topic is None:
                raise ValueError("a null forgotten topic name")
            gone = [r.int32() for _ in range(max(r.array_len(flexible), 0))]
            body.forgotten_topics_data.append(ForgottenTopic(topic, gone))
            if flexible:
                r.skip_tags()
    if version >= 11:
        rack = r.string(flexible)
        body.rack_id = rack if rack is not None else ""
    if flexible:
        cluster = r.skip_tags().get(0)
        if cluster is not None:
            body.cluster_id = _Reader(cluster).string(compact=True)
    return body


def encode_fetch_request(body: FetchBody, version: int, correlation_id: int,
                         client_id: str | None) -> bytes:
    """`body` as a framed Fetch request v0-v12 (size prefix, request header, body): what
    a follower sends its leader several times a second, where kafka-python's generic
    encoder took 60 us (hot) of each. The fields its version lacks are left out."""
    if not 0 <= version <= 12:
        raise ValueError(f"Fetch v{version} is not encoded here (v0-v12 are)")
    flexible = version >= 12
    buf = bytearray(4)  # the size prefix, filled in at the end
    buf += _FETCH_HEADER.pack(1, version, correlation_id)
    put_string(buf, client_id)
    if flexible:
        buf.append(0)  # request header v2: no tagged fields
    buf += _FETCH_HEAD.pack(body.replica_id, body.max_wait_ms, body.min_bytes)
    if version >= 3:
        buf += _I32.pack(body.max_bytes)
    if version >= 4:
        buf += _I8.pack(body.isolation_level)
    if version >= 7:
        buf += _FETCH_SESSION.pack(body.session_id, body.session_epoch)
    layout, _, fields_to = _fetch_partition_layout(version)
    put_count(buf, len(body.topics), flexible)
    for t in body.topics:
        put_name(buf, t.topic, flexible)
        put_count(buf, len(t.partitions), flexible)
        for p in t.partitions:
            buf += layout.pack(*fields_to(p))
            if flexible:
                buf.append(0)
        if flexible:
            buf.append(0)
    if version >= 7:
        put_count(buf, len(body.forgotten_topics_data), flexible)
        for f in body.forgotten_topics_data:
            put_name(buf, f.topic, flexible)
            put_count(buf, len(f.partitions), flexible)
            for index in f.partitions:
                buf += _I32.pack(index)
            if flexible:
                buf.append(0)
    if version >= 11:
        put_name(buf, body.rack_id, flexible)
    if flexible:
        if body.cluster_id is None:
            buf.append(0)
        else:
            tag = bytearray()
            put_name(tag, body.cluster_id, True)
            buf += b"\x01\x00" + uvarint(len(tag)) + tag  # one tagged field: ClusterId (0)
    struct.pack_into(">i", buf, 0, len(buf) - 4)
    return bytes(buf)


class ProducedPartition(NamedTuple):
    """One partition of a Produce response (the names are Kafka's schema's)."""

    index: int
    error_code: int
    base_offset: int = -1
    log_start_offset: int = -1
    error_message: str | None = None  # v8+
    log_append_time_ms: int = -1  # the batch's LogAppendTime, -1 for CreateTime (v2+)
    record_errors: Sequence[tuple[int, str]] = ()  # (batch_index, message) refused, v8+


class ProduceAnswer(NamedTuple):
    """A whole Produce response; `encode_produce` writes it."""

    topics: list[tuple[str, list[ProducedPartition]]]
    throttle_time_ms: int = 0


def encode_produce(answer: ProduceAnswer, version: int, correlation_id: int) -> bytearray:
    """The framed Produce response v0-v8 (size prefix, header v0, body)."""
    buf = response_head(correlation_id, False)
    buf += _I32.pack(len(answer.topics))
    for topic, partitions in answer.topics:
        name = topic.encode()
        buf += _I16.pack(len(name))
        buf += name
        buf += _I32.pack(len(partitions))
        for p in partitions:
            if version >= 2:
                buf += _PRODUCED.pack(p.index, p.error_code, p.base_offset,
                                      p.log_append_time_ms)
            else:
                buf += _PRODUCED_V0.pack(p.index, p.error_code, p.base_offset)
            if version >= 5:
                buf += _I64.pack(p.log_start_offset)
            if version >= 8:
                buf += _I32.pack(len(p.record_errors))
                for index, why in p.record_errors:
                    buf += _I32.pack(index)
                    put_string(buf, why)
                put_string(buf, p.error_message)
    if version >= 1:
        buf += _I32.pack(answer.throttle_time_ms)
    seal_frame(buf)
    return buf


# ---- Fetch responses ----


@dataclass
class FetchPartition:
    """One partition of a Fetch response (the names are Kafka's schema's)."""

    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Records = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), v12
    # (producer id, first offset) per aborted transaction in `records`: a read_committed
    # consumer's, in a log taken over from Kafka; None (null) otherwise.
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1  # v11+: the replica to fetch from instead (KIP-392)

    def release(self) -> None:
        """Close spliced records that will not be sent."""
        if isinstance(self.records, SplicedRecords):
            self.records.close()


@dataclass
class FetchAnswer:
    """A whole Fetch response; `encode_fetch` writes it, `release` drops its pipes."""

    error_code: int = 0
    session_id: int = 0
    throttle_time_ms: int = 0
    topics: list[tuple[str, list[FetchPartition]]] = field(default_factory=list)

    def release(self) -> None:
        for _, parts in self.topics:
            for p in parts:
                p.release()


def encode_fetch(answer: FetchAnswer, version: int, correlation_id: int) -> list[Any]:
    """The framed response (size prefix, header, body) as parts to send in order: bytes
    and bytearrays, and the records objects themselves (never copied here)."""
    flexible = version >= 12
    parts: list[Any] = []
    buf = response_head(correlation_id, flexible)
    if version >= 1:
        buf += _I32.pack(answer.throttle_time_ms)
    if version >= 7:
        buf += _I16.pack(answer.error_code)
        buf += _I32.pack(answer.session_id)
    put_count(buf, len(answer.topics), flexible)
    total = 0
    for topic, partitions in answer.topics:
        put_name(buf, topic, flexible)
        put_count(buf, len(partitions), flexible)
        for p in partitions:
            if version < 4:
                buf += _PARTITION_V0.pack(p.partition_index, p.error_code, p.high_watermark)
            else:
                buf += _PARTITION_V4.pack(p.partition_index, p.error_code, p.high_watermark,
                                          p.last_stable_offset)
            if version >= 5:
                buf += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if version < 4:
                pass  # no aborted transactions before v4
            elif aborted is None:
                buf += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                put_count(buf, len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    buf += _I64.pack(producer_id)
                    buf += _I64.pack(first_offset)
                    if flexible:
                        buf.append(0)  # the entry's tagged fields
            if version >= 11:
                buf += _I32.pack(p.preferred_read_replica)
            records = p.records
            size = len(records)
            put_count(buf, size, flexible)  # COMPACT_RECORDS or RECORDS: the same prefix
            if size:
                if isinstance(records, SplicedRecords) or size >= SPLICE_MIN:
                    parts.append(buf)
                    total += len(buf)
                    parts.append(records)
                    total += size
                    buf = bytearray()
                else:
                    buf += records
            if flexible:
                if p.diverging_epoch is not None:
                    # one tagged field, tag 0: EpochEndOffset {epoch, end offset, no tags}
                    buf += b"\x01\x00\x0d"
                    buf += _EPOCH_END.pack(*p.diverging_epoch)
                    buf += b"\x00"
                else:
                    buf.append(0)
        if flexible:
            buf.append(0)  # topic tagged fields
    if flexible:
        buf.append(0)  # response tagged fields
    parts.append(buf)
    total += len(buf)
    seal_frame(parts[0], total)
    return parts


class _DecodedPartition(NamedTuple):
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: memoryview | None
    diverging_epoch: tuple[int, int] | None


class _DecodedTopic(NamedTuple):
    topic: str
    partitions: list[_DecodedPartition]


class DecodedFetch(NamedTuple):
    error_code: int
    session_id: int
    responses: list[_DecodedTopic]


def decode_fetch(frame: bytes, version: int) -> DecodedFetch:
    """A Fetch response frame (without its size prefix, with its header) at `version`
    (4-12); records are memoryview slices of `frame`."""
    flexible = version >= 12
    r = _Reader(memoryview(frame))
    r.int32()  # correlation id: the caller checked it
    if flexible:
        r.skip_tags()
    r.int32()  # throttle time
    error_code = session_id = 0
    if version >= 7:
        error_code = r.int16()
        session_id = r.int32()
    topics = []
    for _ in range(max(r.array_len(flexible), 0)):
        name = r.string(flexible) or ""
        partitions = []
        for _ in range(max(r.array_len(flexible), 0)):
            index, code, hw, lso = _PARTITION_V4.unpack_from(r.buf, r.pos)
            r.pos += _PARTITION_V4.size
            log_start = r.int64() if version >= 5 else -1
            for _ in range(max(r.array_len(flexible), 0)):  # aborted transactions
                r.take(16)
                if flexible:
                    r.skip_tags()
            if version >= 11:
                r.int32()  # preferred read replica
            records = r.nbytes(flexible)
            diverging = None
            if flexible:
                tags = r.skip_tags()
                if 0 in tags:
                    epoch, end = _EPOCH_END.unpack_from(tags[0])
                    if epoch >= 0:
                        diverging = (epoch, end)
            partitions.append(_DecodedPartition(index, code, hw, lso, log_start, records,
                                                diverging))
        if flexible:
            r.skip_tags()
        topics.append(_DecodedTopic(name, partitions))
    return DecodedFetch(error_code, session_id, topics)
