"""`logkeeper delete-records`: what Kafka's `kafka-delete-records.sh` does, through the
Kafka protocol.

    logkeeper delete-records --offset-json-file FILE [--timeout-ms MS]

FILE is Kafka's: `{"partitions": [{"topic": "t", "partition": 0, "offset": 5}],
"version": 1}`. Each partition's records below its offset are deleted (-1: below its
high watermark, every record consumers can read), by its leader (DeleteRecords): the
log start offset moves up to it at once, whole segments below it go, and followers
follow at their next fetch; the leader answers once every replica on a live broker
has (Kafka's low watermark), or at `--timeout-ms` with RequestTimedOutError (7), the
records deleted on the leader only. Prints Kafka's lines: "Executing records delete
operation", "Records delete operation completed:", then per partition `partition: t-0
low_watermark: 5` (its new log start offset) or `partition: t-0  error: ...`.

A file that is not Kafka's format, names a partition twice or an offset below -1 is
refused before any broker is asked. An offset past a partition's high watermark is
refused by its leader (OffsetOutOfRangeError), deleting nothing there.

The broker asked for the partitions' leaders is `--bootstrap-server`, else the listener
of the daemon on this host (`--config FILE`, or the embedded defaults).

Exit codes: 0 every partition's records deleted; 1 some partition refused or timed out
(named, with the error; the others are done); 2 a usage error, a bad file or config file, or no
broker reachable.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .client import (
    add_broker_options,
    bootstrap_of,
    connect_any,
    metadata,
    read_json_option,
    run_tool,
)
from .leaders import TP, delete_records

DEFAULT_TIMEOUT_MS = 30000
FORMAT = '{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}'


def parse_offsets(doc: Any, where: str = "--offset-json-file") -> dict[TP, int]:
    """Kafka's offset JSON (parsed): {(topic, partition): offset}; ValueError naming
    what is wrong (nothing is deleted then)."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: not a JSON object; the format is {FORMAT}")
    version = doc.get("version", 1)
    if version != 1:
        raise ValueError(f"{where}: Not supported version field value {version}")
    parts = doc.get("partitions")
    if not isinstance(parts, list):
        raise ValueError(f"{where}: Missing partitions field; the format is {FORMAT}")
    out: dict[TP, int] = {}
    duplicates = []
    for i, entry in enumerate(parts):
        ok = isinstance(entry, dict) and isinstance(entry.get("topic"), str) and all(
            isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
            for k in ("partition", "offset"))
        if not ok:
            raise ValueError(f"{where}: partitions[{i}] is {json.dumps(entry)}, not "
                             '{"topic": string, "partition": int, "offset": int}')
        tp = (entry["topic"], entry["partition"])
        if entry["offset"] < -1 or entry["partition"] < 0:
            raise ValueError(f"{where}: partitions[{i}]: partition {entry['partition']} "
                             f"offset {entry['offset']}: an offset is -1 (the high "
                             "watermark) or more, a partition 0 or more")
        if tp in out:
            duplicates.append(f"{tp[0]}-{tp[1]}")
        out[tp] = entry["offset"]
    if duplicates:
        raise ValueError(f"Offset json file contains duplicate topic partitions: "
                         f"{','.join(sorted(set(duplicates)))}")
    if not out:
        raise ValueError(f"{where}: no partitions; the format is {FORMAT}")
    return out


def delete(bootstrap: str, before: dict[TP, int], timeout_ms: int = DEFAULT_TIMEOUT_MS
           ) -> tuple[dict[TP, int], dict[TP, str]]:
    """(each partition's new log start offset, why each of the others was refused)."""
    with connect_any(bootstrap) as conn:
        meta = metadata(conn, sorted({t for t, _ in before}))
    return delete_records(meta, before, timeout_ms)


def render(low: dict[TP, int], problems: dict[TP, str]) -> list[str]:
    lines = []
    for tp in sorted(set(low) | set(problems)):
        what = f"low_watermark: {low[tp]}" if tp in low else f"error: {problems[tp]}"
        lines.append(f"partition: {tp[0]}-{tp[1]}\t{what}")
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper delete-records",
        description="Delete the records of partitions below an offset, as Kafka's "
                    "kafka-delete-records.sh.")
    add_broker_options(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help=f"each partition's offset, in Kafka's format: {FORMAT}")
    p.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
    return p


def _run(args: argparse.Namespace) -> int:
    before = parse_offsets(read_json_option("--offset-json-file", args.offset_json_file, FORMAT))
    bootstrap = bootstrap_of(args)
    print("Executing records delete operation")
    low, problems = delete(bootstrap, before, args.timeout_ms)
    print("Records delete operation completed:")
    print("\n".join(render(low, problems)))
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    return run_tool("delete-records", _parser(), argv, _run)
