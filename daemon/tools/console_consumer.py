"""`logkeeper console-consumer`: Kafka's `kafka-console-consumer.sh` (ConsoleConsumer with
its DefaultMessageFormatter), records to standard output.

    logkeeper console-consumer --topic T [--from-beginning] [--group G]
        [--max-messages N] [--timeout-ms MS] [--property print.key=true ...]
    logkeeper console-consumer --topic T --partition P [--offset earliest|latest|N]
    logkeeper console-consumer --include REGEX ...

What is read: `--topic`, or every topic whose name matches `--include`, through a
consumer group: `--group` (or `group.id` in `--consumer-property` / `--consumer.config`;
they must agree), else a new `console-consumer-NNNNN` group that commits nothing, as
Kafka's tool makes one. A group that has committed offsets goes on from them; otherwise
the consumer starts at the log end, or at the log start with `--from-beginning`
(`auto.offset.reset`). `--partition P` reads that one partition without a group, from
`--offset` (`latest` by default, `earliest`, or an offset).

Each record is one line, as Kafka's DefaultMessageFormatter writes it: the value, and in
front of it, when the `--property` asks (`print.timestamp`, `print.partition`,
`print.offset`, `print.epoch`, `print.headers`, `print.key`, all false by default;
`print.value` true), `CreateTime:T` or `LogAppendTime:T`, `Partition:P`, `Offset:O`,
`Epoch:E`, the headers as `K:V` joined by `headers.separator` (`,`; `NO_HEADERS` when
none), and the key, separated by `key.separator` (a tab); a record ends with
`line.separator` (a newline), and a null key or value is `null.literal` (`null`).
Bytes are written as they are.

It stops after `--max-messages` records, after `--timeout-ms` without one, or on
SIGINT/SIGTERM, and then prints `Processed a total of N messages` on stderr; a group
that auto-commits commits what was read. `--consumer-property` and
`--consumer.config FILE` take any Kafka consumer config kafka-python knows
(`client.rack`, `fetch.max.wait.ms`, ...; others are ignored with Kafka's warning);
`--isolation-level` is read_uncommitted (default) or read_committed.

Exit codes: 0 on any of those stops; 1 the consumer failed (the broker's error on
stderr); 2 a usage error, a bad file or no broker reachable.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import time
from types import FrameType
from typing import Any, BinaryIO

from .client import add_broker_options, bootstrap_of, run_tool
from .console import client_args, key_values, load_properties, open_client

DEFAULT_FORMATTER = ("kafka.tools.DefaultMessageFormatter",
                     "org.apache.kafka.tools.consumer.DefaultMessageFormatter")
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


class Formatter:
    """Kafka's DefaultMessageFormatter over kafka-python's ConsumerRecord."""

    def __init__(self, props: dict[str, str]):
        def flag(name: str, default: bool) -> bool:
            return props[name].strip().lower() == "true" if name in props else default

        self.timestamp = flag("print.timestamp", False)
        self.partition = flag("print.partition", False)
        self.offset = flag("print.offset", False)
        self.delivery = flag("print.delivery", False)
        self.epoch = flag("print.epoch", False)
        self.headers = flag("print.headers", False)
        self.key = flag("print.key", False)
        self.value = flag("print.value", True)
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null = props.get("null.literal", "null").encode()

    def format(self, r: Any) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            kind = _TIMESTAMP_TYPES.get(r.timestamp_type)
            fields.append(b"NO_TIMESTAMP" if kind is None else f"{kind}:{r.timestamp}".encode())
        if self.partition:
            fields.append(b"Partition:%d" % r.partition)
        if self.offset:
            fields.append(b"Offset:%d" % r.offset)
        if self.delivery:
            fields.append(b"Delivery:NOT_PRESENT")  # share groups only (KIP-932)
        if self.epoch:
            epoch = getattr(r, "leader_epoch", None)
            fields.append(b"Epoch:NOT_PRESENT" if epoch is None or epoch < 0
                          else b"Epoch:%d" % epoch)
        if self.headers:
            pairs = [k.encode() + b":" + (self.null if v is None else v) for k, v in r.headers]
            fields.append(self.headers_separator.join(pairs) if pairs else b"NO_HEADERS")
        if self.key:
            fields.append(self.null if r.key is None else r.key)
        if self.value:
            fields.append(self.null if r.value is None else r.value)
        if not fields:
            return b""
        # Every field is followed by key.separator but the last, which gets line.separator
        # (Kafka writes it only after a printed value, or a separator ending the line).
        return self.key_separator.join(fields) + self.line_separator


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper console-consumer",
        description="Read records of topics to standard output, as Kafka's "
                    "kafka-console-consumer.sh does.")
    add_broker_options(p, command_config=False)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--topic", help="the topic to read")
    what.add_argument("--include", metavar="REGEX",
                      help="read every topic whose whole name matches")
    p.add_argument("--partition", type=int, help="read only this partition (no group)")
    p.add_argument("--offset", help="with --partition: earliest, latest (default) or an offset")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the log start when the group has no committed offset")
    p.add_argument("--group", help="the consumer group (default: a new console-consumer-N)")
    p.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="stop after this long without a record")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="what is printed: print.timestamp, print.partition, print.offset, "
                        "print.epoch, print.headers, print.key, print.value, key.separator, "
                        "line.separator, headers.separator, null.literal")
    p.add_argument("--formatter-config", metavar="FILE",
                   help="a properties file of those (--property wins)")
    p.add_argument("--formatter", default=DEFAULT_FORMATTER[1],
                   help="Kafka's DefaultMessageFormatter, the one formatter there is")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka consumer config (client.rack, fetch.max.wait.ms, ...)")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="a properties file of consumer configs (--consumer-property wins)")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"))
    p.add_argument("--skip-message-on-error", action="store_true",
                   help="accepted as Kafka's (a record is never left out here)")
    return p


def parse_offset(text: str | None, from_beginning: bool) -> str | int:
    """`--offset`: "earliest", "latest" or an offset (Kafka's parseOffset)."""
    if text is None:
        return "earliest" if from_beginning else "latest"
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ValueError(f"The provided offset value '{text}' is incorrect. Valid values are "
                         "'earliest', 'latest', or a non-negative long.")
    return offset


def consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    """The kafka-python consumer's arguments, as Kafka's ConsoleConsumerOptions builds
    its props (group, auto.offset.reset, client.id); ValueError for Kafka's conflicts."""
    from kafka import KafkaConsumer

    if (args.topic is None) == (args.include is None):
        raise ValueError("Exactly one of --include/--topic is required.")
    if args.partition is not None:
        if args.topic is None:
            raise ValueError("The topic is required when partition is specified.")
        if args.from_beginning and args.offset is not None:
            raise ValueError("Options from-beginning and offset cannot be specified together.")
    elif args.offset is not None:
        raise ValueError("The partition is required when offset is specified.")
    if args.formatter not in DEFAULT_FORMATTER:
        raise ValueError(f"--formatter {args.formatter}: the one formatter logkeeper has is "
                         f"{DEFAULT_FORMATTER[1]}")
    from_file = load_properties(args.consumer_config, "--consumer.config")
    given = key_values(args.consumer_property, "--consumer-property")
    groups = {g for g in (args.group, from_file.get("group.id"), given.get("group.id")) if g}
    if len(groups) > 1:
        raise ValueError("The group ids provided in different places (directly using "
                         "'--group', via '--consumer-property', or via '--consumer.config') "
                         "do not match. Detected group ids: "
                         + ", ".join(f"'{g}'" for g in sorted(groups)))
    if groups and args.partition is not None:
        raise ValueError("Options group and partition cannot be specified together.")
    props = {**from_file, **given}
    props.pop("bootstrap.servers", None)
    reset = props.get("auto.offset.reset")
    if reset is not None and args.from_beginning and reset != "earliest":
        raise ValueError(f"Can't simultaneously specify --from-beginning and "
                         f"'auto.offset.reset={reset}', please remove one option")
    props.setdefault("auto.offset.reset", "earliest" if args.from_beginning else "latest")
    props.setdefault("client.id", "console-consumer")
    if args.isolation_level is not None:
        props["isolation.level"] = args.isolation_level
    if args.partition is not None:
        props.pop("group.id", None)
    elif groups:
        props["group.id"] = groups.pop()
    else:
        props["group.id"] = f"console-consumer-{random.randrange(100000)}"
        props.setdefault("enable.auto.commit", "false")
    out = client_args(props, KafkaConsumer.DEFAULT_CONFIG)
    if args.partition is not None:
        out["group_id"] = None
    return out


def _run(args: argparse.Namespace) -> int:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.errors import KafkaError

    start = parse_offset(args.offset, args.from_beginning) if args.partition is not None else None
    config = consumer_config(args)
    fmt_props = load_properties(args.formatter_config, "--formatter-config")
    fmt_props.update(key_values(args.property, "--property"))
    formatter = Formatter(fmt_props)
    if args.include is not None:
        try:
            re.compile(args.include)
        except re.error as err:
            raise ValueError(f"--include {args.include!r} is not a regular expression: "
                             f"{err}") from None
    consumer = open_client(KafkaConsumer, bootstrap_of(args), config)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    out: BinaryIO = sys.stdout.buffer
    count = 0
    code = 0
    try:
        if args.partition is not None:
            tp = KTP(args.topic, args.partition)
            consumer.assign([tp])
            if start == "earliest":
                consumer.seek_to_beginning(tp)
            elif start == "latest":
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, start)
        elif args.include is not None:
            consumer.subscribe(pattern=f"^(?:{args.include})$")
        else:
            consumer.subscribe([args.topic])
        last = time.monotonic()
        while not stopping:
            if args.max_messages is not None and count >= args.max_messages:
                break
            if args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= args.timeout_ms:
                print(f"ERROR Error processing message, terminating consumer process: no record "
                      f"for {args.timeout_ms} ms (--timeout-ms)", file=sys.stderr)
                break
            wait = 200 if args.timeout_ms is None else max(1, min(200, args.timeout_ms))
            batches = consumer.poll(timeout_ms=wait,
                                    max_records=None if args.max_messages is None
                                    else max(1, args.max_messages - count))
            for records in batches.values():
                for r in records:
                    out.write(formatter.format(r))
                    count += 1
            if batches:
                out.flush()
                last = time.monotonic()
    except KeyboardInterrupt:
        pass
    except KafkaError as err:
        print(f"ERROR Error processing message, terminating consumer process: {err}",
              file=sys.stderr)
        code = 1
    finally:
        try:
            out.flush()
        finally:
            consumer.close()
            print(f"Processed a total of {count} messages", file=sys.stderr)
    return code


def main(argv: list[str]) -> int:
    return run_tool("console-consumer", _parser(), argv, _run)
