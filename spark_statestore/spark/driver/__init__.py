"""What runs on the Spark driver: settings read from the session, building an operator
before any task runs, the session's services (metrics collector, where tasks send the early
trigger's signals) and the JVM shim (the early trigger's governor runs in the driver's JVM)."""
