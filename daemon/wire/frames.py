"""Kafka's framing on a blocking socket: a 4-byte big-endian size, then that many bytes.

The controller's channel to each broker and the admin tools' client read answers this
way; the replica fetcher (`daemon.wire.peer`) reads the same frames from an asyncio
stream. A peer that closes mid-frame is a ConnectionError naming `who`; a size too
small to hold a response header is a ValueError.
"""

from __future__ import annotations

import socket
import struct

SIZE = struct.Struct(">i")
MIN_RESPONSE = 4  # a response frame holds at least its correlation id


def recv_exact(sock: socket.socket, n: int, who: str) -> bytes:
    """Exactly `n` bytes from `sock`; ConnectionError if `who` closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"{who} closed the connection")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, who: str) -> bytes:
    """The next response frame's payload (its size prefix read and dropped)."""
    (size,) = SIZE.unpack(recv_exact(sock, SIZE.size, who))
    if size < MIN_RESPONSE:
        raise ValueError(f"{who} sent a response frame of {size} bytes")
    return recv_exact(sock, size, who)
