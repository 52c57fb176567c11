"""Schemas of the `__consumer_offsets` records' keys and values (docs/formats.md,
"Group records"), loaded into kafka-python's message generator by
daemon.coordinator.records."""
