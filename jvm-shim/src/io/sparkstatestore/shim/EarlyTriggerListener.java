package io.sparkstatestore.shim;

import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Installs a {@link WakeableClock} into every query of one SparkSession as it starts.
 *
 * <p>Spark calls {@code onQueryStarted} synchronously on the query's own thread, before
 * that thread creates the trigger executor that reads the clock, so the clock is in place
 * before the first wait between batches. The query is forgotten when its run terminates.
 */
public final class EarlyTriggerListener extends StreamingQueryListener {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(EarlyTriggerListener.class);

    private final transient StreamingQueryManager streams;
    private final String clockField;

    /** {@code clockField}: the name of the query execution's trigger clock field. */
    public EarlyTriggerListener(StreamingQueryManager streams, String clockField) {
        this.streams = streams;
        this.clockField = clockField;
    }

    @Override
    public void onQueryStarted(QueryStartedEvent event) {
        String queryId = event.id().toString();
        String runId = event.runId().toString();
        QueryTrigger known = QueryTriggers.get(queryId);
        if (known != null && known.runId().equals(runId)) {
            return; // this run is already set up
        }
        StreamingQuery query = streams.get(event.id());
        QueryTrigger trigger = query == null
                ? new QueryTrigger(runId, "unknown", 0, null, "the query is not active in this session")
                : QueryTriggers.install(query, runId, clockField);
        QueryTriggers.put(queryId, trigger);
        if (trigger.wakeable()) {
            LOG.info("spark_statestore early trigger: wakeable clock installed for query {} (run {}, every {} ms)",
                    queryId, runId, trigger.intervalMs());
        } else {
            LOG.info("spark_statestore early trigger: no wakeable clock for query {} (run {}): {}",
                    queryId, runId, trigger.reason());
        }
    }

    @Override
    public void onQueryProgress(QueryProgressEvent event) {
        // progress is reported to the Python side by its own listener
    }

    @Override
    public void onQueryTerminated(QueryTerminatedEvent event) {
        QueryTriggers.removeRun(event.id().toString(), event.runId().toString());
    }
}
