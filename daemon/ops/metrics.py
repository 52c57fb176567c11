"""Prometheus metrics with Kafka-like names.

Names follow what Kafka's JMX beans become under the Prometheus JMX exporter
(`kafka_server_brokertopicmetrics_*`, `kafka_network_requestmetrics_*`,
`kafka_log_*`), so existing dashboards read them with little change. Each daemon owns
its own `CollectorRegistry` (tests start several in one process).

The daemon records through methods (`observe_request`, `bytes_in(topic, n)`,
`set_log_dir`, `set_log_dir_state`, ...) and serves with `await metrics.serve(host,
port)` (daemon.ops.http); `health_fn` is the callable behind /healthz. Where the Kafka
name exists, the metric follows Prometheus' base units (seconds, bytes) rather than
JMX's milliseconds. Values only known at scrape time come from collectors
(`Crc32cCollector`; `LogFlushCollector`: Kafka's LogFlushStats, each segment flush's
time; `ReplicationCollector`: leader count, under-replicated and
under-min-ISR partitions, ISR shrinks and expands, the controller's active count and
offline partitions, the fetchers' failed partitions and lag; `LogCollector`: each
partition's log start and end offsets, size and segment count, Kafka's
`kafka.log:type=Log` gauges). Kafka's RequestMetrics, recorded at every request, are
kept as plain numbers and become families when scraped (`RequestMetrics`). Recording
never raises.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

import native
from logstore import flush_stats

log = logging.getLogger("logkeeper.metrics")

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)


LOG_DIR_STATES = ("online", "saturated", "offline")


class _TopicCounter:
    """A per-topic counter: `counter(topic, n)` adds n; `.labels(topic)` is the Counter's
    child for that topic, looked up once (prometheus_client's `labels` takes a lock and
    checks its arguments on every call, a cost each Produce and Fetch would pay)."""

    def __init__(self, counter: Counter):
        self.counter = counter
        self._children: dict[str, Any] = {}

    def __call__(self, topic: str, n: int | float) -> None:
        self.labels(topic).inc(n)

    def labels(self, topic: str) -> Any:
        child = self._children.get(topic)
        if child is None:
            child = self._children[topic] = self.counter.labels(topic)
        return child

    def keep_only(self, topics: set[str]) -> None:
        """Drop the series of every topic not in `topics`."""
        for topic in [t for t in self._children if t not in topics]:
            del self._children[topic]
            self.counter.remove(topic)


class RequestMetrics(Collector):
    """Kafka's RequestMetrics: requests by API and version, request bytes and total time
    by API. Every request is recorded here, on the event loop, as plain numbers, and they
    become Prometheus families when scraped (on the loop too): prometheus_client's
    Counter and Histogram children take a lock at each inc and observe, and a Fetch,
    recorded twice (Fetch, and FetchConsumer or FetchFollower), paid 11 us for it. The
    families have the names, labels and samples those metrics gave, `_created` too."""

    def __init__(self, buckets: Iterable[float]):
        self.bounds = tuple(buckets)
        # (api, version) -> [requests, created]
        self._requests: dict[tuple[str, int], list[Any]] = {}
        # api -> [frame bytes, seconds in all, requests per bucket (the last: +Inf), created]
        self._by_api: dict[str, list[Any]] = {}

    def observe(self, api_name: str, version: int, size: int, seconds: float) -> None:
        counted = self._requests.get((api_name, version))
        if counted is None:
            counted = self._requests[(api_name, version)] = [0, time.time()]
        counted[0] += 1
        totals = self._by_api.get(api_name)
        if totals is None:
            totals = self._by_api[api_name] = [0, 0.0, [0] * (len(self.bounds) + 1),
                                              time.time()]
        totals[0] += size
        totals[1] += seconds
        totals[2][bisect.bisect_left(self.bounds, seconds)] += 1  # le: bound >= seconds

    def collect(self) -> Any:
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests handled", labels=["request", "version"])
        for (api_name, version), (n, created) in list(self._requests.items()):
            requests.add_metric([api_name, str(version)], n, created=created)
        yield requests
        name = "kafka_network_requestmetrics_total_time_seconds"
        total_time = HistogramMetricFamily(
            name, "Time from a request's last byte read to its response written",
            labels=["request"])
        request_bytes = CounterMetricFamily("kafka_network_requestmetrics_request_bytes",
                                            "Request frame bytes", labels=["request"])
        les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for api_name, (size, seconds, buckets, created) in list(self._by_api.items()):
            total_time.add_metric([api_name], list(zip(les, itertools.accumulate(buckets),
                                                       strict=True)), seconds)
            total_time.samples.append(Sample(name + "_created", {"request": api_name}, created))
            request_bytes.add_metric([api_name], size, created=created)
        yield total_time
        yield request_bytes


class Crc32cCollector(Collector):
    """`logkeeper_crc32c_implementation{impl=...} 1`: the CRC-32C implementation the
    dispatch uses, read at scrape time (a test or an operator may force another one)."""

    def collect(self) -> Any:
        family = GaugeMetricFamily(
            "logkeeper_crc32c_implementation",
            "1 for the CRC-32C implementation in use (native.crc32c_active)", labels=["impl"])
        family.add_metric([native.crc32c_active()], 1)
        yield family


class LogFlushCollector(Collector):
    """Kafka's LogFlushStats LogFlushRateAndTimeMs (in seconds): every segment flush of
    this process and its time (logstore.flush_stats), read at scrape time."""

    def collect(self) -> Any:
        counts, total = flush_stats.snapshot()
        cumulative, buckets = 0, []
        for bound, n in zip((*flush_stats.BUCKETS, float("inf")), counts, strict=True):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))
        yield HistogramMetricFamily(
            "kafka_log_logflushstats_logflushrateandtime_seconds",
            "Time each segment flush (fdatasync of its log and indexes) took",
            buckets=buckets, sum_value=total)


class AuthorizerCollector(Collector):
    """The authorizer's figures, read at scrape time (KRaft Kafka's authorizer metrics):
    `kafka_security_authorizer_acls_total_count`, and the decisions made,
    `kafka_security_authorizer_authorization_total{result="allowed|denied"}` (a rise of
    denials is a client or a grant gone wrong)."""

    def __init__(self, snapshot: Callable[[], tuple[int, int, int]]):
        self.snapshot = snapshot  # (ACLs, allowed, denied)

    def collect(self) -> Any:
        acls, allowed, denied = self.snapshot()
        yield GaugeMetricFamily("kafka_security_authorizer_acls_total_count",
                                "ACLs held (each entry of each resource pattern)", value=acls)
        family = CounterMetricFamily(
            "kafka_security_authorizer_authorization",
            "Authorization decisions on requests, super users' included", labels=["result"])
        family.add_metric(["allowed"], allowed)
        family.add_metric(["denied"], denied)
        yield family


@dataclass(frozen=True)
class ReplicationSnapshot:
    """What the replication metrics read, taken at scrape time (the daemon builds it)."""

    leader_count: int = 0
    under_replicated: int = 0  # led here, ISR smaller than the replica set
    reassigning: int = 0  # led here, replicas being added or removed by a reassignment
    under_min_isr: int = 0  # led here, ISR smaller than min.insync.replicas
    isr_shrinks: int = 0
    isr_expands: int = 0
    at_min_isr: int = 0  # led here, ISR exactly min.insync.replicas
    zookeeper_disconnects: int = 0  # the ZooKeeper session's connection lost
    zookeeper_expires: int = 0  # the ZooKeeper session expired
    zookeeper_sync_connects: int = 0  # (re)connected to ZooKeeper
    # The active controller's view (0 on the other brokers, as Kafka's).
    active_controller: int = 0
    offline_partitions: int = 0
    global_topics: int = 0
    global_partitions: int = 0
    preferred_replica_imbalance: int = 0
    topics_to_delete: int = 0
    # Leaders elected from outside the ISR by this broker's controller (cumulative).
    unclean_elections: int = 0
    failed_partitions: int = 0  # KIP-461: set aside by this broker's fetchers
    # (topic, partition, lag in offsets behind the leader's high watermark), per follower
    # partition; the max is Kafka's ReplicaFetcherManager MaxLag.
    follower_lag: tuple[tuple[str, int, int], ...] = ()
    # Replica moves between this broker's log dirs (KIP-113): the lag of each copy.
    move_lags: tuple[int, ...] = ()
    # Replication throttles (daemon.replica.quota): bytes per second of the throttled
    # partitions, as each quota measures them (0 with nothing throttled).
    leader_replication_rate: float = 0.0
    follower_replication_rate: float = 0.0


class ReplicationCollector(Collector):
    """Kafka's replication and controller metrics, read when scraped (module doc)."""

    def __init__(self, snapshot: Callable[[], ReplicationSnapshot]):
        self.snapshot = snapshot

    def collect(self) -> Any:
        try:
            s = self.snapshot()
        except Exception:  # noqa: BLE001 - a scrape never fails for a metric
            log.exception("replication metrics snapshot failed")
            return
        for name, doc, value in (
                ("kafka_server_replicamanager_leadercount", "Partitions this broker leads",
                 s.leader_count),
                ("kafka_server_replicamanager_underreplicatedpartitions",
                 "Partitions led here whose ISR is smaller than their replica set",
                 s.under_replicated),
                ("kafka_server_replicamanager_reassigningpartitions",
                 "Partitions led here whose replicas a reassignment is adding or removing",
                 s.reassigning),
                ("kafka_server_replicamanager_underminisrpartitioncount",
                 "Partitions led here whose ISR is smaller than min.insync.replicas",
                 s.under_min_isr),
                ("kafka_controller_kafkacontroller_activecontrollercount",
                 "1 on the broker that is the active controller", s.active_controller),
                ("kafka_server_replicamanager_atminisrpartitioncount",
                 "Partitions led here whose ISR is exactly min.insync.replicas",
                 s.at_min_isr),
                ("kafka_controller_kafkacontroller_offlinepartitionscount",
                 "Partitions without a live leader (the active controller's count)",
                 s.offline_partitions),
                ("kafka_controller_kafkacontroller_globaltopiccount",
                 "Topics in the cluster (the active controller's count)", s.global_topics),
                ("kafka_controller_kafkacontroller_globalpartitioncount",
                 "Partitions in the cluster (the active controller's count)",
                 s.global_partitions),
                ("kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
                 "Partitions whose leader is not their preferred replica (the active "
                 "controller's count)", s.preferred_replica_imbalance),
                ("kafka_controller_kafkacontroller_topicstodeletecount",
                 "Topics queued for deletion (the active controller's count)",
                 s.topics_to_delete),
                ("kafka_server_leaderreplication_byte_rate",
                 "Bytes per second this broker sends followers of partitions its leader "
                 "replication throttle names", s.leader_replication_rate),
                ("kafka_server_followerreplication_byte_rate",
                 "Bytes per second this broker fetches as a follower of partitions its "
                 "follower replication throttle names", s.follower_replication_rate)):
            yield GaugeMetricFamily(name, doc, value=value)
        for name, doc, value in (
                ("kafka_server_replicamanager_isrshrinks", "ISR shrinks made by this leader",
                 s.isr_shrinks),
                ("kafka_server_replicamanager_isrexpands", "ISR expansions made by this leader",
                 s.isr_expands),
                ("kafka_controller_controllerstats_uncleanleaderelections",
                 "Leaders this broker's controller elected from outside the ISR",
                 s.unclean_elections),
                ("kafka_server_sessionexpirelistener_zookeeperdisconnects",
                 "Times the ZooKeeper session's connection was lost", s.zookeeper_disconnects),
                ("kafka_server_sessionexpirelistener_zookeeperexpires",
                 "Times the ZooKeeper session expired", s.zookeeper_expires),
                ("kafka_server_sessionexpirelistener_zookeepersyncconnects",
                 "Times the ZooKeeper session (re)connected", s.zookeeper_sync_connects)):
            yield CounterMetricFamily(name, doc, value=value)
        failed = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_failedpartitionscount",
            "Follower partitions set aside after an error (KIP-461)", labels=["clientId"])
        failed.add_metric(["Replica"], s.failed_partitions)
        yield failed
        max_lag = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "Largest lag, in offsets, of a follower partition behind its leader",
            labels=["clientId"])
        max_lag.add_metric(["Replica"], max((lag for *_, lag in s.follower_lag), default=0))
        yield max_lag
        lag = GaugeMetricFamily(
            "kafka_server_fetcherlagmetrics_consumerlag",
            "Offsets a follower partition is behind its leader's high watermark",
            labels=["clientId", "topic", "partition"])
        for topic, partition, n in s.follower_lag:
            lag.add_metric(["Replica", topic, str(partition)], n)
        yield lag
        moves_lag = GaugeMetricFamily(
            "kafka_server_replicaalterlogdirsmanager_maxlag",
            "Largest lag, in offsets, of a replica move's copy behind its source",
            labels=["clientId"])
        moves_lag.add_metric(["ReplicaAlterLogDirs"], max(s.move_lags, default=0))
        yield moves_lag
        yield GaugeMetricFamily("logkeeper_replica_moves_in_progress",
                                "Replicas being moved between this broker's log dirs",
                                value=len(s.move_lags))


class LogStats(NamedTuple):
    """One partition's log as its `kafka.log:type=Log` gauges show it."""

    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    size: int
    segments: int


class LogCollector(Collector):
    """Kafka's per-partition log gauges (LogStartOffset, LogEndOffset, Size,
    NumLogSegments by topic and partition), read when scraped: nothing is kept per
    partition between scrapes, so idle partitions cost no memory here."""

    def __init__(self, snapshot: Callable[[], Iterable[LogStats]]):
        self.snapshot = snapshot

    def collect(self) -> Any:
        try:
            stats = list(self.snapshot())
        except Exception:  # noqa: BLE001 - a scrape never fails for a metric
            log.exception("log metrics snapshot failed")
            return
        labels = ["topic", "partition"]
        families = [
            (GaugeMetricFamily("kafka_log_log_logstartoffset",
                               "First offset of the partition's log", labels=labels),
             "log_start_offset"),
            (GaugeMetricFamily("kafka_log_log_logendoffset",
                               "Offset after the last record of the partition's log",
                               labels=labels), "log_end_offset"),
            (GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's segments",
                               labels=labels), "size"),
            (GaugeMetricFamily("kafka_log_log_numlogsegments",
                               "Segments of the partition's log", labels=labels),
             "segments")]
        for st in stats:
            key = [st.topic, str(st.partition)]
            for family, field in families:
                family.add_metric(key, getattr(st, field))
        for family, _ in families:
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
        self._http: Any = None  # an ops.http.HttpEndpoint once serving
        self.bytes_in = _TopicCounter(Counter(
            "kafka_server_brokertopicmetrics_bytesin", "Bytes appended by producers",
            ["topic"], registry=r))
        self.bytes_out = _TopicCounter(Counter(
            "kafka_server_brokertopicmetrics_bytesout", "Record bytes sent to consumers",
            ["topic"], registry=r))
        # Kafka's ReplicationBytesOutPerSec: what followers fetched, kept out of bytes_out;
        # and ReplicationBytesInPerSec: what this broker's fetchers appended as a follower.
        self.replication_bytes_out = Counter(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "Record bytes sent to follower replicas", registry=r)
        self.replication_bytes_in = Counter(
            "kafka_server_brokertopicmetrics_replicationbytesin",
            "Record bytes appended as a follower replica", registry=r)
        self.messages_in = _TopicCounter(Counter(
            "kafka_server_brokertopicmetrics_messagesin", "Records appended", ["topic"],
            registry=r))
        self.client_throttled = Counter(
            "logkeeper_client_quota_throttled_requests",
            "Produce and Fetch requests answered with a throttle time by a client quota, by "
            "quota (producer_byte_rate, consumer_byte_rate)", ["quota"], registry=r)
        self.failed_produce = Counter(
            "kafka_server_brokertopicmetrics_failedproducerequests",
            "Partition appends refused or failed, by Kafka error (its Errors enum name)",
            ["error"], registry=r)
        self.failed_fetch = Counter(
            "kafka_server_brokertopicmetrics_failedfetchrequests",
            "Partition reads failed, by Kafka error (its Errors enum name)", ["error"],
            registry=r)
        self.requests = RequestMetrics(_LATENCY_BUCKETS)
        r.register(self.requests)
        # Kafka's ErrorsPerSec: its `error` label is the Errors enum name, as Kafka's.
        self.errors = Counter("kafka_network_requestmetrics_errors",
                              "Errors in responses, by request and Kafka's Errors enum name "
                              "(KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER, ...)",
                              ["request", "error"], registry=r)
        # Kafka's AddPartitionsToTxnManager metrics: transaction verification
        # (daemon.replica.txn_verification) as the leader sees it.
        self.verification_failures = Counter(
            "kafka_server_addpartitionstotxnmanager_verification_failures",
            "Partitions a transaction verification refused or could not verify (Kafka's "
            "VerificationFailureRate), by the Kafka error code the coordinator gave",
            ["error"], registry=r)
        self.verification_time = Histogram(
            "kafka_server_addpartitionstotxnmanager_verification_time_seconds",
            "Time a leader waited for a transaction coordinator's answer (Kafka's "
            "VerificationTimeMs)", buckets=_LATENCY_BUCKETS, registry=r)
        self.bad_frames = Counter("logkeeper_protocol_rejected_frames",
                                  "Frames that closed their connection", ["reason"], registry=r)
        self.logins = Counter(
            "kafka_server_socketservermetrics_authentication",
            "Authentications, by listener and result (successful, failed: Kafka's "
            "successful- and failed-authentication-total): SASL logins, and TLS handshakes "
            "on SSL listeners (a failed one on a SASL_SSL listener too)",
            ["listener", "result"], registry=r)
        self.connections = Gauge("kafka_server_socketservermetrics_connection_count",
                                 "Open client connections", registry=r)
        self.partition_count = Gauge("kafka_server_replicamanager_partitioncount",
                                     "Partitions on this broker", registry=r)
        self.dir_size = Gauge("kafka_log_logdir_size_bytes",
                              "Bytes of partition data in a log dir", ["log_dir"], registry=r)
        self.dir_free = Gauge("kafka_log_logdir_free_bytes",
                              "Bytes available on the filesystem of a log dir", ["log_dir"],
                              registry=r)
        self.dir_total = Gauge("kafka_log_logdir_total_bytes",
                               "Size of the filesystem of a log dir", ["log_dir"], registry=r)
        self.dir_partitions = Gauge("kafka_log_logdir_partition_count",
                                    "Partitions in a log dir", ["log_dir"], registry=r)
        self.dir_offline = Gauge("kafka_log_logmanager_logdirectoryoffline",
                                 "1 when the log dir is offline (Kafka's LogDirectoryOffline)",
                                 ["logDirectory"], registry=r)  # Kafka's tag, as the JMX exporter names it
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
        r.register(LogFlushCollector())

    # ---- the recording API ----

    def observe_request(self, api_name: str, version: int, size: int, seconds: float, *,
                        from_follower: bool = False) -> None:
        """One request of `api_name` ("Produce", "Fetch", ...) at `version`, its frame
        `size` bytes, took `seconds` from its last byte read to its answer written. A
        Fetch counts under "FetchConsumer" or "FetchFollower" (`from_follower`) as well,
        as Kafka's RequestMetrics count it (the names its dashboards ask for)."""
        self.requests.observe(api_name, version, size, seconds)
        if api_name == "Fetch":
            self.requests.observe("FetchFollower" if from_follower else "FetchConsumer",
                                  version, size, seconds)

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
        self.dir_offline.labels(path).set(1 if state == "offline" else 0)
        if state == "offline":
            # Its size and space are not known any more: no series rather than the last
            # values read while it served (it comes back with the next reading).
            for gauge in (self.dir_size, self.dir_free, self.dir_total):
                try:
                    gauge.remove(path)
                except KeyError:
                    pass

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
        from .http import HttpEndpoint  # the endpoint renders these metrics: import late

        endpoint = HttpEndpoint(self, lambda: self.health_fn())
        bound = await endpoint.start(host, port)
        self._http = endpoint
        return bound

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def watch_replication(self, snapshot: Callable[[], ReplicationSnapshot]) -> None:
        """Serve the replication and controller metrics from `snapshot()` at scrape time."""
        self.registry.register(ReplicationCollector(snapshot))

    def watch_authorizer(self, snapshot: Callable[[], tuple[int, int, int]]) -> None:
        """Serve the authorizer's figures from `snapshot()` at scrape time."""
        self.registry.register(AuthorizerCollector(snapshot))

    def watch_logs(self, snapshot: Callable[[], Iterable[LogStats]]) -> None:
        """Serve the per-partition log gauges from `snapshot()` at scrape time."""
        self.registry.register(LogCollector(snapshot))

    def partitions_changed(self, partitions: int, dirs: Iterable[Any],
                           topics: set[str]) -> None:
        """Partitions held, each log dir's partition count, and the topics held: a topic
        with no partition here any more (deleted, or moved to other brokers) loses its
        per-topic series, as Kafka's maybeRemoveTopicMetrics."""
        self.partition_count.set(partitions)
        for d in dirs:
            self.dir_partitions.labels(str(d.path)).set(len(d.partitions))
        for counter in (self.bytes_in, self.bytes_out, self.messages_in):
            counter.keep_only(topics)

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
