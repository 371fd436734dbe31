package io.sparkstatestore.shim;

import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver part's listener in a session: installs a {@link WakeableClock} into every query
 * as it starts, and at the end of each batch lets the driver part decide and write the batch's
 * file ({@link StateStoreDriver#progress}).
 *
 * <p>Spark calls {@code onQueryStarted} synchronously on the query's own thread, before that
 * thread creates the trigger executor that reads the clock, so the clock is in place before the
 * first wait between batches. The query is forgotten when its run terminates. A public
 * no-argument constructor: Spark makes one per session from
 * {@code spark.sql.streaming.streamingQueryListeners}.
 */
public final class EarlyTriggerListener extends StreamingQueryListener {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(EarlyTriggerListener.class);

    @Override
    public void onQueryStarted(QueryStartedEvent event) {
        String queryId = event.id().toString();
        String runId = event.runId().toString();
        QueryTrigger known = QueryTriggers.get(queryId);
        if (known != null && known.runId().equals(runId)) {
            return; // this run is already set up
        }
        Object execution = QueryTriggers.currentExecution(queryId);
        QueryTrigger trigger = execution == null
                ? new QueryTrigger(runId, "unknown", 0, null, "the query's execution is not found from its thread")
                : QueryTriggers.install(execution, runId);
        QueryTriggers.put(queryId, trigger);
        StateStoreDriver driver = StateStoreDriver.current();
        if (driver != null) {
            driver.runStarted(queryId, runId, execution);
        }
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
        StateStoreDriver driver = StateStoreDriver.current();
        if (driver != null) {
            try {
                driver.progress(event.progress());
            } catch (RuntimeException e) { // a listener must never break the query
                LOG.warn("spark_statestore: handling the progress of query {} failed", event.progress().id(), e);
            }
        }
    }

    @Override
    public void onQueryTerminated(QueryTerminatedEvent event) {
        QueryTriggers.removeRun(event.id().toString(), event.runId().toString());
        StateStoreDriver driver = StateStoreDriver.current();
        if (driver != null) {
            driver.runEnded(event.id().toString(), event.runId().toString());
        }
    }
}
