"""Schemas of the records of `__consumer_offsets` (committed offsets and group metadata)
and `__transaction_state` (transactions), docs/formats.md, loaded into kafka-python's
message generator by daemon.coordinator.records and daemon.coordinator.txn_records."""
