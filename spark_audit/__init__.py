"""PySpark audit of Kafka segment integrity across hosts (see spark_audit.main)."""
