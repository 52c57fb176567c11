"""The logkeeper service: config, log-dir states, Kafka protocol, ZooKeeper, metrics."""
