package io.sparkstatestore.shim;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.streaming.StreamingQuery;

/**
 * The registry of running queries by query id, and the installation of a
 * {@link WakeableClock} as a query's trigger clock.
 *
 * <p>Spark's {@code StreamExecution} keeps its trigger clock in a private final field
 * ({@code triggerClock}: the Python side passes the name, from its table of pyspark
 * internals); {@code MicroBatchExecution} hands it to the {@code ProcessingTimeExecutor} it
 * creates when the query's thread starts running batches, after the listeners'
 * {@code onQueryStarted}. Replacing the field there is therefore early enough, and only
 * then: a query already waiting on Spark's own clock cannot be woken.
 */
final class QueryTriggers {
    private static final ConcurrentHashMap<String, QueryTrigger> BY_QUERY = new ConcurrentHashMap<>();

    private QueryTriggers() {}

    static QueryTrigger get(String queryId) {
        return BY_QUERY.get(queryId);
    }

    /** Records a run of a query; a later run of the same query id replaces it. */
    static void put(String queryId, QueryTrigger trigger) {
        BY_QUERY.put(queryId, trigger);
    }

    /** Forgets a query when the run that is registered ended (not an earlier run). */
    static void removeRun(String queryId, String runId) {
        BY_QUERY.computeIfPresent(queryId, (id, known) -> known.runId().equals(runId) ? null : known);
    }

    /**
     * Installs a wakeable clock into a just-started query if its trigger waits between
     * batches (a processing-time interval above 0) and describes the query either way.
     */
    static QueryTrigger install(StreamingQuery query, String runId, String clockField) {
        Object execution;
        Object trigger;
        try {
            execution = unwrap(query);
            trigger = execution.getClass().getMethod("trigger").invoke(execution);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return new QueryTrigger(runId, "unknown", 0, null, "cannot read the query's trigger: " + cause(e));
        }
        String kind = kindOf(trigger);
        long intervalMs = 0;
        if (kind.equals("processingTime")) {
            try {
                intervalMs = (Long) trigger.getClass().getMethod("intervalMs").invoke(trigger);
            } catch (ReflectiveOperationException | RuntimeException e) {
                return new QueryTrigger(runId, kind, 0, null, "cannot read the trigger interval: " + cause(e));
            }
        }
        if (!kind.equals("processingTime") || intervalMs <= 0) {
            return new QueryTrigger(runId, kind, intervalMs, null,
                    "a " + kind + " trigger with interval " + intervalMs + " ms never waits between batches");
        }
        WakeableClock clock = new WakeableClock();
        try {
            Field field = findField(execution.getClass(), clockField);
            field.setAccessible(true);
            field.set(execution, clock);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return new QueryTrigger(runId, kind, intervalMs, null, "cannot replace the trigger clock: " + cause(e));
        }
        return new QueryTrigger(runId, kind, intervalMs, clock, "");
    }

    /** The {@code StreamExecution} behind the public query object. */
    private static Object unwrap(StreamingQuery query) throws ReflectiveOperationException {
        try {
            return query.getClass().getMethod("streamingQuery").invoke(query);
        } catch (NoSuchMethodException notWrapped) {
            return query;
        }
    }

    private static String kindOf(Object trigger) {
        return switch (trigger.getClass().getSimpleName()) {
            case "ProcessingTimeTrigger" -> "processingTime";
            case "OneTimeTrigger$" -> "once";
            case "AvailableNowTrigger$" -> "availableNow";
            case "ContinuousTrigger" -> "continuous";
            case "RealTimeTrigger" -> "realTime";
            default -> "unknown";
        };
    }

    static Field findField(Class<?> type, String name) throws NoSuchFieldException {
        for (Class<?> c = type; c != null; c = c.getSuperclass()) {
            try {
                return c.getDeclaredField(name);
            } catch (NoSuchFieldException e) {
                // declared further up
            }
        }
        throw new NoSuchFieldException(name + " in " + type.getName() + " or its superclasses");
    }

    private static String cause(Throwable e) {
        Throwable root = e instanceof InvocationTargetException && e.getCause() != null ? e.getCause() : e;
        return root.getClass().getName() + ": " + root.getMessage();
    }
}
