package io.sparkstatestore.shim;

import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The early-trigger decision, per query and batch (KIP-892's early commit, the way Spark can).
 *
 * <p>Kafka Streams commits a task early when its uncommitted bytes pass its limit. Spark cannot
 * end a running micro-batch, but a processing-time query waits between batches, and the
 * governor cuts that wait short for the next batch whenever a batch crosses
 * {@code spark.statestore.uncommitted.maxBytes}, so the transactions of each batch stay small
 * under a burst.
 *
 * <p>Inputs: in-flight crossings (a task's signal while the batch runs) and end-of-task reports
 * (each task's peak, kept by {@link BatchReports}), read at the batch's end. Rule: the first
 * crossing of a batch (in flight or at its end) wakes its query once; the clock remembers a
 * wake that arrives while the batch runs, so the next batch starts when this one ends.
 * Batches that keep crossing keep being followed at once; the first that stays under the
 * limit wakes nobody, so the interval comes back by itself, unless the previous batch was
 * started early (woken here, or cut short by an admission limit: {@link #cutShort}) and a whole interval of this batch's input would cross (its peak scaled from
 * the time its input accumulated to the interval: a burst is then drained in small batches). Each early trigger is logged with its
 * reason; for a query whose crossings can start nothing early the log says once why.
 *
 * <p>Thread-safe: signals arrive on the receiver's thread, batch ends on the listener bus.
 */
final class Governor {
    private static final Logger LOG = LoggerFactory.getLogger(Governor.class);
    private static final int KEEP_BATCHES = 1000;

    private record BatchKey(String queryId, long batchId) {}

    /** Decided batches (empty: crossed, but nothing was woken), the latest {@link #KEEP_BATCHES}. */
    private final LinkedHashMap<BatchKey, Optional<Decision>> decided = new LinkedHashMap<>() {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<BatchKey, Optional<Decision>> eldest) {
            return size() > KEEP_BATCHES;
        }
    };
    private final Set<String> explained = new HashSet<>();
    /** Batches an admission limit cut short (their successor started at once), the latest few. */
    private final Set<BatchKey> cutShort = java.util.Collections.newSetFromMap(new LinkedHashMap<>() {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<BatchKey, Boolean> eldest) {
            return size() > KEEP_BATCHES;
        }
    });

    /** A task's crossing while its batch runs: decided at once. */
    synchronized void crossing(Signal signal) {
        crossing(signal.queryId(), signal.batchId(), "in_flight", signal.partition(), signal.uncommittedBytes(),
                signal.limit());
    }

    /**
     * A batch ended: the largest peak of its end-of-task {@code reports} (one per partition)
     * decides (end of batch), else the projection of it over a whole interval
     * ({@code accumulatedMs}: how long its input accumulated, from the previous batch's start
     * to its own; 0 when unknown). Returns the batch's decision.
     */
    synchronized Optional<Decision> batchEnded(String queryId, long batchId, Collection<Signal> reports,
                                               long accumulatedMs) {
        Signal top = top(reports);
        if (top != null
                && !crossing(queryId, batchId, "end_of_batch", top.partition(), top.uncommittedBytes(), top.limit())) {
            long projected = projected(queryId, batchId, top.uncommittedBytes(), accumulatedMs);
            if (projected > 0) {
                crossing(queryId, batchId, "projected", top.partition(), projected, top.limit());
            }
        }
        return decision(queryId, batchId);
    }

    /** The largest peak of the reports of tasks with a limit (the lowest partition of equals), or null. */
    static Signal top(Collection<Signal> reports) {
        Signal top = null;
        for (Signal s : reports) {
            if (s.limit() >= 0 && (top == null || s.uncommittedBytes() > top.uncommittedBytes()
                    || (s.uncommittedBytes() == top.uncommittedBytes() && s.partition() < top.partition()))) {
                top = s;
            }
        }
        return top;
    }

    /**
     * An admission limit cut a batch short and its successor starts at once: for the
     * projection, that successor is an early batch like one the governor woke.
     */
    synchronized void cutShort(String queryId, long batchId) {
        cutShort.add(new BatchKey(queryId, batchId));
    }

    /** The decision of a batch (empty: none, or nothing could be woken). */
    synchronized Optional<Decision> decision(String queryId, long batchId) {
        return decided.getOrDefault(new BatchKey(queryId, batchId), Optional.empty());
    }

    /** A new run of a query re-runs batches: what was decided for it is forgotten. */
    synchronized void runStarted(String queryId) {
        decided.keySet().removeIf(k -> k.queryId().equals(queryId));
        cutShort.removeIf(k -> k.queryId().equals(queryId));
    }

    /** The peak a whole interval of input would give, while in a run of early batches; 0 if none. */
    private long projected(String queryId, long batchId, long peak, long accumulatedMs) {
        BatchKey before = new BatchKey(queryId, batchId - 1);
        Optional<Decision> previous = decided.getOrDefault(before, Optional.empty());
        boolean early = previous.isPresent() && previous.get().woken() || cutShort.contains(before);
        QueryTrigger trigger = QueryTriggers.get(queryId);
        if (!early || accumulatedMs <= 0 || trigger == null
                || !trigger.wakeable() || trigger.intervalMs() <= accumulatedMs) {
            return 0;
        }
        try {
            return Math.multiplyExact(peak, trigger.intervalMs()) / accumulatedMs;
        } catch (ArithmeticException overflow) {
            return Long.MAX_VALUE;
        }
    }

    private boolean crossing(String queryId, long batchId, String source, int partition, long size, long limit) {
        if (limit < 0 || size <= limit) {
            return false;
        }
        BatchKey key = new BatchKey(queryId, batchId);
        if (decided.containsKey(key)) {
            return false; // one decision per batch
        }
        decided.put(key, Optional.empty());
        QueryTrigger trigger = QueryTriggers.get(queryId);
        if (trigger == null || !trigger.wakeable()) {
            explainOnce(queryId, trigger);
            return false;
        }
        trigger.clock().wakeAfter(batchId);
        Decision decision = new Decision(queryId, batchId, source, partition, size, limit, true);
        decided.put(key, Optional.of(decision));
        LOG.info("spark_statestore early trigger: query {} batch {}: {}; the next batch starts when this one ends",
                queryId, batchId, decision.reason());
        return true;
    }

    private void explainOnce(String queryId, QueryTrigger trigger) {
        if (!explained.add(queryId + "/" + (trigger == null ? "unseen" : trigger.runId()))) {
            return;
        }
        if (trigger == null) {
            LOG.warn("spark_statestore early trigger: query {} crossed the limit but is not running, or started "
                    + "before the early-trigger listener was active in its session (restart it to enable them)", queryId);
        } else {
            LOG.info("spark_statestore early triggers: nothing to do for query {} ({} trigger): {}",
                    queryId, trigger.kind(), trigger.reason());
        }
    }
}
