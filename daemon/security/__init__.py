"""Security of the Kafka listeners and the inter-broker connections: TLS (`tls`)."""
