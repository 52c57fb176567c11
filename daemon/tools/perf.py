"""What `logkeeper producer-perf-test` and `consumer-perf-test` share: Kafka's client
config names translated for librdkafka, the client the perf tools run on, and the
client's own metrics (`--print-metrics`).

The perf tools measure a broker, so they use the fastest Kafka client there is for
Python, confluent-kafka (librdkafka, a runtime dependency), where Kafka's use the Java
client. Kafka's config names work: librdkafka knows most of them itself (`acks`,
`linger.ms`, `batch.size`, `compression.type`, `fetch.max.bytes`...); those it names
differently are renamed here (`buffer.memory` in bytes becomes
`queue.buffering.max.kbytes`, `max.request.size` becomes `message.max.bytes`, Java's
assignor class names become librdkafka's strategy names); Java's (de)serializer classes
are dropped, as Kafka's tools set their own. A name librdkafka does not have is left
out with Kafka's warning ("was supplied but isn't a known config"); a value it refuses
raises ValueError naming the property.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# Java client config name -> librdkafka's, where they differ.
_RENAMED = {
    "max.request.size": "message.max.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
}
# Java's names for what the tools set themselves.
_DROPPED = ("key.serializer", "value.serializer", "key.deserializer", "value.deserializer")
_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
_UNKNOWN = re.compile(r'No such configuration property: "([^"]+)"')


def rdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    """Kafka client configs as librdkafka's (see the module docstring). Kafka's
    security.protocol=SSL with its ssl.* keys (truststore and keystore, PEM or PKCS12)
    become librdkafka's ssl.ca.pem, ssl.key.pem and ssl.certificate.pem; SASL's
    sasl.mechanism and sasl.jaas.config its sasl.mechanisms, sasl.username and
    sasl.password."""
    from ..config import client_login, client_tls

    out: dict[str, str] = {}
    secured = "security.protocol" in props
    tls = client_tls(props, "the client config") if secured else None
    login = client_login(props, "the client config") if secured else None
    if login is not None:
        out["security.protocol"] = "sasl_ssl" if tls is not None else "sasl_plaintext"
        out["sasl.mechanisms"], out["sasl.username"], out["sasl.password"] = login
    if tls is not None:
        out["security.protocol"] = "sasl_ssl" if login is not None else "ssl"
        if tls.trusted_pem is not None:
            out["ssl.ca.pem"] = tls.trusted_pem
        parts = tls.pem_parts()
        if parts is not None:
            out["ssl.key.pem"], out["ssl.certificate.pem"] = parts
        out["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else "none"
        if tls.ciphers is not None:
            out["ssl.cipher.suites"] = tls.ciphers  # librdkafka takes OpenSSL's names
    for name, value in props.items():
        value = value.strip()
        if name in _DROPPED or ((tls is not None or login is not None) and (
                name == "security.protocol" or name.startswith(("ssl.", "sasl.")))):
            continue
        if name == "buffer.memory":
            try:
                kbytes = max(1, int(value) // 1024)
            except ValueError:
                raise ValueError(f"Invalid value {value} for configuration buffer.memory: "
                                 "Not a number of type LONG") from None
            out["queue.buffering.max.kbytes"] = str(kbytes)
            continue
        if name == "partition.assignment.strategy":
            value = ",".join(_ASSIGNORS.get(c.strip(), c.strip()) for c in value.split(","))
        out[_RENAMED.get(name, name)] = value
    return out


def open_client(client_class: Any, config: Mapping[str, Any]) -> Any:
    """A confluent_kafka Producer or Consumer of `config`; a config name librdkafka does
    not have is dropped with Kafka's warning on stderr, a value it refuses is a
    ValueError."""
    from confluent_kafka import KafkaException

    config = dict(config)
    while True:
        try:
            return client_class(config)
        except (KafkaException, ValueError, TypeError) as exc:
            err = exc.args[0] if exc.args else exc
            text = err.str() if hasattr(err, "str") else str(err)
            unknown = _UNKNOWN.search(text)
            if unknown and unknown.group(1) in config:
                print(f"WARN The configuration '{unknown.group(1)}' was supplied but isn't a "
                      "known config.", file=sys.stderr)
                del config[unknown.group(1)]
                continue
            raise ValueError(f"client config: {text}") from None


def reach(client: Any, bootstrap: str) -> Any:
    """The cluster's metadata as `client` gets it; ValueError naming the address when no
    broker answers within 10 s (the tools then stop before measuring anything)."""
    from confluent_kafka import KafkaException

    try:
        return client.list_topics(timeout=10)
    except KafkaException as err:
        raise ValueError(f"no broker at {bootstrap}: {err.args[0].str()}") from None


def monotonic_ms() -> int:
    """Milliseconds on the monotonic clock, which the tools time everything by: a step
    of the wall clock (a VM's clock being set) must neither stop a throttle nor
    distort a rate or a latency."""
    return time.monotonic_ns() // 1_000_000


class ClientStats:
    """The last statistics document librdkafka emitted (`stats_cb`), for
    `--print-metrics`: Kafka's tools print their client's metrics at the end."""

    INTERVAL_MS = 200

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.received = 0

    def config(self) -> dict[str, Any]:
        return {"statistics.interval.ms": self.INTERVAL_MS, "stats_cb": self._received}

    def _received(self, text: str) -> None:
        self.last = json.loads(text)
        self.received += 1

    def refresh(self, poll: Callable[[float], Any]) -> None:
        """Serve the client's callbacks (`poll`, which must deliver no records) until a
        statistics document newer than now arrives, so the figures include the end of
        the run; at most a few intervals."""
        seen = self.received
        deadline = time.monotonic() + 3 * self.INTERVAL_MS / 1000
        while self.received < seen + 2 and time.monotonic() < deadline:
            poll(self.INTERVAL_MS / 1000)

    def print(self, out: Any = None) -> None:
        """A `Metric Name  Value` table as Kafka's ToolsUtils.printMetrics prints, of the
        client's counters: its totals, and per broker and partition."""
        out = out or sys.stdout
        rows = sorted(self.rows())
        if not rows:
            print("no client metrics were received", file=out)
            return
        width = max(len(name) for name, _ in rows)
        print(f"\n{'Metric Name':<{width}}  Value", file=out)
        for name, value in rows:
            print(f"{name:<{width}} : {value}", file=out)

    def rows(self) -> Iterable[tuple[str, Any]]:
        doc = self.last or {}
        prefix = f"{doc.get('type', 'client')}-metrics:"
        for key, value in doc.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield f"{prefix}{key}:{{client-id={doc.get('client_id', '')}}}", value
        for broker in (doc.get("brokers") or {}).values():
            if broker.get("nodeid", -1) < 0:
                continue  # the bootstrap connection
            tags = f"{{client-id={doc.get('client_id', '')}, node-id=node-{broker['nodeid']}}}"
            for key in ("tx", "txbytes", "rx", "rxbytes", "txerrs", "rxerrs", "req_timeouts"):
                if key in broker:
                    yield f"{prefix}{key}:{tags}", broker[key]
        for topic in (doc.get("topics") or {}).values():
            for part in (topic.get("partitions") or {}).values():
                if part.get("partition", -1) < 0:
                    continue
                tags = (f"{{client-id={doc.get('client_id', '')}, topic={topic.get('topic')}, "
                        f"partition={part['partition']}}}")
                for key in ("txmsgs", "txbytes", "rxmsgs", "rxbytes", "consumer_lag"):
                    if key in part:
                        yield f"{prefix}{key}:{tags}", part[key]
