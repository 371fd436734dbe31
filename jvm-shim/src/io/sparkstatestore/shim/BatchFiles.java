package io.sparkstatestore.shim;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.stream.Collectors;
import java.util.UUID;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One small JSON file per micro-batch of a query whose checkpoint holds spark_statestore state,
 * {@code <checkpoint>/statestore/_batches/<batch id>.json}, so the Python side sees what the
 * driver saw in any kind of session (it reads the files, it cannot ask this JVM over Spark
 * Connect): the batch's start, the rows Spark dropped as late, the early-trigger decision and
 * the admission limits set for the next batch.
 *
 * <p>Written through Hadoop's FileSystem (the checkpoint's own: local, HDFS, S3A, ...) as a
 * temporary file renamed into place, so a reader never sees half a file; files more than
 * {@code retain} batches old are deleted as new ones come.
 *
 * @param root    the query's resolved checkpoint root
 * @param hadoop  the Hadoop configuration of the query's session
 * @param retain  batches kept ({@code spark.statestore.minBatchesToRetain})
 */
record BatchFiles(String root, Configuration hadoop, int retain) {
    static final String DIRECTORY = "statestore/_batches";
    static final int LOOK_BACK = 5;
    /** A batch file's name: at most 18 digits, so its batch id fits a long (anything else is foreign). */
    static final String BATCH_FILE = "\\d{1,18}\\.json";
    private static final Logger LOG = LoggerFactory.getLogger(BatchFiles.class);

    /** Whether the checkpoint holds spark_statestore state (only then files are written). */
    boolean wanted() throws IOException {
        Path state = new Path(root, "statestore");
        return state.getFileSystem(hadoop).exists(state);
    }

    /** Writes (or replaces: a re-run batch) the file of one batch. */
    void write(String queryId, String runId, long batchId, long timestampMs, long rowsDroppedByWatermark,
               Optional<Decision> decision, List<LimitChange> admission) throws IOException {
        Path directory = new Path(root, DIRECTORY);
        FileSystem fs = directory.getFileSystem(hadoop);
        if (fs instanceof ChecksumFileSystem checksummed) {
            fs = checksummed.getRawFileSystem(); // no .crc files beside the JSON
        }
        Path target = new Path(directory, batchId + ".json");
        Path temp = new Path(directory, "." + batchId + ".json." + UUID.randomUUID() + ".tmp");
        byte[] content = json(queryId, runId, batchId, timestampMs, rowsDroppedByWatermark, decision, admission)
                .getBytes(StandardCharsets.UTF_8);
        try (OutputStream out = fs.create(temp, false)) {
            out.write(content);
        }
        if (!fs.rename(temp, target)) { // HDFS does not rename over a file
            fs.delete(target, false);
            if (!fs.rename(temp, target)) {
                fs.delete(temp, false);
                throw new IOException("cannot rename " + temp + " to " + target);
            }
        }
        if (batchId >= retain) {
            fs.delete(new Path(directory, (batchId - retain) + ".json"), false);
        }
    }

    /**
     * The admission limits (by source) of the latest batch file that has any, among the
     * {@value #LOOK_BACK} latest, or an empty map: what a run in a new driver process goes on
     * from (the previous driver's estimate was in its memory). A file that cannot be read, is
     * not JSON or holds an admission entry this class does not write (a source that is not a
     * string, a limit that is not an integer fitting a long) is skipped, logged, and an older
     * one may do; a file whose name has more digits than a batch id (over 18: it might not fit
     * a long) is foreign. Looking no further back bounds the reads at a query's start.
     */
    Map<String, Long> lastLimits() throws IOException {
        Path directory = new Path(root, DIRECTORY);
        FileSystem fs = directory.getFileSystem(hadoop);
        if (!fs.exists(directory)) {
            return Map.of();
        }
        FileStatus[] listed = fs.listStatus(directory, path -> path.getName().matches(BATCH_FILE));
        Arrays.sort(listed, Comparator.comparingLong((FileStatus f) -> batchOf(f.getPath())).reversed());
        ObjectMapper mapper = new ObjectMapper();
        for (FileStatus file : Arrays.copyOf(listed, Math.min(listed.length, LOOK_BACK))) {
            Map<String, Long> limits;
            try (InputStream in = fs.open(file.getPath())) {
                limits = limitsOf(mapper.readTree(in));
            } catch (IOException | RuntimeException e) {
                LOG.warn("spark_statestore admission: skipped the damaged batch file {}: {}", file.getPath(),
                        QueryTriggers.cause(e));
                continue; // an older one may do
            }
            if (!limits.isEmpty()) {
                return limits;
            }
        }
        return Map.of();
    }

    /** The limits by source of one batch file's content; throws if an entry is not one {@link #json} writes. */
    private static Map<String, Long> limitsOf(JsonNode batch) throws IOException {
        JsonNode admission = batch.path("admission");
        if (!admission.isMissingNode() && !admission.isArray()) {
            throw new IOException("its admission is not a list: " + admission);
        }
        Map<String, Long> limits = new HashMap<>();
        for (JsonNode change : admission) {
            JsonNode source = change.path("source");
            JsonNode limit = change.path("limit");
            if (!source.isTextual() || !limit.isIntegralNumber() || !limit.canConvertToLong()) {
                throw new IOException("an admission entry without a source name and a limit that fits a long: " + change);
            }
            limits.put(source.asText(), limit.longValue());
        }
        return limits;
    }

    private static long batchOf(Path file) {
        String name = file.getName();
        return Long.parseLong(name.substring(0, name.length() - ".json".length()));
    }

    static String json(String queryId, String runId, long batchId, long timestampMs, long rowsDroppedByWatermark,
                       Optional<Decision> decision, List<LimitChange> admission) {
        String early = decision.map(d -> "{\"source\": " + quote(d.source()) + ", \"partition\": " + d.partition()
                + ", \"uncommitted_bytes\": " + d.uncommittedBytes() + ", \"limit\": " + d.limit()
                + ", \"woken\": " + d.woken() + ", \"reason\": " + quote(d.reason()) + "}").orElse("null");
        return "{\"query_id\": " + quote(queryId) + ", \"run_id\": " + quote(runId) + ", \"batch_id\": " + batchId
                + ", \"timestamp_ms\": " + timestampMs + ", \"rows_dropped_by_watermark\": " + rowsDroppedByWatermark
                + ", \"early_trigger\": " + early + ", \"admission\": [" + admission.stream()
                .map(c -> "{\"source\": " + quote(c.source()) + ", \"unit\": " + quote(c.unit()) + ", \"admitted\": "
                        + c.admitted() + ", \"limit\": " + c.limit() + ", \"cut_short\": " + c.cutShort()
                        + ", \"reason\": " + quote(c.reason()) + "}")
                .collect(Collectors.joining(", ")) + "]}";
    }

    private static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
