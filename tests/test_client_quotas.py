"""Client quotas (daemon/api/client_quotas.py; docs/cluster.md "Client quotas"): a
client-id's producer_byte_rate and consumer_byte_rate, set and shown with
AlterClientQuotas / DescribeClientQuotas (the requests kafka-configs.sh --entity-type
clients sends, built here from kafka-python's schema classes) and `logkeeper configs
--client`, enforced on real clients (confluent-kafka) by throttle times and a muted
connection, as Kafka's brokers do (KIP-13, KIP-219). Rates over 3 samples of 1 s here,
so a new quota lets 2 s' worth through before it throttles (Kafka's 11 samples: 10 s).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest
from kazoo.client import KazooClient

from logstore.records import Record, build_batch

from .cluster_helpers import Cluster, wait_for
from .daemon_helpers import RawClient, running
from .sick_helpers import create_topic, fill, metric
from .test_cli import cli

RATE = 256 * 1024
WINDOWS = {"quota.window.num": 3}
INVALID_REQUEST = 42


def _set(bootstrap: str, client: str, **quotas: int) -> None:
    got = cli("configs", "alter", "--bootstrap-server", bootstrap, "--client", client,
              "--add-config", ",".join(f"{k}={v}" for k, v in quotas.items()))
    assert got.returncode == 0, got.stderr
    assert f"Completed updating config for client-id '{client}'." in got.stdout


def _alter(c: RawClient, entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]],
           validate_only: bool = False) -> tuple[int, str | None]:
    E = AlterClientQuotasRequest.EntryData
    resp = c.request(AlterClientQuotasRequest(entries=[E(
        entity=[E.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[E.OpData(key=k, value=v, remove=r) for k, v, r in ops])],
        validate_only=validate_only), 1)
    [entry] = resp.entries
    return entry.error_code, entry.error_message


def _describe(c: RawClient, match_type: int | None = None, match: str | None = None,
              strict: bool = False) -> dict[str | None, dict[str, float]]:
    C = DescribeClientQuotasRequest.ComponentData
    components = [] if match_type is None else [C(entity_type="client-id", match_type=match_type,
                                                    match=match)]
    resp = c.request(DescribeClientQuotasRequest(components=components, strict=strict), 1)
    assert resp.error_code == 0, resp.error_message
    return {e.entity[0].entity_name: {v.key: v.value for v in e.values} for e in resp.entries}


def _produce(c: RawClient, topic: str, kib: int) -> tuple[int, int]:
    """(error, throttle_time_ms) of one acks=1 Produce v8 of about `kib` KiB."""
    T = ProduceRequest.TopicProduceData
    batch = build_batch([Record(None, b"p" * 1024) for _ in range(kib)])
    resp = c.request(ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])]), 8)
    return resp.responses[0].partition_responses[0].error_code, resp.throttle_time_ms


def _fetch(c: RawClient, topic: str, offset: int) -> tuple[int, int, int]:
    """(record bytes, next offset, throttle_time_ms) of one consumer Fetch v11 asking
    for up to 16 MiB."""
    from logstore.records import iter_batches

    F = FetchRequest.FetchTopic
    resp = c.request(FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=16 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=[F.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=16 << 20)])], forgotten_topics_data=[], rack_id=""), 11)
    data = b"".join(bytes(p.records or b"") for t in resp.responses for p in t.partitions)
    batches = list(iter_batches(data)) if data else []
    nxt = batches[-1].base_offset + batches[-1].last_offset_delta + 1 if batches else offset
    return len(data), nxt, resp.throttle_time_ms


def test_a_client_over_its_produce_quota_is_throttled_and_others_are_not(tmp_path: Path) -> None:
    """producer_byte_rate 256 KiB/s for client-id `metered`: its Produce answers carry
    Kafka's throttle time, (observed - quota) / quota x window, once it is over; the
    same requests from another client-id carry none. A confluent-kafka producer as
    `metered` takes seconds for 2 MiB (librdkafka waits out the throttle times; the
    broker holds its next requests meanwhile); as `free`, a fraction of one."""
    with running(tmp_path, WINDOWS) as d:
        create_topic(d, "q", 1)
        _set(d.bootstrap, "metered", producer_byte_rate=RATE)
        shown = cli("configs", "describe", "--bootstrap-server", d.bootstrap, "--client", "metered")
        assert shown.stdout.strip() == \
            f"Quota configs for client-id 'metered' are producer_byte_rate={RATE:.1f}"
        shown = cli("configs", "describe", "--bootstrap-server", d.bootstrap, "--client", "metered",
                    "--json")
        assert json.loads(shown.stdout) == {"producer_byte_rate": RATE}
        shown = cli("configs", "describe", "--bootstrap-server", d.bootstrap, "--client-defaults")
        assert shown.stdout.strip() == "No quota configs for the default client-id"

        free, metered = RawClient(d.port, client_id="free"), RawClient(d.port, client_id="metered")
        try:
            assert [_produce(free, "q", 300) for _ in range(3)] == [(0, 0)] * 3
            assert _produce(metered, "q", 300) == (0, 0)  # 300 KiB over at least 2 s: 150 KiB/s
            code, throttle = _produce(metered, "q", 300)  # 600 KiB over 2 s: 300 KiB/s
            assert code == 0
            # (300 - 256) / 256 x 2 s = 0.34 s, give or take the requests' own framing.
            assert 250 < throttle < 450, throttle
            # The connection takes nothing more until the throttle time is over.
            started = time.monotonic()
            assert _produce(metered, "q", 1)[0] == 0
            assert time.monotonic() - started > throttle / 1000 * 0.8
        finally:
            free.close()
            metered.close()
        assert metric(d, "logkeeper_client_quota_throttled_requests_total",
                      quota="producer_byte_rate") >= 1

        took = {}
        for client in ("free", "metered"):
            p = ck.Producer({"bootstrap.servers": d.bootstrap, "client.id": client, "linger.ms": 5})
            started = time.monotonic()
            for _ in range(512):  # 2 MiB
                p.produce("q", b"c" * 4096)
                p.poll(0)
            assert p.flush(120) == 0
            took[client] = time.monotonic() - started
        print(f"2 MiB produced: free {took['free']:.2f} s, metered {took['metered']:.2f} s at {RATE} B/s")
        # Over 2 MiB at 256 KiB/s, less what the window still allows: seconds at least.
        assert took["metered"] > 3, took


def test_a_consumer_over_its_fetch_quota_gets_empty_throttled_answers(tmp_path: Path) -> None:
    """consumer_byte_rate 256 KiB/s for client-id `reader`: one answer carries at most
    the quota's window (Kafka's getMaxValueInQuotaWindow: 256 KiB x 2 s), an answer that
    would take it over is empty with the throttle time (its bytes not counted, Kafka's
    KIP-219), and a confluent-kafka consumer as `reader` reads 2 MiB in seconds where
    another client-id reads it at once; both read every record."""
    with running(tmp_path, WINDOWS) as d:
        create_topic(d, "r", 1)
        fill(d.port, "r", 0, 10, b"r")  # 2 MiB
        _set(d.bootstrap, "reader", consumer_byte_rate=RATE)
        c = RawClient(d.port, client_id="reader")
        try:
            size, offset, throttle = _fetch(c, "r", 0)
            assert 0 < size <= 2 * RATE and throttle == 0, (size, throttle)
            size, again, throttle = _fetch(c, "r", offset)
            assert size == 0 and again == offset and throttle > 0, (size, throttle)
        finally:
            c.close()

        took = {}
        for client in ("free", "reader"):
            consumer = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": client,
                                    "client.id": client, "auto.offset.reset": "earliest",
                                    "enable.auto.commit": False})
            try:
                started = time.monotonic()
                consumer.assign([ck.TopicPartition("r", 0, 0)])
                got: set[bytes] = set()
                deadline = time.monotonic() + 90
                while len(got) < 2000:
                    assert time.monotonic() < deadline, f"{client} read {len(got)} of 2000"
                    got.update(m.value() for m in consumer.consume(1000, 0.5) if m.error() is None)
                took[client] = time.monotonic() - started
            finally:
                consumer.close()
        print(f"2 MiB consumed: free {took['free']:.2f} s, reader {took['reader']:.2f} s at {RATE} B/s")
        assert took["reader"] > 3, took


def test_client_quota_requests_are_checked_and_kept(tmp_path: Path) -> None:
    """Each bad entry is refused with 42 and a message and changes nothing; validate_only
    stores nothing; DescribeClientQuotas filters as Kafka's (exact, default, any
    specified, strict); the quotas outlive a restart (the dirs' config file)."""
    with running(tmp_path, WINDOWS) as d:
        c = RawClient(d.port)
        try:
            assert _alter(c, [("client-id", "a")], [("producer_byte_rate", 1000, False)]) == (0, None)
            assert _alter(c, [("client-id", None)], [("consumer_byte_rate", 5000, False)]) == (0, None)
            for entity, ops, said in (
                    ([("ip", "10.0.0.1")], [("producer_byte_rate", 1, False)], "not per IP address"),
                    ([("client-id", "a"), ("client-id", "b")], [("producer_byte_rate", 1, False)],
                     "Duplicate client-id entity"),
                    ([("group", "g")], [("producer_byte_rate", 1, False)], "Unknown entity type"),
                    ([], [("producer_byte_rate", 1, False)], "Invalid empty"),
                    ([("user", "")], [("producer_byte_rate", 1, False)], "needs a name"),
                    ([("client-id", "a")], [("request_percentage", 5, False)], "not supported"),
                    ([("client-id", "a")], [("bytes_please", 5, False)], "Invalid configuration key"),
                    ([("client-id", "a")], [("producer_byte_rate", 1.5, False)], "must be a Long"),
                    ([("client-id", "a")], [("producer_byte_rate", -5, False)], "must be positive"),
                    ([("client-id", "a")], [("producer_byte_rate", 5, False),
                                            ("producer_byte_rate", 6, False)], "Duplicate quota key")):
                code, message = _alter(c, entity, ops)
                assert code == INVALID_REQUEST and said in (message or ""), (entity, ops, message)
            assert _alter(c, [("client-id", "b")], [("producer_byte_rate", 7, False)],
                          validate_only=True) == (0, None)
            everything = {"a": {"producer_byte_rate": 1000.0}, None: {"consumer_byte_rate": 5000.0}}
            assert _describe(c) == everything
            assert _describe(c, 0, "a") == {"a": {"producer_byte_rate": 1000.0}}
            assert _describe(c, 1) == {None: {"consumer_byte_rate": 5000.0}}
            assert _describe(c, 2) == {"a": {"producer_byte_rate": 1000.0}}
            assert _describe(c, strict=True) == {}
            # A removal takes the key off; the last key off removes the entity.
            assert _alter(c, [("client-id", "a")], [("producer_byte_rate", 0, True)]) == (0, None)
            assert _describe(c) == {None: {"consumer_byte_rate": 5000.0}}
            assert _alter(c, [("client-id", "a")], [("producer_byte_rate", 2000, False)]) == (0, None)
        finally:
            c.close()
        d.stop()
        d.start()
        c = RawClient(d.port)
        try:
            assert _describe(c) == {"a": {"producer_byte_rate": 2000.0}, None: {"consumer_byte_rate": 5000.0}}
        finally:
            c.close()
        bad = cli("configs", "alter", "--bootstrap-server", d.bootstrap, "--client", "a",
                  "--add-config", "producer_byte_rate=fast")
        assert bad.returncode == 2 and "a quota is a number of bytes per second" in bad.stderr


def test_client_quotas_live_in_kafkas_znodes_and_every_broker_applies_them(tmp_path: Path) -> None:
    """Set through one broker, a quota is `/config/clients/<sanitized client-id>` (or
    `/config/users/<user>[/clients/<client-id>]`) with a change notification, as Kafka's;
    every broker applies it to its own traffic."""
    with Cluster(tmp_path, dirs=1, extra=WINDOWS) as cl:
        _set(cl.brokers[1].bootstrap, "my app*", producer_byte_rate=RATE)
        zk = KazooClient(hosts=cl.zk.hosts)
        zk.start(10)
        try:
            data, _ = zk.get("/config/clients/my%20app%2A")
            assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": str(RATE)}}
        finally:
            zk.stop()
            zk.close()

        def applied(b: int) -> Any:
            shown = cli("configs", "describe", "--bootstrap-server", cl.brokers[b].bootstrap,
                        "--client", "my app*")
            return f"producer_byte_rate={RATE:.1f}" in shown.stdout
        wait_for(lambda: all(applied(b) for b in cl.brokers), 30, "every broker to know the quota")

        # A user's and client-id's: /config/users/<user>/clients/<client-id>; a user's own
        # beside its SCRAM credentials in /config/users/<user>, neither overwriting the other.
        for args in (["--user", "al ice", "--client", "my app*", "--add-config",
                      "consumer_byte_rate=4096"],
                     ["--user", "al ice", "--add-config", "SCRAM-SHA-512=[password=p]"],
                     ["--user", "al ice", "--add-config", "producer_byte_rate=2048"]):
            got = cli("configs", "alter", "--bootstrap-server", cl.brokers[1].bootstrap, *args)
            assert got.returncode == 0, got.stderr
        zk = KazooClient(hosts=cl.zk.hosts)
        zk.start(10)
        try:
            data, _ = zk.get("/config/users/al%20ice/clients/my%20app%2A")
            assert json.loads(data)["config"] == {"consumer_byte_rate": "4096"}
            data, _ = zk.get("/config/users/al%20ice")
            assert set(json.loads(data)["config"]) == {"SCRAM-SHA-512", "producer_byte_rate"}
        finally:
            zk.stop()
            zk.close()

        def user_applied(b: int) -> Any:
            shown = cli("configs", "describe", "--bootstrap-server", cl.brokers[b].bootstrap,
                        "--user", "al ice", "--client", "my app*")
            return "consumer_byte_rate=4096.0" in shown.stdout
        wait_for(lambda: all(user_applied(b) for b in cl.brokers), 30,
                 "every broker to know the user's and client-id's quota")
        # Broker 3 enforces it on a topic it leads.
        from .test_replication import create

        meta = create(cl, "z", 1, min_isr=1, assignment=[[3, 1, 2]])
        assert meta["partitions"][("z", 0)][0] == 3
        c = RawClient(cl.brokers[3].port, client_id="my app*")
        try:
            throttles = [_produce(c, "z", 300)[1] for _ in range(3)]
        finally:
            c.close()
        assert throttles[0] == 0 and throttles[-1] > 0, throttles


@pytest.mark.parametrize("client", ["plain", "my app*", "é/x"])
def test_client_ids_are_sanitized_as_kafka_does(client: str) -> None:
    from daemon.api.client_quotas import desanitize, sanitize

    assert desanitize(sanitize(client)) == client
    assert sanitize("my app*") == "my%20app%2A" and sanitize("a.b_c-d") == "a.b_c-d"


def test_the_throttle_time_is_kafkas_and_idle_client_ids_are_forgotten() -> None:
    """Without a broker, on a fake clock: a client-id's own quota, else the default's;
    Kafka's (observed - quota) / quota x window; a throttled Fetch's bytes taken back
    out; the largest answer one window allows; a rate unused for an hour dropped."""
    from daemon.api.client_quotas import CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, ClientQuotas

    now = [1000.0]
    q = ClientQuotas(samples=3, window_s=1.0, clock=lambda: now[0])
    q.load({(None, "a"): {PRODUCER_BYTE_RATE: "1000"},
            (None, DEFAULT): {PRODUCER_BYTE_RATE: "500", CONSUMER_BYTE_RATE: "100"}})
    assert (q.bound(PRODUCER_BYTE_RATE, "ANONYMOUS", "a"),
            q.bound(PRODUCER_BYTE_RATE, "ANONYMOUS", "b")) == ((1000, (None, "a")),
                                                             (500, (None, "b")))
    assert q.throttle_ms(PRODUCER_BYTE_RATE, "u", "a", 1500) == 0  # 1,500 B over 2 s: 750 B/s
    # 3,000 B over 2 s: 1,500 B/s against 1,000: (1500 - 1000) / 1000 x 2 s = 1 s.
    assert q.throttle_ms(PRODUCER_BYTE_RATE, "u", "a", 1500) == 1000
    assert q.throttle_ms(PRODUCER_BYTE_RATE, "u", "b", 1500) == 1000  # the default: 750 vs 500
    assert q.window_allowance(CONSUMER_BYTE_RATE, "u", "x") == 200
    assert q.throttle_ms(CONSUMER_BYTE_RATE, "u", "x", 300, keep_if_throttled=False) == 1000
    assert q.throttle_ms(CONSUMER_BYTE_RATE, "u", "x", 200) == 0  # the 300 were taken back out
    q.set((None, DEFAULT), {})
    assert q.throttle_ms(PRODUCER_BYTE_RATE, "u", "b", 10**9) == 0 and q.window_allowance(
        CONSUMER_BYTE_RATE, "u", "x") is None
    assert ("producer_byte_rate", (None, "a")) in q._rates
    now[0] += 2 * 3600
    q.throttle_ms(PRODUCER_BYTE_RATE, "u", "a", 1)
    assert set(q._rates) == {("producer_byte_rate", (None, "a"))}  # b's and x's went


def test_user_quotas_come_first_in_kafkas_order() -> None:
    """Kafka's eight levels, most specific first: user and client-id, user and default
    client-id, user, default user and client-id, default user and default client-id,
    default user, client-id, default client-id. The entity matched decides whose rate it
    is: a user quota is shared by all that user's client-ids, a default user's is each
    user's own."""
    from daemon.api.client_quotas import DEFAULT, PRODUCER_BYTE_RATE, ClientQuotas

    levels = [("alice", "app"), ("alice", DEFAULT), ("alice", None), (DEFAULT, "app"),
              (DEFAULT, DEFAULT), (DEFAULT, None), (None, "app"), (None, DEFAULT)]
    q = ClientQuotas(samples=3, window_s=1.0, clock=lambda: 0.0)
    q.load({e: {PRODUCER_BYTE_RATE: str(1000 + i)} for i, e in enumerate(levels)})
    for i, entity in enumerate(levels):
        assert q.bound(PRODUCER_BYTE_RATE, "alice", "app")[0] == 1000 + i, entity
        q.set(entity, {})  # the next level applies now
    assert q.bound(PRODUCER_BYTE_RATE, "alice", "app") is None

    q.load({("alice", None): {PRODUCER_BYTE_RATE: "1000"},
            (DEFAULT, None): {PRODUCER_BYTE_RATE: "1000"}})
    assert q.throttle_ms(PRODUCER_BYTE_RATE, "alice", "one", 2000) == 0  # 1,000 B/s over 2 s
    assert q.throttle_ms(PRODUCER_BYTE_RATE, "alice", "two", 2000) > 0  # the same rate
    assert q.throttle_ms(PRODUCER_BYTE_RATE, "bob", "one", 2000) == 0  # bob's own
    assert q.throttle_ms(PRODUCER_BYTE_RATE, "carol", "one", 2000) == 0  # and carol's


def test_user_quotas_bound_a_sasl_users_client_ids_together(tmp_path: Path) -> None:
    """producer_byte_rate for user alice (a SASL login), set with `logkeeper configs
    --user alice`, kept beside her SCRAM credentials: her two client-ids share one rate
    and are throttled together; bob, with no user quota, falls to the default user's
    and client-id's quota, which is his own; an anonymous client on PLAINTEXT has none.
    DescribeClientQuotas shows each entity as Kafka names it, and they outlive a
    restart."""
    from daemon.security.sasl import login_blocking

    from .daemon_helpers import Daemon, write_config
    from .test_acls import JAAS
    from .zkserver import free_port

    d = Daemon(tmp_path / "d", {"num.partitions": 1, **WINDOWS})
    sp = free_port()
    d.values.update({
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sp},PLAINTEXT://127.0.0.1:{d.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS})
    d.config = write_config(d.root / "logkeeper.toml", d.values)

    def as_user(user: str, client_id: str) -> RawClient:
        c = RawClient(sp, client_id=client_id)
        login_blocking(c.sock, ("PLAIN", user, f"{user}-secret"), client_id=client_id,
                       peer="the broker")
        return c

    def configs(*args: str) -> str:
        got = cli("configs", *args, "--bootstrap-server", d.bootstrap)
        assert got.returncode == 0, got.stderr
        return got.stdout.strip()

    with d:
        create_topic(d, "uq", 1)
        assert configs("alter", "--user", "alice", "--add-config",
                       f"producer_byte_rate={RATE},SCRAM-SHA-256=[password=alice-scram]") == \
            "Completed updating config for user-principal 'alice'."
        configs("alter", "--user-defaults", "--client-defaults", "--add-config",
                f"producer_byte_rate={RATE * 4}")
        assert configs("describe", "--user", "alice") == (
            f"Quota configs for user-principal 'alice' are producer_byte_rate={RATE:.1f}\n"
            "SCRAM credential configs for user-principal 'alice' are "
            "SCRAM-SHA-256=iterations=4096")
        assert configs("describe", "--user-defaults", "--client-defaults") == (
            "Quota configs for the default user-principal, the default client-id are "
            f"producer_byte_rate={RATE * 4:.1f}")

        one, two = as_user("alice", "one"), as_user("alice", "two")
        bob, anonymous = as_user("bob", "one"), RawClient(d.port, client_id="one")
        try:
            assert _produce(one, "uq", 300) == (0, 0)  # 300 KiB over 2 s: within 256 KiB/s
            code, throttle = _produce(two, "uq", 300)  # alice's rate: 600 KiB over 2 s
            assert code == 0 and throttle > 0, throttle
            assert [_produce(bob, "uq", 300)[1] for _ in range(2)] == [0, 0]  # 1 MiB/s his
            assert [_produce(anonymous, "uq", 300)[1] for _ in range(3)] == [0, 0, 0]
        finally:
            for c in (one, two, bob, anonymous):
                c.close()
        # The SCRAM credential set beside the quota logs her in.
        c = RawClient(sp, client_id="scram")
        login_blocking(c.sock, ("SCRAM-SHA-256", "alice", "alice-scram"), client_id="scram",
                       peer="the broker")
        c.close()

        admin = RawClient(d.port)
        try:
            C = DescribeClientQuotasRequest.ComponentData
            resp = admin.request(DescribeClientQuotasRequest(components=[
                C(entity_type="user", match_type=2, match=None)], strict=False), 1)
            assert [[(e.entity_type, e.entity_name) for e in x.entity] for x in resp.entries] \
                == [[("user", "alice")]]
        finally:
            admin.close()
        d.stop()
        d.start()
        assert configs("describe", "--user", "alice").startswith(
            f"Quota configs for user-principal 'alice' are producer_byte_rate={RATE:.1f}")
