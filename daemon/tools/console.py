"""What `logkeeper console-producer` and `console-consumer` share: Kafka's console tools'
`--property`/`--producer-property`/`--consumer-property KEY=VALUE` lists and `*.config`
properties files, and the translation of Kafka's client config names into the
kafka-python client's arguments.

The clients are kafka-python's KafkaProducer and KafkaConsumer (a runtime dependency):
the console tools are Kafka clients like any other, not admin requests, so they use a
whole client (partitioner, batching, retries, consumer groups) as Kafka's tools use the
Java one.

Errors: a malformed KEY=VALUE, an unreadable properties file or a value of the wrong type
raises ValueError naming the option; a config name the client does not have is ignored
with Kafka's warning on stderr ("was supplied but isn't a known config").
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ..config import ConfigError, parse_properties

T = TypeVar("T")

# Kafka config names whose kafka-python argument is not the name with "." -> "_".
_RENAMED = {"security.protocol": "security_protocol"}


def key_values(pairs: Iterable[str], option: str) -> dict[str, str]:
    """`KEY=VALUE` arguments as Kafka's CommandLineUtils.parseKeyValueArgs reads them: split
    at the first `=`; `KEY=` is an empty value."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{option} {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def load_properties(path: str | None, option: str) -> dict[str, str]:
    """The entries of a Java properties file (`--producer.config FILE`...); {} for None."""
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{option} {path}: {getattr(err, 'strerror', None) or err}") from None
    try:
        return {k: v for k, v, _ in parse_properties(text, path)}
    except ConfigError as err:
        raise ValueError(f"{option} {path}: {err}") from None


def client_args(props: Mapping[str, str], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka client configs (`acks`, `linger.ms`, `client.rack`...) as kafka-python's
    arguments, each converted to the type of that argument's default. Kafka's
    security.protocol=SSL with its ssl.* keys (truststore, keystore: PEM or PKCS12)
    becomes kafka-python's security_protocol and ssl_context."""
    from ..config import client_login, client_tls

    out: dict[str, Any] = {}
    secured = "security.protocol" in props
    tls = client_tls(props, "the client config") if secured else None
    login = client_login(props, "the client config") if secured else None
    if tls is not None:
        out.update(security_protocol="SSL", ssl_context=tls.client_context())
    if login is not None:
        out.update(security_protocol="SASL_SSL" if tls is not None else "SASL_PLAINTEXT",
                   sasl_mechanism=login[0], sasl_plain_username=login[1],
                   sasl_plain_password=login[2])
    for name, text in props.items():
        if (tls is not None or login is not None) and (
                name == "security.protocol" or name.startswith(("ssl.", "sasl."))):
            continue
        arg = _RENAMED.get(name, name.replace(".", "_"))
        if arg not in defaults or arg in ("bootstrap_servers", "key_deserializer",
                                          "value_deserializer", "selector", "kafka_client"):
            print(f"WARN The configuration '{name}' was supplied but isn't a known config.",
                  file=sys.stderr)
            continue
        out[arg] = _typed(name, text.strip(), defaults[arg])
    return out


def open_client(client_class: type[T], bootstrap: str, args: Mapping[str, Any]) -> T:
    """A kafka-python KafkaProducer or KafkaConsumer on `bootstrap` (comma-separated
    HOST:PORT); ValueError naming the address when no broker answers."""
    from kafka.errors import KafkaError

    try:
        return client_class(bootstrap_servers=bootstrap.split(","), **args)
    except KafkaError as err:
        raise ValueError(f"no broker at {bootstrap}: {err}") from None


def _typed(name: str, text: str, default: Any) -> Any:
    if name == "acks":
        if text in ("all", "-1"):
            return -1
        if text in ("0", "1"):
            return int(text)
        raise ValueError(f"Invalid value {text} for configuration acks: String must be one of: "
                         "all, -1, 0, 1")
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"Invalid value {text} for configuration {name}: Expected value "
                             "to be either true or false")
        return text.lower() == "true"
    if isinstance(default, int) or (isinstance(default, float) and math.isinf(default)):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"Invalid value {text} for configuration {name}: Not a number of "
                             "type INT or LONG") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"Invalid value {text} for configuration {name}: Not a number of "
                             "type DOUBLE") from None
    return text
