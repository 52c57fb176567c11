"""What applies to a topic, and what is refused (daemon/replica/topic_config.py): the
order Kafka's DescribeConfigs reports (topic override, dynamic broker, dynamic default,
static file, default) with the synonyms' units, validation with Kafka's messages, and
IncrementalAlterConfigs' operations. Plus the config znodes' JSON."""

from __future__ import annotations

import pytest

from daemon import config
from daemon.cluster import znodes
from daemon.replica import topic_config as tc


def layers(**given: object) -> tc.Layers:
    return tc.Layers(config.from_mapping(given), 1)


def test_sources_follow_kafkas_order_with_units() -> None:
    lay = layers(**{"log.retention.hours": 2})
    e = tc.effective(lay, {})["retention.ms"]
    assert (e.value, e.source) == (str(2 * 3600 * 1000), tc.SOURCE_STATIC_BROKER)
    assert e.synonyms[0] == ("log.retention.hours", "2", tc.SOURCE_STATIC_BROKER)
    lay.dynamic_default = {"log.retention.minutes": "5"}
    e = tc.effective(lay, {})["retention.ms"]
    assert (e.value, e.source) == ("300000", tc.SOURCE_DYNAMIC_DEFAULT_BROKER)
    lay.dynamic = {"log.retention.ms": "7000"}
    assert tc.effective(lay, {})["retention.ms"].source == tc.SOURCE_DYNAMIC_BROKER
    e = tc.effective(lay, {"retention.ms": "60000"})["retention.ms"]
    assert (e.value, e.source) == ("60000", tc.SOURCE_TOPIC)
    assert [s[2] for s in e.synonyms] == [tc.SOURCE_TOPIC, tc.SOURCE_DYNAMIC_BROKER,
                                          tc.SOURCE_DYNAMIC_DEFAULT_BROKER,
                                          tc.SOURCE_STATIC_BROKER, tc.SOURCE_DEFAULT]
    d = tc.effective(layers(), {})["retention.ms"]
    assert (d.value, d.source, d.is_default) == (str(168 * 3600 * 1000), tc.SOURCE_DEFAULT, True)


def test_log_config_carries_the_topic_values() -> None:
    lay = layers(**{"log.segment.bytes": 1 << 20, "log.index.size.max.bytes": 4096})
    values = tc.typed(lay, {"cleanup.policy": "compact", "retention.bytes": "500",
                            "max.message.bytes": "2000"})
    cfg = tc.log_config(config.from_mapping({}).log_config(), values)
    assert (cfg.segment_bytes, cfg.retention_bytes, cfg.max_message_bytes, cfg.compacted) == \
        (1 << 20, 500, 2000, True)
    assert cfg.max_index_bytes == 4096  # the broker's log.index.size.max.bytes
    values = tc.typed(lay, {"segment.index.bytes": "240", "message.format.version": "2.8",
                            "message.downconversion.enable": "false"})
    assert tc.log_config(cfg, values).max_index_bytes == 240
    # Accepted and described, with no effect (Kafka 3.x's record format is always v2).
    assert (values["message.format.version"], values["message.downconversion.enable"]) == \
        ("2.8", False)


@pytest.mark.parametrize(("configs", "message"), [
    ({"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms: Not a number"),
    ({"retention.ms": "-2"}, "Value must be at least -1"),
    ({"segment.bytes": "13"}, "Value must be at least 14"),
    ({"min.insync.replicas": "0"}, "Value must be at least 1"),
    ({"unclean.leader.election.enable": "yes"}, "either true or false"),
    ({"cleanup.policy": "shred"}, "String must be one of: compact, delete"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "between 0 and 1"),
    ({"no.such": "1"}, "Unknown topic config name: no.such"),
    ({"compression.type": "brotli"},
     "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"compression.lz4.level": "18"}, "Value must be between 1 and 17"),
    ({"compression.zstd.level": "23"}, "Value must be between -131072 and 22"),
    ({"compression.gzip.level": "0"}, "Value must be between 1 and 9 or -1"),
    ({"message.timestamp.type": "logappendtime"}, "String must be one of: CreateTime"),
    ({"max.compaction.lag.ms": "0"}, "Value must be at least 1"),
    ({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "4000"},
     r"conflict topic config setting min.compaction.lag.ms \(5000\) > max.compaction.lag.ms"),
    ({"preallocate": "true"}, "logkeeper does not preallocate segment files"),
    ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled"),
    ({"local.retention.ms": "-3"}, "Value must be at least -2"),
    ({"file.delete.delay.ms": "60000"}, "not supported by logkeeper"),
    ({"segment.index.bytes": "3"}, "Value must be at least 4"),
    ({"message.format.version": "4.7-beta"}, "Version `4.7-beta` is not a valid version"),
    ({"message.downconversion.enable": "maybe"}, "either true or false"),
    ({"message.timestamp.after.max.ms": "-1"}, "Value must be at least 0"),
])
def test_bad_topic_configs_are_refused_naming_them(configs: dict[str, str], message: str) -> None:
    with pytest.raises(tc.ConfigValueError, match=message):
        tc.validate_topic_configs(configs)


def test_what_a_kafka_broker_without_tiered_storage_takes_is_taken() -> None:
    """A topic cloned from a Kafka cluster (every config it describes): the tiered
    storage keys as a Kafka broker without tiered storage takes them (no effect), and
    preallocate at its default."""
    cloned = {"remote.storage.enable": "false", "local.retention.ms": "-2",
              "local.retention.bytes": "1000000", "remote.log.copy.disable": "false",
              "remote.log.delete.on.disable": "false", "preallocate": "false"}
    assert tc.validate_topic_configs(cloned) == cloned


def test_broker_configs_only_the_dynamic_ones() -> None:
    static = config.from_mapping({})
    assert tc.validate_broker_configs({"log.retention.bytes": " 100 "}, static) == {
        "log.retention.bytes": "100"}
    with pytest.raises(tc.ConfigValueError, match="Cannot update these configs dynamically"):
        tc.validate_broker_configs({"log.dirs": "/x"}, static)
    with pytest.raises(tc.ConfigValueError, match="Unknown broker config name"):
        tc.validate_broker_configs({"log.nonsense": "1"}, static)


def test_incremental_operations() -> None:
    def kind(n: str) -> int | None:
        return tc.TOPIC_CONFIGS[n].kind if n in tc.TOPIC_CONFIGS else None

    def default(n: str) -> str:
        return "delete" if n == "cleanup.policy" else ""

    got = tc.apply_ops({"retention.ms": "1"}, [("cleanup.policy", tc.OP_APPEND, "compact"),
                                               ("retention.ms", tc.OP_DELETE, None),
                                               ("segment.ms", tc.OP_SET, "5")], kind, default)
    assert got == {"cleanup.policy": "delete,compact", "segment.ms": "5"}
    got = tc.apply_ops(got, [("cleanup.policy", tc.OP_SUBTRACT, "delete")], kind, default)
    assert got["cleanup.policy"] == "compact"
    with pytest.raises(tc.ConfigValueError, match="append is not allowed"):
        tc.apply_ops({}, [("retention.ms", tc.OP_APPEND, "1")], kind, default)


def test_config_znodes_are_kafkas() -> None:
    assert znodes.encode_config_change("topics", "t") == b'{"version":2,"entity_path":"topics/t"}'
    path = znodes.config_change_path("0000000007")
    assert path == "/config/changes/config_change_0000000007"
    assert znodes.sequence_number(path) == "0000000007"
    assert znodes.decode_config_change(path, b'{"version":2,"entity_path":"brokers/<default>"}') \
        == ("brokers", "<default>")
    assert znodes.decode_config_change(
        path, b'{"version":1,"entity_type":"topics","entity_name":"t"}') == ("topics", "t")
    with pytest.raises(znodes.ZnodeError):
        znodes.decode_config_change(path, b'{"version":2,"entity_path":"topics"}')
    assert znodes.broker_config_path("<default>") == "/config/brokers/<default>"
    assert znodes.decode_entity_config("/config/brokers/1", b'{"version":1,"config":{"a":"1"}}') \
        == {"a": "1"}
