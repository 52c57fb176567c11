"""`logkeeper serve`: the daemon's parts wired together, started and stopped in order.

Start-up: read the config (a bad one exits 2 naming the key), start /metrics and
/healthz, open every log dir on its own worker (recovering logs that were not closed
cleanly), start the Kafka listener, then tell systemd READY=1. While running, the main
loop pings the systemd watchdog and runs retention and flush/checkpoint rounds on the
workers. SIGTERM or SIGINT: STOPPING=1, stop accepting, close client connections,
flush every log, write the checkpoints and the clean-shutdown marker (so the next start
skips recovery), exit 0. Exit 1 when start-up or the clean close fails, and when every
log dir is offline (the message names each dir and why).

Log-dir health (daemon.health) runs from before the dirs open until shutdown: a dir
that fails is taken offline and the rest keep serving. With `zookeeper.connect` the
broker registers in ZooKeeper and notifies the controller of every dir that goes
OFFLINE or SATURATED (daemon.cluster.link); it keeps serving while ZooKeeper is away. The HTTP
endpoint also carries the operator commands (`POST /admin/log-dirs/readmit|cordon|
uncordon`, `{"dir": PATH}`) and `GET /log-dirs`: keep `http.listen` on loopback.

Connections are daemon.api.connections'; this module only starts and stops them.

The event loop is uvloop's (libuv's, its transports and call scheduling in C) unless
LOGKEEPER_EVENT_LOOP=asyncio asks for the standard library's: under a produce load the
standard loop's own Python (selector, transports, handles, the wake-up socket) was a
third of the broker's CPU. `_run` is the one place the choice is made.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import faulthandler
import logging
import os
import random
import resource
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

import native
from logstore import LogStoreError, TopicPartition
from logstore.checkpoint import read_meta_properties
from logstore.names import (
    INTERNAL_TOPICS,
    META_PROPERTIES,
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    collision,
    creation_refused,
)

from . import config as config_mod
from . import version
from .api import errors, protocol
from .api.acls import AclApis
from .api.client_quotas import (
    QUOTA_KEYS,
    ClientQuotaApis,
    ClientQuotas,
    desanitize,
    entity_of_znode,
    only_quotas,
    sanitize,
    znode_of,
)
from .api.client_quotas import Entity as QuotaEntity
from .api.configs import ConfigApis
from .api.connections import Connections
from .api.groups import GroupApis
from .api.handlers import Handlers
from .api.partitions import PartitionApis
from .api.sasl import SaslApis
from .api.transactions import TxnApis
from .cluster import controlled_shutdown
from .cluster.acl_store import ZkAclStore
from .cluster.config_store import BROKERS, CLIENTS, TOPICS, USERS, ZkConfigStore
from .cluster.link import ClusterLink, cluster_id_from_zookeeper, generate_broker_id
from .cluster.metadata_cache import MetadataCache
from .cluster.znodes import DEFAULT_BROKER_ENTITY, ProducerIdBlock
from .controller.controller import Controller
from .controller.leader_election import replica_assignment
from .controller.state_machines import unclean_enabled
from .coordinator.coordinator import GroupCoordinator, GroupSettings
from .coordinator.internal_topic import InternalTopic
from .coordinator.transactions import TransactionCoordinator, TxnSettings
from .coordinator.txn_markers import MARKER_TIMEOUT_MS, TxnMarkerChannel
from .health.commands import AdminError, OperatorCommands
from .health.monitor import LogDirMonitor
from .health.transitions import TransitionHandler
from .ops.http import HttpEndpoint
from .ops.metrics import LogStats, Metrics, ReplicationSnapshot
from .ops.notify import Notifier
from .replica.control import ControlRequests
from .replica.fetcher import LogFollowerStorage, ReplicaFetchers
from .replica.isr import IsrManager
from .replica.leadership import ClusterLeadership, Standalone
from .replica.manager import Marker, ReplicaManager
from .replica.moves import ReplicaMoves
from .replica.producer_ids import ProducerIds
from .replica.quota import ReplicationQuotas
from .replica.topic_config import TXN_VERIFICATION, ConfigValueError, TopicConfigs
from .replica.topics import TopicAdmin, TopicError
from .replica.txn_verification import TxnVerifier
from .security.acls import Authorizer, Binding, Entry, Resource, binding_from_json, binding_to_json
from .security.sasl import SCRAM_MECHANISMS, Credentials
from .storage.cleaner import LogCleanerService
from .storage.config_store import CONFIG_FILE, FileConfigStore
from .storage.dirstate import DirState
from .storage.log_manager import LogManager, new_cluster_id
from .storage.workers import ManagedDir

log = logging.getLogger("logkeeper.server")

CHECKPOINT_INTERVAL_S = 60.0  # Kafka's log.flush.offset.checkpoint.interval.ms default
FLUSH_CHECK_MS = 1000  # how often flush.ms is checked when the scheduler is unbounded
METRICS_REFRESH_S = 10.0
PRODUCER_SNAPSHOT_S = 5.0  # how often open transactions are snapshotted (daemon.replica.producer)


class Server:
    """The daemon: its parts, and the order they start and stop in."""

    def __init__(self, config: config_mod.Config, *, notifier: Notifier | None = None):
        self.config = config
        self.metrics = Metrics()
        self.storage = LogManager(config.log_dirs, config.log_config(),
                                  broker_id=config.broker_id,
                                  reserve_bytes=config["log.dir.reserve.bytes"])
        # ZooKeeper mode: leadership from the controller's requests, Metadata from the
        # cache UpdateMetadata fills; standalone: this broker leads everything.
        self.controller: Controller | None = None
        self.metadata_cache: MetadataCache | None = None
        # An SSL inter-broker listener: followers, the controller and a stopping broker
        # reach the other brokers over TLS, with this listener's keystore and truststore.
        ib_tls = config.tls.get(config.inter_broker_listener)
        self.inter_broker_tls = ib_tls.client_context() if ib_tls is not None else None
        # The TLS each listener serves now: the config file's, or a keystore rotated since
        # through a dynamic listener.name.<l>.ssl.* broker config (_renew_tls).
        self.active_tls = dict(config.tls)
        leadership: Standalone | ClusterLeadership = Standalone(config.broker_id,
                                                                config["broker.rack"])
        self.isr: IsrManager | None = None
        if not config.standalone:
            self.metadata_cache = MetadataCache(config.inter_broker_listener)
            leadership = ClusterLeadership(
                config.broker_id, self.metadata_cache,
                controller_id=lambda: self.controller.active_id if self.controller else -1)
            self.isr = self._isr_manager(self.metadata_cache)
        self.replicas = ReplicaManager(self.storage, leadership, self.isr)
        self.replicas.rack_aware_reads = config["replica.selector.class"] is not None
        # Replication throttles: the configs below point them at partitions and rates.
        self.quotas = ReplicationQuotas(
            config.broker_id, samples=config["replication.quota.window.num"],
            window_s=config["replication.quota.window.size.seconds"],
            moves_samples=config["alter.log.dirs.replication.quota.window.num"],
            moves_window_s=config["alter.log.dirs.replication.quota.window.size.seconds"])
        self.replicas.leader_quota = self.quotas.leader
        # Topic and broker configs: ZooKeeper's /config in a cluster (the store is made
        # with the link), the dirs' config file standalone.
        self.topic_configs = TopicConfigs(
            config, hosted=self._hosted, run=self.storage.run,
            set_min_isr=self.isr.set_min_isr if self.isr is not None else None,
            quotas=self.quotas)
        self.config_files = FileConfigStore(self.storage) if config.standalone else None
        self.config_zk: ZkConfigStore | None = None
        self.topic_admin = TopicAdmin(config, self.replicas,
                                      on_change=self._partitions_changed,
                                      on_deleted=self._partitions_deleted,
                                      topic_configs=self.topic_configs,
                                      config_store=self.config_files)
        producer_ids = (ProducerIds.standalone(config.broker_id) if config.standalone
                        else ProducerIds(self._claim_producer_id_block))
        self.handlers = Handlers(self.replicas, self.topic_admin, self.storage, self.metrics)
        self.moves = ReplicaMoves(self.replicas, self.storage, quota=self.quotas.alter_log_dirs)
        self.handlers.moves = self.moves
        self.coordinator = GroupCoordinator(
            InternalTopic(OFFSETS_TOPIC, self.replicas, self.handlers.append_replicated,
                          lambda: self._internal_partition_count(OFFSETS_TOPIC)),
            GroupSettings(
                initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                min_session_timeout_ms=config["group.min.session.timeout.ms"],
                max_session_timeout_ms=config["group.max.session.timeout.ms"],
                max_size=config["group.max.size"],
                max_metadata_bytes=config["offset.metadata.max.bytes"],
                commit_timeout_ms=config["offsets.commit.timeout.ms"],
                offsets_retention_ms=config["offsets.retention.minutes"] * 60000,
                retention_check_interval_ms=config["offsets.retention.check.interval.ms"]))
        group_apis = GroupApis(self.coordinator,
                               lambda p, listener: self._coordinator_node(OFFSETS_TOPIC, p, listener),
                               lambda: self._ensure_internal_topic(OFFSETS_TOPIC),
                               self._partition_exists)
        self.handlers.register(group_apis.dispatch())
        # Transactions: __transaction_state's coordinator (daemon.coordinator.transactions)
        # and the channel its markers go to the partitions' leaders by.
        def write_markers_here(markers: dict[TopicPartition, Marker]
                               ) -> Awaitable[dict[TopicPartition, int]]:
            return self.handlers.write_markers(markers, MARKER_TIMEOUT_MS)

        self.marker_channel = TxnMarkerChannel(
            config.broker_id, self.metadata_cache, write_markers_here,
            tls_context=self.inter_broker_tls, login=config.inter_broker_login)
        self.transactions = TransactionCoordinator(
            InternalTopic(TRANSACTION_STATE_TOPIC, self.replicas, self.handlers.append_replicated,
                          lambda: self._internal_partition_count(TRANSACTION_STATE_TOPIC)),
            producer_ids.next_id, self.marker_channel.write,
            TxnSettings(
                max_timeout_ms=config["transaction.max.timeout.ms"],
                id_expiration_ms=config["transactional.id.expiration.ms"],
                abort_interval_ms=config[
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                expire_interval_ms=config[
                    "transaction.remove.expired.transaction.cleanup.interval.ms"]))
        txn_apis = TxnApis(
            self.transactions, self.coordinator, producer_ids,
            lambda p, listener: self._coordinator_node(TRANSACTION_STATE_TOPIC, p, listener),
            lambda: self._ensure_internal_topic(TRANSACTION_STATE_TOPIC),
            write_markers_here, self._partition_exists, self.replicas)
        group_apis.transactions = txn_apis
        self.handlers.register(txn_apis.dispatch())
        # Transaction verification (daemon.replica.txn_verification): a leader asks a
        # transaction's coordinator before writing its first batch to a partition.
        self.txn_verifier = TxnVerifier(
            config.broker_id, self.replicas.start_verifications,
            self._txn_coordinator_node, self.transactions.verify_partitions,
            enabled=config["transaction.partition.verification.enable"],
            tls_context=self.inter_broker_tls, login=config.inter_broker_login,
            metrics=self.metrics)
        self.handlers.txn_verifier = txn_apis.verifier = self.txn_verifier
        self.handlers.on_offsets_marker = self.coordinator.txn_completed
        # When this broker last wrote a topic's znodes (an internal topic's for
        # FindCoordinator, a client's auto-created one): asked again, it waits 5 s.
        self._creations_asked: dict[str, float] = {}
        self.handlers.topic_configs = self.topic_configs
        config_apis = ConfigApis(
            self.topic_configs, files=self.config_files,
            topics=lambda: set(self.replicas.metadata_topic_names()),
            zk=None if config.standalone else lambda: self.config_zk)
        config_apis.check_listeners = self._check_listener_tls
        self.topic_configs.on_broker_change = self._broker_config_changed
        self.handlers.register(config_apis.dispatch())
        self.handlers.register(PartitionApis(
            self.replicas, self.topic_admin, controller=lambda: self.controller,
            metadata=self.metadata_cache, stopping=self.handlers.stopping).dispatch())
        # ACLs (authorizer.class.name): ZooKeeper's /kafka-acl in a cluster, the dirs'
        # config file standalone (daemon.security.acls, daemon.api.acls).
        self.authorizer = Authorizer(config["super.users"],
                                     config["allow.everyone.if.no.acl.found"]) \
            if config["authorizer.class.name"] else None
        self.acl_zk: ZkAclStore | None = None
        self._acl_lock = asyncio.Lock()  # standalone: one read-modify-write at a time
        self.handlers.register(AclApis(self.authorizer, self._update_acls).dispatch())
        # Client quotas: ZooKeeper's /config/clients in a cluster, the dirs' config file
        # standalone (daemon.api.client_quotas).
        self.client_quotas = ClientQuotas(samples=config["quota.window.num"],
                                          window_s=config["quota.window.size.seconds"])
        self.handlers.client_quotas = self.client_quotas
        self.handlers.register(ClientQuotaApis(self.client_quotas,
                                               self._store_client_quotas).dispatch())
        # SASL logins on SASL listeners, and the SCRAM credentials they check: ZooKeeper's
        # /config/users in a cluster, the dirs' config file standalone (daemon.api.sasl).
        self.scram = Credentials()
        self.sasl = SaslApis(
            config.sasl, self.scram, self._store_scram_credentials,
            lambda listener, ok: self.metrics.logins.labels(
                listener, "successful" if ok else "failed").inc(),
            max_reauth_ms=config["connections.max.reauth.ms"])
        self.handlers.register(self.sasl.dispatch())
        self.handlers.check_served()
        self.fetchers: ReplicaFetchers | None = None
        if isinstance(leadership, ClusterLeadership):
            cache = self.metadata_cache
            assert cache is not None

            def endpoint(broker_id: int) -> tuple[str, int] | None:
                b = cache.brokers.get(broker_id)
                return (b.host, b.port) if b is not None else None

            self.fetchers = ReplicaFetchers(
                config.broker_id,
                LogFollowerStorage(self.replicas.follower_logs(), self.replicas.run_for,
                                   lambda tp: self.replicas.partitions[tp].producers,
                                   self.replicas.high_watermark_moved,
                                   self.metrics.replication_bytes_in.inc),
                endpoint, backoff=config["replica.fetch.backoff.ms"] / 1000,
                tls_context=self.inter_broker_tls, login=config.inter_broker_login,
                quota=self.quotas.follower,
                max_wait_ms=config["replica.fetch.wait.max.ms"],
                min_bytes=config["replica.fetch.min.bytes"],
                max_bytes=config["replica.fetch.response.max.bytes"],
                partition_max_bytes=config["replica.fetch.max.bytes"])
            self.handlers.control = ControlRequests(
                self.replicas, leadership, cache,
                broker_epoch=lambda: self.cluster.broker_epoch if self.cluster else -1,
                on_change=self._partitions_changed, fetchers=self.fetchers, isr=self.isr,
                min_isr_of=self._min_isr_of, log_config_of=self._log_config_of,
                on_leadership=self._coordinators_leadership_changed,
                on_deleted=self._partitions_deleted,
                announce_dir=self._announce_log_dir_event)
        self.stop_event = asyncio.Event()
        self.connections = Connections(self.handlers, self.metrics,
                                       max_frame=config["socket.request.max.bytes"],
                                       stopping=self.stop_event)
        self.connections.sasl = self.sasl
        self.connections.authorizer = self.authorizer
        self.connections.principal_rules = config["ssl.principal.mapping.rules"]
        self.cleaner = LogCleanerService(
            self.storage, enabled=config["log.cleaner.enable"],
            backoff_ms=config["log.cleaner.backoff.ms"],
            dedupe_buffer_bytes=config["log.cleaner.dedupe.buffer.size"],
            io_buffer_bytes=config["log.cleaner.io.buffer.size"],
            producers_of=self.replicas.producers_for_cleaner)
        self.monitor = LogDirMonitor(self.storage, self.replicas, self.metrics, config)
        self.transitions = TransitionHandler(self.storage, self.replicas, self.monitor,
                                             reserve_bytes=config["log.dir.reserve.bytes"],
                                             on_all_offline=self._on_all_offline,
                                             on_dir_offline=self._dir_offline)
        self.commands = OperatorCommands(self.storage, self.replicas, self.monitor,
                                         self.topic_configs, timeout=self.monitor.timeout,
                                         on_partitions_changed=self._partitions_changed,
                                         announce=self.transitions.announce)
        self.cluster: ClusterLink | None = None
        self.notifier = notifier or Notifier.from_environment()
        self.metrics.watch_replication(self._replication_snapshot)
        self.metrics.watch_logs(self._log_stats)
        if self.authorizer is not None:
            self.metrics.watch_authorizer(self.authorizer.stats)
        self.http = HttpEndpoint(self.metrics, self.health, admin=self._admin,
                                 views={"/log-dirs": self.monitor.describe,
                                        "/cleaner": self.cleaner.describe})
        self.fatal: str | None = None  # why the daemon stops on its own
        self.stuck_workers = False  # a hung disk's worker: exit without joining it
        self.state = "starting"
        self._background: list[asyncio.Task[None]] = []
        # Each listener's bound address, and each advertised one's (host, port) for
        # clients, by listener name.
        self.bound: dict[str, tuple[str, int]] = {}
        self.advertised: dict[str, tuple[str, int]] = {}

    # ---- replication (ZooKeeper mode) ----

    def _isr_manager(self, cache: MetadataCache) -> IsrManager:
        """A leader's ISR writes go through this broker's ZooKeeper link (made once the
        listener is bound; LeaderAndIsr comes only after it registered)."""

        def link() -> ClusterLink:
            if self.cluster is None:
                raise RuntimeError("not connected to ZooKeeper yet")
            return self.cluster

        return IsrManager(
            self.config.broker_id,
            write_state=lambda tp, st, v: asyncio.to_thread(
                link().write_partition_state, tp, st, v),
            read_state=lambda tp: asyncio.to_thread(link().read_partition_state, tp),
            announce=lambda tp: link().announce_isr_change(tp),
            alive=lambda b: b in cache.brokers,
            lag_time_ms=self.config["replica.lag.time.max.ms"])

    async def _claim_producer_id_block(self) -> ProducerIdBlock:
        if self.cluster is None:
            raise RuntimeError("not connected to ZooKeeper yet")
        return await asyncio.to_thread(self.cluster.claim_producer_id_block)

    # ---- the coordinators' topics: __consumer_offsets, __transaction_state ----

    def _coordinators_leadership_changed(self) -> None:
        self.coordinator.leadership_changed()
        self.transactions.leadership_changed()

    def _internal_partition_count(self, topic: str) -> int | None:
        """How many partitions an internal topic has (its groups, transactional ids are
        placed by it); None while it does not exist. In a cluster: ZooKeeper's
        assignment, as the controller's UpdateMetadata gave it. Standalone there is none:
        a topic held whole (0 to n-1: made here, or a Kafka broker's dir that held all
        of it) keeps its count whatever offsets.topic.num.partitions
        (transaction.state.log.num.partitions) says now, as Kafka never counts an
        existing topic again; one with partitions missing is a Kafka broker's share of
        it, counted as Kafka made it: the configured count, or more when a partition
        above it is held (its missing partitions are created at start-up,
        _complete_internal_topics)."""
        if self.metadata_cache is not None:
            return len(self.metadata_cache.partitions.get(topic, {})) or None
        held = self.replicas.topic(topic)
        if not held:
            return None
        top = held[-1].tp.partition + 1
        return top if len(held) == top else max(top, self._internal_topic_spec(topic)[0])

    async def _complete_internal_topics(self) -> None:
        """Standalone start-up: create the partitions an internal topic held here lacks
        (a Kafka broker's dir holds only its share of __consumer_offsets), with the
        topic's configs, so every group (transactional id) has a coordinator: this broker
        leads every partition. Not while a dir is OFFLINE: a Kafka dir has no placement
        record, and the missing partitions may be in it. A failure is logged; the groups
        placed on those partitions get COORDINATOR_NOT_AVAILABLE until a start succeeds."""
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            count = self._internal_partition_count(topic)
            if count is None:
                continue  # made at the first coordinator lookup
            missing = [p for p in range(count) if self.replicas.get(topic, p) is None]
            if not missing:
                continue
            offline = sorted(str(d.path) for d in self.storage.dirs
                             if d.state is DirState.OFFLINE)
            if offline:
                log.warning("%s: %d of its %d partitions are not held here, and log dirs %s "
                            "are offline (they may hold them): not created; the groups "
                            "(transactional ids) placed on them have no coordinator until "
                            "a start with every dir online",
                            topic, len(missing), count, ", ".join(offline))
                continue
            try:
                await self.topic_admin.create_missing_partitions(topic, missing)
            except TopicError as err:
                log.warning("%s: %s; the groups (transactional ids) placed on them have no "
                            "coordinator", topic, err)

    def _partition_exists(self, tp: TopicPartition) -> bool:
        if self.metadata_cache is not None:
            return self.metadata_cache.partition(tp.topic, tp.partition) is not None
        return self.replicas.get(tp.topic, tp.partition) is not None

    def _coordinator_node(self, topic: str, partition: int, listener: str
                          ) -> tuple[int, int, str, int]:
        """(error, broker id, host, port) of the leader of `topic`-`partition` (a
        coordinator's), at its endpoint on `listener`."""
        if self.metadata_cache is None:
            p = self.replicas.get(topic, partition)
            me = self.advertised.get(listener)
            if p is None or p.offline or me is None:
                return errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
            return errors.NONE, self.config.broker_id, me[0], me[1]
        m = self.metadata_cache.partition(topic, partition)
        b = self.metadata_cache.listener_brokers(listener).get(m.leader) if m is not None else None
        if b is None:
            return errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return errors.NONE, b.broker_id, b.host, b.port

    def _txn_coordinator_node(self, transactional_id: str) -> tuple[int, int, str, int]:
        """(error, broker id, host, port) of `transactional_id`'s transaction
        coordinator on the inter-broker listener."""
        p = self.transactions.partition_of(transactional_id)
        if p is None:
            return errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        if self.transactions.log.led_epoch(p) is not None:
            return errors.NONE, self.config.broker_id, "", -1
        return self._coordinator_node(TRANSACTION_STATE_TOPIC, p,
                                      self.config.inter_broker_listener)

    def _internal_topic_spec(self, topic: str) -> tuple[int, int, dict[str, str | None]]:
        """(partitions, replication factor, configs) of an internal topic, as Kafka
        creates it: compacted, batches kept as the coordinator wrote them, its own
        segment size (and __transaction_state its own min.insync.replicas)."""
        c = self.config
        if topic == OFFSETS_TOPIC:
            return (c["offsets.topic.num.partitions"], c["offsets.topic.replication.factor"],
                    {"cleanup.policy": "compact", "compression.type": "producer",
                     "segment.bytes": str(c["offsets.topic.segment.bytes"])})
        rf = c["transaction.state.log.replication.factor"]
        return (c["transaction.state.log.num.partitions"], rf,
                {"cleanup.policy": "compact", "compression.type": "uncompressed",
                 "segment.bytes": str(c["transaction.state.log.segment.bytes"]),
                 "min.insync.replicas": str(min(c["transaction.state.log.min.isr"], rf)
                                            if self.metadata_cache is not None else 1),
                 "unclean.leader.election.enable": "false"})

    async def _ensure_internal_topic(self, topic: str) -> int:
        """Create an internal topic (FindCoordinator's first lookup): standalone here and
        now; in a cluster through its znodes, as a Kafka broker does, and the controller
        does the rest (the client asks again meanwhile). An error code, or NONE."""
        partitions, rf, configs = self._internal_topic_spec(topic)
        if self.metadata_cache is None:
            try:
                await self.topic_admin.create_topic(topic, partitions, 1, configs=configs)
            except TopicError as err:
                if err.code != errors.TOPIC_ALREADY_EXISTS:
                    log.warning("creating %s failed: %s", topic, err)
                    return errors.COORDINATOR_NOT_AVAILABLE
            self._coordinators_leadership_changed()
            return errors.NONE
        refused = await self._create_in_zookeeper(topic, partitions, rf, configs)
        if refused == errors.INVALID_REPLICATION_FACTOR:
            log.warning("cannot create %s yet: its replication factor is %d and %d brokers "
                        "are alive", topic, rf, len(self.metadata_cache.brokers))
        return errors.COORDINATOR_NOT_AVAILABLE

    async def _auto_create_topic(self, topic: str) -> int:
        """A client's auto-created topic (Metadata, auto.create.topics.enable) on a broker
        that is not the controller: written to its znodes here with this broker's
        num.partitions and default.replication.factor, as a ZooKeeper-mode Kafka broker
        does (KafkaApis.createTopic); the controller's watch does the rest. NONE once it
        is on its way (the client's next Metadata finds its leaders), else the refusal's
        error code (38: more replicas than live brokers; 17: its name collides). An
        internal topic is made as FindCoordinator makes it."""
        if creation_refused(topic):
            return errors.INVALID_REQUEST
        c = self.config
        spec = (self._internal_topic_spec(topic) if topic in INTERNAL_TOPICS else
                (c["num.partitions"], c["default.replication.factor"], {}))
        refused = await self._create_in_zookeeper(topic, *spec)
        if refused:
            log.info("auto-creating %s refused (error %d)", topic, refused)
        return refused

    async def _create_in_zookeeper(self, topic: str, partitions: int, rf: int,
                                   configs: dict[str, str | None]) -> int:
        """Write a new topic's znodes (cluster.create_topic) with an assignment over the
        live brokers (their racks): NONE when written, already there, asked in the last
        5 s, or ZooKeeper is away (the client asks again); INVALID_REPLICATION_FACTOR
        with fewer live brokers than `rf`, INVALID_TOPIC_EXCEPTION when its name collides
        with a topic's ('.' against '_')."""
        assert self.metadata_cache is not None
        now = time.monotonic()
        if self.cluster is None or now - self._creations_asked.get(topic, 0.0) < 5.0:
            return errors.NONE
        if collide := collision(topic, self.metadata_cache.topics()):
            log.info("not creating %s: it collides with existing topic %s", topic, collide)
            return errors.INVALID_TOPIC_EXCEPTION
        brokers = sorted(self.metadata_cache.brokers)
        if len(brokers) < rf:
            return errors.INVALID_REPLICATION_FACTOR
        self._creations_asked[topic] = now
        rng = random.Random()
        assignment = replica_assignment(
            {b: self.metadata_cache.brokers[b].rack for b in brokers}, partitions, rf,
            rng.randrange(len(brokers)), rng.randrange(len(brokers)))
        try:
            created = await asyncio.to_thread(self.cluster.create_topic, topic, assignment,
                                              configs)
        except Exception as err:  # noqa: BLE001 - ZooKeeper away: the client asks again
            log.warning("creating %s failed (%s: %s)", topic, type(err).__name__, err)
            return errors.NONE
        if created:
            log.info("created %s: %d partitions, replication factor %d", topic, partitions, rf)
        return errors.NONE

    async def _min_isr_of(self, topic: str) -> int:
        """The topic's min.insync.replicas (`/config/topics/<t>`), else the broker's."""
        await self._refresh_topic_config(topic)
        return self.topic_configs.min_isr(topic)

    async def _log_config_of(self, topic: str) -> Any:
        """The LogConfig of `topic`'s new logs here, read again from ZooKeeper."""
        await self._refresh_topic_config(topic)
        return self.topic_configs.log_config(topic)

    async def _refresh_topic_config(self, topic: str) -> None:
        """Read `/config/topics/<t>` (Kafka reads it when it makes a partition's log);
        ZooKeeper away or a bad znode: what this broker knew stays."""
        if self.config_zk is None:
            return
        try:
            await self.topic_configs.set_topic(
                topic, await asyncio.to_thread(self.config_zk.read, TOPICS, topic))
        except Exception as err:  # noqa: BLE001 - logged; the config known here applies
            log.warning("reading %s's config from ZooKeeper failed (%s: %s); using what this "
                        "broker knew", topic, type(err).__name__, err)

    def _hosted(self, topic: str | None) -> list[Any]:
        return list(self.replicas.partitions.values()) if topic is None else \
            self.replicas.topic(topic)

    async def _load_configs_from_zookeeper(self) -> None:
        """Once registered: watch `/config/changes`, then read every topic and broker
        config (Kafka's ZkConfigManager.startup) and apply them."""
        assert self.cluster is not None
        if self.config_zk is None:
            self.config_zk = ZkConfigStore(self.cluster.client,
                                           request_timeout=self.cluster.request_timeout)
        zk = self.config_zk
        try:
            await asyncio.to_thread(zk.watch, asyncio.get_running_loop(), self._on_config_change)
            topics = await asyncio.to_thread(zk.read_all, TOPICS)
            brokers = await asyncio.to_thread(zk.read_all, BROKERS)
            clients = await asyncio.to_thread(zk.read_all, CLIENTS)
            users = await asyncio.to_thread(zk.read_all, USERS)
            user_clients = await asyncio.to_thread(zk.read_all_user_clients)
            if self.authorizer is not None:
                if self.acl_zk is None:
                    self.acl_zk = ZkAclStore(self.cluster.client,
                                             request_timeout=self.cluster.request_timeout)
                await asyncio.to_thread(self.acl_zk.watch, asyncio.get_running_loop(),
                                        self._on_acl_change)
                self.authorizer.load(await asyncio.to_thread(self.acl_zk.read_all))
        except Exception as err:  # noqa: BLE001 - retried at the next registration
            log.warning("loading topic, broker and client configs from ZooKeeper failed "
                        "(%s: %s)", type(err).__name__, err)
            return
        self.topic_configs.load(topics, brokers)
        quotas = {}
        for kind, configs in ((CLIENTS, clients), (USERS, users), (USERS, user_clients)):
            for name, config in configs.items():
                entity = entity_of_znode(kind, name)
                if entity is not None:
                    quotas[entity] = config
        self.client_quotas.load(quotas)
        self.scram.load({desanitize(u): c for u, c in users.items()})
        await self.topic_configs.apply(None, "as the configs were loaded")
        log.info("configs loaded from ZooKeeper: %d topics with overrides, dynamic broker "
                 "configs %s, client quotas of %d entities, SCRAM credentials of %d users",
                 len(self.topic_configs.topics), sorted(brokers), len(self.client_quotas.quotas),
                 len(self.scram.users))
        self.moves.resume_interrupted()  # under the configs' move throttle

    async def _on_config_change(self, entity_type: str, name: str) -> None:
        zk = self.config_zk
        assert zk is not None
        if entity_type in (TOPICS, BROKERS):
            config = await asyncio.to_thread(zk.read, entity_type, name)
            if entity_type == TOPICS:
                await self.topic_configs.set_topic(name, config)
            else:
                await self.topic_configs.set_broker(name, config)
            if self.controller is not None and unclean_enabled(config, False) and (
                    entity_type == TOPICS
                    or name in (DEFAULT_BROKER_ENTITY, str(self.config.broker_id))):
                # Kafka's controller elects the leaderless partitions it now may at once.
                self.controller.unclean_leader_election_enabled(
                    name if entity_type == TOPICS else None)
        elif entity_type in (CLIENTS, USERS):
            config = await asyncio.to_thread(zk.read, entity_type, name)
            entity = entity_of_znode(entity_type, name)
            assert entity is not None
            if entity_type == USERS and entity[1] is None:  # a user: credentials and quotas
                self.scram.set(desanitize(name), config)
            self.client_quotas.set(entity, config)

    async def _load_configs_from_files(self) -> None:
        assert self.config_files is not None
        topics, brokers = await self.config_files.load()
        adopted = self._internal_topics_without_configs(topics)
        self.topic_configs.load(topics | adopted, brokers)
        if adopted:
            try:
                await self._write_config_files()
            except LogStoreError as err:  # applied all the same; written at the next change
                log.warning("storing the configs of %s failed: %s", sorted(adopted), err)
        files = self.config_files
        self.client_quotas.load(
            {(None, c): q for c, q in files.clients.items()}
            | {(u, None): q for u, q in files.users.items()}
            | {(u, c): q for u, cs in files.user_clients.items() for c, q in cs.items()})
        self.scram.load(files.users)
        if self.authorizer is not None:
            self.authorizer.load(self._file_acls())
        await self.topic_configs.apply(None, "as the configs were loaded")

    def _internal_topics_without_configs(self, stored: Mapping[str, Mapping[str, str]]
                                         ) -> dict[str, dict[str, str]]:
        """The creation configs of the internal topics found in the log dirs with none
        stored (a Kafka broker's dirs: Kafka keeps them in ZooKeeper): without them
        __consumer_offsets would be a delete-policy topic whose retention removes the
        committed offsets at start-up."""
        hosted = self.replicas.topics()
        out = {}
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            if topic in hosted and not stored.get(topic):
                configs = self._internal_topic_spec(topic)[2]
                out[topic] = {k: v for k, v in configs.items() if v is not None}
                log.info("%s: found with no stored configs; given Kafka's for it: %s", topic,
                         ", ".join(f"{k}={v}" for k, v in sorted(out[topic].items())))
        return out

    def _file_acls(self) -> list[Binding]:
        assert self.config_files is not None
        out = []
        for obj in self.config_files.acls:
            try:
                out.append(binding_from_json(obj))
            except (KeyError, ValueError) as err:
                log.error("ignoring an ACL of %s: %s: %s", CONFIG_FILE, obj, err)
        return out

    async def _on_acl_change(self, resource: Resource) -> None:
        assert self.acl_zk is not None and self.authorizer is not None
        entries, _ = await asyncio.to_thread(self.acl_zk.read, resource)
        self.authorizer.replace(resource, entries)

    async def _update_acls(self, resource: Resource,
                           change: Callable[[set[Entry]], set[Entry]]) -> set[Entry]:
        """Change a resource's ACLs where they are kept (ZooKeeper, or the dirs' file),
        then here."""
        assert self.authorizer is not None
        if self.config_files is None:
            if self.acl_zk is None:
                raise RuntimeError("not connected to ZooKeeper yet")
            new = await asyncio.to_thread(self.acl_zk.update, resource, change)
        else:
            async with self._acl_lock:
                new = change(set(self.authorizer.acls.get(resource, ())))
                kept = [(r, e) for r, es in self.authorizer.acls.items() if r != resource
                        for e in es] + [(resource, e) for e in new]
                await self._write_config_files(
                    acls=[binding_to_json(r, e) for r, e in sorted(kept)])
        self.authorizer.replace(resource, new)
        return new

    async def _store_client_quotas(self, entity: QuotaEntity, quotas: dict[str, str]) -> None:
        """Keep an entity's quotas where Kafka keeps them (or the dirs' config file); a
        user's SCRAM credentials, kept beside them, stay as they are."""
        user, client = entity
        files = self.config_files
        if files is not None:
            if user is None:
                await self._write_config_files(clients={**files.clients, client: quotas})
            elif client is None:
                kept = {k: v for k, v in files.users.get(user, {}).items() if k not in QUOTA_KEYS}
                await self._write_config_files(users={**files.users, user: kept | quotas})
            else:
                await self._write_config_files(user_clients={
                    **files.user_clients, user: {**files.user_clients.get(user, {}),
                                                 client: quotas}})
            return
        kind, name = znode_of(entity)
        if kind == USERS and client is None:
            quotas = await self._zk_config_but(USERS, name, QUOTA_KEYS) | quotas
        await asyncio.to_thread(self._zk().write, kind, name, quotas)

    async def _store_scram_credentials(self, user: str, config: dict[str, str]) -> None:
        """Keep a user's SCRAM credentials where Kafka keeps them (or the dirs' file); the
        user's quotas, kept beside them, stay as they are."""
        files = self.config_files
        if files is not None:
            kept = only_quotas(files.users.get(user, {}))
            await self._write_config_files(users={**files.users, user: kept | config})
            return
        name = sanitize(user)
        config = await self._zk_config_but(USERS, name, SCRAM_MECHANISMS) | config
        await asyncio.to_thread(self._zk().write, USERS, name, config)

    def _zk(self) -> ZkConfigStore:
        if self.config_zk is None:
            raise RuntimeError("not connected to ZooKeeper yet")
        return self.config_zk

    async def _zk_config_but(self, kind: str, name: str, keys: Any) -> dict[str, str]:
        """The entity's config in ZooKeeper without `keys` (those about to be replaced)."""
        config = await asyncio.to_thread(self._zk().read, kind, name)
        return {k: v for k, v in config.items() if k not in keys}

    async def _write_config_files(self, **changed: Any) -> None:
        """The dirs' config file with `changed` parts (clients, users, user_clients, acls)
        and everything else as held."""
        assert self.config_files is not None
        await self.config_files.write(self.topic_configs.topics,
                                      self.topic_configs.dynamic_brokers(), **changed)

    def _check_listener_tls(self, dynamic: Mapping[str, str]) -> None:
        """A dynamic config about to be stored: the keystores and truststores it names
        read and checked now (ConfigValueError: what is wrong, nothing stored)."""
        try:
            self.config.tls_with(dynamic)
        except ValueError as err:
            raise ConfigValueError(str(err)) from None

    def _broker_config_changed(self) -> None:
        """This broker's dynamic config changed (or was loaded): what it sets applies."""
        self._renew_tls()
        enabled = self.topic_configs.broker_value(TXN_VERIFICATION)
        if enabled != self.txn_verifier.enabled:
            log.info("transaction verification %s (%s)", "on" if enabled else "off",
                     TXN_VERIFICATION)
            self.txn_verifier.enabled = enabled

    def _renew_tls(self) -> None:
        """This broker's dynamic config changed (or was loaded): a listener whose keystore
        or truststore it rotates serves the new ones to every later connection, and an
        SSL inter-broker listener's connections to other brokers offer and check them.
        Connections made before keep theirs, as in Kafka."""
        dynamic = self.topic_configs.broker_dynamic(str(self.config.broker_id))
        try:
            wanted = self.config.tls_with(dynamic)
        except ValueError as err:  # changed under us since it was stored (a file gone)
            log.error("the listeners' dynamic TLS config cannot be used, the TLS served "
                      "stays as it was: %s", err)
            return
        for name, new in wanted.items():
            old = self.active_tls.get(name)
            if old is not None and (old.chain_pem, old.trusted_pem) == (new.chain_pem,
                                                                      new.trusted_pem):
                continue
            self.active_tls[name] = new
            if name in self.connections.tls:
                self.connections.tls[name] = new.server_context()
            if name == self.config.inter_broker_listener and self.inter_broker_tls is not None:
                new.renew_client_context(self.inter_broker_tls)
            log.info("listener %s: TLS renewed, serving %s%s", name, new.subject,
                     " (the inter-broker connections too)"
                     if name == self.config.inter_broker_listener else "")

    def _log_stats(self) -> list[LogStats]:
        """For the metrics, at scrape time: every partition held here with a log (an
        offline dir's have none). Read on the loop while the dir workers append: each
        value is one the log had, not all taken at one instant."""
        out = []
        for tp, p in sorted(self.replicas.partitions.items()):
            lg = p.log
            if lg is not None:
                out.append(LogStats(tp.topic, tp.partition, lg.log_start_offset,
                                    lg.log_end_offset, lg.size_bytes, lg.segment_count))
        return out

    def _replication_snapshot(self) -> ReplicationSnapshot:
        """For the metrics, at scrape time (on the HTTP endpoint's loop: this one)."""
        leaders = self.replicas.leader_count()
        move_lags = tuple(m.lag for m in self.moves.moves.values())
        if self.isr is None:  # standalone: a one-broker cluster, its own controller
            return ReplicationSnapshot(leader_count=leaders, active_controller=1,
                                       offline_partitions=self.replicas.offline_count(),
                                       global_topics=len({tp.topic for tp in self.replicas.partitions}),
                                       global_partitions=len(self.replicas.partitions),
                                       move_lags=move_lags)
        ctl = self.controller
        active = ctl is not None and ctl.is_active
        link = self.cluster
        return ReplicationSnapshot(
            leader_count=leaders, under_replicated=self.isr.under_replicated(),
            reassigning=self.isr.reassigning(),
            under_min_isr=self.isr.under_min_isr(), at_min_isr=self.isr.at_min_isr(),
            isr_shrinks=self.isr.isr_shrinks, isr_expands=self.isr.isr_expands,
            zookeeper_disconnects=link.disconnects if link else 0,
            zookeeper_expires=link.expires if link else 0,
            zookeeper_sync_connects=link.sync_connects if link else 0,
            active_controller=int(active),
            offline_partitions=ctl.offline_partitions_count if active else 0,
            global_topics=ctl.global_topic_count if active else 0,
            global_partitions=ctl.global_partition_count if active else 0,
            preferred_replica_imbalance=ctl.preferred_replica_imbalance_count if active else 0,
            topics_to_delete=ctl.topics_to_delete_count if active else 0,
            unclean_elections=ctl.partition_sm.unclean_elections if ctl else 0,
            failed_partitions=len(self.fetchers.failed) if self.fetchers else 0,
            follower_lag=tuple((tp.topic, tp.partition, lag)
                               for tp, lag in (self.fetchers.lags() if self.fetchers else [])),
            move_lags=move_lags, leader_replication_rate=self.quotas.leader.rate(),
            follower_replication_rate=self.quotas.follower.rate())

    def _zookeeper_security(self) -> dict[str, Any]:
        return zookeeper_security(self.config)

    async def _cluster_id_from_zookeeper(self, found: str | None) -> str:
        """At start-up, before the dirs open: the cluster's id from `/cluster/id` (the
        first broker creates it). ZooKeeper unreachable: the dirs' id, or no start."""
        hosts = self.config["zookeeper.connect"]
        timeout = self.config["zookeeper.session.timeout.ms"] / 1000
        try:
            return await asyncio.to_thread(cluster_id_from_zookeeper, hosts,
                                           found or new_cluster_id(), timeout=timeout,
                                           **self._zookeeper_security())
        except Exception as err:  # noqa: BLE001 - ZooKeeper away or refusing: decided below
            if found is None:
                raise LogStoreError(
                    f"cannot read the cluster id from ZooKeeper at {hosts} ({type(err).__name__}: "
                    f"{err}), and the log dirs hold none: a new broker must reach ZooKeeper "
                    "once to join its cluster") from err
            log.warning("cannot read the cluster id from ZooKeeper at %s (%s); using the log "
                        "dirs' (%s)", hosts, type(err).__name__, found)
            return found

    # ---- health ----

    def health(self) -> tuple[bool, dict[str, Any]]:
        dirs = {str(d.path): d.state.value for d in self.storage.dirs}
        any_online = any(d.state is not DirState.OFFLINE for d in self.storage.dirs)
        ok = self.state == "serving" and any_online
        return ok, {"status": self.state, "broker_id": self.config.broker_id,
                    "log_dirs": dirs, "partitions": len(self.replicas.partitions),
                    "offline_partitions": self.replicas.offline_count(),
                    "degraded": sorted(str(d.path) for d in self.storage.dirs if d.degraded)}

    async def _admin(self, action: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST /admin/<action> with {"dir": PATH}: the operator's log-dir commands."""
        commands = {
            "log-dirs/readmit": lambda p: self.commands.readmit(p),
            "log-dirs/cordon": lambda p: self.commands.cordon(p, True),
            "log-dirs/uncordon": lambda p: self.commands.cordon(p, False),
        }
        if action not in commands:
            return 404, {"error": f"unknown command {action!r}; known: {sorted(commands)}"}
        path = payload.get("dir")
        if not isinstance(path, str) or not path:
            return 400, {"error": 'the body must be {"dir": "<log dir path>"}'}
        if self.state != "serving":
            return 503, {"error": f"the daemon is {self.state}"}
        try:
            return 200, await commands[action](path)
        except AdminError as err:
            return err.status, {"error": str(err)}

    def _on_all_offline(self, message: str) -> None:
        self._on_fatal(message, status="every log dir is offline")

    def _on_fatal(self, message: str, *, status: str = "") -> None:
        """Stop on our own, exiting 1 (every dir offline, a broker.id taken, ...)."""
        if self.fatal is None:
            self.fatal = message
            log.error("%s; stopping", message)
            self.notifier.stopping(status or message)
            self.stop_event.set()

    # ---- lifecycle ----

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        # SIGHUP too, as Kafka's broker (its LoggingSignalHandler, then the JVM's shutdown
        # hooks): a clean stop. There is nothing to reload (configs change at runtime
        # through the admin APIs); Python's default for it was to die on the spot, with
        # no checkpoints, no controlled shutdown and not a line in the log.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self._on_signal, sig)
        # Pinged during start-up too: recovery runs on the workers, the loop stays live.
        self._background.append(asyncio.ensure_future(self._watchdog()))
        try:
            host, port = self.config.http_listen
            http_at = await self.http.start(host, port)
            log.info("metrics and health on http://%s:%d/", *http_at[:2])
        except OSError as err:
            log.error("cannot listen on http.listen %s: %s", self.config["http.listen"],
                      err.strerror or err)
            await self._stop_background()
            return 1
        self.notifier.status("opening log dirs")
        # Calibrates the CRC-32C dispatch here (a few hundred microseconds) rather than
        # on the first produce, and says what it chose and what it measured.
        calibration = sorted(native.crc32c_calibration().items(), key=lambda kv: kv[1].score)
        log.info("CRC-32C: %s (%s); calibration GB/s at %s, fastest first: %s",
                 native.crc32c_active(),
                 f"forced by {native.CRC32C_ENV}" if os.environ.get(native.CRC32C_ENV)
                 else "the calibration's choice",
                 " / ".join(f"{size >> 10} KiB" for size in native.CRC32C_CALIBRATION_SIZES),
                 ", ".join(f"{impl} {c.small_gbps:.1f}/{c.large_gbps:.1f}"
                           for impl, c in calibration) or "none (portable only)")
        started = time.monotonic()
        self.transitions.attach()
        self.monitor.attach()
        try:
            placement = await self.storage.start(
                None if self.config.standalone else self._cluster_id_from_zookeeper)
            for d in self.storage.dirs:
                if d.logdir is not None and d.state is not DirState.OFFLINE:
                    for tp, left in await self.replicas.adopt(d):
                        served = self.replicas.partitions[tp]
                        log.warning("%s is in log dir %s and in %s: served from %s, the one "
                                    "holding more records; the copy in %s left as it is (a "
                                    "replica move cut short between its two renames leaves "
                                    "two whole copies)", tp, served.dir.path, left.path,
                                    served.dir.path, left.path)
            self.replicas.load(placement)
            await self.moves.clean_leftovers()
            self._partitions_changed()
            await self.storage.write_placement()
            if self.config_files is not None:
                await self._load_configs_from_files()
                await self._complete_internal_topics()
                self.moves.resume_interrupted()  # under the configs' move throttle
        except (LogStoreError, OSError) as err:
            log.error("start-up failed: %s", err)
            await self._stop_background()
            await self.monitor.stop()
            await self.transitions.stop()
            await self.http.close()
            self.stuck_workers = not self.storage.shutdown_workers()
            return 1
        self._log_recovery(time.monotonic() - started)
        for lst in self.config.listeners:
            try:
                tls = self.active_tls.get(lst.name)
                self.bound[lst.name] = await self.connections.listen(
                    lst.name, lst.host or None, lst.port,
                    tls.server_context() if tls is not None else None)
            except OSError as err:
                log.error("cannot listen on %s: %s", lst, err.strerror or err)
                await self._shutdown()
                return 1
        self.advertised = self._advertised_addresses()
        self.handlers.advertised = self.advertised
        if not self.config.standalone:
            self._join_cluster()
            await self._await_controller(self.config["zookeeper.session.timeout.ms"] / 1000)
        await self.monitor.start()
        self.state = "serving"
        served = ", ".join(
            f"{name} {h}:{p}" + (f" (advertised as {self.advertised[name][0]}:"
                                 f"{self.advertised[name][1]})" if name in self.advertised
                                 else " (not advertised)")
            + (f" with TLS as {self.config.tls[name].subject}, client certificates "
               f"{self.config.tls[name].client_auth}" if name in self.config.tls else "")
            + (f" with SASL {'/'.join(self.config.sasl[name].mechanisms)}"
               if name in self.config.sasl else "")
            for name, (h, p) in self.bound.items())
        log.info("logkeeper %s serving Kafka protocol on %s (broker.id %d, %d partitions, "
                 "%d log dirs)", version(), served, self.config.broker_id,
                 len(self.replicas.partitions), len(self.storage.dirs))
        self.notifier.ready("serving on " + ", ".join(f"{h}:{p}" for h, p in self.bound.values()))
        self.cleaner.start()
        self.coordinator.start()
        self.transactions.start()
        self._coordinators_leadership_changed()
        self._background += [
            asyncio.ensure_future(self._periodic(
                self.config["log.retention.check.interval.ms"] / 1000,
                lambda: self.storage.maintenance(retention=True, checkpoints=False))),
            asyncio.ensure_future(self._periodic(
                CHECKPOINT_INTERVAL_S,
                lambda: self.storage.maintenance(retention=False, checkpoints=True))),
            asyncio.ensure_future(self._periodic(METRICS_REFRESH_S,
                                                 self._refresh_dirs, first=0)),
            # Producer snapshots of the partitions with a transaction open (or a rolled
            # segment since their last one): a restart finds those transactions.
            asyncio.ensure_future(self._periodic(PRODUCER_SNAPSHOT_S,
                                                 self.replicas.snapshot_producers)),
            # Producers idle past producer.id.expiration.ms are forgotten (Kafka's
            # removeExpiredProducers), so partitions do not keep every instance's state.
            asyncio.ensure_future(self._periodic(
                self.config["producer.id.expiration.check.interval.ms"] / 1000,
                lambda: self.replicas.expire_producers(
                    self.config["producer.id.expiration.ms"]))),
            asyncio.ensure_future(self._periodic(
                self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000,
                lambda: self.storage.maintenance(retention=False, checkpoints=False,
                                                 watermarks=True))),
            # flush.ms (Kafka's log flusher): every log.flush.scheduler.interval.ms, or
            # each second when that is left unbounded, so a topic's flush.ms works alone.
            asyncio.ensure_future(self._periodic(
                min(self.config["log.flush.scheduler.interval.ms"], FLUSH_CHECK_MS) / 1000,
                lambda: self.storage.maintenance(retention=False, checkpoints=False,
                                                 flushes=True))),
        ]
        if self.controller is not None and self.config["auto.leader.rebalance.enable"]:
            controller = self.controller

            async def rebalance() -> None:
                await asyncio.wrap_future(controller.rebalance_leaders())

            self._background.append(asyncio.ensure_future(self._periodic(
                self.config["leader.imbalance.check.interval.seconds"], rebalance)))
        if self.isr is not None:
            isr = self.isr

            async def shrink() -> None:
                isr.shrink_out_of_sync()

            self._background.append(asyncio.ensure_future(self._periodic(
                self.config["replica.lag.time.max.ms"] / 2000, shrink)))
        if self.fetchers is not None:
            fetchers = self.fetchers

            async def follow_log_starts() -> None:
                await fetchers.follow_log_starts(self.replicas.saturated_followers())

            # Replicas on a SATURATED dir fetch nothing but follow their leader's log
            # start offset: what DeleteRecords and retention free there, they free here.
            self._background.append(asyncio.ensure_future(self._periodic(
                fetchers.backoff, follow_log_starts)))
        if self.fatal is None:
            await self.stop_event.wait()
        code = await self._shutdown()
        return 1 if self.fatal is not None else code

    def _advertised_addresses(self) -> dict[str, tuple[str, int]]:
        """What Metadata and the ZooKeeper registration give clients, by listener name
        (Kafka's KafkaServer.createBrokerInfo): advertised.listeners, else the
        listeners; an empty host is this host's name, port 0 the port that listener
        was given."""
        return {adv.name: (adv.host or socket.getfqdn(), adv.port or self.bound[adv.name][1])
                for adv in self.config.advertised_listeners}

    def _join_cluster(self) -> None:
        assert self.advertised  # called once the listeners are bound
        host, port = self.advertised[self.config.inter_broker_listener]
        loop = self._loop = asyncio.get_running_loop()
        session_timeout = self.config["zookeeper.session.timeout.ms"] / 1000
        self.cluster = ClusterLink(self.config["zookeeper.connect"], self.config.broker_id,
                                   host, port, rack=self.config["broker.rack"],
                                   listeners=[(name, h, p) for name, (h, p)
                                              in self.advertised.items()],
                                   session_timeout=session_timeout,
                                   on_fatal=lambda why: loop.call_soon_threadsafe(self._on_fatal, why),
                                   on_registered=self._on_registered,
                                   **self._zookeeper_security())
        # The controller shares the link's ZooKeeper session, so losing it loses both the
        # registration and the controller's place; it starts once the broker is
        # registered (_on_registered), never before.
        self.controller = Controller(
            self.config.broker_id, client=self.cluster.client, session_timeout=session_timeout,
            listener=self.config.inter_broker_listener,
            default_num_partitions=self.config["num.partitions"],
            default_replication_factor=self.config["default.replication.factor"],
            unclean_leader_election=self.config["unclean.leader.election.enable"],
            delete_topic_enable=self.config["delete.topic.enable"],
            leader_imbalance_percentage=self.config["leader.imbalance.per.broker.percentage"],
            tls_context=self.inter_broker_tls, login=self.config.inter_broker_login)
        self.handlers.controller = self.controller
        self.handlers.create_in_zookeeper = self._auto_create_topic
        self._controller_started = False
        self.monitor.cluster = self.transitions.cluster = self.cluster
        for d in self.storage.dirs:
            if d.state is not DirState.ONLINE:  # failed before the link existed
                self.cluster.announce_log_dir_event(str(d.path))
        # Written before the registration: the controller looks there for replicas a
        # reassignment moved off this broker while it was away.
        self.monitor.publish()
        self.cluster.start()
        log.info("registering as broker %d in ZooKeeper at %s", self.config.broker_id,
                 self.config["zookeeper.connect"])

    async def _await_controller(self, timeout: float) -> None:
        """Before READY, wait (at most `timeout`) for the election to name a controller,
        as a Kafka broker starts its controller before it serves: a client's first
        Metadata then names one, and CreateTopics finds it. ZooKeeper away: serve anyway."""
        deadline = time.monotonic() + timeout
        while (self.controller is not None and self.controller.active_id < 0
               and time.monotonic() < deadline and not self.stop_event.is_set()):
            await asyncio.sleep(0.05)
        if self.controller is not None and self.controller.active_id < 0:
            log.warning("no controller elected within %.0f s (ZooKeeper away?); serving anyway",
                        timeout)

    def _on_registered(self, broker_epoch: int) -> None:
        """On the ZooKeeper link's thread, after each registration of /brokers/ids/<id>."""
        self._loop.call_soon_threadsafe(
            lambda: asyncio.ensure_future(self._load_configs_from_zookeeper()))
        if self.controller is not None and not self._controller_started:
            self._controller_started = True
            self.controller.start()
            log.info("broker %d registered (broker epoch %d); controller election joined",
                     self.config.broker_id, broker_epoch)

    async def _refresh_dirs(self) -> None:
        for entry in await self.storage.describe_dirs():
            d = entry["dir"]
            size = sum(s for s, _ in entry["partitions"].values())
            self.metrics.log_dir(str(d.path), state=d.state.value, size=size,
                                 free=entry["usable_bytes"], total=entry["total_bytes"],
                                 partitions=len(d.partitions))
        self.monitor.publish()  # free bytes change: the controller's view follows

    def _partitions_changed(self) -> None:
        self.metrics.partitions_changed(len(self.replicas.partitions), self.storage.dirs,
                                        {tp.topic for tp in self.replicas.partitions})
        self.monitor.publish()  # what this broker holds: the controller reads it

    def _dir_offline(self, d: ManagedDir) -> None:
        """A dir went OFFLINE: in a cluster, its partitions' roles are dropped here."""
        if self.handlers.control is not None:
            self.handlers.control.dir_offline(d)

    def _announce_log_dir_event(self, path: str) -> None:
        """A log_dir_event for `path` (the controller asks about every replica here)."""
        if self.cluster is not None:
            self.cluster.announce_log_dir_event(path)

    def _partitions_deleted(self, tps: list[TopicPartition]) -> Awaitable[int]:
        """A topic's partitions are deleted (standalone: here; in a cluster: the
        controller's UpdateMetadata says so to every broker): the groups this broker
        coordinates drop their committed offsets of them (Kafka's onPartitionsDeleted)."""
        return self.coordinator.partitions_deleted(tps)

    def _on_signal(self, sig: int) -> None:
        if self.stop_event.is_set():
            return
        log.info("%s: stopping", signal.Signals(sig).name)
        self.notifier.stopping("flushing and writing checkpoints")
        self.stop_event.set()

    async def _shutdown(self) -> int:
        serving = self.state == "serving"
        self.state = "stopping"
        if (serving and self.cluster is not None and self.fatal is None
                and self.config["controlled.shutdown.enable"]):
            await self._controlled_shutdown()
        self.handlers.stopping.set()
        self.connections.stop_accepting()  # stop accepting first
        if self.controller is not None:
            # Give up the controller first: another broker takes over while this one
            # flushes (its requests to brokers stop here).
            await asyncio.to_thread(self.controller.stop)
        await self._stop_background()
        await self.coordinator.stop()
        await self.transactions.stop()
        await self.marker_channel.close()
        await self.txn_verifier.close()
        await self.monitor.stop()
        await self.transitions.stop()
        await self.connections.close()
        if self.fetchers is not None:
            await self.fetchers.stop()
        if self.isr is not None:
            await self.isr.stop()
        await self.moves.stop()
        await self.replicas.snapshot_producers(every=True)
        self.replicas.stop()
        await self.cleaner.stop()
        failures, self.stuck_workers = await self.storage.stop()
        for d, err in failures:
            log.error("closing log dir %s failed: %s", d.path, err)
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.stop)
        await self.http.close()
        self.notifier.close()
        if failures:
            return 1
        log.info("stopped cleanly: checkpoints and clean-shutdown markers written")
        return 0

    async def _controlled_shutdown(self) -> None:
        """Before anything stops: leadership moved to other brokers while this one still
        serves, so clients are answered NOT_LEADER_OR_FOLLOWER and follow it."""
        assert self.cluster is not None and self.handlers.control is not None
        if not self.cluster.connected:  # the controller could write no new leadership
            log.warning("controlled shutdown skipped: ZooKeeper is not reachable")
            return
        self.handlers.control.shutting_down = True
        await controlled_shutdown.run(
            self._ask_controlled_shutdown,
            retries=self.config["controlled.shutdown.max.retries"],
            backoff=self.config["controlled.shutdown.retry.backoff.ms"] / 1000,
            others_live=lambda: any(b != self.config.broker_id
                                    for b in self.replicas.leadership.live_brokers()))

    async def _ask_controlled_shutdown(self) -> controlled_shutdown.Answer | str:
        """One ControlledShutdown asked of the controller, or why it could not be."""
        assert self.cluster is not None and self.metadata_cache is not None
        me, epoch = self.config.broker_id, self.cluster.broker_epoch
        timeout = max(self.config["zookeeper.session.timeout.ms"] / 1000, 10.0)
        cid = self.replicas.leadership.controller_id
        if cid < 0:
            return "no controller is known"
        if cid == me and self.controller is not None:
            try:
                code, remaining = await asyncio.wait_for(
                    asyncio.wrap_future(self.controller.controlled_shutdown(me, epoch)), timeout)
            except TimeoutError:
                return "this broker's controller did not answer"
            return code, [(tp.topic, tp.partition) for tp in remaining]
        ep = self.metadata_cache.brokers.get(cid)
        if ep is None:
            return f"the controller, broker {cid}, has no endpoint known here"
        try:
            return await asyncio.to_thread(controlled_shutdown.ask, ep.host, ep.port, me, epoch,
                                           timeout=timeout, tls_context=self.inter_broker_tls,
                                           login=self.config.inter_broker_login)
        except (OSError, ValueError, protocol.ProtocolError) as err:
            return f"asking the controller, broker {cid} at {ep.host}:{ep.port}, failed: {err}"

    async def _stop_background(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []

    def _log_recovery(self, seconds: float) -> None:
        for d in self.storage.dirs:
            if d.logdir is None:
                continue
            cut = sum(r.bytes_truncated for r in d.logdir.recovery)
            recovered = sum(1 for r in d.logdir.recovery if r.recovered)
            self.metrics.recovered.labels(str(d.path)).inc(cut)
            if d.clean_shutdown:
                how = "clean shutdown, no recovery"
            elif d.logdir.created and not d.logdir.logs:
                how = "new log dir"
            else:
                how = f"no clean-shutdown marker: recovered {recovered} partitions, {cut} bytes cut"
            log.info("log dir %s: %d partitions (%s)", d.path, len(d.logdir.logs), how)
            for r in d.logdir.recovery:
                if r.bytes_truncated or r.problem:
                    # Kafka names each segment it cut ("Found invalid messages in log
                    # segment ..."): with many partitions, the operator needs which.
                    deleted = (f"; later segments deleted: {r.segments_deleted}"
                               if r.segments_deleted else "")
                    log.warning("%s: recovery cut %d bytes: %s%s", r.topic_partition,
                                r.bytes_truncated, r.problem or "no detail", deleted)
            for path in d.logdir.cluster_metadata_logs:
                log.info("%s is a KRaft controller's metadata log, not a topic: left as "
                         "it is (not served, recovered or cleaned; logkeeper does not run "
                         "KRaft)", path)
        log.info("log dirs loaded in %.2f s", seconds)

    async def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval
        if interval is None:
            return
        while True:
            # Sent from the event loop itself: a stuck loop stops the pings and systemd
            # restarts the service. A hung disk stalls only its worker, never this.
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    async def _periodic(self, interval: float, fn: Any, *, first: float | None = None) -> None:
        await asyncio.sleep(interval if first is None else first)
        while True:
            try:
                await fn()
            except Exception:  # noqa: BLE001 - a failed round is logged and retried
                log.exception("periodic task %s failed", getattr(fn, "__name__", fn))
            await asyncio.sleep(interval)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper serve", description=(
        "Run the storage daemon: a Kafka-protocol storage node for this host's log dirs."))
    p.add_argument("--config", metavar="FILE",
                   help="Kafka's server.properties (Java properties) or TOML, keyed by "
                        "Kafka's property names; *.properties or a file that is not TOML "
                        "is read as properties (default: embedded defaults, three log dirs "
                        "under ./data)")
    p.add_argument("--help-config", action="store_true", help="list the config keys and exit")
    p.add_argument("--log-level", default=os.environ.get("LOGKEEPER_LOG_LEVEL", "INFO"),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def zookeeper_security(cfg: config_mod.Config) -> dict[str, Any]:
    """How a broker's ZooKeeper clients connect and create znodes (zookeeper.ssl.*,
    zookeeper.set.acl; daemon.cluster.zk_client)."""
    tls = cfg.zookeeper_tls
    return {"tls_context": None if tls is None else tls.client_context(),
            "secure_acls": cfg["zookeeper.set.acl"]}


def resolve_broker_id(cfg: config_mod.Config) -> config_mod.Config:
    """A cluster broker configured without a broker.id (-1, Kafka's default) is the
    broker its log dirs' meta.properties name (one restarted), else gets an id from
    ZooKeeper (reserved.broker.max.id plus `/brokers/seqid`'s new version: Kafka's
    getOrGenerateBrokerId), which the dirs' meta.properties then keep. ConfigError when
    the dirs name different brokers or ZooKeeper cannot be reached for a new one."""
    if cfg.broker_id >= 0:
        return cfg
    held: dict[int, list[str]] = {}
    for d in cfg["log.dirs"]:
        try:
            meta = read_meta_properties(os.path.join(d, META_PROPERTIES))
        except (OSError, LogStoreError):
            continue  # none yet, or a dead disk: the open judges it
        stored = meta.get("broker.id") or meta.get("node.id")
        if stored is not None and stored.isdigit():
            held.setdefault(int(stored), []).append(d)
    if len(held) > 1:
        raise config_mod.ConfigError(
            "broker.id = -1, and the log dirs' meta.properties name different brokers: "
            + "; ".join(f"{b} in {', '.join(ds)}" for b, ds in sorted(held.items())))
    if held:
        broker_id = next(iter(held))
        log.info("broker.id -1: this is broker %d, as its log dirs' meta.properties say",
                 broker_id)
    else:
        hosts = cfg["zookeeper.connect"]
        try:
            broker_id = generate_broker_id(
                hosts, cfg["reserved.broker.max.id"],
                timeout=cfg["zookeeper.session.timeout.ms"] / 1000, **zookeeper_security(cfg))
        except Exception as err:  # noqa: BLE001 - ZooKeeper away or refusing: no start
            raise config_mod.ConfigError(
                f"broker.id = -1 asks ZooKeeper at {hosts} for an id, and it could not "
                f"give one ({type(err).__name__}: {err}); give broker.id, or start it "
                "again once ZooKeeper is reachable") from err
        log.info("broker.id -1: ZooKeeper generated broker id %d", broker_id)
    return dataclasses.replace(cfg, values=MappingProxyType(
        {**cfg.values, "broker.id": broker_id, "node.id": broker_id}))


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.help_config:
        print(config_mod.describe())
        return 0
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr,
        # systemd's journal stamps each line itself; elsewhere a timestamp helps.
        format=("%(levelname)s %(name)s: %(message)s" if os.environ.get("JOURNAL_STREAM")
                else "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    try:
        cfg = config_mod.load(args.config)
        for warning in cfg.warnings:
            log.warning("%s", warning)
        cfg = resolve_broker_id(cfg)
    except config_mod.ConfigError as err:
        print(f"logkeeper serve: {err}", file=sys.stderr)
        return 2
    _raise_fd_limit()
    _limit_malloc_arenas()
    # `kill -USR1` prints every thread's stack to stderr: what a stuck daemon is doing.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    server = Server(cfg)
    code = _run(server.run())
    if server.fatal is not None:
        print(f"logkeeper serve: {server.fatal}", file=sys.stderr)
    if server.stuck_workers:
        # A worker is stuck in a syscall on a hung disk: the interpreter would join it
        # at exit forever. Everything else is closed; leave without it.
        log.error("a log dir's worker is stuck on its disk; exiting without it")
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    return code


EVENT_LOOP_ENV = "LOGKEEPER_EVENT_LOOP"
EVENT_LOOPS = ("uvloop", "asyncio")


def _run(main: Awaitable[int]) -> int:
    """Run the daemon's coroutine on the event loop LOGKEEPER_EVENT_LOOP names: uvloop
    (the default) or asyncio (the standard library's own loop, pure Python)."""
    choice = os.environ.get(EVENT_LOOP_ENV, "uvloop").strip().lower() or "uvloop"
    if choice not in EVENT_LOOPS:
        log.warning("%s=%s is not one of %s: using uvloop", EVENT_LOOP_ENV,
                    os.environ[EVENT_LOOP_ENV], ", ".join(EVENT_LOOPS))
        choice = "uvloop"
    if choice == "uvloop":
        import uvloop

        log.info("event loop: uvloop %s", uvloop.__version__)
        return uvloop.run(main)  # type: ignore[arg-type]
    log.info("event loop: asyncio (%s)", EVENT_LOOP_ENV)
    return asyncio.run(main)  # type: ignore[arg-type]


MALLOC_ARENA_ENV = "MALLOC_ARENA_MAX"


def _limit_malloc_arenas() -> None:
    """One glibc malloc arena for the whole daemon, unless MALLOC_ARENA_MAX says
    otherwise (glibc reads it itself). By default every thread that allocates gets an
    arena of its own: each dir worker opens its dir's logs, so each kept ~1.8 MiB of its
    own beside the main heap, and a daemon holding 1,000 partitions over 3 dirs sat at
    ~11.9 KiB of RSS a partition against ~8.5 KiB in one arena (bench_daemon's flow). The
    threads that allocate mostly do so holding the GIL, so one arena's lock costs them
    nothing measurable (the produce and fetch figures did not move)."""
    if os.environ.get(MALLOC_ARENA_ENV):
        return
    if not native.malloc_arena_max(1):
        log.debug("not glibc: malloc's arenas left as they are")


def _raise_fd_limit() -> None:
    """Lift the soft RLIMIT_NOFILE to the hard limit: every segment holds its three files
    open (an active one five under Python before 3.13, whose index mappings dup their
    descriptors: logstore.index), so 1,000 partitions need ~3,000 to ~5,000, and three
    more for each inactive segment (systemd's LimitNOFILE= sets both limits)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as err:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, target, err)
