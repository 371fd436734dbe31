package io.sparkstatestore.shim;

/**
 * What the shim knows about one run of a streaming query: its trigger, and the clock
 * installed for it ({@code null} when none is). It is wakeable when {@code reason} is empty; a
 * processing-time trigger with interval 0 and an {@code availableNow} one never wait, and their
 * clock only runs the hook before the first trigger ({@link WakeableClock#beforeFirstTrigger}).
 *
 * @param runId      the run this describes (a restart from the checkpoint is a new run of the
 *                   same query id)
 * @param kind       {@code processingTime}, {@code once}, {@code availableNow},
 *                   {@code continuous}, {@code realTime} or {@code unknown}
 * @param intervalMs the processing-time interval; 0 for the other kinds
 * @param clock      the query's trigger clock, or {@code null}
 * @param reason     why the query is not wakeable; empty when it is
 */
public record QueryTrigger(String runId, String kind, long intervalMs, WakeableClock clock, String reason) {

    /** Whether waking the query starts its next batch early. */
    public boolean wakeable() {
        return clock != null && reason.isEmpty();
    }
}
