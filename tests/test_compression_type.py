"""`compression.type` on the broker (a topic's, else the broker's): the leader writes
each batch in that codec whatever its producer used (Kafka's LogValidator recompresses),
or as the producer sent it with "producer", Kafka's default. Real producers of every
codec (confluent-kafka, kafka-python, aiokafka), then the segment files' own codecs read
back, and every record read back by confluent-kafka, kafka-python, aiokafka and kcat.
In a cluster the followers copy the leader's recompressed batches byte for byte.
"""

from __future__ import annotations

import asyncio
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import UnsupportedCompressionTypeError
from kafka.protocol.producer import ProduceRequest

import native
from logstore.records import CRC_START, HEADER_SIZE, Codec, Record, build_batch, iter_batches
from tests.cluster_helpers import Cluster, wait_for
from tests.daemon_helpers import Daemon, RawClient, aiokafka_read, running
from tests.test_cluster_configs import describe_on
from tests.test_daemon_fetch import fetch
from tests.test_replication import create, replicas_identical

N = 40  # records per producer
UNSUPPORTED_COMPRESSION_TYPE = UnsupportedCompressionTypeError.errno
CORRUPT_MESSAGE = 2


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("compression"), {
            "compression.type": "gzip", "auto.create.topics.enable": False}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        for fut in admin.create_topics([
                NewTopic("g", 1, 1),  # the broker's gzip
                NewTopic("z", 1, 1, config={"compression.type": "zstd"}),
                NewTopic("p", 1, 1, config={"compression.type": "producer"})]).values():
            fut.result(30)
        yield d


def _codecs(d: Daemon, topic: str) -> list[Codec]:
    """The codec of each batch in the partition's segment files, in order."""
    out: list[Codec] = []
    for ld in d.log_dirs:
        for seg in sorted((ld / f"{topic}-0").glob("*.log")):
            out += [Codec(b.codec) for b in iter_batches(seg.read_bytes())]
    return out


def _produce_every_codec(d: Daemon, topic: str) -> list[bytes]:
    """N records from each producer and codec; the values sent, in order."""
    sent: list[bytes] = []
    for codec in ("none", "zstd", "lz4", "snappy", "gzip"):
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "compression.type": codec,
                         "linger.ms": 20})
        values = [b"ck-%s-%03d-" % (codec.encode(), i) + b"x" * 200 for i in range(N)]
        for i, v in enumerate(values):
            p.produce(topic, key=b"k%d" % i, value=v, headers=[("codec", codec.encode())])
        assert p.flush(30) == 0
        sent += values
    kp = KafkaProducer(bootstrap_servers=d.bootstrap, compression_type="lz4", linger_ms=20)
    values = [b"kp-lz4-%03d" % i for i in range(N)]
    for v in values:
        kp.send(topic, key=b"kp", value=v)
    kp.flush(30)
    kp.close()
    sent += values

    async def aio() -> list[bytes]:
        ap = AIOKafkaProducer(bootstrap_servers=d.bootstrap, compression_type="snappy",
                              linger_ms=20)
        await ap.start()
        try:
            vals = [b"aio-snappy-%03d" % i for i in range(N)]
            await asyncio.gather(*[await ap.send(topic, key=b"aio", value=v) for v in vals])
            return vals
        finally:
            await ap.stop()

    sent += asyncio.run(aio())
    return sent


def _set(admin: AdminClient, topic: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET of the topic's configs (dots as underscores)."""
    res = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(30)


def _read_back(d: Daemon, topic: str, count: int) -> dict[str, list[bytes]]:
    """Every value of the topic as each client reads it."""
    got: dict[str, list[bytes]] = {}
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": f"{topic}-ck",
                     "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    wait_for(lambda: values.extend(m.value() for m in c.consume(500, 0.5) if not m.error())
             or len(values) >= count, 30, "confluent-kafka reading")
    c.close()
    got["confluent-kafka"] = values
    kc = KafkaConsumer(topic, bootstrap_servers=d.bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=5000)
    got["kafka-python"] = [m.value for m in kc]
    kc.close()

    got["aiokafka"] = aiokafka_read(topic, count, bootstrap_servers=d.bootstrap)
    kcat = subprocess.run(["kcat", "-C", "-b", d.bootstrap, "-t", topic, "-o", "beginning", "-e",
                           "-q", "-D", "\x1e", "-c", str(count)],
                          capture_output=True, timeout=60)
    assert kcat.returncode == 0, kcat.stderr
    got["kcat"] = kcat.stdout.split(b"\x1e")[:-1]
    return got


@pytest.mark.parametrize("topic, codec", [("g", Codec.GZIP), ("z", Codec.ZSTD)])
def test_the_leader_writes_every_batch_in_the_topics_codec(daemon: Daemon, topic: str,
                                                            codec: Codec) -> None:
    sent = _produce_every_codec(daemon, topic)
    codecs = _codecs(daemon, topic)
    assert codecs and set(codecs) == {codec}, codecs
    for client, values in _read_back(daemon, topic, len(sent)).items():
        assert values == sent, client
    # DescribeConfigs says where the codec comes from.
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    res = ConfigResource("topic", topic)
    entry = admin.describe_configs([res])[res].result(30)["compression.type"]
    assert entry.value == codec.name.lower()
    assert entry.source == (ck.admin.ConfigSource.STATIC_BROKER_CONFIG if topic == "g" else
                            ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG).value


def test_producer_keeps_each_batch_as_sent_and_a_change_applies_to_new_batches(
        daemon: Daemon) -> None:
    sent = _produce_every_codec(daemon, "p")
    codecs = _codecs(daemon, "p")
    # confluent's five codecs, kafka-python's lz4, aiokafka's snappy: each kept.
    assert {Codec.NONE, Codec.ZSTD, Codec.LZ4, Codec.SNAPPY, Codec.GZIP} == set(codecs)
    before = len(codecs)
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    _set(admin, "p", compression_type="uncompressed")
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap, "compression.type": "zstd",
                     "linger.ms": 20})
    more = [b"after-%03d" % i for i in range(N)]
    for v in more:
        p.produce("p", value=v)
    assert p.flush(30) == 0
    after = _codecs(daemon, "p")[before:]
    assert after and set(after) == {Codec.NONE}, after
    assert _read_back(daemon, "p", len(sent) + N)["kcat"] == sent + more
    # Bad values are refused, changing nothing.
    with pytest.raises(ck.KafkaException, match="compression.type"):
        _set(admin, "p", compression_type="brotli")
    now = admin.describe_configs([ConfigResource("topic", "p")])
    assert list(now.values())[0].result(30)["compression.type"].value == "uncompressed"


def test_followers_copy_the_leaders_recompressed_batches(tmp_path: Path) -> None:
    with Cluster(tmp_path, dirs=1) as cl:
        create(cl, "lz", 2)
        admin = AdminClient({"bootstrap.servers": cl.brokers[1].bootstrap})
        _set(admin, "lz", compression_type="lz4")
        # A topic config reaches the other brokers through its change notification,
        # after the answer (as in Kafka): wait until every leader applies it.
        for b in cl.brokers:
            wait_for(lambda b=b: describe_on(cl, b, "lz")["compression.type"] == "lz4", 20,
                     f"broker {b} to apply compression.type=lz4")
        p = ck.Producer({"bootstrap.servers": cl.brokers[1].bootstrap, "acks": "all",
                         "compression.type": "gzip", "linger.ms": 20})
        for i in range(400):
            p.produce("lz", value=b"v%04d" % i + b"y" * 300, partition=i % 2)
        assert p.flush(30) == 0
        wait_for(lambda: replicas_identical(cl, "lz", 2), 30, "replicas byte-identical")
        for broker in cl.brokers.values():
            for part in range(2):
                segs = sorted((broker.log_dirs[0] / f"lz-{part}").glob("*.log"))
                codecs = {Codec(b.codec) for s in segs for b in iter_batches(s.read_bytes())}
                assert codecs == {Codec.LZ4}, (broker, part, codecs)


def test_clients_too_old_for_zstd_are_told_so(daemon: Daemon) -> None:
    """As Kafka: a consumer's Fetch below v10 of a topic written in zstd answers
    UNSUPPORTED_COMPRESSION_TYPE (it could not read the batches), as does a Produce
    below v7 that sends a zstd batch; a newer request of the same works."""
    c = RawClient(daemon.port)
    try:
        T = ProduceRequest.TopicProduceData
        batch = build_batch([Record(key=b"old", value=b"z" * 500)], codec=Codec.ZSTD)
        codes = {}
        for version in (6, 7):
            resp = c.request(ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000,
                                            topic_data=[T(name="p", partition_data=[
                                                T.PartitionProduceData(index=0, records=batch)])]),
                             version)
            codes[version] = resp.responses[0].partition_responses[0].error_code
        assert codes == {6: UNSUPPORTED_COMPRESSION_TYPE, 7: 0}
        for topic, version, code in (("z", 9, UNSUPPORTED_COMPRESSION_TYPE), ("z", 10, 0),
                                     ("g", 9, 0)):
            part = fetch(c, topic, 0, 0, version=version)
            assert part.error_code == code, (topic, version)
            assert bool(part.records) == (code == 0), (topic, version)
    finally:
        c.close()


def test_max_message_bytes_holds_the_batch_as_sent_and_as_recompressed(daemon: Daemon) -> None:
    """As Kafka: max.message.bytes bounds each batch as its producer sent it (Kafka's
    analyzeAndValidateRecords, before LogValidator), so an uncompressed 5 KB record is
    MESSAGE_TOO_LARGE on a zstd topic of max.message.bytes 2000 although zstd would shrink
    it below; and again as the leader rewrote it, so a gzip batch under the limit that an
    uncompressed topic would store at 5 KB is refused too. A compressed batch under the
    limit either way is taken. A refused record leaves nothing in the log."""
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    for fut in admin.create_topics([
            NewTopic("small-z", 1, 1, config={"compression.type": "zstd",
                                              "max.message.bytes": "2000"}),
            NewTopic("small-u", 1, 1, config={"compression.type": "uncompressed",
                                              "max.message.bytes": "2000"})]).values():
        fut.result(30)

    def produce(topic: str, codec: str) -> int | None:
        p = ck.Producer({"bootstrap.servers": daemon.bootstrap, "compression.type": codec,
                         "message.max.bytes": 1 << 20, "retries": 0})
        got: list[int | None] = []
        p.produce(topic, value=b"a" * 5000,
                  on_delivery=lambda err, msg: got.append(err.code() if err else msg.offset()))
        assert p.flush(30) == 0
        return got[0]

    too_large = ck.KafkaError.MSG_SIZE_TOO_LARGE
    assert produce("small-z", "none") == too_large
    assert produce("small-u", "gzip") == too_large
    assert produce("small-z", "gzip") == 0  # 5 KB of one byte: tens of bytes in gzip or zstd
    assert _codecs(daemon, "small-z") == [Codec.ZSTD]
    assert _codecs(daemon, "small-u") == []


def _rebuilt(batch: bytearray, count: int | None = None, garble: bool = False) -> bytes:
    """`batch` with its records area garbled and/or another record count in its header
    (lastOffsetDelta to match), under a CRC that fits: what a broken producer sends."""
    if garble:
        for i in range(HEADER_SIZE + 12, len(batch) - 8):
            batch[i] ^= 0x5A
    if count is not None:
        struct.pack_into(">i", batch, 23, count - 1)  # lastOffsetDelta
        struct.pack_into(">i", batch, HEADER_SIZE - 4, count)  # recordsCount
    struct.pack_into(">I", batch, 17, native.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_a_compressed_batch_that_does_not_read_back_is_refused(daemon: Daemon,
                                                               codec: Codec) -> None:
    """As Kafka's LogValidator, which reads every record of a compressed batch whatever
    the topic's codec: a payload that does not decompress, or holds fewer or more
    records than its header says, is refused (CORRUPT_MESSAGE) and written nowhere,
    on a topic that keeps the producer's codec ("p"), one in that codec or another
    ("g", "z"); it was stored where no rewrite read it, and every consumer then failed
    at its offset for good. The same records sent whole are taken."""
    c = RawClient(daemon.port)
    try:
        def produce(topic: str, batch: bytes) -> int:
            T = ProduceRequest.TopicProduceData
            resp = c.request(ProduceRequest(
                transactional_id=None, acks=1, timeout_ms=10000, topic_data=[T(
                    name=topic, partition_data=[T.PartitionProduceData(index=0,
                                                                       records=batch)])]), 8)
            return resp.responses[0].partition_responses[0].error_code

        def batch(n: int) -> bytearray:
            return bytearray(build_batch([Record(b"k%d" % i, b"v" * 200) for i in range(n)],
                                         codec=codec))

        for topic in ("p", "g", "z"):
            before = _codecs(daemon, topic)
            assert produce(topic, _rebuilt(batch(3), garble=True)) == CORRUPT_MESSAGE, topic
            assert produce(topic, _rebuilt(batch(2), count=3)) == CORRUPT_MESSAGE, topic
            assert produce(topic, _rebuilt(batch(4), count=3)) == CORRUPT_MESSAGE, topic
            assert _codecs(daemon, topic) == before, topic
            assert produce(topic, bytes(batch(3))) == 0, topic
    finally:
        c.close()
