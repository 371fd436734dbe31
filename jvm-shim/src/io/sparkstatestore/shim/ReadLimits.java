package io.sparkstatestore.shim;

import java.lang.reflect.Array;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.sql.connector.read.streaming.CompositeReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SparkDataStream;

/**
 * The read limit of each source of a running micro-batch query, as Spark holds it, and how a
 * bound is put into it.
 *
 * <p>Facts (the same in 4.0.5, 4.1.4, 4.2.1 and 4.3.0, checked with javap): {@code StreamExecution}
 * keeps {@code private volatile scala.collection.immutable.Map<SparkDataStream, ReadLimit>
 * uniqueSources} with the public accessors {@code uniqueSources()} and {@code uniqueSources_$eq};
 * it is filled from {@code getDefaultReadLimit} when the plan is built and read by
 * {@code constructNextBatch} each batch ({@code latestOffset(start, limit)}). A volatile write
 * of a map with the same sources and other limits is seen by the next batch that starts; the
 * offsets a batch chose are in the offset log before it runs, so a restart re-runs them as
 * they were. {@code FileStreamSource} ({@code ...streaming} in 4.0, {@code ...streaming.runtime}
 * from 4.1) matches {@code ReadMaxFiles}, {@code ReadMaxBytes} and {@code ReadAllAvailable}
 * only (a composite would fail the query) and lists each batch's files in its
 * {@code private final FileStreamSourceLog metadataLog}, keyed by the {@code logOffset} of its
 * offsets. Kafka's sources take {@code ReadMaxRows} (and a composite); Python data sources with
 * admission control ({@code PythonMicroBatchStreamWithAdmissionControl}, 4.2 and 4.3) take a
 * {@code PythonStreamingSourceReadLimit(json)} only (see {@link #pythonMaxRows}).
 */
final class ReadLimits {
    static final String LIMITS = "uniqueSources";
    static final String FILE_SOURCE = "FileStreamSource";
    static final String FILE_LOG = "metadataLog";
    static final Set<String> ROW_SOURCES = Set.of(
            "KafkaMicroBatchStream", "KafkaSource", "PythonMicroBatchStreamWithAdmissionControl");
    static final String PYTHON_LIMIT = "PythonStreamingSourceReadLimit";
    private static final Pattern PYTHON_ALL = Pattern.compile("\"_type\"\\s*:\\s*\"ReadAllAvailable\"");
    private static final Pattern PYTHON_MAX_ROWS = Pattern.compile("\"max_rows\"\\s*:\\s*(\\d+)\\s*[,}]");
    private static final Pattern LOG_OFFSET = Pattern.compile("\"logOffset\"\\s*:\\s*(-?)(\\d+)(?![\\d.eE])");
    /** The significant digits a count may have: at most 18, so it always fits a long (as {@link BatchFiles#BATCH_FILE}). */
    static final int MAX_DIGITS = 18;
    /**
     * The most log batches {@link #filesAdmitted} counts over: a file source's micro-batch spans one
     * ({@code FileStreamSource} writes one log batch per batch it plans), and its log's {@code get}
     * reads the range id by id, so a wider span (a damaged or crafted offset) is unreadable like a
     * missing one instead of keeping the driver's listener busy for as many reads.
     */
    static final long MAX_LOG_SPAN = 1_000;

    private ReadLimits() {}

    /** The query's sources and their read limits ({@code execution}: a MicroBatchExecution). */
    static Map<SparkDataStream, ReadLimit> of(Object execution) throws ReflectiveOperationException {
        scala.collection.immutable.Map<SparkDataStream, ReadLimit> limits = scalaMap(execution);
        return scala.jdk.javaapi.CollectionConverters.asJava(limits);
    }

    /** Sets the read limit of one of the query's sources for the batches that start after now. */
    @SuppressWarnings("unchecked")
    static void set(Object execution, SparkDataStream source, ReadLimit limit) throws ReflectiveOperationException {
        Object updated = scalaMap(execution).updated(source, limit);
        execution.getClass().getMethod(LIMITS + "_$eq", scala.collection.immutable.Map.class).invoke(execution, updated);
    }

    @SuppressWarnings("unchecked")
    private static scala.collection.immutable.Map<SparkDataStream, ReadLimit> scalaMap(Object execution)
            throws ReflectiveOperationException {
        Object limits = execution.getClass().getMethod(LIMITS).invoke(execution);
        if (!(limits instanceof scala.collection.immutable.Map<?, ?>)) {
            throw new NoSuchFieldException(LIMITS + " of " + execution.getClass().getName() + " is not a Map");
        }
        return (scala.collection.immutable.Map<SparkDataStream, ReadLimit>) limits;
    }

    /** What a source's admission is counted in, {@code files} or {@code rows}; null if unknown. */
    static String unit(SparkDataStream source) {
        String name = source.getClass().getSimpleName();
        return name.equals(FILE_SOURCE) ? "files" : ROW_SOURCES.contains(name) ? "rows" : null;
    }

    /**
     * The user's limit bounded further to {@code units} (at least 1), or null when the source
     * cannot take both (the user's limit then stays alone). A user's own bound stays an upper
     * bound: the smaller of the two counts.
     */
    static ReadLimit bounded(SparkDataStream source, String unit, long units, ReadLimit user)
            throws ReflectiveOperationException {
        long n = Math.max(1, units);
        if (unit.equals("files")) {
            if (user instanceof ReadAllAvailable) {
                return ReadLimit.maxFiles((int) Math.min(Integer.MAX_VALUE, n));
            }
            return user instanceof ReadMaxFiles files ? ReadLimit.maxFiles((int) Math.min(files.maxFiles(), n)) : null;
        }
        if (user.getClass().getSimpleName().equals(PYTHON_LIMIT)) {
            return pythonMaxRows(user, n);
        }
        if (user instanceof ReadAllAvailable) {
            return ReadLimit.maxRows(n);
        }
        if (user instanceof ReadMaxRows rows) {
            return ReadLimit.maxRows(Math.min(rows.maxRows(), n));
        }
        if (user instanceof CompositeReadLimit parts && source.getClass().getSimpleName().startsWith("Kafka")) {
            List<ReadLimit> kept = new ArrayList<>();
            long max = n;
            for (ReadLimit part : parts.getReadLimits()) {
                if (part instanceof ReadMaxRows rows) {
                    max = Math.min(max, rows.maxRows());
                } else {
                    kept.add(part);
                }
            }
            kept.add(ReadLimit.maxRows(max));
            return ReadLimit.compositeLimit(kept.toArray(new ReadLimit[0]));
        }
        return null;
    }

    /**
     * A Python data source's limit: its runner takes only {@code ReadAllAvailable} or a
     * {@code PythonStreamingSourceReadLimit} holding the Python limit as JSON
     * ({@code {"_type": "ReadMaxRows", "max_rows": n}}, as pyspark's {@code datasource_internal}
     * reads it, 4.2 and 4.3); any other kind would fail the query.
     */
    private static ReadLimit pythonMaxRows(ReadLimit user, long n) throws ReflectiveOperationException {
        String json = (String) user.getClass().getMethod("json").invoke(user);
        long max = n;
        if (!PYTHON_ALL.matcher(json).find()) {
            long own = pythonMaxRows(json);
            if (own < 0) {
                return null;
            }
            max = Math.min(max, own);
        }
        return (ReadLimit) user.getClass().getConstructor(String.class)
                .newInstance("{\"_type\": \"ReadMaxRows\", \"max_rows\": " + max + "}");
    }

    /**
     * The rows a Python limit's JSON allows, or -1 when it holds no whole count (the source
     * cannot take a bound beside it). Python's ints are unbounded: a count beyond a long bounds
     * nothing a long can count, so it is {@code Long.MAX_VALUE} (the smaller count is then ours).
     */
    private static long pythonMaxRows(String json) {
        Matcher m = PYTHON_MAX_ROWS.matcher(json);
        if (!json.contains("\"ReadMaxRows\"") || !m.find()) {
            return -1;
        }
        long rows = digits(m.group(1));
        return rows < 0 ? Long.MAX_VALUE : rows; // beyond 18 digits: beyond anything counted
    }

    /**
     * A decimal of digits only, or -1 when it has more than {@value #MAX_DIGITS} significant digits
     * (bounded before it is parsed, so it never overflows).
     */
    static long digits(String digits) {
        int first = 0;
        while (first < digits.length() - 1 && digits.charAt(first) == '0') {
            first++;
        }
        return digits.length() - first > MAX_DIGITS ? -1 : Long.parseLong(digits.substring(first));
    }

    /** The count a limit puts on a source, or -1 for none. */
    static long count(ReadLimit limit) throws ReflectiveOperationException {
        if (limit instanceof ReadMaxFiles files) {
            return files.maxFiles();
        }
        if (limit instanceof ReadMaxRows rows) {
            return rows.maxRows();
        }
        if (limit instanceof CompositeReadLimit parts) {
            for (ReadLimit part : parts.getReadLimits()) {
                if (part instanceof ReadMaxRows rows) {
                    return rows.maxRows();
                }
            }
        }
        if (limit.getClass().getSimpleName().equals(PYTHON_LIMIT)) {
            return pythonMaxRows((String) limit.getClass().getMethod("json").invoke(limit));
        }
        return -1;
    }

    /**
     * The files a file source admitted between two of its offsets (JSON {@code {"logOffset": n}};
     * null start: from the beginning), from its metadata log.
     */
    static long filesAdmitted(SparkDataStream source, String start, String end) throws ReflectiveOperationException {
        long first = start == null ? -1 : logOffset(start);
        long last = logOffset(end);
        if (last <= first) {
            return 0;
        }
        if (last - first > MAX_LOG_SPAN) {
            throw new NoSuchFieldException("a file source batch from " + start + " to " + end + " spans " + (last - first)
                    + " log batches (at most " + MAX_LOG_SPAN + " are counted)");
        }
        Field field = QueryTriggers.findField(source.getClass(), FILE_LOG);
        field.setAccessible(true);
        Object log = field.get(source);
        Object batches = log.getClass().getMethod("get", scala.Option.class, scala.Option.class)
                .invoke(log, scala.Option.apply(first + 1), scala.Option.apply(last));
        long files = 0;
        for (int i = 0; i < Array.getLength(batches); i++) {
            files += Array.getLength(((scala.Tuple2<?, ?>) Array.get(batches, i))._2());
        }
        return files;
    }

    /**
     * The {@code logOffset} of a file source's offset: -1 (nothing yet) or a log batch id of at most
     * {@value #MAX_DIGITS} digits, as Spark writes it; anything else (beyond a long, below -1, not
     * a whole number) is unreadable like a missing one (the caller explains it and keeps the limit).
     */
    private static long logOffset(String json) throws NoSuchFieldException {
        Matcher m = LOG_OFFSET.matcher(json);
        if (!m.find()) {
            throw new NoSuchFieldException("logOffset in the file source's offset " + json);
        }
        long offset = digits(m.group(2));
        if (offset < 0) {
            throw new NoSuchFieldException("logOffset beyond a long in the file source's offset " + json);
        }
        long value = m.group(1).isEmpty() ? offset : -offset;
        if (value < -1) {
            throw new NoSuchFieldException("logOffset below -1 in the file source's offset " + json);
        }
        return value;
    }
}
