"""logkeeper's own JSON schemas for the inter-broker control messages.

Data only: `daemon.wire.messages` loads each file into kafka-python's message generator
by class name (`LeaderAndIsrRequest` reads `LeaderAndIsrRequest.json`). Field names,
types and versions follow Kafka's protocol (3.9); the wording and layout are ours.
"""
