"""Security of the Kafka listeners and the inter-broker connections: TLS (`tls`) and
SASL (`sasl`: PLAIN and SCRAM, JAAS configs, SCRAM credentials)."""
