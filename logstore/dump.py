"""`logkeeper dump-log`: print and verify Kafka log segments, like kafka-dump-log.sh.

    logkeeper dump-log [--verify-index] [--deep] [--offsets-decoder] [--json] PATH...
    (kafka-dump-log.sh's --files A,B, --deep-iteration and --print-data-log work too)

PATH is a `.log`, `.index` or `.timeindex` file, or a directory (every `.log` below
it). Per batch: offsets, position, size, record count, timestamps, CRC verdict;
`--deep` decodes records; `--offsets-decoder` decodes `__consumer_offsets` records
(committed offsets, group metadata) as kafka-dump-log.sh's does; `--verify-index`
checks `.index`/`.timeindex` against the log. As Kafka's tool does, a batch whose CRC
fails is listed (`isvalid: false`) and the listing goes on while the framing holds, and
an index is read up to its zero-filled (preallocated) tail. Exit status: 0 all valid, 1
problems found, 2 usage or IO error (the message names the path and the operation).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import native

from . import names
from .errors import LogStoreError
from .index import read_index_entries
from .records import Codec, LegacyMessage, iter_batches, parse_batch_header
from .verify import SegmentReport, verify_segment

EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2

# (key, value) -> {"key": ..., "payload": ...}: how a record of __consumer_offsets reads.
# logstore knows no group records; `logkeeper dump-log` passes the coordinator's.
RecordDecoder = Callable[[bytes | None, bytes | None], dict[str, Any]]


def _batch_fields(b: native.BatchInfo) -> dict[str, Any]:
    attrs = b.attributes
    try:
        codec = Codec(attrs & 7).name.lower()
    except ValueError:
        codec = f"unknown({attrs & 7})"
    return {
        "baseOffset": b.base_offset, "lastOffset": b.last_offset, "count": b.records_count,
        "position": b.position, "size": b.size, "magic": b.magic,
        "baseTimestamp": b.base_timestamp, "maxTimestamp": b.max_timestamp,
        "timestampType": "LogAppendTime" if attrs & 0x08 else "CreateTime",
        "producerId": b.producer_id, "producerEpoch": b.producer_epoch,
        "baseSequence": b.base_sequence, "partitionLeaderEpoch": b.partition_leader_epoch,
        "isTransactional": bool(attrs & 0x10), "isControl": bool(attrs & 0x20),
        "compresscodec": codec, "crc": b.crc,
    }


def _records(fd: int, b: native.BatchInfo, path: str,
             decoder: RecordDecoder | None = None) -> list[dict[str, Any]]:
    data = native.pread(fd, b.size, b.position, path=path)
    if b.magic < 2:
        return _legacy_records(data, b)
    batch = parse_batch_header(data, 0, b.position)
    out = []
    for rec in batch.records():
        if decoder is not None and not batch.is_control:
            try:
                decoded = decoder(rec.key, rec.value)
            except ValueError as err:
                raise LogStoreError(f"offset {rec.offset}: {err}") from err
            out.append({"offset": rec.offset, "timestamp": rec.timestamp,
                        "key": json.dumps(decoded["key"], separators=(",", ":")),
                        "payload": json.dumps(decoded["payload"], separators=(",", ":"))})
            continue
        out.append({
            "offset": rec.offset, "timestamp": rec.timestamp,
            "keySize": -1 if rec.key is None else len(rec.key),
            "valueSize": -1 if rec.value is None else len(rec.value),
            "key": None if rec.key is None else rec.key.decode("utf-8", "backslashreplace"),
            "payload": None if rec.value is None
            else rec.value.decode("utf-8", "backslashreplace"),
            "headerKeys": [k for k, _ in rec.headers],
        })
    return out


def _legacy_records(data: bytes, b: native.BatchInfo) -> list[dict[str, Any]]:
    """A legacy message's records: itself, or a compressed wrapper's inner messages."""
    (msg,) = iter_batches(data, base_position=b.position, verify_crc=False)
    assert isinstance(msg, LegacyMessage)
    return [{
        "offset": m.offset, "timestamp": m.timestamp,
        "keySize": -1 if m.key is None else len(m.key),
        "valueSize": -1 if m.value is None else len(m.value),
        "key": None if m.key is None else m.key.decode("utf-8", "backslashreplace"),
        "payload": None if m.value is None else m.value.decode("utf-8", "backslashreplace"),
        "headerKeys": [],
    } for m in msg.messages()]


def _text_batch(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in fields.items())


def dump_segment(path: Path, *, verify_index: bool, deep: bool, as_json: bool,
                 out: TextIO, decoder: RecordDecoder | None = None
                 ) -> tuple[dict[str, Any], SegmentReport]:
    doc: dict[str, Any] = {"file": str(path), "batches": []}
    if not as_json:
        print(f"Dumping {path}", file=out)
    fd = os.open(path, os.O_RDONLY) if deep else -1
    deep_problems: list[str] = []
    try:
        def on_batch(b: native.BatchInfo, valid: bool = True) -> None:
            fields = _batch_fields(b)
            fields["isvalid"] = valid
            if deep:
                try:
                    fields["records"] = _records(fd, b, str(path), decoder)
                except LogStoreError as err:
                    fields["records_error"] = str(err)
                    deep_problems.append(f"batch at {b.position}: {err}")
            if as_json:
                doc["batches"].append(fields)
            else:
                recs = fields.pop("records", [])
                print(_text_batch(fields), file=out)
                for r in recs:
                    print("| " + _text_batch(r), file=out)

        report = verify_segment(path, check_indexes=verify_index, on_batch=on_batch,
                                on_bad_batch=lambda b: on_batch(b, valid=False))
    finally:
        if fd >= 0:
            os.close(fd)
    problems = [
        {"kind": p.kind, "severity": p.severity, "path": p.path, "position": p.position,
         "offset": p.offset, "detail": p.detail}
        for p in report.problems
    ] + [{"kind": "record-decode", "severity": "error", "path": str(path), "position": None,
          "offset": None, "detail": d} for d in deep_problems]
    doc.update({
        "baseOffset": report.base_offset, "size": report.file_size,
        "validBytes": report.valid_bytes, "batchCount": report.batch_count,
        "recordCount": report.record_count, "firstOffset": report.first_offset,
        "lastOffset": report.last_offset, "offsetGaps": report.offset_gaps,
        "indexEntries": report.index_entries, "timeIndexEntries": report.time_index_entries,
        "problems": problems,
        "valid": not any(p["severity"] == "error" for p in problems),
    })
    if not as_json:
        for p in problems:
            print(f"{p['severity'].upper()} {p['kind']}: {p['detail']}", file=out)
        print(f"Summary {path}: {report.batch_count} batches, {report.record_count} records, "
              f"{len(problems)} problem(s)", file=out)
    return doc, report


def dump_index(path: Path, *, as_json: bool, out: TextIO) -> dict[str, Any]:
    parsed = names.parse_segment_file(path.name)
    base = parsed[0] if parsed else 0
    kind = "offset" if path.suffix == names.INDEX_SUFFIX else "time"
    entries = read_index_entries(path, kind)
    if kind == "offset":
        rows = [{"offset": base + rel, "position": pos} for rel, pos in entries]
    else:
        rows = [{"timestamp": ts, "offset": base + rel} for ts, rel in entries]
    if not as_json:
        print(f"Dumping {path}", file=out)
        for row in rows:
            print(" ".join(f"{k}: {v}" for k, v in row.items()), file=out)
    return {"file": str(path), "entries": rows}


def _expand(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*" + names.LOG_SUFFIX) if q.is_file())
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(2, "No such file or directory (from dump-log)", raw)
    return out


def main(argv: list[str] | None = None, out: TextIO | None = None, *,
         offsets_decoder: RecordDecoder | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="logkeeper dump-log", description=__doc__.split("\n")[0])
    parser.add_argument("--verify-index", action="store_true",
                        help="check .index and .timeindex against the log")
    # kafka-dump-log.sh's spellings work too: --deep-iteration, --print-data-log, --files.
    parser.add_argument("--deep", "--deep-iteration", "--print-data-log", action="store_true",
                        help="decode every record")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode __consumer_offsets records (implies --deep)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--files", metavar="PATH[,PATH...]", action="append", default=[],
                        help="comma-separated files to dump, as kafka-dump-log.sh takes them")
    parser.add_argument("paths", nargs="*", metavar="PATH")
    try:
        args = parser.parse_args(argv)
        args.paths += [p for f in args.files for p in f.split(",") if p]
        if not args.paths:
            parser.error("name at least one PATH (or --files)")
    except SystemExit as exc:
        return EXIT_OK if exc.code == 0 else EXIT_ERROR
    decoder = None
    if args.offsets_decoder:
        if offsets_decoder is None:
            print("logkeeper dump-log: --offsets-decoder needs the daemon package "
                  "(run it as `logkeeper dump-log`)", file=sys.stderr)
            return EXIT_ERROR
        decoder = offsets_decoder
    docs: list[dict[str, Any]] = []
    valid = True
    try:
        for path in _expand(args.paths):
            if path.suffix in (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX):
                docs.append(dump_index(path, as_json=args.json, out=out))
                continue
            if path.suffix != names.LOG_SUFFIX:
                print(f"logkeeper dump-log: {path}: not a .log, .index or .timeindex file",
                      file=sys.stderr)
                return EXIT_ERROR
            doc, _ = dump_segment(path, verify_index=args.verify_index,
                                  deep=args.deep or decoder is not None, as_json=args.json,
                                  out=out, decoder=decoder)
            docs.append(doc)
            valid = valid and doc["valid"]
    except BrokenPipeError:
        raise  # stdout's reader is gone (`| head`), no input failed: the dispatcher's case
    except OSError as err:
        print(f"logkeeper dump-log: {err.filename or ''}: {err.strerror or err}",
              file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        json.dump({"files": docs, "valid": valid}, out, indent=1)
        out.write("\n")
    return EXIT_OK if valid else EXIT_PROBLEMS
