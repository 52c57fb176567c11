"""Spark audit of Kafka-format log dirs across many hosts (issue 5).

Modules: `transforms` (pure DataFrame -> DataFrame logic and severity policy), `io`
(listing roots on the driver, the executor scan task over logstore.verify, raw tables),
`report` (Parquet, summary.json, text and HTML reports), `main` (`logkeeper audit`).
Importing this package does not import pyspark; its modules do.
"""
