"""`logkeeper console-producer` and `console-consumer`: Kafka's kafka-console-producer.sh
and kafka-console-consumer.sh, what a Kafka user types first. Lines in, records out,
in Kafka's formats, against a real daemon; confluent-kafka checks what the producer
wrote, and writes what the consumer reads.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_helpers import wait_for
from tests.daemon_helpers import REPO, Daemon, running


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("console"), {"num.partitions": 1}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        for fut in admin.create_topics([
                NewTopic("three", 3, 1),
                NewTopic("keyed", 1, 1, config={"cleanup.policy": "compact"})]).values():
            fut.result(30)
        yield d


def tool(d: Daemon, name: str, *args: str, stdin: bytes | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", name, "--bootstrap-server",
                           d.bootstrap, *args], input=stdin, capture_output=True, cwd=REPO,
                          timeout=timeout)


def read_all(d: Daemon, topic: str, count: int) -> list[ck.Message]:
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": f"check-{topic}",
                     "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[ck.Message] = []
    try:
        wait_for(lambda: got.extend(m for m in c.consume(100, 0.5) if not m.error())
                 or len(got) >= count, 30, f"{count} records of {topic}")
    finally:
        c.close()
    return got


def test_lines_become_records_with_keys_and_headers(daemon: Daemon) -> None:
    lines = b"h1:a,h2:b\tk1:first\nNULL\tk2:second\nh3:c\tNULL:third\n"
    r = tool(daemon, "console-producer", "--topic", "lines", "--property", "parse.key=true",
             "--property", "key.separator=:", "--property", "parse.headers=true",
             "--property", "null.marker=NULL", "--compression-codec", stdin=lines)
    assert r.returncode == 0, r.stderr
    got = [(m.key(), m.value(), m.headers()) for m in read_all(daemon, "lines", 3)]
    assert got == [(b"k1", b"first", [("h1", b"a"), ("h2", b"b")]),
                   (b"k2", b"second", None),
                   (None, b"third", [("h3", b"c")])]
    # kafka-python cannot send a null header value: refused, not sent empty.
    r = tool(daemon, "console-producer", "--topic", "lines", "--property", "parse.headers=true",
             "--property", "null.marker=NULL", stdin=b"h:NULL\tv\n")
    assert r.returncode == 1
    assert b"line number 1: a null header value cannot be sent" in r.stderr


def test_plain_lines_spread_over_partitions_and_sync_mode(daemon: Daemon) -> None:
    values = [b"line-%d" % i for i in range(30)]
    r = tool(daemon, "console-producer", "--topic", "three", "--sync",
             "--producer-property", "acks=1", stdin=b"\r\n".join(values) + b"\r\n")
    assert r.returncode == 0, r.stderr
    got = read_all(daemon, "three", 30)
    assert sorted(m.value() for m in got) == sorted(values)
    assert all(m.key() is None for m in got)
    assert len({m.partition() for m in got}) > 1  # no key: spread, as Kafka's partitioner


def test_a_line_without_its_separator_stops_the_producer_unless_ignored(daemon: Daemon) -> None:
    r = tool(daemon, "console-producer", "--topic", "strict", "--property", "parse.key=true",
             stdin=b"k\tv\nno separator here\nnever read\n")
    assert r.returncode == 1
    assert b"No key separator found on line number 2: 'no separator here'" in r.stderr
    assert [m.value() for m in read_all(daemon, "strict", 1)] == [b"v"]
    r = tool(daemon, "console-producer", "--topic", "lenient", "--property", "parse.key=true",
             "--property", "ignore.error=true", stdin=b"no separator\n")
    assert r.returncode == 0, r.stderr
    [m] = read_all(daemon, "lenient", 1)
    assert (m.key(), m.value()) == (None, b"no separator")


def test_a_refused_record_is_named_and_fails_the_run(daemon: Daemon) -> None:
    # A compacted topic refuses a record without a key (INVALID_RECORD).
    r = tool(daemon, "console-producer", "--topic", "keyed",
             "--producer-property", "retries=0", stdin=b"no key\n")
    assert r.returncode == 1
    assert b"Error when sending message to topic keyed with key: null, value: 6 bytes" in r.stderr
    assert b"InvalidRecord" in r.stderr or b"INVALID_RECORD" in r.stderr.upper(), r.stderr


def test_a_topic_missing_from_the_metadata_is_a_refusal_not_a_crash(tmp_path) -> None:
    """Kafka's producer reports "Topic T not present in metadata after N ms" through the
    send's callback, and the console producer goes on with the next line."""
    with running(tmp_path, {"auto.create.topics.enable": False}) as d:
        r = tool(d, "console-producer", "--topic", "absent", "--producer-property",
                 "max.block.ms=500", stdin=b"one\ntwo\n")
    assert r.returncode == 1, r.stderr
    assert b"Traceback" not in r.stderr, r.stderr
    assert r.stderr.count(b"Error when sending message to topic absent with key: null") == 2


def test_the_consumer_prints_as_kafkas_formatter(daemon: Daemon) -> None:
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap})
    p.produce("fmt", key=b"k0", value=b"v0", headers=[("h", b"x"), ("n", None)],
              timestamp=1_700_000_000_000)
    p.produce("fmt", value=b"v1", timestamp=1_700_000_000_001)
    p.produce("fmt", key=b"k2", value=None, timestamp=1_700_000_000_002)
    assert p.flush(30) == 0
    r = tool(daemon, "console-consumer", "--topic", "fmt", "--from-beginning",
             "--max-messages", "3", *[a for prop in (
                 "print.timestamp=true", "print.partition=true", "print.offset=true",
                 "print.headers=true", "print.key=true") for a in ("--property", prop)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == [
        "CreateTime:1700000000000\tPartition:0\tOffset:0\th:x,n:null\tk0\tv0",
        "CreateTime:1700000000001\tPartition:0\tOffset:1\tNO_HEADERS\tnull\tv1",
        "CreateTime:1700000000002\tPartition:0\tOffset:2\tNO_HEADERS\tk2\tnull"]
    assert r.stderr.decode().strip().endswith("Processed a total of 3 messages")
    # Values only by default; key and value with other separators.
    r = tool(daemon, "console-consumer", "--topic", "fmt", "--from-beginning",
             "--max-messages", "3", "--property", "print.key=true", "--property",
             "key.separator= => ", "--property", "line.separator=|", "--property",
             "null.literal=-")
    assert r.stdout == b"k0 => v0|- => v1|k2 => -|"


def test_partition_offsets_and_timeouts(daemon: Daemon) -> None:
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap})
    for i in range(5):
        p.produce("offsets", value=b"%d" % i)
    assert p.flush(30) == 0
    r = tool(daemon, "console-consumer", "--topic", "offsets", "--partition", "0",
             "--offset", "3", "--timeout-ms", "1500")
    assert (r.returncode, r.stdout) == (0, b"3\n4\n"), r.stderr
    assert b"Processed a total of 2 messages" in r.stderr
    r = tool(daemon, "console-consumer", "--topic", "offsets", "--partition", "0",
             "--offset", "earliest", "--max-messages", "1")
    assert r.stdout == b"0\n"
    # latest (the default): nothing before the timeout.
    r = tool(daemon, "console-consumer", "--topic", "offsets", "--partition", "0",
             "--timeout-ms", "1000")
    assert (r.returncode, r.stdout) == (0, b"")


def test_a_group_resumes_where_it_committed_and_include_matches_topics(daemon: Daemon) -> None:
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap})
    for t in ("inc-a", "inc-b", "other"):
        p.produce(t, value=t.encode())
    assert p.flush(30) == 0
    r = tool(daemon, "console-consumer", "--include", "inc-.*", "--from-beginning",
             "--group", "resume", "--max-messages", "2")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == [b"inc-a", b"inc-b"]
    # The group committed what it read: a second run finds nothing new, then the next.
    p.produce("inc-a", value=b"later")
    assert p.flush(30) == 0
    r = tool(daemon, "console-consumer", "--include", "inc-.*", "--from-beginning",
             "--group", "resume", "--timeout-ms", "4000")
    assert r.stdout == b"later\n", r.stderr
    groups = subprocess.run([sys.executable, "-m", "daemon.cli", "groups", "list",
                             "--bootstrap-server", daemon.bootstrap],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "resume" in groups.stdout.split()


def test_sigterm_stops_the_consumer_cleanly(daemon: Daemon) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "console-consumer",
                             "--bootstrap-server", daemon.bootstrap, "--topic", "quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out == b""
    assert b"Processed a total of 0 messages" in err


@pytest.mark.parametrize("args, words", [
    (["console-consumer"], "Exactly one of --include/--topic is required"),
    (["console-consumer", "--topic", "t", "--offset", "3"],
     "The partition is required when offset is specified"),
    (["console-consumer", "--topic", "t", "--partition", "0", "--offset", "-4"],
     "The provided offset value '-4' is incorrect"),
    (["console-consumer", "--topic", "t", "--partition", "0", "--group", "g"],
     "Options group and partition cannot be specified together"),
    (["console-consumer", "--topic", "t", "--group", "a", "--consumer-property", "group.id=b"],
     "Detected group ids: 'a', 'b'"),
    (["console-consumer", "--topic", "t", "--from-beginning", "--consumer-property",
      "auto.offset.reset=latest"], "Can't simultaneously specify --from-beginning"),
    (["console-producer", "--topic", "t", "--producer-property", "acks=most"],
     "Invalid value most for configuration acks"),
    (["console-producer", "--topic", "t", "--property", "headers.separator=:",
      "--property", "parse.headers=true"], "headers.separator and headers.key.separator"),
])
def test_bad_usage_is_refused_with_kafkas_words(daemon: Daemon, args: list[str],
                                                 words: str) -> None:
    r = tool(daemon, *args, stdin=b"")
    assert r.returncode == 2, r
    assert words in r.stderr.decode(), r.stderr
