"""`logkeeper configs`: describe and alter topic and broker configs, as Kafka's
`kafka-configs.sh` does, through the Kafka protocol (DescribeConfigs and
IncrementalAlterConfigs).

    logkeeper configs describe --topic T [--all] [--json]
    logkeeper configs describe --broker N | --broker-defaults
    logkeeper configs alter --topic T --add-config retention.ms=60000[,k=v...]
                            [--delete-config k[,k...]]
    logkeeper configs describe --client ID | --client-defaults
    logkeeper configs alter --client ID | --client-defaults
                            --add-config producer_byte_rate=1048576[,consumer_byte_rate=...]
    logkeeper configs describe --user NAME | --user-defaults [--client ID | --client-defaults]
    logkeeper configs alter --user NAME | --user-defaults [--client ID | --client-defaults]
                            --add-config producer_byte_rate=1048576[,consumer_byte_rate=...]
    logkeeper configs alter --user NAME [--zookeeper HOSTS]
                            --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'
                            [--delete-config SCRAM-SHA-512]

Client quotas go through DescribeClientQuotas and AlterClientQuotas, to any broker, as
kafka-configs.sh `--entity-type clients` / `users` does: of a client-id (`--client`, or
`--client-defaults`), a user (`--user`, or `--user-defaults`), or a user and client-id
(both); each broker enforces them on its own traffic. A user's SCRAM credentials
(`--user NAME` with SCRAM-SHA-256/512 keys) go through DescribeUserScramCredentials and
AlterUserScramCredentials, salted here as Kafka's admin client salts them; with
`--zookeeper` they are written to ZooKeeper directly, as kafka-configs.sh --zookeeper
does for the inter-broker user before any broker runs.

The broker asked is `--bootstrap-server`, else the listener of the daemon on this host
(`--config FILE`, or the embedded defaults). A `--broker N` request goes to broker N
itself (its address from Metadata), as Kafka's admin clients send it. Without `--all`,
describe prints only what is set on the entity (the topic's overrides, the broker's
dynamic configs), like kafka-configs.sh.

Exit codes: 0 done; 1 the broker refused (the error code, its name and the broker's
message are printed, and nothing changed); 2 a usage error, a bad config file, or no
broker reachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from .client import (
    ClientError,
    Connection,
    Refused,
    add_command,
    add_zookeeper_tls_option,
    bootstrap_of,
    connect_any,
    connect_broker,
    zookeeper_session,
    zookeeper_tls_option,
)

TOPIC, BROKER = 2, 4
SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}
SET, DELETE = 0, 1


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's `k=v,k2=v2`; a list value goes in brackets: `k=[a,b]`."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            raise ValueError(f"--add-config {text!r}: expected key=value at {text[i:]!r}")
        key = text[i:eq].strip()
        j = eq + 1
        if j < n and text[j] == "[":
            end = text.find("]", j)
            if end < 0:
                raise ValueError(f"--add-config {text!r}: unclosed [ in {key}")
            value, i = text[j + 1:end], end + 1
            if i < n and text[i] == ",":
                i += 1
        else:
            end = text.find(",", j)
            end = n if end < 0 else end
            value, i = text[j:end], end + 1
        if not key:
            raise ValueError(f"--add-config {text!r}: empty key")
        out[key] = value.strip()
    return out


CLIENT = -1  # not a ConfigResource type: client quotas have their own APIs
MATCH_EXACT, MATCH_DEFAULT = 0, 1


# A quota entity: its (entity type, name) parts, a None name for the default
# (`--user alice --client-defaults`: [("user", "alice"), ("client-id", None)]).
QuotaEntity = list[tuple[str, str | None]]
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")


def describe_quotas(bootstrap: str, entity: QuotaEntity) -> dict[str, float]:
    """The entity's quotas."""
    C = DescribeClientQuotasRequest.ComponentData
    with connect_any(bootstrap) as conn:
        resp = conn.call(DescribeClientQuotasRequest(components=[C(
            entity_type=kind, match_type=MATCH_DEFAULT if name is None else MATCH_EXACT,
            match=name) for kind, name in entity], strict=True),
            DescribeClientQuotasResponse, lo=0, hi=1)
    if resp.error_code:
        raise Refused(resp.error_code, resp.error_message)
    return {v.key: v.value for e in resp.entries or [] for v in e.values}


def alter_quotas(bootstrap: str, entity: QuotaEntity, add: dict[str, str],
                 delete: list[str]) -> None:
    E = AlterClientQuotasRequest.EntryData
    ops = []
    for k, v in add.items():
        try:
            value = float(v)
        except ValueError:
            raise ValueError(f"--add-config {k}={v}: a quota is a number of bytes per "
                             "second") from None
        ops.append(E.OpData(key=k, value=value, remove=False))
    ops += [E.OpData(key=k, value=0.0, remove=True) for k in delete]
    with connect_any(bootstrap) as conn:
        resp = conn.call(AlterClientQuotasRequest(entries=[E(
            entity=[E.EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
            ops=ops)], validate_only=False), AlterClientQuotasResponse, lo=0, hi=1)
    [res] = resp.entries
    if res.error_code:
        raise Refused(res.error_code, res.error_message)


USER = -2  # SCRAM credentials: their own APIs too
SCRAM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
DEFAULT_ITERATIONS = 4096  # Kafka's ScramMechanism default


def scram_upsertions(user: str, add: dict[str, str]) -> list[tuple[str, int, bytes, bytes]]:
    """kafka-configs.sh's `SCRAM-SHA-256=[iterations=8192,password=...]` as (mechanism,
    iterations, salt, salted password): salted here, as Kafka's admin client does, so
    the password never leaves this host."""
    import hashlib
    import os

    out = []
    for mechanism, spec in add.items():
        if mechanism not in SCRAM_IDS:
            raise ValueError(f"--add-config {mechanism}: a user's configs are "
                             f"{', '.join(SCRAM_IDS)} (SCRAM credentials)")
        fields = {}
        for item in spec.split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--add-config {mechanism}=[{spec}]: expected "
                                 "[iterations=N,]password=...")
            fields[key.strip()] = value
        if not fields.get("password"):
            raise ValueError(f"--add-config {mechanism}: give password=... (and optionally "
                             "iterations=N)")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise ValueError(f"--add-config {mechanism}: iterations must be a number") from None
        salt = os.urandom(32)
        salted = hashlib.pbkdf2_hmac(mechanism.split("-", 1)[1].replace("-", "").lower(),
                                     fields["password"].encode(), salt, iterations)
        out.append((mechanism, iterations, salt, salted))
    return out


def describe_user(bootstrap: str, user: str) -> dict[str, int]:
    """The user's SCRAM mechanisms and their iterations ({} when it has none)."""
    from kafka.protocol.admin import (
        DescribeUserScramCredentialsRequest as D,
    )
    from kafka.protocol.admin import (
        DescribeUserScramCredentialsResponse,
    )

    with connect_any(bootstrap) as conn:
        resp = conn.call(D(users=[D.UserName(name=user)]), DescribeUserScramCredentialsResponse,
                         lo=0, hi=0)
    [res] = resp.results
    if res.error_code == 91:  # RESOURCE_NOT_FOUND: no credential
        return {}
    if res.error_code:
        raise Refused(res.error_code, res.error_message)
    names = {v: k for k, v in SCRAM_IDS.items()}
    return {names.get(c.mechanism, str(c.mechanism)): c.iterations for c in res.credential_infos}


def alter_user(bootstrap: str, user: str, add: dict[str, str], delete: list[str]) -> None:
    from kafka.protocol.admin import (
        AlterUserScramCredentialsRequest as A,
    )
    from kafka.protocol.admin import (
        AlterUserScramCredentialsResponse,
    )

    for m in delete:
        if m not in SCRAM_IDS:
            raise ValueError(f"--delete-config {m}: a user's configs are {', '.join(SCRAM_IDS)}")
    ups = [A.ScramCredentialUpsertion(name=user, mechanism=SCRAM_IDS[m], iterations=i,
                                      salt=salt, salted_password=salted)
           for m, i, salt, salted in scram_upsertions(user, add)]
    dels = [A.ScramCredentialDeletion(name=user, mechanism=SCRAM_IDS[m]) for m in delete]
    with connect_any(bootstrap) as conn:
        resp = conn.call(A(deletions=dels, upsertions=ups), AlterUserScramCredentialsResponse,
                         lo=0, hi=0)
    for res in resp.results:
        if res.error_code:
            raise Refused(res.error_code, res.error_message)


def alter_user_in_zookeeper(hosts: str, user: str, add: dict[str, str], delete: list[str],
                            tls_config: str | None = None) -> None:
    """kafka-configs.sh --zookeeper: write the user's credentials straight to ZooKeeper,
    as Kafka's docs have for the inter-broker user before any broker runs (every broker
    applies the change notification)."""
    from ..api.client_quotas import sanitize
    from ..cluster.config_store import USERS, ZkConfigStore
    from ..security.sasl import make_credential

    with zookeeper_session(hosts, tls_config) as zk:
        store = ZkConfigStore(zk)
        config = store.read(USERS, sanitize(user))
        for m in delete:
            if config.pop(m, None) is None:
                raise Refused(91, f"Attempt to delete a user credential that does not exist: {m}")
        for m, iterations, salt, salted in scram_upsertions(user, add):
            config[m] = make_credential(m, salted, iterations, salt).to_kafka()
        store.write(USERS, sanitize(user), config)


def _quota_entity(args: argparse.Namespace) -> QuotaEntity:
    """The user and/or client-id named (each possibly the default), as Kafka's
    `--entity-type users --entity-name alice --entity-type clients --entity-default`."""
    out: QuotaEntity = []
    if args.user is not None or args.user_defaults:
        out.append(("user", args.user))
    if args.client is not None or args.client_defaults:
        out.append(("client-id", args.client))
    return out


def _resource(args: argparse.Namespace) -> tuple[int, str]:
    entity = _quota_entity(args)
    named = [x for x in (args.topic is not None, args.broker is not None,
                         args.broker_defaults, bool(entity)) if x]
    if len(named) != 1:
        raise ValueError("name one of --topic, --broker, --broker-defaults, or a user "
                         "(--user/--user-defaults) and/or client-id (--client/--client-defaults)")
    if entity:
        return (USER if entity[0][0] == "user" else CLIENT), ", ".join(
            _entity_text(kind, name) for kind, name in entity)
    if args.topic is not None:
        return TOPIC, args.topic
    if args.broker is not None:
        return BROKER, str(args.broker)
    return BROKER, ""


def _connect(bootstrap: str, rtype: int, name: str) -> Connection:
    """A connection to the broker that answers for the resource: any for a topic or
    the broker defaults, broker N itself for `--broker N`."""
    if rtype != BROKER or name == "":
        return connect_any(bootstrap)
    return connect_broker(bootstrap, int(name))


def describe(bootstrap: str, rtype: int, name: str) -> list[dict[str, Any]]:
    R = DescribeConfigsRequest.DescribeConfigsResource
    with _connect(bootstrap, rtype, name) as conn:
        resp = conn.call(DescribeConfigsRequest(
            resources=[R(resource_type=rtype, resource_name=name, configuration_keys=None)],
            include_synonyms=True, include_documentation=False), DescribeConfigsResponse,
            lo=1, hi=4)
    [res] = resp.results
    if res.error_code:
        raise Refused(res.error_code, res.error_message)
    return [{"name": c.name, "value": c.value, "source": SOURCES.get(c.config_source, "UNKNOWN"),
             "read_only": c.read_only, "sensitive": c.is_sensitive,
             "synonyms": [{"name": s.name, "value": s.value,
                           "source": SOURCES.get(s.source, "UNKNOWN")} for s in c.synonyms]}
            for c in sorted(res.configs, key=lambda c: c.name)]


def alter(bootstrap: str, rtype: int, name: str, add: dict[str, str], delete: list[str]) -> None:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    configs = [C(name=k, config_operation=SET, value=v) for k, v in add.items()]
    configs += [C(name=k, config_operation=DELETE, value=None) for k in delete]
    with _connect(bootstrap, rtype, name) as conn:
        resp = conn.call(IncrementalAlterConfigsRequest(
            resources=[R(resource_type=rtype, resource_name=name, configs=configs)],
            validate_only=False), IncrementalAlterConfigsResponse, lo=0, hi=1)
    [res] = resp.responses
    if res.error_code:
        raise Refused(res.error_code, res.error_message)


def _entity_text(kind: str, name: str | None) -> str:
    what = "user-principal" if kind == "user" else "client-id"
    return f"{what} '{name}'" if name is not None else f"the default {what}"


def _what(rtype: int, name: str) -> str:
    if rtype == TOPIC:
        return f"topic {name}"
    if rtype in (CLIENT, USER):
        return name  # the quota entity's text (_resource)
    return f"broker {name}" if name else "default brokers"


# The source of a config set on the resource itself: what --delete-config can remove
# (the broker defaults' own is DYNAMIC_DEFAULT_BROKER_CONFIG).
_OWN_SOURCE = {TOPIC: "DYNAMIC_TOPIC_CONFIG", BROKER: "DYNAMIC_BROKER_CONFIG"}


def _own_source(rtype: int, name: str) -> str | None:
    return _OWN_SOURCE.get(rtype) if rtype != BROKER or name else \
        "DYNAMIC_DEFAULT_BROKER_CONFIG"


def render(entries: list[dict[str, Any]], rtype: int, name: str, everything: bool) -> str:
    # As kafka-configs.sh: without --all, only what is set on the resource itself, so a
    # broker default never reads as a topic's (or one broker's) own override.
    own = _own_source(rtype, name)
    shown = entries if everything else [e for e in entries if e["source"] == own]
    head = "All configs" if everything else "Dynamic configs"
    lines = [f"{head} for {_what(rtype, name)} are:"]
    for e in shown:
        syn = ", ".join(f"{s['source']}:{s['name']}={s['value']}" for s in e["synonyms"])
        lines.append(f"  {e['name']}={e['value']} sensitive={str(e['sensitive']).lower()} "
                     f"synonyms={{{syn}}}")
    return "\n".join(lines)



def _check_deletions(delete: list[str], have: Iterable[str], rtype: int, name: str) -> None:
    """kafka-configs.sh's check before it alters anything: each --delete-config key must be
    set on the resource (a typo or an unset key is an error, and nothing changes)."""
    have = set(have)
    missing = [k for k in delete if k not in have]
    if missing:
        raise ValueError(f"Invalid config(s): {','.join(missing)}: not set on "
                         f"{_what(rtype, name)}; nothing changed")


def _changes(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    add = parse_add_config(args.add_config) if args.add_config else {}
    delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not add and not delete:
        raise ValueError("alter needs --add-config or --delete-config")
    return add, delete


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper configs",
                                description="Describe or alter topic and broker configs.")
    sub = p.add_subparsers(dest="action", required=True)
    for action in ("describe", "alter"):
        s = add_command(sub, action, f"{action} the configs of a topic or broker")
        s.add_argument("--topic", help="a topic")
        s.add_argument("--broker", type=int, help="a broker id (its dynamic configs)")
        s.add_argument("--broker-defaults", action="store_true",
                       help="the cluster-wide dynamic broker defaults")
        client = s.add_mutually_exclusive_group()
        client.add_argument("--client", metavar="ID",
                            help="a client-id's quotas (producer_byte_rate, consumer_byte_rate); "
                            "with --user/--user-defaults, that user's and client-id's")
        client.add_argument("--client-defaults", action="store_true",
                            help="the quotas of every client-id without its own")
        user = s.add_mutually_exclusive_group()
        user.add_argument("--user", metavar="NAME",
                          help="a user's quotas (producer_byte_rate, consumer_byte_rate) and "
                          "SCRAM credentials (SCRAM-SHA-256=[iterations=N,password=...], "
                          "SCRAM-SHA-512=[...])")
        user.add_argument("--user-defaults", action="store_true",
                          help="the quotas of every user without its own")
        s.add_argument("--zookeeper", metavar="HOSTS[/CHROOT]",
                       help="with --user: read and write ZooKeeper directly (the first "
                       "inter-broker user, before any broker runs)")
        add_zookeeper_tls_option(s)
        if action == "describe":
            s.add_argument("--all", action="store_true",
                           help="every config with the value that applies, not only those set")
            s.add_argument("--json", action="store_true", help="print JSON")
        else:
            s.add_argument("--add-config", default="", metavar="K=V[,K=V]",
                           help="configs to set (a list value in brackets: k=[a,b])")
            s.add_argument("--delete-config", default="", metavar="K[,K]",
                           help="configs to remove (the broker's value applies again)")
    return p


def _split_user_keys(add: dict[str, str], delete: list[str]) -> tuple[
        dict[str, str], list[str], dict[str, str], list[str]]:
    """A user's --add-config and --delete-config split into its quota keys and its SCRAM
    credentials (two APIs)."""
    return ({k: v for k, v in add.items() if k not in SCRAM_IDS},
            [k for k in delete if k not in SCRAM_IDS],
            {k: v for k, v in add.items() if k in SCRAM_IDS},
            [k for k in delete if k in SCRAM_IDS])


def _describe_entity(bootstrap: str, rtype: int, name: str, entity: QuotaEntity,
                     as_json: bool) -> None:
    quotas = describe_quotas(bootstrap, entity)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(quotas.items()))
    user = entity[0][1] if entity[0][0] == "user" else None
    creds = describe_user(bootstrap, user) if user is not None and len(entity) == 1 else {}
    if as_json:  # a client-id's: its quotas; a user's: {"quotas": ..., "scram": ...}
        print(json.dumps({"quotas": quotas, "scram": creds} if user is not None
                         and len(entity) == 1 else quotas, sort_keys=True))
        return
    # Kafka's lines: each kind that the entity has.
    if quotas:
        print(f"Quota configs for {_what(rtype, name)} are {shown}")
    if creds:
        scram = ", ".join(f"{m}=iterations={i}" for m, i in sorted(creds.items()))
        print(f"SCRAM credential configs for {_what(rtype, name)} are {scram}")
    if not quotas and not creds:
        print(f"No quota configs for {_what(rtype, name)}" if user is None or len(entity) > 1
              else f"No quota or SCRAM credential configs for {_what(rtype, name)}")


# kafka-configs.sh's --entity-type (either spelling) -> our option for one entity, and
# for its defaults (--entity-default).
_ENTITY_OPTIONS = {"topics": ("--topic", None), "topic": ("--topic", None),
                   "brokers": ("--broker", "--broker-defaults"),
                   "broker": ("--broker", "--broker-defaults"),
                   "users": ("--user", "--user-defaults"), "user": ("--user", "--user-defaults"),
                   "clients": ("--client", "--client-defaults"),
                   "client": ("--client", "--client-defaults")}


def kafka_entity_args(argv: list[str]) -> list[str]:
    """kafka-configs.sh's way of naming what to describe or alter, `--entity-type T
    --entity-name N` (or `--entity-default`), repeated for a user's client-id, written as
    our options (`--topic N`, `--user N --client-defaults`, ...). ValueError for an
    entity type we do not have, or a name or default with no type before it."""
    out: list[str] = []
    types: list[str] = []  # entity types given, in order; each takes the next name
    named = 0
    i = 0
    while i < len(argv):
        arg, value = argv[i], None
        for flag in ("--entity-type", "--entity-name"):
            if arg == flag and i + 1 < len(argv):
                value, i = argv[i + 1], i + 1
                arg = flag
            elif arg.startswith(flag + "="):
                arg, value = flag, arg[len(flag) + 1:]
        if arg == "--entity-type" and value is not None:
            if value not in _ENTITY_OPTIONS:
                raise ValueError(f"--entity-type {value}: not one of topics, brokers, users, "
                                 "clients")
            types.append(value)
        elif arg in ("--entity-name", "--entity-default"):
            if named >= len(types):
                raise ValueError(f"{arg} needs an --entity-type before it")
            one, defaults = _ENTITY_OPTIONS[types[named]]
            named += 1
            if arg == "--entity-name" and value is not None:
                out += [one, value]
            elif defaults is None:
                raise ValueError(f"--entity-type {types[named - 1]} has no --entity-default")
            else:
                out.append(defaults)
        else:
            out.append(argv[i])
        i += 1
    if named < len(types):
        raise ValueError(f"--entity-type {types[named]} needs --entity-name or "
                         "--entity-default")
    return out


def main(argv: list[str]) -> int:
    try:
        argv = kafka_entity_args(argv)
    except ValueError as err:
        print(f"logkeeper configs: {err}", file=sys.stderr)
        return 2
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    rtype, name = USER, ""
    try:
        rtype, name = _resource(args)
        entity = _quota_entity(args)
        single_user = entity[0][1] if len(entity) == 1 and entity[0][0] == "user" else None
        tls_config = zookeeper_tls_option(args, args.zookeeper)
        if args.zookeeper is not None and single_user is None:
            raise ValueError("--zookeeper is for --user only (SCRAM credentials)")
        if args.zookeeper is not None and args.action == "alter":
            alter_user_in_zookeeper(args.zookeeper, single_user, *_changes(args),
                                    tls_config=tls_config)
            print(f"Completed updating config for {_what(rtype, name)}.")
            return 0
        bootstrap = bootstrap_of(args)
        if args.action == "describe":
            if entity:
                _describe_entity(bootstrap, rtype, name, entity, args.json)
                return 0
            entries = describe(bootstrap, rtype, name)
            print(json.dumps(entries, indent=2) if args.json
                  else render(entries, rtype, name, args.all))
            return 0
        add, delete = _changes(args)
        if entity:
            q_add, q_delete, s_add, s_delete = _split_user_keys(add, delete)
            if (s_add or s_delete) and single_user is None:
                raise ValueError("SCRAM credentials belong to one named user (--user NAME "
                                 "alone)")
            _check_deletions(q_delete, describe_quotas(bootstrap, entity) if q_delete else {},
                             rtype, name)
            if q_add or q_delete:
                alter_quotas(bootstrap, entity, q_add, q_delete)
            if s_add or s_delete:
                alter_user(bootstrap, single_user, s_add, s_delete)
        else:
            own = _own_source(rtype, name)
            if delete and own is not None:
                _check_deletions(delete, {e["name"] for e in describe(bootstrap, rtype, name)
                                          if e["source"] == own}, rtype, name)
            alter(bootstrap, rtype, name, add, delete)
    except Refused as err:
        print(f"logkeeper configs: {_what(rtype, name)}: {err}; nothing changed",
              file=sys.stderr)
        return 1
    except (ClientError, ValueError) as err:  # ConfigError is a ValueError
        print(f"logkeeper configs: {err}", file=sys.stderr)
        return 2
    print(f"Completed updating config for {_what(rtype, name)}.")
    return 0
