package io.sparkstatestore.shim;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.LongSupplier;

/**
 * The registry of running queries by query id, and the installation of a
 * {@link WakeableClock} as a query's trigger clock.
 *
 * <p>Spark's {@code StreamExecution} ({@code org.apache.spark.sql.execution.streaming} in 4.0,
 * its {@code runtime} subpackage from 4.1) keeps its trigger clock in a private final field
 * {@code triggerClock}; {@code MicroBatchExecution} hands it to the {@code ProcessingTimeExecutor}
 * it creates when the query's thread starts running batches, after the listeners'
 * {@code onQueryStarted}. Replacing the field there is therefore early enough, and only then:
 * a query already waiting on Spark's own clock cannot be woken.
 *
 * <p>{@code onQueryStarted} runs on the query's own thread, an inner class of the
 * {@code StreamExecution} it runs (its {@code $outer}): that is how the listener finds the
 * query's execution in any session, also one it was not given (Spark Connect's).
 */
final class QueryTriggers {
    static final String CLOCK_FIELD = "triggerClock";
    static final List<String> EXECUTION_CLASSES = List.of(
            "org.apache.spark.sql.execution.streaming.runtime.StreamExecution", // 4.1+
            "org.apache.spark.sql.execution.streaming.StreamExecution"); // 4.0
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
     * The running Spark's query execution class and its trigger clock field, or why neither
     * is found ({@code NoSuchFieldException} naming what was looked for).
     */
    static Field clockField() throws NoSuchFieldException {
        ClassLoader loader = org.apache.spark.SparkContext.class.getClassLoader();
        for (String name : EXECUTION_CLASSES) {
            try {
                return findField(Class.forName(name, false, loader), CLOCK_FIELD);
            } catch (ClassNotFoundException | LinkageError e) {
                // another Spark minor's class name
            }
        }
        throw new NoSuchFieldException(CLOCK_FIELD + " of " + String.join(" or ", EXECUTION_CLASSES)
                + " (not found in this Spark)");
    }

    /** The query execution running on the current thread (a query's own thread), or null. */
    static Object currentExecution(String queryId) {
        Thread thread = Thread.currentThread();
        for (Class<?> c = thread.getClass(); c != null && c != Thread.class; c = c.getSuperclass()) {
            try {
                Field outer = c.getDeclaredField("$outer");
                outer.setAccessible(true);
                Object execution = outer.get(thread);
                if (execution != null && queryId.equals(String.valueOf(call(execution, "id")))) {
                    return execution;
                }
            } catch (ReflectiveOperationException | RuntimeException e) {
                // not a query's thread
            }
        }
        return null;
    }

    /**
     * Installs a wakeable clock into a just-started query execution if its trigger is a
     * processing-time one (wakeable if its interval is above 0) or {@code availableNow}; a
     * trigger that never waits has it for the hook before its first trigger only. Describes
     * the query either way.
     */
    static QueryTrigger install(Object execution, String runId) {
        Object trigger;
        try {
            trigger = call(execution, "trigger");
        } catch (ReflectiveOperationException | RuntimeException e) {
            return new QueryTrigger(runId, "unknown", 0, null, "cannot read the query's trigger: " + cause(e));
        }
        String kind = kindOf(trigger);
        long intervalMs = 0;
        if (kind.equals("processingTime")) {
            try {
                intervalMs = (Long) call(trigger, "intervalMs");
            } catch (ReflectiveOperationException | RuntimeException e) {
                return new QueryTrigger(runId, kind, 0, null, "cannot read the trigger interval: " + cause(e));
            }
        }
        String never = "a " + kind + " trigger with interval " + intervalMs + " ms never waits between batches";
        if (!kind.equals("processingTime") && !kind.equals("availableNow")) {
            return new QueryTrigger(runId, kind, intervalMs, null, never); // once: a single batch, no limit
        }
        WakeableClock clock = new WakeableClock(latestBatch(execution));
        try {
            Field field = clockField();
            if (!field.getDeclaringClass().isInstance(execution)) {
                throw new NoSuchFieldException(execution.getClass().getName() + " is not a " + field.getDeclaringClass().getName());
            }
            field.setAccessible(true);
            field.set(execution, clock);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return new QueryTrigger(runId, kind, intervalMs, null, "cannot replace the trigger clock: " + cause(e));
        }
        return new QueryTrigger(runId, kind, intervalMs, clock, intervalMs > 0 ? "" : never);
    }

    /**
     * The id of the query's latest batch run: that of its latest plan
     * ({@code lastExecution().currentBatchId()}; in 4.0 to 4.3 a trigger that runs no batch
     * carries the previous batch's plan over), -1 before the first; where that cannot be read,
     * {@link WakeableClock#UNKNOWN}.
     */
    private static LongSupplier latestBatch(Object execution) {
        LongSupplier latest = () -> {
            try {
                Object plan = call(execution, "lastExecution");
                return plan == null ? -1 : (Long) call(plan, "currentBatchId");
            } catch (ReflectiveOperationException | RuntimeException e) {
                return WakeableClock.UNKNOWN;
            }
        };
        return latest.getAsLong() == WakeableClock.UNKNOWN ? () -> WakeableClock.UNKNOWN : latest;
    }

    static Object call(Object target, String method) throws ReflectiveOperationException {
        return target.getClass().getMethod(method).invoke(target);
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

    static String cause(Throwable e) {
        Throwable root = e instanceof InvocationTargetException && e.getCause() != null ? e.getCause() : e;
        return root.getClass().getName() + ": " + root.getMessage();
    }
}
