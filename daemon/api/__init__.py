"""The Kafka protocol side: connections, request framing, and the API handlers."""
