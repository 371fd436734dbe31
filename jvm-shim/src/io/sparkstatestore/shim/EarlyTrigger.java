package io.sparkstatestore.shim;

import java.io.IOException;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.SparkEnv;
import org.apache.spark.metrics.MetricsSystem;
import org.apache.spark.metrics.source.Source;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryManager;

/**
 * The entry point the Python side of a classic session calls through py4j: start the driver
 * part in a session that runs without the plugin, and ask about queries (for tests and tools).
 *
 * <p>Instance methods with a public no-argument constructor, so the class works the same
 * whether it is on the driver's classpath or was loaded into a running driver by a child
 * class loader (py4j calls methods on objects of any class loader, but static methods
 * only of classes it can find by name).
 */
public final class EarlyTrigger {

    /**
     * Starts the driver part of the session's context unless it runs already (the plugin's,
     * or an earlier activation), registers the clock-installing listener with the session's
     * query manager unless it has it, and sets where tasks send signals in the session's conf
     * (a session made before the driver part started did not copy them from the context's).
     * Returns who started the driver part: {@code plugin} or {@code python}.
     */
    public String activate(SparkSession session) throws IOException {
        StateStoreDriver driver = StateStoreDriver.start(session.sparkContext(), "python");
        StreamingQueryManager streams = session.streams();
        synchronized (EarlyTrigger.class) {
            boolean registered = false;
            for (StreamingQueryListener listener : streams.listListeners()) {
                registered |= listener.getClass().getName().equals(EarlyTriggerListener.class.getName());
            }
            if (!registered) {
                streams.addListener(new EarlyTriggerListener());
            }
        }
        if (driver.target() != null) {
            session.conf().set(StateStoreDriver.TARGET, driver.target());
            session.conf().set(StateStoreDriver.SECRET, driver.secretHex());
        }
        return driver.startedBy();
    }

    /**
     * Makes the query's current wait between batches end now, or its next wait if a batch
     * is running. False if the query has no wakeable clock (not running, started before
     * the listener was registered, or a trigger that never waits).
     */
    public boolean wake(String queryId) {
        return wakeAfter(queryId, Long.MAX_VALUE);
    }

    /**
     * As {@link #wake}, for the batch after {@code batchId} only: the wake is dropped if the
     * query has run that batch by its next wait ({@code Long.MAX_VALUE}: whichever batch is next).
     */
    public boolean wakeAfter(String queryId, long batchId) {
        QueryTrigger trigger = QueryTriggers.get(queryId);
        if (trigger == null || !trigger.wakeable()) {
            return false;
        }
        trigger.clock().wakeAfter(batchId);
        return true;
    }

    /** The current run of a query as the listener saw it start, or null if it did not. */
    public QueryTrigger query(String queryId) {
        return QueryTriggers.get(queryId);
    }

    /** The early-trigger decision of a batch, or null (none, or the driver part is not running). */
    public Decision decision(String queryId, long batchId) {
        StateStoreDriver driver = StateStoreDriver.current();
        return driver == null ? null : driver.decision(queryId, batchId).orElse(null);
    }

    /** The signal receiver's counters by outcome (empty when it does not run). */
    public Map<String, Long> signalStats() {
        StateStoreDriver driver = StateStoreDriver.current();
        if (driver == null) {
            return Map.of();
        }
        return driver.signalStats();
    }

    /**
     * The values of the metrics source {@code spark_statestore} as the driver's metrics system
     * has it registered, by their names in its sinks ({@code <app id>.driver.spark_statestore.
     * <query>.<metric>}: gauges' values, counters' counts); empty when it is not registered.
     */
    public Map<String, Long> metricsSource() {
        SparkEnv env = SparkEnv.get();
        Map<String, Long> values = new TreeMap<>();
        if (env == null) {
            return values;
        }
        MetricsSystem system = env.metricsSystem();
        scala.collection.Iterator<Source> sources = system.getSourcesByName(StateStoreSource.NAME).iterator();
        while (sources.hasNext()) {
            Source source = sources.next();
            String prefix = system.buildRegistryName(source) + ".";
            source.metricRegistry().getGauges().forEach((name, gauge) ->
                    values.put(prefix + name, ((Number) gauge.getValue()).longValue()));
            source.metricRegistry().getCounters().forEach((name, counter) ->
                    values.put(prefix + name, counter.getCount()));
        }
        return values;
    }

    /**
     * A clock of the kind installed into queries (for checking its behaviour directly), whose
     * query's latest batch id is what {@code latestBatch[0]} holds.
     */
    public WakeableClock newClock(long[] latestBatch) {
        return new WakeableClock(() -> latestBatch[0]);
    }
}
