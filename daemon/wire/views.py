"""Version-independent views of the control messages, and builders for them.

The generated classes mirror the wire, which changes shape across versions: partitions
are listed one by one before LeaderAndIsr v2 / UpdateMetadata v5 / StopReplica v1 and
grouped by topic after; UpdateMetadata v0 has one host and port per broker; StopReplica
v0-2 carries one delete flag for the whole request. The readers here turn any version
into flat frozen records (what Kafka's `partitionStates()`, `liveBrokers()` accessors do),
and the builders turn records into a message at a chosen version, so neither the broker
nor the controller branches on versions.

Builders leave out what a version cannot carry (topic ids before v5, offline replicas
before UpdateMetadata v4, ...). A StopReplica below v3 has a single delete flag: the
builder raises ValueError when the records disagree, since the controller sends deletes
and stops in separate requests there. Readers never raise on a decoded message.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)

# Kafka's SecurityProtocol ids; before UpdateMetadata v3 the listener name is the
# protocol's name (ListenerName.forSecurityProtocol).
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


@dataclass(frozen=True)
class LeaderAndIsrPartition:
    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int  # the state znode's zkVersion
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    is_new: bool = False
    leader_recovery_state: int = 0
    topic_id: uuid.UUID | None = None  # v5+; None when absent or all zeros


@dataclass(frozen=True)
class LiveLeader:
    broker_id: int
    host: str
    port: int


@dataclass(frozen=True)
class MetadataPartition:
    topic: str
    partition: int
    controller_epoch: int
    leader: int  # -1 none, -2 the topic is being deleted
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    topic_id: uuid.UUID | None = None  # v7+


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True)
class LiveBroker:
    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None


@dataclass(frozen=True)
class StopReplicaPartition:
    topic: str
    partition: int
    delete: bool
    leader_epoch: int = -1  # v3+; -1 means "no check", -2 "topic being deleted"


def _tuple(ints: Iterable[int] | None) -> tuple[int, ...]:
    return tuple(ints or ())


def _grouped(records: Iterable, key=lambda r: r.topic) -> dict[str, list]:
    groups: dict[str, list] = {}
    for r in records:
        groups.setdefault(key(r), []).append(r)
    return groups


# -- LeaderAndIsr -----------------------------------------------------------------------

def leader_and_isr_partitions(req: LeaderAndIsrRequest) -> list[LeaderAndIsrPartition]:
    """Every partition state in a decoded request, in request order."""
    if req.version < 2:
        pairs = [(s.topic_name, None, s) for s in req.ungrouped_partition_states]
    else:
        pairs = [(t.topic_name, t.topic_id if req.version >= 5 else None, s)
                 for t in req.topic_states for s in t.partition_states]
    v = req.version
    return [
        LeaderAndIsrPartition(
            topic=topic, partition=s.partition_index, controller_epoch=s.controller_epoch,
            leader=s.leader, leader_epoch=s.leader_epoch, isr=_tuple(s.isr),
            partition_epoch=s.partition_epoch, replicas=_tuple(s.replicas),
            adding_replicas=_tuple(s.adding_replicas) if v >= 3 else (),
            removing_replicas=_tuple(s.removing_replicas) if v >= 3 else (),
            is_new=bool(s.is_new) if v >= 1 else False,
            leader_recovery_state=s.leader_recovery_state if v >= 6 else 0,
            topic_id=topic_id,
        )
        for topic, topic_id, s in pairs
    ]


def leader_and_isr_leaders(req: LeaderAndIsrRequest) -> list[LiveLeader]:
    return [LiveLeader(b.broker_id, b.host_name, b.port) for b in req.live_leaders]


def leader_and_isr_request(version: int, *, controller_id: int, controller_epoch: int,
                           broker_epoch: int, partitions: Iterable[LeaderAndIsrPartition],
                           live_leaders: Iterable[LiveLeader]) -> LeaderAndIsrRequest:
    r = LeaderAndIsrRequest

    def state(cls: type, p: LeaderAndIsrPartition, **extra) -> object:
        kw = dict(partition_index=p.partition, controller_epoch=p.controller_epoch,
                  leader=p.leader, leader_epoch=p.leader_epoch, isr=list(p.isr),
                  partition_epoch=p.partition_epoch, replicas=list(p.replicas), **extra)
        if version >= 1:
            kw["is_new"] = p.is_new
        if version >= 3:
            kw["adding_replicas"] = list(p.adding_replicas)
            kw["removing_replicas"] = list(p.removing_replicas)
        if version >= 6:
            kw["leader_recovery_state"] = p.leader_recovery_state
        return cls(**kw)

    body: dict = dict(controller_id=controller_id, controller_epoch=controller_epoch,
                      live_leaders=[r.LeaderAndIsrLiveLeader(broker_id=b.broker_id,
                                                             host_name=b.host, port=b.port)
                                    for b in live_leaders])
    if version >= 2:
        body["broker_epoch"] = broker_epoch
        ts = r.LeaderAndIsrTopicState
        topics = []
        for topic, parts in _grouped(partitions).items():
            t = dict(topic_name=topic,
                     partition_states=[state(ts.LeaderAndIsrPartitionState, p) for p in parts])
            if version >= 5:
                t["topic_id"] = parts[0].topic_id
            topics.append(ts(**t))
        body["topic_states"] = topics
    else:
        body["ungrouped_partition_states"] = [
            state(r.LeaderAndIsrUngroupedPartitionState, p, topic_name=p.topic) for p in partitions]
    return r(version=version, **body)


def leader_and_isr_response(version: int, errors: Mapping[tuple[str, int], int],
                            topic_ids: Mapping[str, uuid.UUID | None] | None = None,
                            error_code: int = 0) -> LeaderAndIsrResponse:
    """The answer to a LeaderAndIsr of `version`: one error code per (topic, partition).

    v5+ group by topic id, so `topic_ids` must name every topic (Kafka's broker answers
    with the ids it was sent)."""
    r = LeaderAndIsrResponse
    if version < 5:
        ps = [r.LeaderAndIsrUngroupedPartitionError(topic_name=t, partition_index=p, error_code=e)
              for (t, p), e in errors.items()]
        return r(version=version, error_code=error_code, partition_errors=ps)
    te = r.LeaderAndIsrTopicError
    topics = []
    for topic, items in _grouped(errors.items(), key=lambda kv: kv[0][0]).items():
        if topic_ids is None or topic not in topic_ids:
            raise ValueError(f"LeaderAndIsr response v{version} needs the topic id of {topic!r}")
        topics.append(te(topic_id=topic_ids[topic], partition_errors=[
            te.LeaderAndIsrPartitionError(partition_index=p, error_code=e) for (_, p), e in items]))
    return r(version=version, error_code=error_code, topics=topics)


def leader_and_isr_errors(resp: LeaderAndIsrResponse,
                          topic_names: Mapping[uuid.UUID, str] | None = None) -> dict[tuple[str, int], int]:
    """(topic, partition) -> error code from a response; v5+ need `topic_names` (id -> name)
    and skip ids they do not know, as Kafka's controller does."""
    if resp.version < 5:
        return {(e.topic_name, e.partition_index): e.error_code for e in resp.partition_errors}
    out = {}
    for t in resp.topics:
        name = (topic_names or {}).get(t.topic_id)
        if name is not None:
            out.update({(name, e.partition_index): e.error_code for e in t.partition_errors})
    return out


# -- UpdateMetadata ---------------------------------------------------------------------

def update_metadata_partitions(req: UpdateMetadataRequest) -> list[MetadataPartition]:
    if req.version < 5:
        pairs = [(s.topic_name, None, s) for s in req.ungrouped_partition_states]
    else:
        pairs = [(t.topic_name, t.topic_id if req.version >= 7 else None, s)
                 for t in req.topic_states for s in t.partition_states]
    return [
        MetadataPartition(
            topic=topic, partition=s.partition_index, controller_epoch=s.controller_epoch,
            leader=s.leader, leader_epoch=s.leader_epoch, isr=_tuple(s.isr),
            zk_version=s.zk_version, replicas=_tuple(s.replicas),
            offline_replicas=_tuple(s.offline_replicas) if req.version >= 4 else (),
            topic_id=topic_id,
        )
        for topic, topic_id, s in pairs
    ]


def update_metadata_brokers(req: UpdateMetadataRequest) -> list[LiveBroker]:
    """Live brokers; before v3 each endpoint's listener is named for its security protocol,
    and a v0 broker's single host and port is a PLAINTEXT endpoint."""
    out = []
    for b in req.live_brokers:
        if req.version == 0:
            eps = (Endpoint("PLAINTEXT", b.v0_host, b.v0_port, 0),)
        else:
            eps = tuple(
                Endpoint(e.listener if req.version >= 3 and e.listener
                         else SECURITY_PROTOCOLS.get(e.security_protocol, str(e.security_protocol)),
                         e.host, e.port, e.security_protocol)
                for e in b.endpoints)
        out.append(LiveBroker(b.id, eps, b.rack if req.version >= 2 else None))
    return out


def update_metadata_request(version: int, *, controller_id: int, controller_epoch: int,
                            broker_epoch: int, partitions: Iterable[MetadataPartition],
                            live_brokers: Iterable[LiveBroker]) -> UpdateMetadataRequest:
    r = UpdateMetadataRequest

    def state(cls: type, p: MetadataPartition, **extra) -> object:
        kw = dict(partition_index=p.partition, controller_epoch=p.controller_epoch,
                  leader=p.leader, leader_epoch=p.leader_epoch, isr=list(p.isr),
                  zk_version=p.zk_version, replicas=list(p.replicas), **extra)
        if version >= 4:
            kw["offline_replicas"] = list(p.offline_replicas)
        return cls(**kw)

    brokers = []
    for b in live_brokers:
        kw: dict = dict(id=b.broker_id)
        if version == 0:
            # v0 has room for one PLAINTEXT host and port (Kafka sends its PLAINTEXT one).
            ep = next((e for e in b.endpoints if e.security_protocol == 0), None)
            if ep is None:
                raise ValueError(f"UpdateMetadata v0 needs a PLAINTEXT endpoint for broker {b.broker_id}")
            kw.update(v0_host=ep.host, v0_port=ep.port)
        else:
            ec = r.UpdateMetadataBroker.UpdateMetadataEndpoint
            kw["endpoints"] = [
                ec(port=e.port, host=e.host, security_protocol=e.security_protocol,
                   **({"listener": e.listener} if version >= 3 else {}))
                for e in b.endpoints]
        if version >= 2:
            kw["rack"] = b.rack
        brokers.append(r.UpdateMetadataBroker(**kw))

    body: dict = dict(controller_id=controller_id, controller_epoch=controller_epoch,
                      live_brokers=brokers)
    if version >= 5:
        body["broker_epoch"] = broker_epoch
        ts = r.UpdateMetadataTopicState
        topics = []
        for topic, parts in _grouped(partitions).items():
            t = dict(topic_name=topic,
                     partition_states=[state(ts.UpdateMetadataPartitionState, p) for p in parts])
            if version >= 7:
                t["topic_id"] = parts[0].topic_id
            topics.append(ts(**t))
        body["topic_states"] = topics
    else:
        body["ungrouped_partition_states"] = [
            state(r.UpdateMetadataUngroupedPartitionState, p, topic_name=p.topic) for p in partitions]
    return r(version=version, **body)


# -- StopReplica ------------------------------------------------------------------------

def stop_replica_partitions(req: StopReplicaRequest) -> list[StopReplicaPartition]:
    """Before v3 every partition takes the request's delete flag and leader epoch -1."""
    if req.version == 0:
        return [StopReplicaPartition(p.topic_name, p.partition_index, bool(req.delete_partitions))
                for p in req.ungrouped_partitions]
    if req.version < 3:
        return [StopReplicaPartition(t.name, i, bool(req.delete_partitions))
                for t in req.topics for i in t.partition_indexes]
    return [StopReplicaPartition(t.topic_name, p.partition_index, bool(p.delete_partition), p.leader_epoch)
            for t in req.topic_states for p in t.partition_states]


def stop_replica_request(version: int, *, controller_id: int, controller_epoch: int,
                         broker_epoch: int, partitions: Iterable[StopReplicaPartition]) -> StopReplicaRequest:
    r = StopReplicaRequest
    partitions = list(partitions)
    body: dict = dict(controller_id=controller_id, controller_epoch=controller_epoch)
    if version >= 1:
        body["broker_epoch"] = broker_epoch
    if version < 3:
        flags = {p.delete for p in partitions}
        if len(flags) > 1:
            raise ValueError(f"StopReplica v{version} has one delete flag: send deletes and "
                             "stops in separate requests")
        body["delete_partitions"] = flags.pop() if flags else False
    if version == 0:
        body["ungrouped_partitions"] = [
            r.StopReplicaPartitionV0(topic_name=p.topic, partition_index=p.partition) for p in partitions]
    elif version < 3:
        body["topics"] = [r.StopReplicaTopicV1(name=t, partition_indexes=[p.partition for p in ps])
                          for t, ps in _grouped(partitions).items()]
    else:
        ts = r.StopReplicaTopicState
        body["topic_states"] = [
            ts(topic_name=t, partition_states=[
                ts.StopReplicaPartitionState(partition_index=p.partition, leader_epoch=p.leader_epoch,
                                             delete_partition=p.delete) for p in ps])
            for t, ps in _grouped(partitions).items()]
    return r(version=version, **body)


def stop_replica_response(version: int, errors: Mapping[tuple[str, int], int],
                          error_code: int = 0) -> StopReplicaResponse:
    r = StopReplicaResponse
    return r(version=version, error_code=error_code, partition_errors=[
        r.StopReplicaPartitionError(topic_name=t, partition_index=p, error_code=e)
        for (t, p), e in errors.items()])


def stop_replica_errors(resp: StopReplicaResponse) -> dict[tuple[str, int], int]:
    return {(e.topic_name, e.partition_index): e.error_code for e in resp.partition_errors}


__all__ = [
    "Endpoint", "LeaderAndIsrPartition", "LiveBroker", "LiveLeader", "MetadataPartition",
    "SECURITY_PROTOCOLS", "StopReplicaPartition",
    "leader_and_isr_errors", "leader_and_isr_leaders", "leader_and_isr_partitions",
    "leader_and_isr_request", "leader_and_isr_response",
    "stop_replica_errors", "stop_replica_partitions", "stop_replica_request", "stop_replica_response",
    "update_metadata_brokers", "update_metadata_partitions", "update_metadata_request",
]
