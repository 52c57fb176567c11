"""Transactional producers against logkeeper, which runs no transaction coordinator: each
Kafka client is refused at its first transactional request, at once and for good, with
the reason where the client shows one, and nothing is written. (Kafka's clients retry
most refusals until their timeout; TRANSACTIONAL_ID_AUTHORIZATION_FAILED they take as
final.) Reading transactional data a Kafka broker wrote is test_kafka_transactions.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import confluent_kafka as ck
import kafka.errors as ke
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import InitProducerIdRequest

from tests.daemon_helpers import Daemon, RawClient, running

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
REASON = "transactions are not served by logkeeper"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("txn")) as d:
        yield d


def topics(d: Daemon) -> set[str]:
    return set(AdminClient({"bootstrap.servers": d.bootstrap}).list_topics(timeout=10).topics)


def test_confluent_kafka_fails_at_once_with_the_reason(daemon: Daemon) -> None:
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap, "transactional.id": "orders-app"})
    with pytest.raises(ck.KafkaException) as info:
        p.init_transactions(30)
    err = info.value.args[0]
    # Fatal, not the _TIMED_OUT of a client that kept retrying.
    assert err.fatal() and err.code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert REASON in err.str()
    assert "orders" not in topics(daemon)


def test_kafka_python_and_aiokafka_are_refused(daemon: Daemon) -> None:
    p = KafkaProducer(bootstrap_servers=daemon.bootstrap, transactional_id="kp-app")
    try:
        with pytest.raises(ke.TransactionalIdAuthorizationFailedError):
            p.init_transactions()
    finally:
        p.close(5)

    async def aio() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=daemon.bootstrap, transactional_id="aio-app")
        try:
            await producer.start()
            async with producer.transaction():
                await producer.send_and_wait("aio-orders", b"x")
        finally:
            await producer.stop()

    with pytest.raises(Exception) as info:  # aiokafka's own error class, by its name
        asyncio.run(aio())
    assert type(info.value).__name__ == "TransactionalIdAuthorizationFailed"
    assert "aio-orders" not in topics(daemon)


def test_the_protocol_answers(daemon: Daemon) -> None:
    c = RawClient(daemon.port)
    try:
        r = c.request(FindCoordinatorRequest(key="app", key_type=1), 1)
        assert (r.error_code, r.node_id) == (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        assert REASON in r.error_message
        r = c.request(InitProducerIdRequest(transactional_id="app", transaction_timeout_ms=60000), 1)
        assert (r.error_code, r.producer_id) == (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        # An idempotent producer (no transactional id) still gets its id.
        r = c.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 1)
        assert r.error_code == 0 and r.producer_id >= 0
    finally:
        c.close()
