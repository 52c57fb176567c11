"""Prometheus metrics with Kafka-like names, and the HTTP endpoint for /metrics and /healthz.

Names follow what Kafka's JMX beans become under the Prometheus JMX exporter
(`kafka_server_brokertopicmetrics_*`, `kafka_network_requestmetrics_*`,
`kafka_log_*`), so existing dashboards read them with little change. Each daemon owns
its own `CollectorRegistry` (tests start several in one process).

The daemon records through methods (`observe_request`, `bytes_in(topic, n)`,
`set_log_dir`, `set_log_dir_state`, ...) and serves with `await metrics.serve(host,
port)`; `health_fn` is the callable behind /healthz. Where the Kafka name exists, the
metric follows Prometheus' base units (seconds, bytes) rather than JMX's
milliseconds. The log-dir state, probe-latency, degraded and offline/saturated counts
are defined here already so dashboards and alerts can be written against them.

The HTTP endpoint runs on the event loop (asyncio) and never touches a disk itself:
/metrics renders the registry, /healthz reports readiness and the state of each log
dir from memory (200 when serving, 503 while starting, stopping, or with every dir
offline), other GET views (`/log-dirs`) are JSON from memory, and `POST /admin/<cmd>`
with a JSON body goes to the daemon's admin handler (operator commands; answers JSON
with the handler's status). Malformed requests get 400 and the connection is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

import native

log = logging.getLogger("logkeeper.metrics")

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)


LOG_DIR_STATES = ("online", "saturated", "offline")


class _TopicCounter:
    """A per-topic counter: `counter(topic, n)` adds n; `.labels(topic)` is the Counter's."""

    def __init__(self, counter: Counter):
        self.counter = counter

    def __call__(self, topic: str, n: int | float) -> None:
        self.counter.labels(topic).inc(n)

    def labels(self, *values: str, **kw: str) -> Any:
        return self.counter.labels(*values, **kw)


class Crc32cCollector(Collector):
    """`logkeeper_crc32c_implementation{impl=...} 1`: the CRC-32C implementation the
    dispatch uses, read at scrape time (a test or an operator may force another one)."""

    def collect(self) -> Any:
        family = GaugeMetricFamily(
            "logkeeper_crc32c_implementation",
            "1 for the CRC-32C implementation in use (native.crc32c_active)", labels=["impl"])
        family.add_metric([native.crc32c_active()], 1)
        yield family


def _default_health() -> tuple[bool, dict[str, Any]]:
    return True, {"status": "serving"}


class Metrics:
    """One daemon's metrics in its own registry. Call from the event loop thread."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # /healthz asks this: () -> (ok, detail); the daemon replaces it with its own.
        self.health_fn: Callable[[], tuple[bool, dict[str, Any]]] = _default_health
        self._http: HttpEndpoint | None = None
        self.bytes_in = _TopicCounter(Counter(
            "kafka_server_brokertopicmetrics_bytes_in", "Bytes appended by producers",
            ["topic"], registry=r))
        self.bytes_out = _TopicCounter(Counter(
            "kafka_server_brokertopicmetrics_bytes_out", "Record bytes sent to consumers",
            ["topic"], registry=r))
        self.messages_in = _TopicCounter(Counter(
            "kafka_server_brokertopicmetrics_messages_in", "Records appended", ["topic"],
            registry=r))
        self.failed_produce = Counter(
            "kafka_server_brokertopicmetrics_failed_produce_requests",
            "Partition appends refused or failed, by Kafka error code", ["error"], registry=r)
        self.failed_fetch = Counter(
            "kafka_server_brokertopicmetrics_failed_fetch_requests",
            "Partition reads failed, by Kafka error code", ["error"], registry=r)
        self.requests = Counter("kafka_network_requestmetrics_requests",
                                "Requests handled", ["request", "version"], registry=r)
        self.request_time = Histogram(
            "kafka_network_requestmetrics_total_time_seconds",
            "Time from a request's last byte read to its response written",
            ["request"], buckets=_LATENCY_BUCKETS, registry=r)
        self.request_bytes = Counter("kafka_network_requestmetrics_request_bytes",
                                     "Request frame bytes", ["request"], registry=r)
        self.errors = Counter("kafka_network_requestmetrics_errors",
                              "Error codes in responses", ["request", "error"], registry=r)
        self.bad_frames = Counter("logkeeper_protocol_rejected_frames",
                                  "Frames that closed their connection", ["reason"], registry=r)
        self.connections = Gauge("kafka_server_socketservermetrics_connection_count",
                                 "Open client connections", registry=r)
        self.partition_count = Gauge("kafka_server_replicamanager_partitioncount",
                                     "Partitions on this broker", registry=r)
        self.leader_count = Gauge("kafka_server_replicamanager_leadercount",
                                  "Partitions this broker leads", registry=r)
        self.dir_size = Gauge("kafka_log_logdir_size_bytes",
                              "Bytes of partition data in a log dir", ["log_dir"], registry=r)
        self.dir_free = Gauge("kafka_log_logdir_free_bytes",
                              "Bytes available on the filesystem of a log dir", ["log_dir"],
                              registry=r)
        self.dir_total = Gauge("kafka_log_logdir_total_bytes",
                               "Size of the filesystem of a log dir", ["log_dir"], registry=r)
        self.dir_partitions = Gauge("kafka_log_logdir_partition_count",
                                    "Partitions in a log dir", ["log_dir"], registry=r)
        self.dir_online = Gauge("kafka_log_logmanager_logdirectoryoffline",
                                "1 when the log dir is offline (Kafka's LogDirectoryOffline)",
                                ["log_dir"], registry=r)
        self.recovered = Counter("logkeeper_log_recovered_bytes_truncated",
                                 "Bytes cut by recovery at start-up", ["log_dir"], registry=r)
        self.offline_dirs = Gauge("kafka_log_logmanager_offlinelogdirectorycount",
                                  "Offline log dirs", registry=r)
        self.offline_replicas = Gauge("kafka_server_replicamanager_offlinereplicacount",
                                      "Replicas on this broker in offline log dirs", registry=r)
        self.saturated_dirs = Gauge("logkeeper_saturated_log_dir_count",
                                    "Log dirs refusing appends because their disk is full",
                                    registry=r)
        self.dir_state = Gauge("logkeeper_log_dir_state",
                               "1 for the state a log dir is in, 0 for the others",
                               ["log_dir", "state"], registry=r)
        self.probe_latency = Histogram(
            "logkeeper_log_dir_probe_latency_seconds",
            "Time an availability probe of a log dir took", ["log_dir"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.dir_degraded = Gauge("logkeeper_log_dir_degraded",
                                  "1 while a log dir is slow but still serving", ["log_dir"],
                                  registry=r)
        r.register(Crc32cCollector())

    # ---- the recording API ----

    def observe_request(self, api_name: str, seconds: float) -> None:
        """One request of `api_name` ("Produce", "Fetch", ...) took `seconds` to serve."""
        self.request_time.labels(api_name).observe(seconds)

    def set_log_dir(self, path: str, size_bytes: int, free_bytes: int, partitions: int) -> None:
        """Size of the partition data, free space (-1 when unknown) and partition count."""
        self.dir_size.labels(path).set(size_bytes)
        if free_bytes >= 0:
            self.dir_free.labels(path).set(free_bytes)
        self.dir_partitions.labels(path).set(partitions)

    def set_log_dir_state(self, path: str, state: str) -> None:
        """Mark `state` ("online", "saturated", "offline") current for `path`."""
        state = state.lower()
        for known in dict.fromkeys((*LOG_DIR_STATES, state)):
            self.dir_state.labels(path, known).set(1 if known == state else 0)
        self.dir_online.labels(path).set(1 if state == "offline" else 0)

    def set_offline_counts(self, dirs: int, replicas: int, saturated: int) -> None:
        self.offline_dirs.set(dirs)
        self.offline_replicas.set(replicas)
        self.saturated_dirs.set(saturated)

    def observe_probe(self, path: str, seconds: float) -> None:
        self.probe_latency.labels(path).observe(seconds)

    def set_degraded(self, path: str, degraded: bool) -> None:
        self.dir_degraded.labels(path).set(1 if degraded else 0)

    async def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serve /metrics and /healthz on host:port (0 picks a port); returns the bound address."""
        if self._http is not None:
            raise RuntimeError("metrics endpoint already serving")
        endpoint = HttpEndpoint(self, lambda: self.health_fn())
        bound = await endpoint.start(host, port)
        self._http = endpoint
        return bound

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def partitions_changed(self, broker: Any) -> None:
        n = len(broker.partitions)
        self.partition_count.set(n)
        self.leader_count.set(n)
        for d in broker.dirs.dirs:
            self.dir_partitions.labels(str(d.path)).set(len(d.partitions))

    def log_dir(self, path: str, *, state: str, size: int, free: int, total: int,
                partitions: int) -> None:
        self.dir_size.labels(path).set(size)
        if free >= 0:
            self.dir_free.labels(path).set(free)
        if total >= 0:
            self.dir_total.labels(path).set(total)
        self.dir_partitions.labels(path).set(partitions)
        self.set_log_dir_state(path, state)

    def render(self) -> bytes:
        return generate_latest(self.registry)


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            409: "Conflict", 413: "Payload Too Large", 503: "Service Unavailable"}
MAX_ADMIN_BODY = 64 * 1024
AdminHandler = Callable[[str, dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]


class HttpEndpoint:
    """A tiny HTTP/1.0-style server for /metrics and /healthz on the event loop."""

    def __init__(self, metrics: Metrics, health: Callable[[], tuple[bool, dict[str, Any]]], *,
                 admin: AdminHandler | None = None,
                 views: dict[str, Callable[[], Any]] | None = None):
        self.metrics = metrics
        self.health = health
        self.admin = admin
        self.views = dict(views or {})
        self.server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, host or None, port)
        sock = self.server.sockets[0].getsockname()
        return sock[0], sock[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            parts = line.decode("latin-1").split()
            length = 0
            while True:  # the headers: only Content-Length matters here
                h = await asyncio.wait_for(reader.readline(), 10)
                if h in (b"\r\n", b"\n", b""):
                    break
                name, _, value = h.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(parts) < 2:
                await self._reply(writer, 400, b"bad request line\n", "text/plain")
                return
            method, target = parts[0], parts[1].split("?", 1)[0]
            if method == "POST" and target.startswith("/admin/") and self.admin is not None:
                await self._admin(reader, writer, target[len("/admin/"):], length)
            elif method not in ("GET", "HEAD"):
                await self._reply(writer, 405, b"GET only (POST for /admin/)\n", "text/plain")
            elif target in self.views:
                body = (json.dumps(self.views[target](), sort_keys=True, default=str)
                        + "\n").encode()
                await self._reply(writer, 200, body, "application/json", head=method == "HEAD")
            elif target == "/metrics":
                await self._reply(writer, 200, self.metrics.render(), CONTENT_TYPE_LATEST,
                                  head=method == "HEAD")
            elif target == "/healthz":
                try:
                    ok, detail = self.health()
                except Exception as err:  # noqa: BLE001 - a broken check reads as unhealthy
                    log.exception("health check failed")
                    ok, detail = False, {"status": "error", "error": repr(err)}
                # default=str: a Path or an enum in the detail must still give an answer.
                body = (json.dumps(detail, sort_keys=True, default=str) + "\n").encode()
                await self._reply(writer, 200 if ok else 503, body, "application/json",
                                  head=method == "HEAD")
            else:
                await self._reply(writer, 404, b"try /metrics or /healthz\n", "text/plain")
        except (TimeoutError, ConnectionError, asyncio.LimitOverrunError, ValueError) as err:
            log.debug("http: dropped a client: %s", err)
        finally:
            writer.close()

    async def _admin(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     command: str, length: int) -> None:
        assert self.admin is not None
        if not 0 <= length <= MAX_ADMIN_BODY:
            await self._reply(writer, 413, b'{"error": "body too large"}\n', "application/json")
            return
        try:
            payload = json.loads(await asyncio.wait_for(reader.readexactly(length), 10) or b"{}")
        except (ValueError, asyncio.IncompleteReadError):
            payload = None
        if not isinstance(payload, dict):
            await self._reply(writer, 400, b'{"error": "the body must be a JSON object"}\n',
                              "application/json")
            return
        status, answer = await self.admin(command, payload)
        await self._reply(writer, status, (json.dumps(answer, default=str) + "\n").encode(),
                          "application/json")

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, *,
                     head: bool = False) -> None:
        head_bytes = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head_bytes if head else head_bytes + body)
        await writer.drain()
