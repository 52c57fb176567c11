"""`logkeeper get-offsets`: what Kafka's `kafka-get-offsets.sh` (GetOffsetShell) does,
through the Kafka protocol.

    logkeeper get-offsets [--topic REGEX] [--partitions 0,2] [--time T]
                          [--exclude-internal-topics]
    logkeeper get-offsets --topic-partitions 'orders:0,pay.*:0-3,:5-' [--time T]

Prints `topic:partition:offset` for each partition chosen, in Kafka's order: the
partition's log end offset (`--time latest`, -1, the default), its log start offset
(`earliest`, -2), the offset of its record with the newest timestamp (`max-timestamp`,
-3), or of its first record at or after a time in ms since the epoch; `earliest-local`
(-4) and `latest-tiered` (-5) are asked as Kafka's tool asks them (with no tiered
storage, the log start offset and -1). A partition with no record at or after the time
is left out, as Kafka's tool leaves it out. Each partition is asked of its leader
(ListOffsets); one whose leader is not known, not reachable, moved or answered another
retriable error (OFFSET_NOT_AVAILABLE while a new leader catches up) is asked again, for
up to a minute, as Kafka's tool (its admin client's default.api.timeout.ms) does; a
`--command-config` file's `default.api.timeout.ms` sets that time.

Partitions: every partition of each topic whose whole name matches `--topic` (a regular
expression; every topic without it, internal ones too unless
`--exclude-internal-topics`), narrowed to `--partitions`; or `--topic-partitions`, a
comma-separated list of `TOPIC_REGEX[:PARTITIONS]` rules where PARTITIONS is `N`, `N-M`
(M excluded), `N-` or `-M`, and an empty topic matches every topic.

The broker asked is `--bootstrap-server`, else the listener of the daemon on this host
(`--config FILE`, or the embedded defaults).

Exit codes: 0 every partition chosen answered; 1 no partition matched (Kafka's
"Could not match any topic-partitions with the specified filters"), or some could not
be asked (each named on stderr, as Kafka's "Skip getting offsets for topic-partition
..."; the others are printed); 2 a usage error, a bad config file, or no broker
reachable.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any

from .client import add_broker_options, bootstrap_of, connect_any, metadata, run_tool
from .console import load_properties
from .leaders import (
    API_TIMEOUT_S,
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    list_offsets,
)

API_TIMEOUT_KEY = "default.api.timeout.ms"

TIMES = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP,
         "earliest-local": EARLIEST_LOCAL, "latest-tiered": LATEST_TIERED}
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
# A rule: does it take this topic, and this partition of it?
Rule = tuple[Callable[[str], bool], Callable[[int], bool]]


def parse_time(text: str) -> int:
    """`--time`: a name, -1 to -5, or a timestamp in ms; ValueError for anything else."""
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"Malformed time argument {text}. Please use -1 or latest / -2 or "
                         "earliest / -3 or max-timestamp / -4 or earliest-local / -5 or "
                         "latest-tiered, or a timestamp in ms") from None
    if value < LATEST_TIERED:
        raise ValueError(f"--time {text}: not a timestamp, nor one of -1 to -5")
    return value


def _topic_matcher(regex: str) -> Callable[[str], bool]:
    try:
        pattern = re.compile(regex)
    except re.error as err:
        raise ValueError(f"topic pattern {regex!r} is not a regular expression: {err}") from None
    return lambda name: pattern.fullmatch(name) is not None


def parse_rules(text: str) -> list[Rule]:
    """`--topic-partitions`: its comma-separated rules (Kafka's GetOffsetShell syntax)."""
    rules = []
    for spec in text.split(","):
        m = _RULE.fullmatch(spec)
        if m is None:
            raise ValueError(f"Invalid rule specification: {spec}")
        topic, one, low, high = (g or None for g in m.groups())
        if one is not None:
            wanted = int(one)
            rules.append((_topic_matcher(topic or ".*"), lambda p, w=wanted: p == w))
        else:
            lo, hi = int(low or 0), int(high) if high is not None else None
            rules.append((_topic_matcher(topic or ".*"),
                          lambda p, lo=lo, hi=hi: p >= lo and (hi is None or p < hi)))
    return rules


def topic_and_partitions(topic: str | None, partitions: str | None) -> list[Rule]:
    """`--topic` and `--partitions` as one rule."""
    ids: set[int] = set()
    if partitions:
        try:
            ids = {int(p) for p in partitions.split(",")}
        except ValueError:
            raise ValueError("--partitions expects a comma separated list of numeric partition "
                             f"ids, but received: {partitions}") from None
    return [(_topic_matcher(topic or ".*"), lambda p: not ids or p in ids)]


def chosen(meta: Any, rules: list[Rule], exclude_internal: bool) -> list[tuple[str, int]]:
    """The partitions in `meta` (every topic's Metadata) some rule takes."""
    out = []
    for t in meta.topics:
        if t.error_code or (exclude_internal and t.is_internal):
            continue
        for p in t.partitions:
            if any(takes(t.name) and part(p.partition_index) for takes, part in rules):
                out.append((t.name, p.partition_index))
    return out


def get_offsets(bootstrap: str, rules: list[Rule], timestamp: int, *,
                exclude_internal: bool = False, timeout_s: float = API_TIMEOUT_S
                ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], str]]:
    """(offset of each partition chosen, why each of the others has none); a partition
    with no record at or after `timestamp` is in neither. ListOffsets is asked again
    for up to `timeout_s` where the answer may change (daemon.tools.leaders)."""
    with connect_any(bootstrap) as conn:
        meta = metadata(conn, None)
    tps = chosen(meta, rules, exclude_internal)
    if not tps:
        raise LookupError("Could not match any topic-partitions with the specified filters")
    offsets, problems = list_offsets(meta, tps, timestamp, bootstrap=bootstrap,
                                     timeout_s=timeout_s)
    return {tp: o for tp, o in offsets.items() if o >= 0}, problems


def api_timeout_s(command_config: str | None) -> float:
    """How long the admin client asks again: `default.api.timeout.ms` of the
    `--command-config` file, as kafka-get-offsets.sh's admin client takes it (an int of
    at least 0), else Kafka's default of 60 s. ValueError names a bad value."""
    raw = load_properties(command_config, "--command-config").get(API_TIMEOUT_KEY)
    if raw is None:
        return API_TIMEOUT_S
    try:
        ms = int(raw.strip())
    except ValueError:
        ms = -1
    if ms < 0:
        raise ValueError(f"--command-config {command_config}: Invalid value {raw} for "
                         f"configuration {API_TIMEOUT_KEY}: an integer of at least 0 "
                         "(milliseconds) is required")
    return ms / 1000


def _kafka_order(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"  # Kafka's tool sorts by TopicPartition.toString()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper get-offsets",
        description="Each partition's offset at a time (the log end by default), as Kafka's "
                    "kafka-get-offsets.sh prints it: topic:partition:offset.")
    add_broker_options(p)
    p.add_argument("--topic", metavar="REGEX",
                   help="the topics whose whole name matches (default: every topic)")
    p.add_argument("--partitions", metavar="P,P",
                   help="only these partition ids (default: every partition)")
    p.add_argument("--topic-partitions", metavar="RULES",
                   help="comma-separated TOPIC_REGEX[:N | :N-M | :N- | :-M] rules, instead of "
                        "--topic and --partitions")
    p.add_argument("--time", default="latest",
                   help="latest (-1, default), earliest (-2), max-timestamp (-3), "
                        "earliest-local (-4), latest-tiered (-5), or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true",
                   help="leave out internal topics (__consumer_offsets)")
    return p


def _run(args: argparse.Namespace) -> int:
    if args.topic_partitions is not None and (args.topic is not None or args.partitions):
        raise ValueError("--topic-partitions cannot be used with --topic or --partitions")
    rules = (parse_rules(args.topic_partitions) if args.topic_partitions is not None
             else topic_and_partitions(args.topic, args.partitions))
    timestamp = parse_time(args.time)
    timeout_s = api_timeout_s(args.command_config)
    try:
        offsets, problems = get_offsets(bootstrap_of(args), rules, timestamp,
                                        exclude_internal=args.exclude_internal_topics,
                                        timeout_s=timeout_s)
    except LookupError as err:
        print(f"logkeeper get-offsets: {err}", file=sys.stderr)
        return 1
    for tp in sorted(offsets, key=_kafka_order):
        print(f"{tp[0]}:{tp[1]}:{offsets[tp]}")
    for tp in sorted(problems, key=_kafka_order):
        print(f"Skip getting offsets for topic-partition {_kafka_order(tp)} due to error: "
              f"{problems[tp]}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    return run_tool("get-offsets", _parser(), argv, _run)
