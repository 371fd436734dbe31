"""Command-line tools over a query's durable state (`python -m spark_statestore`)."""
