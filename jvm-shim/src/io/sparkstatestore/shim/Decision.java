package io.sparkstatestore.shim;

/**
 * A batch that crossed the limit and had its query woken: where the crossing was seen
 * ({@code in_flight}, {@code end_of_batch} or {@code projected}), by which partition, with how
 * many uncommitted bytes, and whether the wake reached a wakeable clock.
 */
public record Decision(String queryId, long batchId, String source, int partition, long uncommittedBytes,
                       long limit, boolean woken) {

    /** Why the next batch starts early, for the driver log and the batch file. */
    public String reason() {
        if (source.equals("projected")) {
            return "partition " + partition + " would reach " + uncommittedBytes + " uncommitted bytes > limit "
                    + limit + " over a whole trigger interval (projected from an early batch)";
        }
        return "partition " + partition + " had " + uncommittedBytes + " uncommitted bytes > limit " + limit
                + " (" + source.replace('_', ' ') + ")";
    }
}
