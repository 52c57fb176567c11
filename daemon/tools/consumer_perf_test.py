"""`logkeeper consumer-perf-test`: Kafka's `kafka-consumer-perf-test.sh`
(ConsumerPerformance): read N records of a topic in a consumer group and print the
throughput.

    logkeeper consumer-perf-test --topic T --messages N [--bootstrap-server HOST:PORT]
        [--group G] [--from-latest] [--timeout MS] [--show-detailed-stats]

The options and the output are Kafka's: a header, then
`start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec`, where the data is the
records' keys and values, `rebalance.time.ms` the time spent joining the group and
`fetch.*` the rest. `--show-detailed-stats` prints a line per `--reporting-interval`
instead of the totals. The tool stops after `--messages` records, or after `--timeout`
ms (10 s) without one, with Kafka's warning; as in Kafka's, that wait starts at the
subscription, so joining the group (the broker's group.initial.rebalance.delay.ms, 3 s
by default) counts. Times are formatted by `--date-format`, a
java.text.SimpleDateFormat pattern (letters y M d H h m s S a E Z; '...' for text).

The consumer is librdkafka's (confluent-kafka) in group `--group` (default
perf-consumer-N), client.id perf-consumer-client, starting at the log start when the
group has no offset (`--from-latest`: at the log end), with `--fetch-size` as
max.partition.fetch.bytes (1 MiB) and `--socket-buffer-size` as the receive buffer
(2 MiB); it commits its offsets as Kafka's does (enable.auto.commit, and on close).
`--consumer.config FILE` (`--command-config`) takes Kafka's consumer configs
(daemon.tools.perf). The broker is `--bootstrap-server`, else the listener of the
daemon on this host (`--config FILE`, or the embedded defaults).

Exit codes: 0 done (also when the timeout ended it, as Kafka's); 1 the client failed;
2 a usage error, a bad config, or no broker reachable; 130 interrupted.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .client import add_broker_options, bootstrap_of, run_tool
from .console import load_properties
from .perf import ClientStats, monotonic_ms, open_client, rdkafka_config, reach

DEFAULT_DATE_FORMAT = "yyyy-MM-dd HH:mm:ss:SSS"
HEADER = ("data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
          "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
MB = 1024 * 1024


def java_date_format(pattern: str) -> Callable[[int], str]:
    """A formatter of epoch milliseconds in local time for a SimpleDateFormat pattern;
    ValueError for a letter it does not know."""
    parts: list[Callable[[datetime], str]] = []
    for m in re.finditer(r"'([^']*)'|([A-Za-z])\2*|[^A-Za-z']+", pattern):
        text = m.group(0)
        if m.group(1) is not None or text == "''":
            literal = m.group(1) or "'"
            parts.append(lambda _d, s=literal: s)
        elif m.group(2) is None:
            parts.append(lambda _d, s=text: s)
        else:
            parts.append(_field(m.group(2), len(text)))
    if "'" in re.sub(r"'[^']*'", "", pattern):
        raise ValueError(f"--date-format {pattern!r}: an unterminated quote")
    return lambda ms: "".join(p(datetime.fromtimestamp(ms / 1000).astimezone()) for p in parts)


def _field(letter: str, n: int) -> Callable[[datetime], str]:
    def num(get: Callable[[datetime], int]) -> Callable[[datetime], str]:
        return lambda d: str(get(d)).zfill(n)

    if letter == "y":
        return (lambda d: str(d.year % 100).zfill(2)) if n == 2 else num(lambda d: d.year)
    if letter == "M":
        if n >= 4:
            return lambda d: d.strftime("%B")
        if n == 3:
            return lambda d: d.strftime("%b")
        return num(lambda d: d.month)
    if letter == "E":
        return (lambda d: d.strftime("%A")) if n >= 4 else (lambda d: d.strftime("%a"))
    simple: dict[str, Callable[[datetime], int]] = {
        "d": lambda d: d.day, "H": lambda d: d.hour, "h": lambda d: d.hour % 12 or 12,
        "m": lambda d: d.minute, "s": lambda d: d.second,
        "S": lambda d: d.microsecond // 1000,
    }
    if letter in simple:
        return num(simple[letter])
    if letter == "a":
        return lambda d: "AM" if d.hour < 12 else "PM"
    if letter == "Z":
        return lambda d: d.strftime("%z")
    if letter == "z":
        return lambda d: d.strftime("%Z")
    raise ValueError(f"--date-format: the pattern letter {letter!r} is not supported "
                     "(y M d H h m s S a E Z z are)")


def _rate(amount: float, ms: float) -> str:
    if ms > 0:
        return f"{1000.0 * amount / ms:.4f}"
    return "NaN" if amount == 0 else "Infinity"  # Java's double division by zero


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper consumer-perf-test",
        description="Read records of a topic in a consumer group and print the throughput, "
                    "as Kafka's kafka-consumer-perf-test.sh does.")
    add_broker_options(p, command_config=False)
    p.add_argument("--topic", required=True, help="the topic to consume from")
    p.add_argument("--messages", type=int, required=True, metavar="COUNT",
                   help="the number of messages to consume")
    p.add_argument("--group", default=f"perf-consumer-{random.randrange(100_000)}",
                   help="the group id to consume on (default: perf-consumer-N)")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024, metavar="SIZE",
                   help="max.partition.fetch.bytes (default 1 MiB)")
    p.add_argument("--from-latest", action="store_true",
                   help="without a committed offset, start at the log end")
    p.add_argument("--socket-buffer-size", type=int, default=2 * 1024 * 1024, metavar="SIZE",
                   help="the socket's receive buffer (default 2 MiB)")
    p.add_argument("--consumer.config", "--command-config", dest="consumer_config",
                   metavar="CONFIG-FILE", help="a properties file of consumer configs")
    p.add_argument("--print-metrics", action="store_true", help="print the client's metrics")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="a line of stats per --reporting-interval")
    p.add_argument("--timeout", type=int, nargs="?", const=10_000, default=10_000,
                   metavar="MS", help="stop after this long without a record (default 10000)")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="INTERVAL_MS",
                   help="with --show-detailed-stats (default 5000)")
    p.add_argument("--date-format", default=DEFAULT_DATE_FORMAT,
                   help=f"a java.text.SimpleDateFormat pattern (default {DEFAULT_DATE_FORMAT})")
    p.add_argument("--hide-header", action="store_true", help="print no header")
    return p


def _run(args: argparse.Namespace) -> int:
    if args.messages <= 0:
        raise ValueError("--messages should be greater than zero")
    if args.reporting_interval <= 0:
        raise ValueError("Reporting interval must be greater than 0.")
    for option in ("fetch_size", "socket_buffer_size", "timeout"):
        if getattr(args, option) < 0:
            raise ValueError(f"--{option.replace('_', '-')} may not be negative")
    fmt = java_date_format(args.date_format)
    props = load_properties(args.consumer_config, "--consumer.config")
    bootstrap = bootstrap_of(args)

    import confluent_kafka as ck

    client_stats = ClientStats()
    config: dict[str, Any] = {"client.id": "perf-consumer-client", **rdkafka_config(props),
                              "bootstrap.servers": bootstrap, "group.id": args.group,
                              "socket.receive.buffer.bytes": args.socket_buffer_size,
                              "max.partition.fetch.bytes": args.fetch_size,
                              "auto.offset.reset": "latest" if args.from_latest else "earliest",
                              "check.crcs": False}
    if args.print_metrics:
        config.update(client_stats.config())
    consumer = open_client(ck.Consumer, config)
    try:
        reach(consumer, bootstrap)
    except ValueError:
        consumer.close()
        raise

    if not args.hide_header:
        first = "time, threadId" if args.show_detailed_stats else "start.time, end.time"
        print(f"{first}, {HEADER}", flush=True)

    join_ms = 0  # the whole run's time in rebalances
    join_in_round = 0  # since the last detailed line
    # Durations on the monotonic clock (a step of the wall clock distorts no rate); the
    # times printed are the wall clock's at the start plus those durations.
    wall_start, mono_start = time.time_ns() // 1_000_000, monotonic_ms()
    now_ms = monotonic_ms

    def wall(mono_ms: int) -> int:
        return wall_start + mono_ms - mono_start

    join_start = start_ms = now_ms()

    def revoked(_consumer: Any, _parts: Any) -> None:
        nonlocal join_start
        join_start = now_ms()

    def assigned(_consumer: Any, _parts: Any) -> None:
        nonlocal join_ms, join_in_round
        elapsed = now_ms() - join_start
        join_ms += elapsed
        join_in_round += elapsed

    read = nbytes = last_read = last_bytes = 0
    code = 0
    try:
        consumer.subscribe([args.topic], on_assign=assigned, on_revoke=revoked)
        current = last_report = last_consumed = now_ms()
        while read < args.messages and current - last_consumed <= args.timeout:
            msgs = consumer.consume(min(500, args.messages - read), 0.1)
            current = now_ms()
            if msgs:
                last_consumed = current
            for msg in msgs:
                if msg.error() is not None:
                    if msg.error().fatal():
                        raise ck.KafkaException(msg.error())
                    print(f"WARN {msg.error().str()}", file=sys.stderr)
                    continue
                read += 1
                nbytes += len(msg.key() or b"") + len(msg.value() or b"")
                if current - last_report >= args.reporting_interval:
                    if args.show_detailed_stats:
                        elapsed = current - last_report
                        fetch_ms = elapsed - join_in_round
                        print(f"{fmt(wall(current))}, 0, {nbytes / MB:.4f}, "
                              f"{_rate((nbytes - last_bytes) / MB, elapsed)}, {read}, "
                              f"{_rate(read - last_read, elapsed)}, {join_in_round}, {fetch_ms}, "
                              f"{_rate((nbytes - last_bytes) / MB, fetch_ms) if fetch_ms > 0 else '0.0000'}, "
                              f"{_rate(read - last_read, fetch_ms) if fetch_ms > 0 else '0.0000'}",
                              flush=True)
                    join_in_round = 0
                    last_report, last_read, last_bytes = current, read, nbytes
        if read < args.messages:
            print(f"WARNING: Exiting before consuming the expected number of messages: timeout "
                  f"({args.timeout} ms) exceeded. You can use the --timeout option to increase "
                  "the timeout.", flush=True)
    except KeyboardInterrupt:
        code = 130
    except ck.KafkaException as err:
        print(f"ERROR {err.args[0].str() if err.args else err}", file=sys.stderr)
        code = 1
    finally:
        end_ms = now_ms()
        if args.print_metrics and code == 0:
            # Paused, the consumer delivers no more records while its statistics arrive.
            consumer.pause(consumer.assignment())
            client_stats.refresh(consumer.poll)
        consumer.close()
    if not args.show_detailed_stats:
        elapsed = end_ms - start_ms
        fetch_ms = elapsed - join_ms
        mb = nbytes / MB
        print(f"{fmt(wall(start_ms))}, {fmt(wall(end_ms))}, {mb:.4f}, {_rate(mb, elapsed)}, {read}, "
              f"{_rate(read, elapsed)}, {join_ms}, {fetch_ms}, {_rate(mb, fetch_ms)}, "
              f"{_rate(read, fetch_ms)}", flush=True)
    if args.print_metrics:
        client_stats.print()
    return code


def main(argv: list[str]) -> int:
    return run_tool("consumer-perf-test", _parser(), argv, _run)
