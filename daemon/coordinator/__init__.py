"""The group coordinator: consumer groups and committed offsets kept in the
`__consumer_offsets` topic, as Kafka's classic group protocol does (docs/groups.md)."""
