"""Creating and deleting topics on this broker (standalone: it is its own controller).

Names are validated before anything touches a disk; new partitions are placed by the
log manager (most free space, ONLINE and uncordoned dirs only) and created on their
dirs' workers; the placement record is written after every change. Deleting a topic
with a partition in an OFFLINE dir deletes nothing (the rest would come back on
re-admission). In a cluster, the controller takes this over.

Errors: a refusal raises `TopicError` with the Kafka code and a message naming the topic.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from logstore import LogConfig, StorageError, TopicPartition, names
from logstore.errors import InvalidTopicError

from ..api.errors import (
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_of,
)
from ..cluster import znodes
from ..config import Config
from ..storage.config_store import FileConfigStore
from ..storage.workers import ManagedDir
from .manager import ReplicaManager
from .partition import Partition
from .topic_config import ConfigValueError, TopicConfigs, validate_topic_configs

log = logging.getLogger("logkeeper.broker")


class TopicError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def refuse_internal(topic: str, change: str) -> None:
    """Raise TopicError (INVALID_TOPIC_EXCEPTION, Kafka's code for what internal topics
    do not allow) for `change` ("delete", "add partitions to") on __consumer_offsets or
    __transaction_state: a group's (a transactional id's) coordinator is the leader of
    partition hash(id) mod its partition count, so deleting it or growing it loses every
    group's committed offsets (every open transaction). Kafka's kafka-topics.sh refuses
    both."""
    if topic == names.OFFSETS_TOPIC:
        raise TopicError(INVALID_TOPIC_EXCEPTION, (
            f"{topic} is an internal topic: cannot {change} it (every consumer group's "
            "committed offsets live there, placed by its partition count)"))
    if topic == names.TRANSACTION_STATE_TOPIC:
        raise TopicError(INVALID_TOPIC_EXCEPTION, (
            f"{topic} is an internal topic: cannot {change} it (every transactional id's "
            "state lives there, placed by its partition count)"))


class TopicAdmin:
    """Event loop only; one change at a time."""

    def __init__(self, config: Config, replicas: ReplicaManager, *,
                 on_change: Callable[[], None] = lambda: None,
                 on_deleted: Callable[[list[TopicPartition]], Awaitable[object]] | None = None,
                 topic_configs: TopicConfigs | None = None,
                 config_store: FileConfigStore | None = None):
        self.config = config
        self.replicas = replicas
        # Topic configs given at creation are stored (standalone: the dirs' config file)
        # before the logs are made with them, and forgotten with the topic.
        self.topic_configs = topic_configs
        self.config_store = config_store
        self.storage = replicas.storage
        self.on_change = on_change  # partitions were added or removed (metrics)
        # A topic's partitions are gone: the groups' committed offsets of them go too.
        self.on_deleted = on_deleted
        self._lock = asyncio.Lock()

    async def create_topic(self, topic: str, num_partitions: int, replication_factor: int, *,
                           validate_only: bool = False,
                           configs: dict[str, str | None] | None = None) -> None:
        """Create `topic` with partitions placed by free space and `configs` as its
        overrides; TopicError on refusal."""
        try:
            names.validate_topic(topic)
        except InvalidTopicError as err:
            raise TopicError(INVALID_TOPIC_EXCEPTION, str(err)) from err
        if refused := names.creation_refused(topic):
            raise TopicError(INVALID_REQUEST, refused)
        try:
            overrides = validate_topic_configs(configs or {})
        except ConfigValueError as err:
            raise TopicError(INVALID_CONFIG, f"{topic}: {err}") from err
        if num_partitions == -1:
            num_partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if num_partitions < 1:
            raise TopicError(INVALID_PARTITIONS, f"{topic}: number of partitions must be at "
                                                 f"least 1, got {num_partitions}")
        brokers = len(self.replicas.leadership.live_brokers())
        if replication_factor != 1:
            raise TopicError(INVALID_REPLICATION_FACTOR,
                             f"{topic}: replication factor {replication_factor} is larger "
                             f"than the {brokers} available broker (standalone)")
        async with self._lock:
            topics = self.replicas.topics()
            if topic in topics:
                raise TopicError(TOPIC_ALREADY_EXISTS, f"topic {topic!r} already exists")
            collide = names.collision(topic, topics)
            if collide:
                raise TopicError(INVALID_TOPIC_EXCEPTION,
                                 f"topic {topic!r} collides with existing topic {collide!r} "
                                 "('.' and '_' map to the same metric names)")
            if validate_only:
                return
            try:
                placed = await self.storage.place_partitions(
                    [TopicPartition(topic, i) for i in range(num_partitions)])
                log_config = await self._store_configs(topic, overrides)
            except StorageError as err:
                raise TopicError(KAFKA_STORAGE_ERROR, str(err)) from err
            failed = await self._create_logs(topic, list(range(num_partitions)), placed, log_config)
            if failed is not None:
                if overrides and self.topic_configs is not None:
                    self.topic_configs.forget(topic)
                    await self._write_configs()
                code, msg = error_of(failed, f"create {topic}")
                raise TopicError(code, f"creating {topic} (nothing created): {msg}")
            log.info("created topic %s with %d partitions on %s", topic, num_partitions,
                     ", ".join(sorted({str(d.path) for d in placed})))

    async def create_partitions(self, topic: str, count: int,
                                assignments: list[list[int]] | None = None, *,
                                validate_only: bool = False) -> None:
        """Grow `topic` to `count` partitions (CreatePartitions); TopicError on refusal."""
        async with self._lock:
            parts = self.replicas.topic(topic)
            if not parts:
                raise TopicError(UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{topic}' does not exist.")
            current = self.replicas.partition_count(topic)
            if count < current:
                raise TopicError(INVALID_PARTITIONS, f"Topic currently has {current} "
                                 f"partitions, which is higher than the requested {count}.")
            if count == current:
                raise TopicError(INVALID_PARTITIONS, f"Topic already has {current} partitions.")
            me = self.replicas.leadership.broker_id
            if assignments is not None:
                if len(assignments) != count - current:
                    raise TopicError(INVALID_REPLICA_ASSIGNMENT, (
                        f"Increasing the number of partitions by {count - current} but "
                        f"{len(assignments)} assignments provided."))
                if any(list(a) != [me] for a in assignments):
                    raise TopicError(INVALID_REPLICA_ASSIGNMENT, f"{topic}: each new partition "
                                     f"must be on broker {me} only (standalone)")
            if validate_only:
                return
            try:
                placed = await self.storage.place_partitions(
                    [TopicPartition(topic, i) for i in range(current, count)])
            except StorageError as err:
                raise TopicError(KAFKA_STORAGE_ERROR, str(err)) from err
            cfg = self.topic_configs.log_config(topic) if self.topic_configs else None
            failed = await self._create_logs(topic, list(range(current, count)), placed, cfg)
            if failed is not None:
                code, msg = error_of(failed, f"add partitions to {topic}")
                raise TopicError(code, f"adding partitions to {topic} (none added): {msg}")
            log.info("topic %s: %d partitions now", topic, count)

    async def create_missing_partitions(self, topic: str, numbers: list[int]) -> None:
        """Create partitions `numbers` of `topic`, which exists with others (an internal
        topic of a Kafka broker's dir, holding only its share of the partitions:
        daemon.app), with the topic's configs; all of them or none, TopicError on
        failure. Those already held are left as they are."""
        async with self._lock:
            numbers = [n for n in numbers if self.replicas.get(topic, n) is None]
            if not numbers:
                return
            try:
                placed = await self.storage.place_partitions(
                    [TopicPartition(topic, n) for n in numbers])
            except StorageError as err:
                raise TopicError(KAFKA_STORAGE_ERROR, str(err)) from err
            cfg = self.topic_configs.log_config(topic) if self.topic_configs else None
            failed = await self._create_logs(topic, numbers, placed, cfg)
            if failed is not None:
                code, msg = error_of(failed, f"create the missing partitions of {topic}")
                raise TopicError(code, f"creating {len(numbers)} missing partitions of "
                                       f"{topic} (none created): {msg}")
            log.info("topic %s: created its %d missing partitions %s on %s", topic,
                     len(numbers), _spans(numbers),
                     ", ".join(sorted({str(d.path) for d in placed})))

    async def _create_logs(self, topic: str, numbers: list[int], placed: list[ManagedDir],
                           log_config: LogConfig | None) -> BaseException | None:
        """Create partitions `numbers` of `topic` on the `placed` dirs' workers (one
        each, in order) and take them on, recording the placement; or, when any of them
        fails, undo those made (a topic is created whole or not at all) and return the
        first failure."""
        held = self.replicas.topic(topic)
        if held:  # its partitions' id, or none if they have none (made before ids were)
            topic_id = next((p.log.topic_id for p in held
                             if p.log is not None and p.log.topic_id), None)
        else:  # a new topic: a new id, in each partition's partition.metadata as Kafka's
            topic_id = znodes.topic_id_to_str(uuid.uuid4())
        futures = [self.storage.submit(d, functools.partial(
                       d.logdir.create_log, topic_id=topic_id),  # type: ignore[union-attr]
                       topic, n, log_config)
                   for n, d in zip(numbers, placed, strict=True)]
        done = await asyncio.gather(*futures, return_exceptions=True)
        failed = next((r for r in done if isinstance(r, BaseException)), None)
        if failed is not None:
            await self._undo_create(topic, numbers, placed, done)
            return failed
        for n, d, res in zip(numbers, placed, done, strict=True):
            self.replicas.add(Partition(TopicPartition(topic, n), res, d, 0))
        self.on_change()
        await self.storage.write_placement()
        return None

    async def _undo_create(self, topic: str, numbers: list[int], placed: list[ManagedDir],
                           done: list[Any]) -> None:
        """Close and remove the partitions a failed creation made, and the dirs of those it
        could not (a half-made topic would hold descriptors and hide its gaps)."""
        futures = []
        for n, d, res in zip(numbers, placed, done, strict=True):
            logdir = d.logdir
            if logdir is None:
                continue
            if isinstance(res, BaseException):
                full = logdir.path / names.partition_dir_name(topic, n)
                futures.append(self.storage.submit(d, logdir.remove_dir, full))
            else:
                futures.append(self.storage.submit(d, logdir.delete_log, topic, n))
        for res in await asyncio.gather(*futures, return_exceptions=True):
            if isinstance(res, BaseException):
                log.warning("undoing the creation of %s: %s", topic, res)

    async def delete_topic(self, topic: str) -> None:
        async with self._lock:
            parts = self.replicas.topic(topic)
            if not parts:
                raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
            offline = sorted({str(p.dir.path) for p in parts if p.offline})
            if offline:
                # Deleting only part of a topic would bring the rest back on re-admission.
                raise TopicError(KAFKA_STORAGE_ERROR, (
                    f"topic {topic!r} has partitions in offline log dirs ({', '.join(offline)}); "
                    "nothing deleted: re-admit the dirs (logkeeper log-dirs readmit) first"))
            if self.topic_configs is not None and self.topic_configs.overrides(topic):
                self.topic_configs.forget(topic)
                await self._write_configs()
            futures = []
            for p in parts:
                self.replicas.remove(p)  # appends already queued on the worker see it
                futures.append(self.storage.submit(p.dir, p.dir.logdir.delete_log,  # type: ignore[union-attr]
                                                   p.tp.topic, p.tp.partition))
            done = await asyncio.gather(*futures, return_exceptions=True)
            self.on_change()
            # Under the lock: a re-creation of the topic waits until the offsets are gone.
            if self.on_deleted is not None:
                await self.on_deleted([p.tp for p in parts])
            await self.storage.write_placement()
            errors = [r for r in done if isinstance(r, BaseException)]
            if errors:
                code, msg = error_of(errors[0], f"delete {topic}")
                raise TopicError(code, f"deleting {topic}: {msg}")
            log.info("deleted topic %s (%d partitions)", topic, len(parts))


    async def _store_configs(self, topic: str, overrides: dict[str, str]) -> LogConfig | None:
        """Store a new topic's overrides; the LogConfig its logs get (None: the dirs')."""
        if self.topic_configs is None:
            return None
        if overrides:
            self.topic_configs.topics[topic] = overrides
            try:
                await self._write_configs()
            except BaseException:
                self.topic_configs.forget(topic)
                raise
            self.topic_configs.configure_quotas()
        return self.topic_configs.log_config(topic)

    async def _write_configs(self) -> None:
        tcs = self.topic_configs
        if self.config_store is None or tcs is None:
            return
        await self.config_store.write(tcs.topics, tcs.dynamic_brokers())


def _spans(numbers: list[int]) -> str:
    """Sorted partition numbers as runs: "0-12, 14-49"."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)

