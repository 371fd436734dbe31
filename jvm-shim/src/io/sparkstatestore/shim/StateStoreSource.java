package io.sparkstatestore.shim;

import java.util.Collection;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.ToLongFunction;

import com.codahale.metrics.Gauge;
import com.codahale.metrics.MetricRegistry;
import org.apache.spark.metrics.source.Source;

/**
 * spark_statestore's source in Spark's metrics system ({@code spark_statestore}): per query
 * (its name, else its id; characters other than letters, digits, {@code _} and {@code -}
 * become {@code _}), gauges of its latest completed batch that ran spark_statestore tasks and
 * counters over the driver's life. The figures are the tasks' end-of-task reports of the batch
 * (one per partition, the latest attempt's), summed, or the maximum for peaks and times, as
 * {@code metrics.recent()} combines the tasks' records; {@code earlyTrigger} is 1 when the
 * governor woke the query for the batch.
 *
 * <p>Gauges: {@code <query>.batchId}, {@code .partitions}, {@code .rowsWritten},
 * {@code .changelogBytes}, {@code .spills}, {@code .cacheHits}, {@code .cacheMisses},
 * {@code .droppedRecords}, {@code .rowsExpired}, {@code .uncommittedBytesPeak},
 * {@code .openMicrosMax}, {@code .prepareMicrosMax}, {@code .earlyTrigger}. Counters:
 * {@code <query>.batches}, {@code .rowsWrittenTotal}, {@code .spillsTotal}, {@code .earlyTriggers}.
 */
public final class StateStoreSource implements Source {
    static final String NAME = "spark_statestore";

    /** One batch's figures, combined over its partitions. */
    record Batch(long batchId, long partitions, Signal.Figures figures, long uncommittedPeak,
                 long earlyTrigger) {

        /** The driver log's line of the batch (as the Python side's {@code batch_line}). */
        String line(String label, long lateRows) {
            return String.format(java.util.Locale.ROOT,
                    "spark_statestore batch %d: query %s partitions=%d rows_written=%d changelog_bytes=%d "
                            + "uncommitted_peak=%d spills=%d cache hits/misses=%d/%d dropped=%d late_rows=%d "
                            + "rows_expired=%d open_max=%.3fs prepare_max=%.3fs%s",
                    batchId, label, partitions, figures.rowsWritten(), figures.changelogBytes(), uncommittedPeak,
                    figures.spills(), figures.cacheHits(), figures.cacheMisses(), figures.droppedRecords(), lateRows,
                    figures.rowsExpired(), figures.openMicros() / 1e6, figures.prepareMicros() / 1e6,
                    earlyTrigger == 1 ? " early_trigger=1" : "");
        }
    }

    private static final Map<String, ToLongFunction<Batch>> GAUGES = Map.ofEntries(
            Map.entry("batchId", Batch::batchId),
            Map.entry("partitions", Batch::partitions),
            Map.entry("rowsWritten", b -> b.figures().rowsWritten()),
            Map.entry("changelogBytes", b -> b.figures().changelogBytes()),
            Map.entry("spills", b -> b.figures().spills()),
            Map.entry("cacheHits", b -> b.figures().cacheHits()),
            Map.entry("cacheMisses", b -> b.figures().cacheMisses()),
            Map.entry("droppedRecords", b -> b.figures().droppedRecords()),
            Map.entry("rowsExpired", b -> b.figures().rowsExpired()),
            Map.entry("uncommittedBytesPeak", Batch::uncommittedPeak),
            Map.entry("openMicrosMax", b -> b.figures().openMicros()),
            Map.entry("prepareMicrosMax", b -> b.figures().prepareMicros()),
            Map.entry("earlyTrigger", Batch::earlyTrigger));

    private final MetricRegistry registry = new MetricRegistry();
    private final Map<String, Batch> latest = new ConcurrentHashMap<>();

    @Override
    public String sourceName() {
        return NAME;
    }

    @Override
    public MetricRegistry metricRegistry() {
        return registry;
    }

    /** The metric name prefix of a query: its name if it has one, else its id. */
    static String label(String name, String queryId) {
        String label = name == null || name.isBlank() ? queryId : name;
        return label.replaceAll("[^A-Za-z0-9_-]", "_");
    }

    /**
     * A batch of the query {@code label} ended with these end-of-task {@code reports}: its
     * combined figures (null without reports: nothing to show).
     */
    Batch batchEnded(String label, long batchId, Collection<Signal> reports, Optional<Decision> decision) {
        if (reports.isEmpty()) {
            return null;
        }
        Signal.Figures figures = Signal.Figures.NONE;
        long peak = 0;
        for (Signal report : reports) {
            figures = figures.combine(report.figures());
            peak = Math.max(peak, report.uncommittedBytes());
        }
        long early = decision.filter(Decision::woken).isPresent() ? 1 : 0;
        latest.put(label, new Batch(batchId, reports.size(), figures, peak, early));
        GAUGES.forEach((metric, value) -> registry.gauge(MetricRegistry.name(label, metric),
                () -> (Gauge<Long>) () -> value.applyAsLong(latest.get(label))));
        registry.counter(MetricRegistry.name(label, "batches")).inc();
        registry.counter(MetricRegistry.name(label, "rowsWrittenTotal")).inc(figures.rowsWritten());
        registry.counter(MetricRegistry.name(label, "spillsTotal")).inc(figures.spills());
        registry.counter(MetricRegistry.name(label, "earlyTriggers")).inc(early);
        return latest.get(label);
    }
}
