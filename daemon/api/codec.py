"""Kafka's primitive types as the hand-coded messages write them
(daemon.api.record_messages, daemon.api.metadata_messages): lengths, strings and
varints, classic and compact (flexible versions, KIP-482)."""

from __future__ import annotations

import struct

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


def response_head(correlation_id: int, flexible: bool) -> bytearray:
    """A response frame's start: room for its size prefix (`seal_frame` fills it in),
    the correlation id, and for a flexible header (v1) its empty tag buffer."""
    buf = bytearray(4)
    buf += I32.pack(correlation_id)
    if flexible:
        buf.append(0)
    return buf


def seal_frame(buf: bytearray, size: int | None = None) -> None:
    """Write the size prefix of the frame `buf` starts: `size` bytes in all (the frame's
    parts together, for one sent in parts), or `buf` alone."""
    I32.pack_into(buf, 0, (len(buf) if size is None else size) - 4)


def uvarint(n: int) -> bytes:
    """An unsigned varint: 7 bits a byte, least significant first."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def put_count(buf: bytearray, n: int, compact: bool) -> None:
    """An array's (or a byte string's) length: a uvarint of n + 1 when compact, an INT32
    otherwise."""
    buf += uvarint(n + 1) if compact else I32.pack(n)


def put_string(buf: bytearray, text: str | None) -> None:
    """A nullable STRING: int16 length (-1 for null), then UTF-8."""
    if text is None:
        buf += b"\xff\xff"
        return
    data = text.encode()
    buf += I16.pack(len(data))
    buf += data


def put_name(buf: bytearray, text: str, compact: bool) -> None:
    """A non-null string: COMPACT_STRING or STRING."""
    if not compact:
        put_string(buf, text)
        return
    data = text.encode()
    buf += uvarint(len(data) + 1)
    buf += data


def put_nullable(buf: bytearray, text: str | None, compact: bool) -> None:
    """A nullable string: COMPACT_NULLABLE_STRING (0 for null) or NULLABLE_STRING."""
    if text is None and compact:
        buf.append(0)
    elif compact:
        put_name(buf, text, True)
    else:
        put_string(buf, text)
