package io.sparkstatestore.shim;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SparkDataStream;
import org.apache.spark.sql.streaming.SourceProgress;
import org.apache.spark.sql.streaming.StreamingQueryProgress;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Adaptive admission of one run of a micro-batch query: a read limit per source, sized so that
 * the next batch's largest task stays under {@code spark.statestore.uncommitted.maxBytes}.
 *
 * <p>After each batch: bytes per unit = the largest task's peak of uncommitted bytes divided by
 * the units (files of the file source, rows of the others) the source admitted in the batch (the
 * largest task carries the skew between partitions). The next limit is the units whose projected
 * peak is {@code headroom} x the uncommitted limit, shared evenly between the limited sources, at
 * least 1 (a query never stalls), never above the user's own limit. The headroom starts at
 * {@value #HEADROOM}, halves after a batch that crossed the limit (down to {@value #TIGHTEST}) and
 * grows back by a quarter per batch that did not. A source admitting less than its limit takes
 * all that waits (a steady stream is not cut); a batch that admitted its whole limit was cut
 * short, and the query is woken so the rest follows at once. Only how input is cut into batches
 * changes, never the input or its order. A new run of the query (a restart) goes on from the
 * previous run's estimate: its limits are in force before it plans its first batch
 * ({@link #applyInherited}); a first batch that re-runs one the previous run planned takes the
 * offsets planned then, and the limit tells whether it was cut short. Runs on the listener bus, one batch at
 * a time (and once on the query's thread before its first batch).
 */
final class Admission {
    static final String SETTING = "spark.statestore.earlyTrigger.admission";
    static final double HEADROOM = 0.8;
    static final double TIGHTEST = 0.1;
    private static final Logger LOG = LoggerFactory.getLogger(Admission.class);

    /** What the run keeps of one limited source. */
    private static final class Source {
        final String unit;
        final ReadLimit user;
        long limit = -1; // the count in force (-1: the user's limit alone)

        Source(String unit, ReadLimit user) {
            this.unit = unit;
            this.user = user;
        }
    }

    private final String queryId;
    private final Object execution;
    private final Map<SparkDataStream, Source> sources = new HashMap<>();
    private final Set<String> explained = new HashSet<>();
    private final Map<String, Long> inherited = new HashMap<>(); // limits of the previous run, by source
    private double headroom = HEADROOM;

    /** What a run's estimate leaves to the next run of its query: headroom, limits by source. */
    record Carried(double headroom, Map<String, Long> limits) {}

    private Admission(String queryId, Object execution, Carried previous) {
        this.queryId = queryId;
        this.execution = execution;
        if (previous != null) {
            headroom = previous.headroom();
            inherited.putAll(previous.limits());
        }
    }

    /** This run's estimate, for the next run of the query. */
    synchronized Carried carried() {
        Map<String, Long> limits = new HashMap<>();
        sources.forEach((stream, source) -> limits.put(stream.toString(), source.limit));
        return new Carried(headroom, limits);
    }

    /**
     * The admission of a run (going on from the {@code previous} run's, if any), or null (with
     * the reason logged) when it cannot have one.
     */
    static Admission of(String queryId, Object execution, String setting, Carried previous) {
        String value = setting.trim().toLowerCase(java.util.Locale.ROOT);
        if (value.equals("false")) {
            LOG.info("spark_statestore admission: off for query {}: {}=false", queryId, SETTING);
            return null;
        }
        if (!value.equals("true")) { // a bad value is a user's mistake: shown at the default WARN level
            LOG.warn("spark_statestore admission: off for query {}: {} must be true or false, got '{}'", queryId,
                    SETTING, setting);
            return null;
        }
        if (execution == null || !execution.getClass().getSimpleName().contains("MicroBatchExecution")) {
            LOG.info("spark_statestore admission: none for query {}: not a micro-batch query ({})", queryId,
                    execution == null ? "its execution is not found" : execution.getClass().getName());
            return null;
        }
        try {
            ReadLimits.of(execution);
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
            LOG.warn("spark_statestore admission: none for query {}: its per-source read limits ({}) are not "
                    + "reachable in this Spark: {}", queryId, ReadLimits.LIMITS, QueryTriggers.cause(e));
            return null;
        }
        return new Admission(queryId, execution, previous);
    }

    /**
     * A batch ended; {@code top} is its largest task report (null: none). Sets the next
     * batch's limits and returns what it decided, one entry per limited source.
     */
    synchronized List<LimitChange> batchEnded(StreamingQueryProgress progress, Signal top) {
        Map<SparkDataStream, ReadLimit> limits = limits();
        if (limits == null) {
            return List.of();
        }
        discover(limits);
        if (top == null || top.limit() < 0 || sources.isEmpty()) {
            return List.of();
        }
        boolean crossed = top.uncommittedBytes() > top.limit();
        headroom = crossed ? Math.max(TIGHTEST, headroom / 2) : Math.min(HEADROOM, headroom * 1.25);
        List<LimitChange> changes = new ArrayList<>();
        for (Map.Entry<SparkDataStream, Source> e : sources.entrySet()) {
            LimitChange change = decide(e.getKey(), e.getValue(), progress, top, crossed);
            if (change != null) {
                changes.add(change);
            }
        }
        return changes;
    }

    /**
     * Before the run plans its first batch (on the query's thread, once its sources are made):
     * puts the previous run's limits in force, so that after a restart the first new batch is
     * bounded like the batches before the restart, not only the batches after it. Returns
     * whether that is done (false: the sources are not made yet; ask again).
     */
    synchronized boolean applyInherited() {
        if (inherited.isEmpty()) {
            return true;
        }
        Map<SparkDataStream, ReadLimit> limits = limits();
        if (limits == null) {
            return true;
        }
        if (limits.isEmpty()) {
            return false;
        }
        discover(limits);
        for (Map.Entry<SparkDataStream, Source> e : sources.entrySet()) {
            Source source = e.getValue();
            if (source.limit <= 0) {
                continue; // none inherited, or the user's own limit was the tighter
            }
            try {
                ReadLimit next = ReadLimits.bounded(e.getKey(), source.unit, source.limit, source.user);
                if (next == null) {
                    continue; // the source cannot take a bound beside the user's (said at its first batch end)
                }
                ReadLimits.set(execution, e.getKey(), next);
                LOG.info("spark_statestore admission: query {}: the run starts with the previous run's limit of {} {}"
                        + " for {}", queryId, source.limit, source.unit, e.getKey());
            } catch (ReflectiveOperationException | RuntimeException ex) {
                explainOnce(e.getKey() + "/set", "cannot set the read limit of " + e.getKey() + ": "
                        + QueryTriggers.cause(ex));
            }
        }
        return true;
    }

    /** The query's read limits by source, or null (explained once) when they cannot be read. */
    private Map<SparkDataStream, ReadLimit> limits() {
        try {
            return ReadLimits.of(execution);
        } catch (ReflectiveOperationException | RuntimeException e) {
            explainOnce("limits", "its per-source read limits cannot be read: " + QueryTriggers.cause(e));
            return null;
        }
    }

    /** Keeps each limited source of {@code limits} seen for the first time (its limit: the inherited one). */
    private void discover(Map<SparkDataStream, ReadLimit> limits) {
        for (Map.Entry<SparkDataStream, ReadLimit> e : limits.entrySet()) {
            String unit = ReadLimits.unit(e.getKey());
            if (unit == null) {
                explainOnce(e.getKey().toString(), "source " + e.getKey() + " (" + e.getKey().getClass().getName()
                        + ") has no admission control spark_statestore can use; its batches take what its own limit says");
            } else {
                sources.computeIfAbsent(e.getKey(), k -> {
                    Source source = new Source(unit, e.getValue());
                    source.limit = inherited.getOrDefault(k.toString(), -1L);
                    return source;
                });
            }
        }
    }

    private LimitChange decide(SparkDataStream stream, Source source, StreamingQueryProgress progress, Signal top,
                               boolean crossed) {
        SourceProgress read = progressOf(stream, progress);
        if (read == null) {
            return null; // the source is not in this batch's progress: nothing measured
        }
        long admitted;
        try {
            admitted = source.unit.equals("files")
                    ? ReadLimits.filesAdmitted(stream, read.startOffset(), read.endOffset()) : read.numInputRows();
        } catch (ReflectiveOperationException | RuntimeException e) {
            explainOnce(stream + "/count", "cannot count what source " + stream + " admitted: " + QueryTriggers.cause(e));
            return null;
        }
        if (admitted <= 0) {
            return null; // nothing measured: the limit stays
        }
        // cut short by our limit: it took the whole limit (Kafka's source splits a row limit over
        // its partitions, rounding each share down: up to a row per partition less), or the
        // source reported more available than it read
        boolean cutShort = source.limit > 0
                && (admitted >= source.limit - roundingSlack(stream, read) || leftBehind(read));
        double perUnit = (double) top.uncommittedBytes() / admitted;
        long units = perUnit <= 0 ? Long.MAX_VALUE
                : (long) Math.max(1, Math.floor(headroom * top.limit() / perUnit / sources.size()));
        ReadLimit next;
        long userCount;
        try {
            next = ReadLimits.bounded(stream, source.unit, units, source.user);
            userCount = ReadLimits.count(source.user);
        } catch (ReflectiveOperationException | RuntimeException e) {
            explainOnce(stream + "/bound", "cannot bound the read limit " + source.user + " of " + stream + ": "
                    + QueryTriggers.cause(e));
            return null;
        }
        String why;
        if (next == null) {
            explainOnce(stream + "/user", "source " + stream + " keeps its own limit " + source.user
                    + " (it cannot take a bound in " + source.unit + " beside it)");
            return null;
        }
        boolean userBound = units == Long.MAX_VALUE || (userCount >= 0 && userCount <= units);
        long previous = source.limit;
        long limit = userBound ? -1 : units;
        if (userBound) {
            next = source.user;
            why = perUnit <= 0 ? "no uncommitted bytes measured per " + source.unit.replaceAll("s$", "")
                    : "the source's own limit " + source.user + " is tighter";
        } else {
            why = String.format(java.util.Locale.ROOT, "%.0f bytes per %s (partition %d: %d bytes over %d %s)%s"
                            + "; %d %s keep a task near %.0f%% of %d",
                    perUnit, source.unit.replaceAll("s$", ""), top.partition(), top.uncommittedBytes(), admitted,
                    source.unit, crossed ? ", crossed: tightened" : "", units, source.unit, headroom * 100, top.limit());
        }
        try {
            ReadLimits.set(execution, stream, next);
        } catch (ReflectiveOperationException | RuntimeException e) {
            explainOnce(stream + "/set", "cannot set the read limit of " + stream + ": " + QueryTriggers.cause(e));
            return null;
        }
        source.limit = limit;
        String action = source.limit < 0 ? (previous < 0 ? "none" : "lifted")
                : previous < 0 ? "set" : source.limit < previous ? "lowered" : source.limit > previous ? "raised" : "kept";
        LimitChange change = new LimitChange(stream.toString(), source.unit, admitted, source.limit, cutShort,
                action + ": " + why + (cutShort ? "; the batch was cut short: the next starts at once" : ""));
        if (!action.equals("kept") || cutShort) {
            LOG.info("spark_statestore admission: query {} batch {}: {} admitted {} {}, next limit {}: {}", queryId,
                    progress.batchId(), stream, admitted, source.unit, source.limit, change.reason());
        }
        return change;
    }

    /** This batch's progress of {@code stream}, or null. */
    private static SourceProgress progressOf(SparkDataStream stream, StreamingQueryProgress progress) {
        for (SourceProgress source : progress.sources()) {
            if (source.description().equals(stream.toString())) {
                return source;
            }
        }
        return null;
    }

    /** Rows a Kafka source may take below a binding row limit: one per topic partition it read. */
    private static long roundingSlack(SparkDataStream stream, SourceProgress read) {
        if (!stream.getClass().getSimpleName().startsWith("Kafka") || read.endOffset() == null) {
            return 0;
        }
        return KAFKA_PARTITION.matcher(read.endOffset()).results().count();
    }

    /** True when the batch ended before the newest offset the source reported available. */
    private static boolean leftBehind(SourceProgress read) {
        String latest = read.latestOffset();
        return latest != null && !latest.equals("null") && !latest.equals(read.endOffset());
    }

    /** A partition's entry in a Kafka source's offset JSON ({"topic":{"0":12,"1":40}}). */
    private static final java.util.regex.Pattern KAFKA_PARTITION = java.util.regex.Pattern.compile("\"\\d+\"\\s*:");

    private void explainOnce(String what, String why) {
        if (explained.add(what)) {
            LOG.info("spark_statestore admission: query {}: {}", queryId, why);
        }
    }
}
