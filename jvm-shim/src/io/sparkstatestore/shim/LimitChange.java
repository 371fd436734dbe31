package io.sparkstatestore.shim;

/**
 * The admission decision about one source after a batch: what it admitted, the limit of the
 * next batch ({@code -1}: none of spark_statestore's, the source's own limit alone), whether the
 * batch was cut short by the limit (then the next starts at once), and why.
 */
public record LimitChange(String source, String unit, long admitted, long limit, boolean cutShort, String reason) {}
