"""Kafka's small per-log-dir and per-partition text files: read, and write atomically.

Offset checkpoints (`version`, `count`, then `topic partition offset` lines), the
leader-epoch checkpoint, `meta.properties` and `partition.metadata`, byte-for-byte as
Kafka writes them; an empty offset or leader-epoch checkpoint means no entries, as
Kafka reads it. Writes go to `<file>.tmp`, are fsynced, renamed over the target,
and the directory is fsynced. A file that does not parse raises `CheckpointError`
naming the file and line; OSErrors propagate to the caller's IoGuard untouched.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import CheckpointError
from .names import TopicPartition

CHECKPOINT_VERSION = 0


def _lines(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8")
    if not text:
        return []
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Write data to path via a synced temp file and a rename; then sync the directory."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    sync_dir(path.parent)


def sync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so the renames and creations in it are durable."""
    dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _parse_versioned(path: Path, fields: int) -> list[list[str]]:
    """The entry lines of a versioned checkpoint, split into `fields` fields each.

    As Kafka's CheckpointFile reads it: an empty (0-byte) file, which Kafka creates
    (cleaner-offset-checkpoint, and others when a broker stops before its first
    write), has no entries; so has a file that ends after its version line.
    """
    lines = _lines(path)
    if not lines:
        return []
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{path}:1: unsupported checkpoint version {lines[0]!r}")
    if len(lines) == 1:
        return []
    try:
        count = int(lines[1])
    except ValueError as err:
        raise CheckpointError(f"{path}:2: entry count {lines[1]!r} is not an integer") from err
    entries = lines[2:]
    if len(entries) != count:
        raise CheckpointError(f"{path}: header says {count} entries, found {len(entries)}")
    rows = []
    for lineno, line in enumerate(entries, start=3):
        parts = line.split(" ")
        if len(parts) != fields:
            raise CheckpointError(f"{path}:{lineno}: expected {fields} fields in {line!r}")
        rows.append(parts)
    return rows


def read_offset_checkpoint(path: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """Entries of an offset checkpoint; {} when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return {}
    out: dict[TopicPartition, int] = {}
    for lineno, (topic, partition, offset) in enumerate(_parse_versioned(path, 3), start=3):
        try:
            out[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError as err:
            raise CheckpointError(f"{path}:{lineno}: partition or offset is not an integer") from err
    return out


def format_offset_checkpoint(entries: Mapping[TopicPartition, int] | Iterable[tuple]) -> bytes:
    items = list(entries.items()) if isinstance(entries, Mapping) else [
        ((t, p), o) for t, p, o in entries
    ]
    lines = [str(CHECKPOINT_VERSION), str(len(items))]
    lines += [f"{tp[0]} {tp[1]} {offset}" for tp, offset in items]
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_offset_checkpoint(path: str | os.PathLike[str],
                            entries: Mapping[TopicPartition, int] | Iterable[tuple]) -> None:
    write_atomically(path, format_offset_checkpoint(entries))


def read_leader_epoch_checkpoint(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    path = Path(path)
    if not path.exists():
        return []
    try:
        return [(int(e), int(o)) for e, o in _parse_versioned(path, 2)]
    except ValueError as err:
        raise CheckpointError(f"{path}: epoch or offset is not an integer") from err


def write_leader_epoch_checkpoint(path: str | os.PathLike[str],
                                  entries: Iterable[tuple[int, int]]) -> None:
    items = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(items))] + [f"{e} {o}" for e, o in items]
    write_atomically(path, ("\n".join(lines) + "\n").encode("utf-8"))


def read_meta_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Java properties subset Kafka writes: `#` comments and `key=value` lines."""
    path = Path(path)
    props: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text("utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CheckpointError(f"{path}:{lineno}: expected key=value, got {raw!r}")
        props[key.strip()] = value.strip()
    return props


def write_meta_properties(path: str | os.PathLike[str], props: Mapping[str, str]) -> None:
    lines = ["#", "#Written by logkeeper"]
    lines += [f"{k}={v}" for k, v in sorted(props.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode("utf-8"))


def read_partition_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    path = Path(path)
    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        key, sep, value = line.partition(":")
        if not sep:
            raise CheckpointError(f"{path}:{lineno}: expected 'key: value', got {line!r}")
        out[key.strip()] = value.strip()
    if out.get("version") != "0" or "topic_id" not in out:
        raise CheckpointError(f"{path}: expected version 0 and a topic_id, got {out}")
    return out


def write_partition_metadata(path: str | os.PathLike[str], topic_id: str) -> None:
    write_atomically(path, f"version: 0\ntopic_id: {topic_id}".encode())
