"""`logkeeper e2e-latency`: Kafka's `kafka-e2e-latency.sh` (EndToEndLatency): the time
from sending a record until a consumer reads it back, one record at a time.

    logkeeper e2e-latency BROKER_LIST TOPIC NUM_MESSAGES ACKS MESSAGE_SIZE [PROPERTIES_FILE]

As Kafka's: each record (MESSAGE_SIZE bytes of one letter, drawn from a seeded random
generator) is sent with linger.ms 0 and waited for (acks 1 or all), then read back by a
consumer assigned every partition of the topic from its log end (fetch.wait.max.ms 0);
the time of the pair is one latency. Every 1000th is printed (`i<tab>ms`), then
`Avg latency: X ms` and `Percentiles: 50th = A, 99th = B, 99.9th = C` (whole ms). A
record not read back within 60 s, read back different, or with another record beside
it stops the tool. A topic that does not exist is created with 1 partition and
replication factor 1. The consumer's group is test-group-<ms>, committed at the end.
PROPERTIES_FILE holds Kafka client configs for both clients (daemon.tools.perf); the
clients are librdkafka's (confluent-kafka).

Exit codes: 0 done; 1 a record was lost, different or doubled, or the broker refused
one; 2 a usage error, a bad config, or no broker reachable.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

from .client import run_tool
from .console import load_properties
from .perf import open_client, rdkafka_config, reach

POLL_TIMEOUT_S = 60.0
REPORT_EVERY = 1000


class Failed(Exception):
    """What makes the measurement meaningless (Kafka's RuntimeException)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper e2e-latency",
        description="Measure the time from sending a record to reading it back, one at a "
                    "time, as Kafka's kafka-e2e-latency.sh does.")
    p.add_argument("broker_list", help="HOST:PORT[,HOST:PORT...]")
    p.add_argument("topic")
    p.add_argument("num_messages", type=int)
    p.add_argument("producer_acks", help="1 or all")
    p.add_argument("message_size_bytes", type=int)
    p.add_argument("properties_file", nargs="?", help="Kafka client configs for both clients")
    return p


def _latency_line(i: int, elapsed_ns: int) -> str:
    return f"{i}\t{elapsed_ns / 1e6}"


def _run(args: argparse.Namespace) -> int:
    if args.producer_acks not in ("1", "all"):
        raise ValueError("Latency testing requires synchronous acknowledgement. Please use 1 or all")
    if args.num_messages <= 0:
        raise ValueError("num_messages should be greater than zero")
    if args.message_size_bytes < 0:
        raise ValueError("message_size_bytes may not be negative")
    props = rdkafka_config(load_properties(args.properties_file or None, "properties_file"))

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    common = {**props, "bootstrap.servers": args.broker_list}
    consumer = open_client(ck.Consumer, {
        **common, "group.id": f"test-group-{int(time.time() * 1000)}",
        "enable.auto.commit": False, "auto.offset.reset": "latest", "fetch.wait.max.ms": 0})
    try:
        topics = reach(consumer, args.broker_list).topics
        if args.topic not in topics:
            print(f'Topic "{args.topic}" does not exist. Will create topic with 1 partition(s) '
                  "and replication factor = 1")
            admin = open_client(AdminClient, common)
            try:
                admin.create_topics([NewTopic(args.topic, 1, 1)])[args.topic].result(30)
            except ck.KafkaException as err:
                print(f"Creation of topic {args.topic} failed", file=sys.stderr)
                raise Failed(err.args[0].str()) from None
        producer = open_client(ck.Producer, {**common, "linger.ms": 0,
                                             "acks": args.producer_acks})
        try:
            return _measure(args, consumer, producer)
        finally:
            producer.flush(10)
    finally:
        consumer.close()


def _assign_at_end(consumer: Any, topic: str) -> None:
    """Every partition of `topic`, from its log end as it is now (Kafka's seekToEnd and
    position: a record sent after this is the next one read)."""
    import confluent_kafka as ck

    deadline = time.monotonic() + 30
    while True:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        if parts and all(p.leader >= 0 for p in parts.values()):
            break
        if time.monotonic() > deadline:
            raise Failed(f"topic {topic} has no leader for every partition")
        time.sleep(0.1)
    consumer.assign([ck.TopicPartition(topic, p, consumer.get_watermark_offsets(
        ck.TopicPartition(topic, p), timeout=10)[1]) for p in sorted(parts)])


def _measure(args: argparse.Namespace, consumer: Any, producer: Any) -> int:
    try:
        _assign_at_end(consumer, args.topic)
        rng = random.Random(0)
        latencies: list[int] = []
        total_ns = 0
        for i in range(args.num_messages):
            message = bytes([rng.randrange(26) + 65]) * args.message_size_bytes
            begin = time.monotonic_ns()
            delivered: list[Any] = []
            producer.produce(args.topic, message,
                             on_delivery=lambda err, _msg, d=delivered: d.append(err))
            producer.flush(POLL_TIMEOUT_S)
            if not delivered or delivered[0] is not None:
                why = delivered[0].str() if delivered else "no answer"
                raise Failed(f"sending record {i} failed: {why}")
            got = _read_one(consumer)
            elapsed = time.monotonic_ns() - begin
            _validate(consumer, message, got)
            if i % REPORT_EVERY == 0:
                print(_latency_line(i, elapsed), flush=True)
            total_ns += elapsed
            latencies.append(elapsed // 1_000_000)
    except Failed as err:
        print(err, file=sys.stderr)
        return 1
    print(f"Avg latency: {total_ns / args.num_messages / 1e6:.4f} ms")
    latencies.sort()
    n = len(latencies)
    print(f"Percentiles: 50th = {latencies[int(n * 0.5)]}, 99th = {latencies[int(n * 0.99)]}, "
          f"99.9th = {latencies[int(n * 0.999)]}", flush=True)
    consumer.commit(asynchronous=False)
    return 0


def _read_one(consumer: Any) -> list[Any]:
    """The records a poll returns: the first as soon as there is one, with any that
    came with it."""
    first = consumer.poll(POLL_TIMEOUT_S)
    if first is None:
        return []
    if first.error() is not None:
        raise Failed(f"reading failed: {first.error().str()}")
    return [first, *[m for m in consumer.consume(100, 0) if m.error() is None]]


def _validate(consumer: Any, message: bytes, records: list[Any]) -> None:
    """Kafka's validate: one record, the one sent (the offsets are committed first)."""
    if not records:
        consumer.commit(asynchronous=False)
        raise Failed(f"poll() timed out before finding a result (timeout:[{int(POLL_TIMEOUT_S * 1000)}])")
    read = records[0].value() or b""
    if read != message:
        consumer.commit(asynchronous=False)
        raise Failed(f"The message read [{read.decode('utf-8', 'replace')}] did not match the "
                     f"message sent [{message.decode('utf-8', 'replace')}]")
    if len(records) != 1:
        consumer.commit(asynchronous=False)
        raise Failed(f"Only one result was expected during this test. We found [{len(records)}]")


def main(argv: list[str]) -> int:
    return run_tool("e2e-latency", _parser(), argv, _run)
