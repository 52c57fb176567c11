"""Prometheus metrics with Kafka-like names, and the HTTP endpoint for /metrics and /healthz.

Names follow what Kafka's JMX beans become under the Prometheus JMX exporter
(`kafka_server_brokertopicmetrics_*`, `kafka_network_requestmetrics_*`,
`kafka_log_*`), so existing dashboards read them with little change. Each daemon owns
its own `CollectorRegistry` (tests start several in one process).

The HTTP endpoint runs on the event loop (asyncio), answers GET only, and never
touches a disk: /metrics renders the registry, /healthz reports readiness and the
state of each log dir from memory (200 when serving, 503 while starting, stopping, or
with every dir offline). Malformed requests get 400 and the connection is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("logkeeper.metrics")

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.bytes_in = Counter("kafka_server_brokertopicmetrics_bytes_in",
                                "Bytes appended by producers", ["topic"], registry=r)
        self.bytes_out = Counter("kafka_server_brokertopicmetrics_bytes_out",
                                 "Record bytes sent to consumers", ["topic"], registry=r)
        self.messages_in = Counter("kafka_server_brokertopicmetrics_messages_in",
                                   "Records appended", ["topic"], registry=r)
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
        self.dir_online.labels(path).set(1 if state == "offline" else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}


class HttpEndpoint:
    """A tiny HTTP/1.0-style server for /metrics and /healthz on the event loop."""

    def __init__(self, metrics: Metrics, health: Callable[[], tuple[bool, dict[str, Any]]]):
        self.metrics = metrics
        self.health = health
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
            while True:  # drain the headers; nothing in them matters here
                h = await asyncio.wait_for(reader.readline(), 10)
                if h in (b"\r\n", b"\n", b""):
                    break
            if len(parts) < 2:
                await self._reply(writer, 400, b"bad request line\n", "text/plain")
                return
            method, target = parts[0], parts[1].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                await self._reply(writer, 405, b"GET only\n", "text/plain")
            elif target == "/metrics":
                await self._reply(writer, 200, self.metrics.render(), CONTENT_TYPE_LATEST,
                                  head=method == "HEAD")
            elif target == "/healthz":
                ok, detail = self.health()
                body = (json.dumps(detail, sort_keys=True) + "\n").encode()
                await self._reply(writer, 200 if ok else 503, body, "application/json",
                                  head=method == "HEAD")
            else:
                await self._reply(writer, 404, b"try /metrics or /healthz\n", "text/plain")
        except (TimeoutError, ConnectionError, asyncio.LimitOverrunError, ValueError) as err:
            log.debug("http: dropped a client: %s", err)
        finally:
            writer.close()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, *,
                     head: bool = False) -> None:
        head_bytes = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head_bytes if head else head_bytes + body)
        await writer.drain()
