"""Spark audit of Kafka-format log dirs across many hosts (issue 5).

Modules: `findings` (each partition's findings and the severity policy, plain Python),
`transforms` (the findings pass on Spark), `io` (listing roots on the driver, the
executor scan task over logstore.verify, raw tables), `report` (Parquet, summary.json,
text and HTML reports), `main` (`logkeeper audit`). Importing this package does not
import pyspark; its modules do, but `findings`.
"""
