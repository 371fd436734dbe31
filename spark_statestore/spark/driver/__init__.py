"""What runs on the Spark driver: settings read from the session, building an operator
before any task runs, the session's services (metrics collector, signal server, early-trigger
governor and its JVM shim)."""
