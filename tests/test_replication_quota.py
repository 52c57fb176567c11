"""Replication throttles' parts without a broker (daemon.replica.quota): the configs that
name them, Kafka's sampled rate, and which partitions a broker throttles."""

from __future__ import annotations

import pytest

from daemon import config
from daemon.replica import quota as q
from daemon.replica import topic_config as tc
from logstore import TopicPartition


@pytest.mark.parametrize("text", ["*", "0:1", "0:1, 1:2,2:3", ""])
def test_throttled_replica_lists_kafka_takes_are_taken(text: str) -> None:
    assert tc.validate_topic_configs({q.LEADER_REPLICAS: text}) == {q.LEADER_REPLICAS: text.strip()}


@pytest.mark.parametrize("text", ["*,0:1", "0", "0:b", "a:1", "0:1;1:2", "-1:2", "all"])
def test_bad_throttled_replica_lists_are_refused_as_kafka_words_it(text: str) -> None:
    with pytest.raises(tc.ConfigValueError,
                       match=rf"Invalid value .* for configuration {q.FOLLOWER_REPLICAS}: must be "
                             r"the literal '\*' or a list of replicas"):
        tc.validate_topic_configs({q.FOLLOWER_REPLICAS: text})


def test_throttle_rates_are_dynamic_broker_configs_and_described_where_set() -> None:
    static = config.from_mapping({})
    assert tc.validate_broker_configs({q.LEADER_RATE: " 1000 ", q.ALTER_LOG_DIRS_RATE: "5"},
                                      static) == {q.LEADER_RATE: "1000", q.ALTER_LOG_DIRS_RATE: "5"}
    with pytest.raises(tc.ConfigValueError, match="Value must be at least 0"):
        tc.validate_broker_configs({q.FOLLOWER_RATE: "-1"}, static)
    layers = tc.Layers(static, 1)
    names = {e.name for e in tc.broker_entries(layers)}
    assert q.LEADER_RATE not in names  # not set: Kafka lists them only where set
    layers.dynamic_default = {q.FOLLOWER_RATE: "500"}
    layers.dynamic = {q.LEADER_RATE: "1000"}
    entries = {e.name: e for e in tc.broker_entries(layers)}
    assert (entries[q.LEADER_RATE].value, entries[q.LEADER_RATE].source) == \
        ("1000", tc.SOURCE_DYNAMIC_BROKER)
    assert (entries[q.FOLLOWER_RATE].value, entries[q.FOLLOWER_RATE].source) == \
        ("500", tc.SOURCE_DYNAMIC_DEFAULT_BROKER)
    # The topic configs describe as Kafka's: lists, empty by default.
    described = tc.effective(layers, {q.LEADER_REPLICAS: "0:1"})
    assert (described[q.LEADER_REPLICAS].value, described[q.LEADER_REPLICAS].source) == \
        ("0:1", tc.SOURCE_TOPIC)
    assert (described[q.FOLLOWER_REPLICAS].value, described[q.FOLLOWER_REPLICAS].source,
            described[q.FOLLOWER_REPLICAS].kind) == ("", tc.SOURCE_DEFAULT, tc.TYPE_LIST)


def test_a_broker_throttles_only_the_replicas_named_on_it() -> None:
    quotas = q.ReplicationQuotas(2)
    rates = {q.LEADER_RATE: 1000, q.FOLLOWER_RATE: q.UNBOUNDED, q.ALTER_LOG_DIRS_RATE: 300}
    quotas.configure({"a": {q.LEADER_REPLICAS: "0:1,1:2,3:2", q.FOLLOWER_REPLICAS: "0:3"},
                      "b": {q.FOLLOWER_REPLICAS: "*"}, "c": {"retention.ms": "5"}},
                     rates.__getitem__)
    assert quotas.leader.throttled == {"a": frozenset({1, 3})}
    assert quotas.follower.throttled == {"b": None}  # a's follower list names broker 3 only
    assert [quotas.leader.is_throttled(TopicPartition("a", i)) for i in range(4)] == \
        [False, True, False, True]
    assert quotas.follower.is_throttled(TopicPartition("b", 7))
    assert not quotas.follower.is_throttled(TopicPartition("a", 0))
    assert (quotas.leader.bound, quotas.follower.bound, quotas.alter_log_dirs.bound) == \
        (1000, q.UNBOUNDED, 300)
    quotas.configure({}, rates.__getitem__)
    assert not quotas.leader.is_throttled(TopicPartition("a", 1))


def test_the_rate_is_kafkas_sampled_rate_over_at_least_all_but_one_window() -> None:
    now = [100.0]
    quota = q.ReplicationQuota("leader", samples=11, window_s=1.0, clock=lambda: now[0])
    quota.bound = 1000
    assert not quota.is_exceeded()
    # A new quota: 9,000 bytes at once count as spread over 10 windows.
    quota.record(9000)
    assert quota.rate() == pytest.approx(900)
    assert not quota.is_exceeded()
    quota.record(2000)
    assert quota.rate() == pytest.approx(1100) and quota.is_exceeded()
    # 20 s later the samples have expired: nothing is held back.
    now[0] += 20
    assert quota.rate() == 0 and not quota.is_exceeded()
    # At a steady 2,000 bytes a second, the rate converges on it over the whole window.
    for _ in range(30):
        quota.record(2000)
        now[0] += 1
    assert quota.rate() == pytest.approx(2000, rel=0.1)
    # Unbounded (Kafka's default): never exceeded, whatever flows.
    quota.bound = q.UNBOUNDED
    assert not quota.is_exceeded()


def test_a_bad_value_stored_by_hand_throttles_nothing_and_breaks_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    """Values that reached ZooKeeper without a broker's validation (a hand edit): the
    list is skipped, the rate is unbounded, each with a warning; the rest applies."""
    static = config.from_mapping({"broker.id": 1})
    configs = tc.TopicConfigs(static, hosted=lambda topic: [], run=None,  # type: ignore[arg-type]
                              quotas=q.ReplicationQuotas(1))
    configs.load({"bad": {q.LEADER_REPLICAS: "all of them"}, "good": {q.LEADER_REPLICAS: "0:1"}},
                 {"1": {q.LEADER_RATE: "fast"}, tc.DEFAULT_BROKER: {q.FOLLOWER_RATE: "100"}})
    assert configs.quotas is not None
    assert configs.quotas.leader.throttled == {"good": frozenset({0})}
    assert (configs.quotas.leader.bound, configs.quotas.follower.bound) == (q.UNBOUNDED, 100)
    assert "topic bad: Invalid value all of them" in caplog.text
    assert "Invalid value fast for configuration leader.replication.throttled.rate" in caplog.text
