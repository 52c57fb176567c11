"""`logkeeper producer-perf-test`: Kafka's `kafka-producer-perf-test.sh`
(ProducerPerformance): send N records as fast as the broker takes them, or at a rate,
and print the throughput and the latency of their acknowledgements.

    logkeeper producer-perf-test --topic T --num-records N --record-size BYTES
        --throughput RECORDS_PER_SEC|-1 [--producer-props acks=1 linger.ms=5 ...]

The options and the output are Kafka's: every 5 s a window
(`N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency.`), and at
the end the totals with the 50th, 95th, 99th and 99.9th percentile latencies (of at most
500,000 records sampled evenly, as Kafka's). A latency runs from the record's send to its
acknowledgement. Records carry no key; each `--record-size` payload is drawn afresh from
the letters A-Z (seeded, as Kafka's); `--payload-file` picks payloads at random from a
UTF-8 file split at `--payload-delimiter` (a regular expression, default a line end);
`--payload-monotonic` sends 0, 1, 2...

The client is librdkafka's (confluent-kafka) with its defaults, client.id
perf-producer-client; `--producer-props KEY=VALUE...` (`--command-property`) and
`--producer.config FILE` (`--command-config`) take Kafka's producer configs
(daemon.tools.perf). The broker is `--bootstrap-server`, else `bootstrap.servers` of those,
else the listener of the daemon on this host (`--config FILE`, or the embedded defaults).

Transactions, as Kafka's: `--transactional-id ID` (or `transactional.id` in the producer
configs) and/or `--transaction-duration-ms N` send the records in transactions committed
every N ms (default 3000; the id defaults to performance-producer-default-transactional-id)
and at the end.

Differences from Kafka's: `--throughput 0` (which makes Kafka's wait forever) is
refused; a record the broker refuses is named on stderr (the first ten, then a count)
and the tool exits 1 where Kafka's prints a stack trace and exits 0.

Exit codes: 0 every record was acknowledged; 1 some were not; 2 a usage error, a bad
config, or no broker reachable; 130 interrupted (the totals so far are printed).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .client import add_broker_options, bootstrap_of, run_tool
from .console import key_values, load_properties
from .perf import ClientStats, monotonic_ms, open_client, rdkafka_config, reach

REPORTING_INTERVAL_MS = 5000
MAX_SAMPLES = 500_000
MIN_SLEEP_S = 0.002  # Kafka's ThroughputThrottler sleeps once 2 ms of deficit add up
ERRORS_SHOWN = 10
# byte -> an upper-case letter, for the random payloads
_LETTERS = bytes(65 + b % 26 for b in range(256))


class Stats:
    """Kafka's ProducerPerformance.Stats: totals, the current window, and a sample of
    the latencies for the percentiles."""

    def __init__(self, num_records: int, reporting_interval_ms: int, out: Any):
        self.out = out
        self.start = self.window_start = monotonic_ms()
        self.sampling = max(1, num_records // min(num_records, MAX_SAMPLES))
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = self.bytes = self.max_latency = self.total_latency = 0
        self.reporting_interval = reporting_interval_ms
        self._new_window()

    def _new_window(self) -> None:
        self.window_start = monotonic_ms()
        self.window_count = self.window_bytes = self.window_max = self.window_total = 0

    def record(self, latency: int, nbytes: int, now: int) -> None:
        self.count += 1
        self.bytes += nbytes
        self.total_latency += latency
        self.max_latency = max(self.max_latency, latency)
        self.window_count += 1
        self.window_bytes += nbytes
        self.window_total += latency
        self.window_max = max(self.window_max, latency)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency)
        self.iteration += 1
        if now - self.window_start >= self.reporting_interval:
            self.print_window()
            self._new_window()

    def print_window(self) -> None:
        elapsed = max(1, monotonic_ms() - self.window_start)
        print(f"{self.window_count} records sent, {1000.0 * self.window_count / elapsed:.1f} "
              f"records/sec ({1000.0 * self.window_bytes / elapsed / (1 << 20):.2f} MB/sec), "
              f"{self.window_total / max(1, self.window_count):.1f} ms avg latency, "
              f"{float(self.window_max):.1f} ms max latency.", file=self.out, flush=True)

    def percentiles(self, *ps: float) -> list[int]:
        ordered = sorted(self.latencies)
        if not ordered:
            return [0 for _ in ps]
        return [ordered[min(len(ordered) - 1, int(p * len(ordered)))] for p in ps]

    def print_total(self) -> None:
        elapsed = max(1, monotonic_ms() - self.start)
        p50, p95, p99, p999 = self.percentiles(0.5, 0.95, 0.99, 0.999)
        avg = self.total_latency / self.count if self.count else 0.0
        print(f"{self.count} records sent, {1000.0 * self.count / elapsed:.1f} records/sec "
              f"({1000.0 * self.bytes / elapsed / (1 << 20):.2f} MB/sec), {avg:.2f} ms avg "
              f"latency, {float(self.max_latency):.2f} ms max latency, {p50} ms 50th, "
              f"{p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.", file=self.out, flush=True)


class Throttler:
    """Kafka's ThroughputThrottler: past `target` records a second since it started,
    sleep off 1/target a record, in sleeps of at least 2 ms; a negative target never
    throttles. Times are the monotonic clock's seconds, not Kafka's milliseconds: within
    the first millisecond Kafka's sends a burst unthrottled, which a short run at a
    low rate shows as a rate well above the target."""

    def __init__(self, target: float):
        self.target = target
        self.start = time.monotonic()
        self.deficit_s = 0.0

    def should_throttle(self, sent: int) -> bool:
        if self.target < 0:
            return False
        elapsed = time.monotonic() - self.start
        return elapsed > 0 and sent / elapsed > self.target

    def throttle(self, wait: Callable[[float], None]) -> None:
        self.deficit_s += 1.0 / self.target
        if self.deficit_s >= MIN_SLEEP_S:
            until = time.monotonic() + self.deficit_s
            self.deficit_s = 0.0
            while (left := until - time.monotonic()) > 0:
                wait(left)


def read_payloads(path: str, delimiter: str) -> list[bytes]:
    """Kafka's readPayloadFile: the file split at `delimiter` (a regular expression, as
    Java's String.split, trailing empty pieces dropped)."""
    p = Path(path)
    print(f"Reading payloads from: {p.absolute()}")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--payload-file {path}: {getattr(err, 'strerror', None) or err}") from None
    if not text:
        raise ValueError("File does not exist or empty file provided.")
    try:
        pieces = re.split(delimiter, text)
    except re.error as err:
        raise ValueError(f"--payload-delimiter {delimiter!r}: {err}") from None
    while pieces and pieces[-1] == "":
        pieces.pop()
    print(f"Number of messages read: {len(pieces)}")
    if not pieces:
        raise ValueError("File does not exist or empty file provided.")
    return [s.encode() for s in pieces]


DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"
DEFAULT_TRANSACTION_DURATION_MS = 3000


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper producer-perf-test",
        description="Send records as fast as the broker takes them, or at a rate, and print "
                    "throughput and latency, as Kafka's kafka-producer-perf-test.sh does.")
    add_broker_options(p, command_config=False)
    p.add_argument("--topic", required=True, help="produce messages to this topic")
    p.add_argument("--num-records", type=int, required=True, metavar="NUM-RECORDS",
                   help="number of messages to produce")
    payload = p.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, metavar="RECORD-SIZE",
                         help="message size in bytes (random letters)")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                         help="a UTF-8 file of payloads, picked at random")
    payload.add_argument("--payload-monotonic", action="store_true",
                         help="payloads are 0, 1, 2...")
    p.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                   help="splits --payload-file (a regular expression; default a line end)")
    p.add_argument("--throughput", type=float, required=True, metavar="THROUGHPUT",
                   help="at most about this many messages a second; -1 for no limit")
    p.add_argument("--producer-props", "--command-property", dest="producer_props",
                   nargs="+", action="extend", default=[], metavar="PROP-NAME=PROP-VALUE",
                   help="Kafka producer configs (bootstrap.servers, acks, linger.ms...)")
    p.add_argument("--producer.config", "--command-config", dest="producer_config",
                   metavar="CONFIG-FILE", help="a properties file of producer configs")
    p.add_argument("--print-metrics", action="store_true",
                   help="print the client's metrics at the end")
    p.add_argument("--transactional-id",
                   help="send in transactions of this transactional id")
    p.add_argument("--transaction-duration-ms", type=int,
                   help="commit a transaction this often (default 3000 with an id)")
    return p


def _run(args: argparse.Namespace) -> int:
    if args.num_records <= 0:
        raise ValueError("--num-records should be greater than zero")
    if args.record_size is not None and args.record_size <= 0:
        raise ValueError("--record-size should be greater than zero")
    if args.throughput == 0:
        raise ValueError("--throughput 0 would send nothing; -1 sends without a limit")
    props = load_properties(args.producer_config, "--producer.config")
    props.update(key_values(args.producer_props, "--producer-props"))
    if args.transactional_id is not None:
        props["transactional.id"] = args.transactional_id
    duration = args.transaction_duration_ms
    if duration is not None and duration <= 0:
        raise ValueError("--transaction-duration-ms should be greater than zero")
    if duration is not None and "transactional.id" not in props:
        props["transactional.id"] = DEFAULT_TRANSACTIONAL_ID
    if "transactional.id" in props and duration is None:
        duration = DEFAULT_TRANSACTION_DURATION_MS
    if args.bootstrap_server is None and args.config is None and "bootstrap.servers" in props:
        bootstrap = props["bootstrap.servers"]
    else:
        bootstrap = bootstrap_of(args)
    delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
    payloads = read_payloads(args.payload_file, delimiter) if args.payload_file else []

    import confluent_kafka as ck

    client_stats = ClientStats()
    config: dict[str, Any] = {"client.id": "perf-producer-client", **rdkafka_config(props),
                              "bootstrap.servers": bootstrap}
    if args.print_metrics:
        config.update(client_stats.config())
    producer = open_client(ck.Producer, config)
    reach(producer, bootstrap)
    transactional = duration is not None
    if transactional:
        try:
            producer.init_transactions(30)
            producer.begin_transaction()
        except ck.KafkaException as err:
            raise ValueError(f"transactions as {props['transactional.id']!r}: "
                             f"{err.args[0].str()}") from None
    txn_started = monotonic_ms()

    rng = random.Random(0)
    if payloads:
        def payload(i: int) -> bytes:
            return payloads[rng.randrange(len(payloads))]
    elif args.payload_monotonic:
        def payload(i: int) -> bytes:
            return str(i).encode()
    else:
        size = args.record_size

        def payload(i: int) -> bytes:
            return rng.randbytes(size).translate(_LETTERS)

    stats = Stats(args.num_records, REPORTING_INTERVAL_MS, sys.stdout)
    failed = 0

    def delivered(send_ms: int, nbytes: int) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            nonlocal failed
            now = monotonic_ms()
            if err is None:
                stats.record(now - send_ms, nbytes, now)
                return
            failed += 1
            if failed <= ERRORS_SHOWN:
                print(f"ERROR Error when sending message to topic {args.topic} with key: null, "
                      f"value: {nbytes} bytes with error: {err.str()}", file=sys.stderr)
        return done

    throttler = Throttler(args.throughput)
    code = 0
    try:
        for i in range(args.num_records):
            value = payload(i)
            send_ms = monotonic_ms()
            while True:
                try:
                    producer.produce(args.topic, value, on_delivery=delivered(send_ms, len(value)))
                    break
                except BufferError:  # the client's queue is full: Kafka's send blocks
                    producer.poll(0.01)
            producer.poll(0)
            if transactional and monotonic_ms() - txn_started >= duration:
                producer.commit_transaction(60)
                producer.begin_transaction()
                txn_started = monotonic_ms()
            if throttler.should_throttle(i + 1):
                throttler.throttle(producer.poll)
        if transactional:
            producer.commit_transaction(60)
        while producer.flush(1.0):
            pass
    except KeyboardInterrupt:
        producer.flush(10)
        code = 130
    except ck.KafkaException as err:  # a transaction that could not commit
        print(f"ERROR {err.args[0].str()}", file=sys.stderr)
        code = 1
    stats.print_total()
    if failed:
        print(f"{failed} of {args.num_records} records were not acknowledged", file=sys.stderr)
        code = code or 1
    if args.print_metrics:
        client_stats.refresh(producer.poll)
        client_stats.print()
    return code


def main(argv: list[str]) -> int:
    return run_tool("producer-perf-test", _parser(), argv, _run)
