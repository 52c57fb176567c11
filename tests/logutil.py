"""Small helpers for tests that write logs: batches of known records, file snapshots."""

from __future__ import annotations

import hashlib
from pathlib import Path

from logstore.records import Record, build_batch


def batch(n: int = 1, *, size: int = 100, ts: int = 1_700_000_000_000, key: bytes = b"k") -> bytes:
    return build_batch([Record(key, bytes([i % 256]) * size, [], ts + i) for i in range(n)])


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root -> sha256 of its bytes (for byte-for-byte comparisons)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}
