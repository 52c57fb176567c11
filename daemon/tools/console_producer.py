"""`logkeeper console-producer`: Kafka's `kafka-console-producer.sh` (ConsoleProducer with
its LineMessageReader), one record per line of standard input.

    logkeeper console-producer --topic T [--bootstrap-server HOST:PORT]
        [--property parse.key=true] [--property key.separator=:]
        [--producer-property acks=1] [--compression-codec [CODEC]] [--sync]

Each line (UTF-8, without its line end) is a record's value. `--property` reads more of
the line as Kafka's reader does: `parse.key=true` takes the key from the line's start up
to `key.separator` (default a tab); `parse.headers=true` takes headers first, up to
`headers.delimiter` (tab), as `K:V` pairs split at `headers.separator` (a regular
expression, default `,`) and `headers.key.separator` (`:`); a key, value, header value
(or the whole headers part) equal to `null.marker` is null. A line without a separator
it needs stops the tool (exit 1), unless `ignore.error=true` (the key, or headers, is
then null). Unlike Kafka's, a null header value, or a null key with a null value, stops
it too: kafka-python, its client, cannot send them.

The producer is Kafka's console producer's: acks=all (`--request-required-acks`),
linger.ms 1000 (`--timeout`), request.timeout.ms 1500, retries 3, batch.size 16384,
no compression (`--compression-codec` alone is gzip), client.id console-producer;
`--producer-property` and `--producer.config FILE` take any Kafka producer config
kafka-python knows (others are ignored with Kafka's warning). Records go to the topic's
partitions by the default partitioner (by key, or spread). `--sync` waits for each
record's answer before reading the next line.

The broker is `--bootstrap-server`, else the listener of the daemon on this host
(`--config FILE`, or the embedded defaults). A topic that does not exist is created if
the broker auto-creates topics.

Exit codes: 0 every record was written; 1 a record was refused (each named on stderr as
Kafka's "Error when sending message to topic ..."; Kafka's tool exits 0 then) or a line
could not be read; 2 a usage error or no broker reachable.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
from typing import Any

from .client import add_broker_options, bootstrap_of, run_tool
from .console import client_args, key_values, load_properties, open_client

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class LineReader:
    """Kafka's LineMessageReader: (key, value, headers) of each line."""

    def __init__(self, props: dict[str, str]):
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        self.parse_key = flag("parse.key")
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = flag("parse.headers")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = flag("ignore.error")
        self.null_marker = props.get("null.marker")
        pairs = (("headers.delimiter", "headers.separator"),
                 ("headers.delimiter", "headers.key.separator"),
                 ("headers.separator", "headers.key.separator"))
        for a, b in pairs:
            if self._value(a) == self._value(b):
                raise ValueError(f"{a} and {b} may not be equal")
        for other in ("key.separator", "headers.separator", "headers.delimiter",
                      "headers.key.separator"):
            if self.null_marker is not None and self._value(other) == self.null_marker:
                raise ValueError(f"null.marker and {other} may not be equal")
        try:
            self._split = re.compile(self.headers_separator)
        except re.error as err:
            raise ValueError(f"headers.separator {self.headers_separator!r} is not a regular "
                             f"expression: {err}") from None
        self.line_number = 0

    def _value(self, name: str) -> str:
        return {"key.separator": self.key_separator, "headers.delimiter": self.headers_delimiter,
                "headers.separator": self.headers_separator,
                "headers.key.separator": self.headers_key_separator}[name]

    def _bytes(self, text: str | None) -> bytes | None:
        return None if text is None or text == self.null_marker else text.encode()

    def _cut(self, enabled: bool, line: str, start: int, mark: str, what: str) -> str | None:
        if not enabled:
            return None
        i = line.find(mark, start)
        if i < 0:
            if self.ignore_error:
                return None
            raise ValueError(f"No {what} found on line number {self.line_number}: '{line}'")
        return line[start:i]

    def record(self, line: str) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        self.line_number += 1
        headers = self._cut(self.parse_headers, line, 0, self.headers_delimiter,
                            "headers delimiter")
        at = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._cut(self.parse_key, line, at, self.key_separator, "key separator")
        at += 0 if key is None else len(key) + len(self.key_separator)
        out_headers = []
        if headers is not None and headers != self.null_marker:
            for pair in self._split.split(headers):
                i = pair.find(self.headers_key_separator)
                if i < 0:
                    if not self.ignore_error:
                        raise ValueError(f"No header key separator found in pair '{pair}' on "
                                         f"line number {self.line_number}")
                    out_headers.append((pair, None))
                    continue
                name = pair[:i]
                if name == self.null_marker:
                    raise ValueError(f"Header keys should not be equal to the null marker "
                                     f"'{self.null_marker}' as they can't be null")
                out_headers.append((name, self._bytes(pair[i + len(self.headers_key_separator):])))
        return self._bytes(key), self._bytes(line[at:]), out_headers


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper console-producer",
        description="Write each line of standard input to a topic as a record, as Kafka's "
                    "kafka-console-producer.sh does.")
    add_broker_options(p, command_config=False)
    p.add_argument("--topic", required=True, help="the topic to write to")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="how lines are read: parse.key, key.separator, parse.headers, "
                        "headers.delimiter, headers.separator, headers.key.separator, "
                        "null.marker, ignore.error")
    p.add_argument("--reader-config", metavar="FILE",
                   help="a properties file of those (--property wins)")
    p.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka producer config (acks, linger.ms, compression.type, ...)")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                   help="a properties file of producer configs (--producer-property wins)")
    p.add_argument("--compression-codec", nargs="?", const="gzip", choices=CODECS,
                   help="none (default), gzip (when given alone), snappy, lz4 or zstd")
    p.add_argument("--sync", action="store_true",
                   help="wait for each record's answer before reading the next line")
    p.add_argument("--request-required-acks", help="acks (default all)")
    p.add_argument("--request-timeout-ms", type=int, help="request.timeout.ms (default 1500)")
    p.add_argument("--timeout", type=int, metavar="MS",
                   help="linger.ms: how long records wait to be batched (default 1000)")
    p.add_argument("--batch-size", type=int, help="batch.size (default 16384)")
    p.add_argument("--message-send-max-retries", type=int, help="retries (default 3)")
    p.add_argument("--retry-backoff-ms", type=int, help="retry.backoff.ms (default 100)")
    p.add_argument("--max-block-ms", type=int, help="max.block.ms (default 60000)")
    p.add_argument("--metadata-expiry-ms", type=int, help="metadata.max.age.ms (default 300000)")
    return p


# Options of Kafka's tool that set a producer config, with its defaults there: used when
# the option is given, or when no --producer-property / file sets the config.
_OPTION_CONFIGS = (("request_required_acks", "acks", "-1"),
                   ("request_timeout_ms", "request.timeout.ms", "1500"),
                   ("timeout", "linger.ms", "1000"),
                   ("batch_size", "batch.size", "16384"),
                   ("message_send_max_retries", "retries", "3"),
                   ("retry_backoff_ms", "retry.backoff.ms", "100"),
                   ("max_block_ms", "max.block.ms", "60000"),
                   ("metadata_expiry_ms", "metadata.max.age.ms", "300000"))


def producer_config(args: argparse.Namespace) -> dict[str, Any]:
    """The kafka-python producer's arguments, as Kafka's ConsoleProducer builds its props."""
    from kafka import KafkaProducer

    props = load_properties(args.producer_config, "--producer.config")
    props.update(key_values(args.producer_property, "--producer-property"))
    props.pop("bootstrap.servers", None)
    props["compression.type"] = args.compression_codec or "none"
    props.setdefault("client.id", "console-producer")
    for option, name, default in _OPTION_CONFIGS:
        given = getattr(args, option)
        if given is not None or name not in props:
            props[name] = str(given if given is not None else default)
    out = client_args(props, KafkaProducer.DEFAULT_CONFIG)
    if out.get("compression_type") == "none":
        out["compression_type"] = None
    return out


def _unsendable(key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]]) -> str | None:
    """Why kafka-python, this tool's client, cannot send a record Kafka's tool would: a
    null header value (it would write an empty one), or a null key with a null value."""
    if key is None and value is None:
        return ("a record with a null key and a null value cannot be sent by this tool's "
                "client (kafka-python)")
    if any(v is None for _, v in headers):
        return "a null header value cannot be sent by this tool's client (kafka-python)"
    return None


def _run(args: argparse.Namespace) -> int:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    reader_props = load_properties(args.reader_config, "--reader-config")
    reader_props.update(key_values(args.property, "--property"))
    reader = LineReader(reader_props)
    config = producer_config(args)
    producer = open_client(KafkaProducer, bootstrap_of(args), config)
    failed = 0

    def refused(key: bytes | None, value: bytes | None, err: Exception) -> None:
        nonlocal failed
        failed += 1
        print(f"ERROR Error when sending message to topic {args.topic} with key: "
              f"{'null' if key is None else f'{len(key)} bytes'}, value: "
              f"{'null' if value is None else f'{len(value)} bytes'} with error: "
              f"{err}", file=sys.stderr)

    prompt = sys.stdin.isatty() and sys.stdout.isatty()
    lines = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline=None)
    code = 0
    try:
        while True:
            if prompt:
                print(">", end="", flush=True)
            line = lines.readline()
            if not line:
                break
            try:
                key, value, headers = reader.record(line[:-1] if line.endswith("\n") else line)
            except ValueError as err:
                print(f"logkeeper console-producer: {err}", file=sys.stderr)
                code = 1
                break
            unsendable = _unsendable(key, value, headers)
            if unsendable:
                print(f"logkeeper console-producer: line number {reader.line_number}: "
                      f"{unsendable}", file=sys.stderr)
                code = 1
                break
            try:
                future = producer.send(args.topic, key=key, value=value, headers=headers)
            except KafkaError as err:
                # Raised before the record is queued (its topic not in the metadata within
                # max.block.ms, say): Kafka's producer hands it to the callback instead.
                refused(key, value, err)
                continue
            if args.sync:
                try:
                    future.get()
                except KafkaError as err:
                    refused(key, value, err)
            else:
                future.add_errback(lambda err, k=key, v=value: refused(k, v, err))
    except KeyboardInterrupt:
        pass
    finally:
        producer.flush()
        producer.close()
    return 1 if failed else code


def main(argv: list[str]) -> int:
    return run_tool("console-producer", _parser(), argv, _run)
