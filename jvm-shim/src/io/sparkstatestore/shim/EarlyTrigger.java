package io.sparkstatestore.shim;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryManager;

/**
 * The entry point the Python side calls through py4j: activate the listener in a session,
 * wake a query, ask about a query's trigger.
 *
 * <p>Instance methods with a public no-argument constructor, so the class works the same
 * whether it is on the driver's classpath or was loaded into a running driver by a child
 * class loader (py4j calls methods on objects of any class loader, but static methods
 * only of classes it can find by name).
 */
public final class EarlyTrigger {

    /**
     * Null if {@code className} (as Spark's class loader finds it) or one of its
     * superclasses declares the field {@code fieldName}, else why not: the Python side
     * checks the trigger clock field this way before it registers the listener.
     */
    public String missingField(String className, String fieldName) {
        try {
            QueryTriggers.findField(Class.forName(className, false, SparkSession.class.getClassLoader()), fieldName);
            return null;
        } catch (ClassNotFoundException | NoSuchFieldException | LinkageError e) {
            return e.toString();
        }
    }

    /**
     * Registers the clock-installing listener with a session's streaming query manager,
     * once per session; {@code clockField} names the query execution's trigger clock
     * field. Returns true if it registered it now, false if it already was.
     */
    public boolean register(SparkSession session, String clockField) {
        StreamingQueryManager streams = session.streams();
        synchronized (EarlyTrigger.class) {
            for (StreamingQueryListener listener : streams.listListeners()) {
                if (listener.getClass().getName().equals(EarlyTriggerListener.class.getName())) {
                    return false;
                }
            }
            streams.addListener(new EarlyTriggerListener(streams, clockField));
            return true;
        }
    }

    /**
     * Makes the query's current wait between batches end now, or its next wait if a batch
     * is running. False if the query has no wakeable clock (not running, started before
     * the listener was registered, or a trigger that never waits).
     */
    public boolean wake(String queryId) {
        QueryTrigger trigger = QueryTriggers.get(queryId);
        if (trigger == null || !trigger.wakeable()) {
            return false;
        }
        trigger.clock().wake();
        return true;
    }

    /** The current run of a query as the listener saw it start, or null if it did not. */
    public QueryTrigger query(String queryId) {
        return QueryTriggers.get(queryId);
    }

    /** A clock of the kind installed into queries (for checking its behaviour directly). */
    public WakeableClock newClock() {
        return new WakeableClock();
    }
}
