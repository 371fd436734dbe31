package io.sparkstatestore.shim;

import java.io.IOException;
import java.time.Instant;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StateOperatorProgress;
import org.apache.spark.sql.streaming.StreamingQueryProgress;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * spark_statestore's part of a Spark driver, one per SparkContext: the signal receiver, the
 * governor, the per-batch files and the metrics source ({@link StateStoreSource}, registered
 * with Spark's metrics system by {@link #registerMetrics}). Started by {@link StateStorePlugin}
 * when the context starts ({@code spark.plugins}), or by the Python side of a classic session
 * that runs without the plugin ({@link EarlyTrigger#activate}): the same code either way.
 *
 * <p>At start it binds the receiver ({@code spark.driver.bindAddress}, else
 * {@code spark.driver.host}, else loopback; port {@code spark.statestore.earlyTrigger.signalPort},
 * 0 = any) with a random 32-byte secret and publishes where tasks send signals in the driver's
 * SparkConf ({@code spark.statestore.earlyTrigger.target} = host:port and {@code .signingKey} =
 * the secret as hex), so every session made afterwards, classic or Spark Connect, reads them with
 * {@code spark.conf.get}. (Not named "secret": Spark Connect answers no client's question about
 * a key Spark redacts. The key authenticates early-trigger datagrams only.)
 * {@code spark.statestore.earlyTrigger.enabled=false} starts no receiver and decides nothing.
 */
public final class StateStoreDriver {
    static final String ENABLED = "spark.statestore.earlyTrigger.enabled";
    static final String PORT = "spark.statestore.earlyTrigger.signalPort";
    static final String TARGET = "spark.statestore.earlyTrigger.target";
    static final String SECRET = "spark.statestore.earlyTrigger.signingKey";
    static final String RETAIN = "spark.statestore.minBatchesToRetain";
    static final String LISTENERS = "spark.sql.streaming.streamingQueryListeners";
    private static final Logger LOG = LoggerFactory.getLogger(StateStoreDriver.class);
    /**
     * Each batch's line, at WARN so that Spark's default log (root level WARN in a pyspark
     * session) shows it; silenced by this logger's level (log4j2.properties:
     * {@code logger.ssb.name = spark_statestore.batches}, {@code logger.ssb.level = error}).
     */
    static final String BATCH_LOGGER = "spark_statestore.batches";
    private static final Logger BATCHES = LoggerFactory.getLogger(BATCH_LOGGER);
    private static final int KEEP_CARRIED = 1000;
    private static StateStoreDriver current;

    /** What the driver keeps of a query's current run. */
    private static final class Run {
        final String runId;
        final BatchFiles files;
        final Admission admission;
        boolean wanted;
        long lastBatch = -2;
        long lastStartMs;

        Run(String runId, BatchFiles files, Admission admission) {
            this.runId = runId;
            this.files = files;
            this.admission = admission;
        }
    }

    private final SparkContext context;
    private final Governor governor;
    private final BatchReports reports = new BatchReports();
    private final StateStoreSource source = new StateStoreSource();
    private final SignalReceiver receiver;
    private final String startedBy;
    private final Map<String, Run> runs = new ConcurrentHashMap<>();
    /** The admission estimate of each stopped query's last run, for its next run. */
    private final Map<String, Admission.Carried> carried = new ConcurrentHashMap<>();
    private SparkEnv metricsEnv; // where the source is registered

    private StateStoreDriver(SparkContext context, String startedBy) throws IOException {
        this.context = context;
        this.startedBy = startedBy;
        SparkConf conf = context.conf();
        if (enabled(conf)) {
            String host = conf.get("spark.driver.host", null);
            String bind = conf.get("spark.driver.bindAddress", host == null ? "127.0.0.1" : host);
            governor = new Governor();
            receiver = new SignalReceiver(bind, host == null ? bind : host, port(conf), this::onSignal);
            conf.set(TARGET, receiver.target());
            conf.set(SECRET, receiver.secretHex());
            LOG.info("spark_statestore early trigger: receiving task signals on {} (bound to {})", receiver.target(), bind);
        } else {
            governor = null;
            receiver = null;
            LOG.info("spark_statestore early triggers are off: {}=false", ENABLED);
        }
    }

    /**
     * The driver part of {@code context}, started now unless it runs already (a stopped
     * context's is replaced). {@code startedBy}: {@code plugin} also names the clock-installing
     * listener in {@code spark.sql.streaming.streamingQueryListeners}, so every session's
     * query manager registers it when it is made; otherwise sessions are activated one by one.
     */
    public static synchronized StateStoreDriver start(SparkContext context, String startedBy) throws IOException {
        if (current != null && current.context == context && !context.isStopped()) {
            return current;
        }
        if (current != null) {
            current.stop();
        }
        current = new StateStoreDriver(context, startedBy);
        if (!startedBy.equals("plugin")) {
            current.registerMetrics(); // the plugin's are registered when Spark asks its plugins (the app id is set)
        } else {
            SparkConf conf = context.conf();
            String listeners = conf.get(LISTENERS, "").trim();
            String mine = EarlyTriggerListener.class.getName();
            if (!(("," + listeners.replace(" ", "") + ",").contains("," + mine + ","))) {
                conf.set(LISTENERS, listeners.isEmpty() ? mine : listeners + "," + mine);
            }
        }
        LOG.info("spark_statestore driver started (by the {}); clock field: {}", startedBy, clockFieldOrWhyNot());
        return current;
    }

    /** The running driver part, or null. */
    static synchronized StateStoreDriver current() {
        return current;
    }

    /** Stops the running driver part (the context stops). */
    static synchronized void stopCurrent() {
        if (current != null) {
            current.stop();
            current = null;
        }
    }

    /** Registers the metrics source with the driver's metrics system, so its sinks show it. */
    synchronized void registerMetrics() {
        SparkEnv env = SparkEnv.get();
        if (env != null && metricsEnv == null) {
            env.metricsSystem().registerSource(source);
            metricsEnv = env;
        }
    }

    private synchronized void stop() {
        if (receiver != null) {
            receiver.close();
        }
        if (metricsEnv != null) {
            metricsEnv.metricsSystem().removeSource(source);
            metricsEnv = null;
        }
    }

    /** A task's signal: a crossing is decided at once, a report kept for its batch's end. */
    private void onSignal(Signal signal) {
        if (signal.crossing()) {
            governor.crossing(signal);
        } else {
            reports.accept(signal);
        }
    }

    String startedBy() {
        return startedBy;
    }

    /** {@code host:port} tasks send to, or null when early triggers are off. */
    String target() {
        return receiver == null ? null : receiver.target();
    }

    String secretHex() {
        return receiver == null ? null : receiver.secretHex();
    }

    Map<String, Long> signalStats() {
        return receiver == null ? Map.of() : receiver.stats();
    }

    Optional<Decision> decision(String queryId, long batchId) {
        return governor == null ? Optional.empty() : governor.decision(queryId, batchId);
    }

    /** A run of a query started; {@code execution} is its StreamExecution (null: not found). */
    void runStarted(String queryId, String runId, Object execution) {
        if (governor != null) {
            governor.runStarted(queryId);
        }
        reports.forget(queryId);
        BatchFiles files = null;
        String admission = "true";
        Runnable checkOperators = () -> { };
        if (execution != null) {
            try {
                SparkSession session = (SparkSession) QueryTriggers.call(execution, "sparkSession");
                admission = session.conf().get(Admission.SETTING, "true");
                Configuration hadoop = (Configuration) QueryTriggers.call(QueryTriggers.call(session, "sessionState"), "newHadoopConf");
                int retain = Integer.parseInt(session.conf().get(RETAIN, "100").trim());
                String root = (String) QueryTriggers.call(execution, "resolvedCheckpointRoot");
                files = new BatchFiles(root, hadoop, Math.max(1, retain));
                checkOperators = () -> checkOperators(queryId, execution, root, hadoop);
            } catch (ReflectiveOperationException | RuntimeException e) {
                LOG.warn("spark_statestore: no batch files for query {}: {}", queryId, QueryTriggers.cause(e));
            }
        }
        Admission admitted = governor == null ? null
                : Admission.of(queryId, execution, admission, previousEstimate(queryId, files));
        QueryTrigger trigger = QueryTriggers.get(queryId);
        if (trigger != null && trigger.clock() != null && trigger.runId().equals(runId)) {
            // on the query's thread once its plan is made, before batch 0 is planned
            Runnable check = checkOperators;
            boolean[] checked = {false};
            trigger.clock().beforeFirstTrigger(() -> {
                if (!checked[0]) {
                    checked[0] = true;
                    check.run();
                }
                return admitted == null || admitted.applyInherited();
            });
        }
        runs.put(queryId, new Run(runId, files, admitted));
    }

    /**
     * Refuses the query ({@link OperatorCheckpoints.Mismatch}, out of its trigger clock) when a
     * spark_statestore operator of its plan was built with another checkpoint path; anything
     * else that goes wrong while looking is logged, and the query runs.
     */
    private static void checkOperators(String queryId, Object execution, String root, Configuration hadoop) {
        try {
            OperatorCheckpoints.check(queryId, execution, root, hadoop);
        } catch (ReflectiveOperationException | RuntimeException e) {
            if (e instanceof OperatorCheckpoints.Mismatch mismatch) {
                throw mismatch;
            }
            LOG.warn("spark_statestore: the operators' checkpoint paths of query {} are not checked: {}", queryId,
                    QueryTriggers.cause(e));
        }
    }

    /**
     * The admission estimate the query's previous run left: kept when that run ended, or still
     * in that run when the listener bus has not told its end yet (a restart right after a stop),
     * or, when that run was in another driver process, the limits of the checkpoint's latest
     * batch file (its headroom is not kept: the default).
     */
    private Admission.Carried previousEstimate(String queryId, BatchFiles files) {
        Admission.Carried kept = carried.remove(queryId);
        Run previous = runs.get(queryId);
        if (kept != null || previous != null) {
            return kept != null || previous.admission == null ? kept : previous.admission.carried();
        }
        if (files == null) {
            return null;
        }
        try {
            Map<String, Long> limits = files.lastLimits();
            return limits.isEmpty() ? null : new Admission.Carried(Admission.HEADROOM, limits);
        } catch (IOException | RuntimeException e) {
            LOG.warn("spark_statestore admission: query {}: cannot read the last limits under {}: {}", queryId,
                    files.root(), QueryTriggers.cause(e));
            return null;
        }
    }

    /**
     * A run ended: its admission estimate is kept for the query's next run, and its tasks'
     * reports go. The listener bus may tell a run's end after the next run started (a restart
     * right after a stop): then the newer run and the reports of its tasks stay. Done under
     * the query's entry, so a run starting meanwhile waits for it.
     */
    void runEnded(String queryId, String runId) {
        runs.compute(queryId, (id, run) -> {
            if (run != null && !run.runId.equals(runId)) {
                return run;
            }
            if (run != null && run.admission != null) {
                if (carried.size() >= KEEP_CARRIED) {
                    carried.clear(); // bounded: an estimate is only a head start
                }
                carried.put(queryId, run.admission.carried());
            }
            reports.forget(queryId);
            return null;
        });
    }

    /**
     * A batch ended: decide its early trigger (after handling every signal already received),
     * publish its figures in the metrics source and write its file.
     */
    void progress(StreamingQueryProgress progress) {
        String queryId = progress.id().toString();
        long batchId = progress.batchId();
        long startMs = Instant.parse(progress.timestamp()).toEpochMilli();
        Run run = runs.get(queryId);
        Optional<Decision> decision = Optional.empty();
        List<LimitChange> admitted = List.of();
        if (governor != null) {
            receiver.drain();
            Collection<Signal> batch = reports.take(queryId, batchId);
            long accumulated = run != null && run.lastBatch == batchId - 1 ? startMs - run.lastStartMs : 0;
            // the next batch's limit first: the governor's decision may start that batch at once
            boolean cutShort = false;
            if (run != null && run.admission != null) {
                admitted = run.admission.batchEnded(progress, Governor.top(batch));
                cutShort = admitted.stream().anyMatch(LimitChange::cutShort);
                if (cutShort) {
                    governor.cutShort(queryId, batchId);
                }
            }
            decision = governor.batchEnded(queryId, batchId, batch, accumulated);
            String label = StateStoreSource.label(progress.name(), queryId);
            StateStoreSource.Batch figures = source.batchEnded(label, batchId, batch, decision);
            if (figures != null) {
                BATCHES.warn(figures.line(label, lateRows(progress)));
            }
            if (cutShort) {
                wake(queryId, batchId);
            }
        }
        if (run == null) {
            return;
        }
        run.lastBatch = batchId;
        run.lastStartMs = startMs;
        if (run.files == null) {
            return;
        }
        long dropped = lateRows(progress);
        try {
            run.wanted = run.wanted || run.files.wanted();
            if (run.wanted) {
                run.files.write(queryId, progress.runId().toString(), batchId, startMs, dropped, decision, admitted);
            }
        } catch (IOException | RuntimeException e) {
            LOG.warn("spark_statestore: cannot write the file of query {} batch {} under {}: {}",
                    queryId, batchId, run.files.root(), e.toString());
        }
    }

    /** Input rows Spark's stateful operators dropped behind the watermark in the batch. */
    private static long lateRows(StreamingQueryProgress progress) {
        long dropped = 0;
        for (StateOperatorProgress operator : progress.stateOperators()) {
            dropped += operator.numRowsDroppedByWatermark();
        }
        return dropped;
    }

    /**
     * A batch cut short by an admission limit is followed at once (a wake of its clock for the
     * batch after it: stale, and dropped, if that batch started already).
     */
    private static void wake(String queryId, long batchId) {
        QueryTrigger trigger = QueryTriggers.get(queryId);
        if (trigger != null && trigger.wakeable()) {
            trigger.clock().wakeAfter(batchId);
        }
    }

    private static boolean enabled(SparkConf conf) {
        String value = conf.get(ENABLED, "true").trim().toLowerCase(java.util.Locale.ROOT);
        if (!value.equals("true") && !value.equals("false")) {
            throw new IllegalArgumentException(ENABLED + " must be true or false, got '" + conf.get(ENABLED, "") + "'");
        }
        return value.equals("true");
    }

    private static int port(SparkConf conf) {
        String value = conf.get(PORT, "0");
        try {
            int port = Integer.parseInt(value.trim());
            if (port >= 0 && port <= 65535) {
                return port;
            }
        } catch (NumberFormatException e) {
            // said below
        }
        throw new IllegalArgumentException(PORT + " must be a port number in 0..65535, got '" + value + "'");
    }

    private static String clockFieldOrWhyNot() {
        try {
            java.lang.reflect.Field field = QueryTriggers.clockField();
            return field.getDeclaringClass().getName() + "." + field.getName();
        } catch (NoSuchFieldException e) {
            return "not found (" + e.getMessage() + "): queries will not be wakeable";
        }
    }
}
