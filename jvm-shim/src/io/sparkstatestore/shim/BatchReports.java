package io.sparkstatestore.shim;

import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The end-of-task reports of running batches, per query and batch: per partition the latest
 * attempt's (the highest task attempt id). Taken when the batch ends, by the governor (the
 * peaks) and the metrics source (the figures). Thread-safe: reports arrive on the receiver's
 * thread, batch ends on the listener bus.
 */
final class BatchReports {
    private record BatchKey(String queryId, long batchId) {}

    private final Map<BatchKey, Map<Integer, Signal>> reports = new HashMap<>();

    synchronized void accept(Signal report) {
        reports.computeIfAbsent(new BatchKey(report.queryId(), report.batchId()), k -> new HashMap<>())
                .merge(report.partition(), report, (old, now) -> now.taskAttemptId() > old.taskAttemptId() ? now : old);
    }

    /** The reports of a batch that ended (none: empty), forgotten here. */
    synchronized Collection<Signal> take(String queryId, long batchId) {
        Map<Integer, Signal> batch = reports.remove(new BatchKey(queryId, batchId));
        return batch == null ? List.of() : List.copyOf(batch.values());
    }

    /** A query's run started or ended: the reports of its unfinished batches will not be read. */
    synchronized void forget(String queryId) {
        reports.keySet().removeIf(k -> k.queryId().equals(queryId));
    }
}
