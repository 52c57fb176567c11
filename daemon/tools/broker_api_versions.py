"""`logkeeper broker-api-versions`: Kafka's `kafka-broker-api-versions.sh`
(BrokerApiVersionsCommand): every broker of the cluster with the request versions it
serves, in Kafka's format.

    logkeeper broker-api-versions [--bootstrap-server HOST:PORT]

For each broker the cluster's Metadata names, its ApiVersions answer:

    127.0.0.1:9092 (id: 1 rack: null) -> (
    <tab>Produce(0): 3 to 8 [usable: 8],
    <tab>...
    <tab>SaslHandshake(17): UNSUPPORTED,
    <tab>...
    )

`[usable: N]` is the highest version this tool's protocol classes (kafka-python's,
from Kafka's schemas) share with the broker, `[unusable: node too old]` or `node too
new` when they share none; an API the broker does not serve is UNSUPPORTED, one the
tool does not know UNKNOWN(key). A broker that cannot be reached is printed with
`-> ERROR: why`.

Exit codes: 0 every broker answered; 1 some broker did not; 2 no broker reachable at
the bootstrap address, or a usage error.
"""

from __future__ import annotations

import argparse
import functools

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from .client import ClientError, Connection, add_broker_options, bootstrap_of, connect_any, run_tool

SCHEMAS = "kafka.protocol.schemas.resources"


@functools.cache
def _schema(api_key: int) -> dict | None:
    """The request schema this tool's protocol classes have for `api_key`, or None."""
    from kafka.protocol.api_message import load_json

    try:
        return load_json(f"{ApiKey(api_key).name}Request", SCHEMAS)
    except (ValueError, FileNotFoundError, ModuleNotFoundError):
        return None


def client_versions(api_key: int) -> tuple[int, int] | None:
    """The versions this tool knows for `api_key` (its request schema's
    validVersions), or None for an API it does not have."""
    schema = _schema(api_key)
    if schema is None:
        return None
    lo, _, hi = str(schema["validVersions"]).partition("-")
    return int(lo), int(hi or lo)


def _broker_api(api_key: int) -> bool:
    """Whether a broker serves `api_key` in Kafka (Kafka's ApiKeys.clientApis: its
    schema lists a broker listener), so not serving it is worth saying."""
    schema = _schema(api_key)
    return schema is not None and bool({"zkBroker", "broker"} & set(schema.get("listeners", ())))


def api_line(api_key: int, versions: tuple[int, int] | None) -> str:
    """One API as Kafka's NodeApiVersions prints it."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        name = None
    if versions is None:
        return f"{name}({api_key}): UNSUPPORTED"
    lo, hi = versions
    text = f"{name or 'UNKNOWN'}({api_key}): {lo if lo == hi else f'{lo} to {hi}'}"
    ours = client_versions(api_key) if name is not None else None
    if ours is not None:
        if ours[1] < lo:
            text += " [unusable: node too new]"
        elif hi < ours[0]:
            text += " [unusable: node too old]"
        else:
            text += f" [usable: {min(ours[1], hi)}]"
    return text


def describe(versions: dict[int, tuple[int, int]]) -> str:
    """Kafka's NodeApiVersions.toString(lineBreaks=true): every API the broker serves,
    and as UNSUPPORTED every other one Kafka's clients know, by key."""
    keys = sorted(set(versions) | {k.value for k in ApiKey if _broker_api(k.value)})
    lines = [api_line(k, versions.get(k)) for k in keys]
    return "(\n\t" + ",\n\t".join(lines) + "\n)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper broker-api-versions",
        description="Print the request versions every broker serves, as Kafka's "
                    "kafka-broker-api-versions.sh does.")
    add_broker_options(p)
    return p


def _run(args: argparse.Namespace) -> int:
    bootstrap = bootstrap_of(args)
    with connect_any(bootstrap) as conn:
        meta = conn.call(MetadataRequest(topics=None, allow_auto_topic_creation=False),
                         MetadataResponse, hi=8)
    code = 0
    for b in sorted(meta.brokers, key=lambda b: b.node_id):
        head = f"{b.host}:{b.port} (id: {b.node_id} rack: {b.rack if b.rack else 'null'}) -> "
        try:
            with Connection(b.host, b.port) as node:
                versions = dict(node.versions)
        except ClientError as err:
            print(f"{head}ERROR: {err}")
            code = 1
            continue
        print(head + describe(versions))
    return code


def main(argv: list[str]) -> int:
    return run_tool("broker-api-versions", _parser(), argv, _run)
