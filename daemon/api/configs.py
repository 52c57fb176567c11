"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for topics
and this broker, as a ZooKeeper-mode Kafka broker answers them (Kafka's ConfigHelper and
ZkAdminManager; docs/cluster.md "Topic and broker configs").

Any broker takes a topic's change: with ZooKeeper it writes `/config/topics/<t>` and a
`/config/changes` notification (daemon.cluster.config_store), which every broker applies;
standalone it writes the log dirs' config file (daemon.storage.config_store). Either way
this broker applies the change before it answers. A BROKER resource names this broker's
id (its dynamic config) or "" (the cluster's dynamic default); another id answers
INVALID_REQUEST, as Kafka does, since clients send a broker's request to that broker.
A BROKER_LOGGER resource (this broker's id) lists its loggers and their levels, and
IncrementalAlterConfigs sets or unsets them (daemon.ops.loggers); AlterConfigs refuses it.

Errors, per resource, each changing nothing: an unknown topic 3 (UNKNOWN_TOPIC_OR_PARTITION);
an unknown config name, a bad value, a static broker key 40 (INVALID_CONFIG); a resource
named twice, a config named twice in one resource, an unsupported resource type, a topic
resource without a name, another broker's id 42 (INVALID_REQUEST); no ONLINE dir to
store a standalone change 56 (KAFKA_STORAGE_ERROR); ZooKeeper unreachable -1
(UNKNOWN_SERVER_ERROR) with the reason, logged (daemon.api.errors.error_of).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

from ..cluster.config_store import BROKERS, TOPICS, ZkConfigStore
from ..config import SENSITIVE_KEYS
from ..ops import loggers
from ..replica import topic_config as tc
from ..security.acls import Operation, ResourceType
from ..storage.config_store import FileConfigStore
from . import errors, protocol

log = logging.getLogger("logkeeper.configs")

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32
SOURCE_DYNAMIC_BROKER_LOGGER = 6  # Kafka's ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG


def _denied(conn: Any, op: Operation, rtype: int, name: str) -> int:
    """The authorization error of a config resource the principal may not describe or
    alter (Kafka's: a topic's own ACL, a broker's the cluster's), else 0."""
    if rtype == RESOURCE_TOPIC:
        return 0 if conn.allowed(op, ResourceType.TOPIC, name) else errors.TOPIC_AUTHORIZATION_FAILED
    if rtype == RESOURCE_GROUP:
        return 0 if conn.allowed(op, ResourceType.GROUP, name) else errors.GROUP_AUTHORIZATION_FAILED
    if rtype in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        return 0 if conn.allowed(op, ResourceType.CLUSTER) else errors.CLUSTER_AUTHORIZATION_FAILED
    return 0


class RequestError(Exception):
    """A resource answered with `code` and this message; nothing changed."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class ConfigApis:
    """Event loop only. `topics()` names the topics that exist (the metadata this broker
    answers with); `zk()` is the ZooKeeper store once connected (None standalone)."""

    def __init__(self, configs: tc.TopicConfigs, *, topics: Callable[[], set[str]],
                 zk: Callable[[], ZkConfigStore | None] | None = None,
                 files: FileConfigStore | None = None):
        self.configs = configs
        self.broker_id = configs.static.broker_id
        self.topics = topics
        self.zk = zk
        self.files = files
        # Checks this broker's dynamic config for its listeners' TLS (ConfigValueError
        # saying what is wrong), before it is stored (set by the app).
        self.check_listeners: Callable[[Mapping[str, str]], None] | None = None
        self._lock = asyncio.Lock()  # one change at a time: read, modify, write

    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        return {32: self.describe_configs, 33: self.alter_configs,
                44: self.incremental_alter_configs}

    # ---- DescribeConfigs ----

    async def describe_configs(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        R = DescribeConfigsResponse.DescribeConfigsResult
        out = []
        for res in body.resources:
            denied = _denied(conn, Operation.DESCRIBE_CONFIGS, res.resource_type,
                             res.resource_name)
            if denied:
                out.append(R(error_code=denied, error_message="Authorization failed.",
                             resource_type=res.resource_type, resource_name=res.resource_name,
                             configs=[]))
                continue
            try:
                entries = await self._describe(res.resource_type, res.resource_name)
                keys = res.configuration_keys
                if keys:
                    entries = [e for e in entries if e.name in keys]
                out.append(R(error_code=errors.NONE, error_message=None,
                             resource_type=res.resource_type, resource_name=res.resource_name,
                             configs=[_entry(e, req.version, body) for e in entries]))
            except RequestError as err:
                out.append(R(error_code=err.code, error_message=str(err),
                             resource_type=res.resource_type, resource_name=res.resource_name,
                             configs=[]))
            except Exception as err:  # noqa: BLE001 - ZooKeeper away, a bad znode, a bug
                code, msg = errors.error_of(err, f"describe configs of {res.resource_name}")
                out.append(R(error_code=code, error_message=msg,
                             resource_type=res.resource_type, resource_name=res.resource_name,
                             configs=[]))
        return DescribeConfigsResponse(throttle_time_ms=0, results=out)

    async def _describe(self, rtype: int, name: str) -> list[tc.Entry]:
        if rtype == RESOURCE_TOPIC:
            if name not in self.topics():
                raise RequestError(errors.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"The topic '{name}' does not exist.")
            if self.zk is not None and (zk := self.zk()) is not None:
                await self.configs.set_topic(name, await asyncio.to_thread(zk.read, TOPICS, name))
            return list(self.configs.describe(name).values())
        if rtype == RESOURCE_BROKER:
            if name == "":
                return [tc.Entry(n, v, tc.SOURCE_DYNAMIC_DEFAULT_BROKER,
                                 tc.DYNAMIC_BROKER_KEYS[n].kind,
                                 ((n, v, tc.SOURCE_DYNAMIC_DEFAULT_BROKER),))
                        for n, v in sorted(self.configs.broker_dynamic(tc.DEFAULT_BROKER).items())]
            self._check_broker(name)
            return tc.broker_entries(self.configs.layers)
        if rtype == RESOURCE_BROKER_LOGGER:
            if not name:
                raise RequestError(errors.INVALID_REQUEST, "Broker id must not be empty")
            self._check_broker(name)
            return [tc.Entry(n, level, SOURCE_DYNAMIC_BROKER_LOGGER, 0, ())
                    for n, level in loggers.loggers().items()]
        raise RequestError(errors.INVALID_REQUEST, f"Unsupported resource type: {rtype}")

    def _check_broker(self, name: str) -> None:
        if name != str(self.broker_id):
            raise RequestError(errors.INVALID_REQUEST,
                               f"Unexpected broker id, expected {self.broker_id} or empty "
                               f"string, but received {name}")

    # ---- AlterConfigs and IncrementalAlterConfigs ----

    async def alter_configs(self, req: protocol.Request, conn: Any) -> Any:
        """The whole set of overrides is replaced by the request's (Kafka's AlterConfigs)."""
        body = req.body
        R = AlterConfigsResponse.AlterConfigsResourceResponse
        dup = _duplicates((r.resource_type, r.resource_name) for r in body.resources)
        out = []
        for res in body.resources:
            code, msg = await self._alter_allowed(
                conn, res.resource_type, res.resource_name,
                [(c.name, tc.OP_SET, c.value) for c in res.configs], replace=True,
                validate_only=body.validate_only,
                duplicate=(res.resource_type, res.resource_name) in dup)
            out.append(R(error_code=code, error_message=msg, resource_type=res.resource_type,
                         resource_name=res.resource_name))
        return AlterConfigsResponse(throttle_time_ms=0, responses=out)

    async def incremental_alter_configs(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        R = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        dup = _duplicates((r.resource_type, r.resource_name) for r in body.resources)
        out = []
        for res in body.resources:
            code, msg = await self._alter_allowed(
                conn, res.resource_type, res.resource_name,
                [(c.name, c.config_operation, c.value) for c in res.configs], replace=False,
                validate_only=body.validate_only,
                duplicate=(res.resource_type, res.resource_name) in dup)
            out.append(R(error_code=code, error_message=msg, resource_type=res.resource_type,
                         resource_name=res.resource_name))
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out)

    async def _alter_allowed(self, conn: Any, rtype: int, name: str,
                             ops: list[tuple[str, int, str | None]], **how: Any
                             ) -> tuple[int, str | None]:
        """`_alter` once the principal may alter the resource's configs."""
        denied = _denied(conn, Operation.ALTER_CONFIGS, rtype, name)
        if denied:
            return denied, "Authorization failed."
        return await self._alter(rtype, name, ops, **how)

    async def _alter(self, rtype: int, name: str, ops: list[tuple[str, int, str | None]], *,
                     replace: bool, validate_only: bool, duplicate: bool) -> tuple[int, str | None]:
        try:
            if duplicate:
                raise RequestError(errors.INVALID_REQUEST,
                                   f"Error due to duplicate resource {name!r} of type {rtype}")
            keys = Counter(n for n, _, _ in ops)
            twice = sorted(n for n, c in keys.items() if c > 1)
            if twice:
                raise RequestError(errors.INVALID_REQUEST,
                                   f"Error due to duplicate config keys: {', '.join(twice)}")
            async with self._lock:
                if rtype == RESOURCE_TOPIC:
                    await self._alter_topic(name, ops, replace, validate_only)
                elif rtype == RESOURCE_BROKER:
                    await self._alter_broker(name, ops, replace, validate_only)
                elif rtype == RESOURCE_BROKER_LOGGER and not replace:
                    self._alter_broker_loggers(name, ops, validate_only)
                else:
                    raise RequestError(errors.INVALID_REQUEST, "AlterConfigs is only supported "
                                       f"for topics and brokers, but resource type is {rtype}")
        except RequestError as err:
            log.info("alter configs of %s (type %d) refused: %s", name, rtype, err)
            return err.code, str(err)
        except loggers.LoggerChangeError as err:
            log.info("alter broker loggers of %s refused: %s", name, err)
            return (errors.INVALID_CONFIG if err.invalid_config else errors.INVALID_REQUEST,
                    str(err))
        except tc.ConfigValueError as err:
            msg = f"Invalid config value for resource {_resource(rtype, name)}: {err}"
            log.info("%s", msg)
            return errors.INVALID_CONFIG, msg
        except Exception as err:  # noqa: BLE001 - a full dir (56), ZooKeeper away, a bug
            return errors.error_of(err, f"store configs of {name}")
        return errors.NONE, None

    async def _alter_topic(self, topic: str, ops: list[tuple[str, int, str | None]],
                           replace: bool, validate_only: bool) -> None:
        if not topic:
            raise RequestError(errors.INVALID_REQUEST, "Default topic resources are not allowed.")
        if topic not in self.topics():
            raise RequestError(errors.UNKNOWN_TOPIC_OR_PARTITION,
                               f"The topic '{topic}' does not exist.")
        zk = self.zk() if self.zk is not None else None
        if replace:
            current: dict[str, str] = {}
        elif zk is not None:
            current = await asyncio.to_thread(zk.read, TOPICS, topic)
        else:
            current = self.configs.overrides(topic)

        def kind(n: str) -> int | None:
            k = tc.TOPIC_CONFIGS.get(n)
            return k.kind if k is not None else None

        described = self.configs.describe(topic)
        new = tc.apply_ops(current, ops, kind,
                           lambda n: described[n].value or "" if n in described else "")
        new = tc.validate_topic_configs(new)
        if validate_only:
            return
        if zk is not None:
            await asyncio.to_thread(zk.write, TOPICS, topic, new)
        else:
            assert self.files is not None
            await self.files.write({**self.configs.topics, topic: new}, self._brokers_with())
        log.info("topic %s: config overrides set to %s", topic, new)
        await self.configs.set_topic(topic, new)

    async def _alter_broker(self, name: str, ops: list[tuple[str, int, str | None]],
                            replace: bool, validate_only: bool) -> None:
        entity = tc.DEFAULT_BROKER if name == "" else name
        if name != "":
            self._check_broker(name)
        zk = self.zk() if self.zk is not None else None
        if replace:
            current: dict[str, str] = {}
        elif zk is not None:
            current = await asyncio.to_thread(zk.read, BROKERS, entity)
        else:
            current = self.configs.broker_dynamic(entity)

        def kind(n: str) -> int | None:
            k = tc.DYNAMIC_BROKER_KEYS.get(n)
            return k.kind if k is not None else None

        def default(n: str) -> str:
            chain = self.configs.layers.broker_chain(n)
            return next((v for _, v, _ in chain if v is not None), "")

        new = tc.validate_broker_configs(tc.apply_ops(current, ops, kind, default),
                                         self.configs.static)
        tls_keys = sorted(n for n in new if tc.listener_tls_key(n) is not None)
        if tls_keys and name == "":
            raise tc.ConfigValueError("Cannot update these configs at default cluster level, "
                                      f"broker id must be specified: {tls_keys}")
        if self.check_listeners is not None:
            self.check_listeners(new)  # the keystores they name, read and checked now
        if validate_only:
            return
        if zk is not None:
            await asyncio.to_thread(zk.write, BROKERS, entity, new)
        else:
            assert self.files is not None
            await self.files.write(self.configs.topics, self._brokers_with(entity, new))
        await self.configs.set_broker(entity, new)

    def _alter_broker_loggers(self, name: str, ops: list[tuple[str, int, str | None]],
                              validate_only: bool) -> None:
        """IncrementalAlterConfigs of BROKER_LOGGER: this broker's log levels, changed at
        once and kept until it restarts (daemon.ops.loggers); AlterConfigs has no such
        resource, as in Kafka."""
        self._check_broker(name)
        nulls = [n for n, op, v in ops if op != tc.OP_DELETE and v is None]
        if nulls:
            raise RequestError(errors.INVALID_REQUEST,
                               f"Null value not supported for : {', '.join(nulls)}")
        loggers.check(ops)
        if not validate_only:
            loggers.apply(ops)

    def _brokers_with(self, entity: str | None = None,
                      new: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
        out = self.configs.dynamic_brokers()
        if entity is not None and new is not None:
            out[entity] = new
        return out


def _resource(rtype: int, name: str) -> str:
    kind = {RESOURCE_TOPIC: "TOPIC", RESOURCE_BROKER: "BROKER"}.get(rtype, str(rtype))
    return f"ConfigResource(type={kind}, name='{name}')"


def _duplicates(keys: Any) -> set[Any]:
    return {k for k, c in Counter(keys).items() if c > 1}


def _entry(e: tc.Entry, version: int, body: Any) -> Any:
    C = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
    S = C.DescribeConfigsSynonym
    # A password or private key is never shown, as Kafka hides its PASSWORD-type keys:
    # no value, in the entry or its synonyms, and is_sensitive set.
    sensitive = e.name in SENSITIVE_KEYS
    synonyms = [S(name=n, value=None if sensitive else v, source=s) for n, v, s in e.synonyms] \
        if version >= 1 and body.include_synonyms else []
    return C(name=e.name, value=None if sensitive else e.value, read_only=e.read_only,
             config_source=e.source, is_default=e.is_default, is_sensitive=sensitive,
             synonyms=synonyms,
             config_type=tc.TYPE_PASSWORD if sensitive else e.kind, documentation=None)
