package io.sparkstatestore.shim;

import java.lang.reflect.Method;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * Refuses a query whose spark_statestore operators were built with another checkpoint path than
 * the query's {@code checkpointLocation}, before its first batch runs (their state would live
 * where no restart or reader looks). Each operator's pickled Python function carries its path
 * after {@link #MARKER} ({@code spark_statestore/spark/driver/operator.py} puts it there as
 * {@code MARKER + <bytes>:<path>}); the shim finds it in the commands of the plan's Python UDFs
 * and compares it with the query's resolved checkpoint root, both qualified by Hadoop. A
 * command Spark broadcast instead of inlining (larger than its UDF threshold) carries no
 * marker, and is not checked.
 */
final class OperatorCheckpoints {
    static final String MARKER = "spark_statestore-operator-checkpoint:";
    private static final byte[] MARKER_BYTES = MARKER.getBytes(StandardCharsets.UTF_8);

    /** Thrown out of the trigger clock, so that the query fails with it before batch 0. */
    static final class Mismatch extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Mismatch(String message) {
            super(message);
        }
    }

    private OperatorCheckpoints() {}

    /** {@link Mismatch} naming both paths if an operator of the query's plan has another path. */
    static void check(String queryId, Object execution, String checkpointRoot, Configuration hadoop)
            throws ReflectiveOperationException {
        Object plan = QueryTriggers.call(execution, "logicalPlan");
        String query = qualified(checkpointRoot, hadoop);
        for (String path : operatorPaths(plan)) {
            if (!qualified(path, hadoop).equals(query)) {
                throw new Mismatch("spark_statestore: query " + queryId + " has checkpointLocation " + checkpointRoot
                        + ", but a spark_statestore operator of it was built with checkpoint location " + path
                        + ": its state would live where no restart or reader looks. Build the operator with the"
                        + " same path as writeStream.option('checkpointLocation', ...)");
            }
        }
    }

    /** The checkpoint paths the plan's spark_statestore operators were built with. */
    static List<String> operatorPaths(Object plan) throws ReflectiveOperationException {
        List<String> out = new ArrayList<>();
        Map<Object, Boolean> seen = new IdentityHashMap<>();
        List<Object> todo = new ArrayList<>(List.of(plan));
        while (!todo.isEmpty()) {
            Object node = todo.remove(todo.size() - 1);
            if (node == null || seen.put(node, Boolean.TRUE) != null) {
                continue;
            }
            if (node.getClass().getSimpleName().equals("PythonUDF")) {
                byte[] command = command(QueryTriggers.call(node, "func"));
                if (command != null) {
                    out.addAll(paths(command));
                }
            }
            for (String children : new String[] {"children", "expressions"}) {
                Method method = method(node, children);
                if (method != null) {
                    scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) method.invoke(node)).iterator();
                    while (it.hasNext()) {
                        todo.add(it.next());
                    }
                }
            }
        }
        return out;
    }

    /**
     * The paths after each marker in a pickled command (a path is skipped over whole: one that
     * holds the marker itself is not read as a second path).
     */
    static List<String> paths(byte[] command) {
        List<String> out = new ArrayList<>();
        int from = 0;
        for (int at = indexOf(command, 0); at >= 0; at = indexOf(command, Math.max(at + 1, from))) {
            int i = at + MARKER_BYTES.length;
            int length = 0;
            int digits = 0;
            while (i < command.length && command[i] >= '0' && command[i] <= '9' && digits < 6) {
                length = length * 10 + (command[i++] - '0');
                digits++;
            }
            if (digits > 0 && i < command.length && command[i] == ':' && i + 1 + length <= command.length) {
                out.add(new String(command, i + 1, length, StandardCharsets.UTF_8));
                from = i + 1 + length;
            }
        }
        return out;
    }

    private static int indexOf(byte[] data, int from) {
        outer:
        for (int i = from; i <= data.length - MARKER_BYTES.length; i++) {
            for (int j = 0; j < MARKER_BYTES.length; j++) {
                if (data[i + j] != MARKER_BYTES[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }

    /** The bytes of a PythonFunction's command ({@code Seq[Byte]} or {@code byte[]}), null if neither. */
    private static byte[] command(Object function) throws ReflectiveOperationException {
        Object command = QueryTriggers.call(function, "command");
        if (command instanceof byte[] bytes) {
            return bytes;
        }
        if (!(command instanceof scala.collection.Iterable<?> seq)) {
            return null;
        }
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        scala.collection.Iterator<?> it = seq.iterator();
        while (it.hasNext()) {
            out.write((Byte) it.next());
        }
        return out.toByteArray();
    }

    private static Method method(Object node, String name) {
        try {
            Method method = node.getClass().getMethod(name);
            return method.getParameterCount() == 0 && scala.collection.Iterable.class.isAssignableFrom(method.getReturnType())
                    ? method : null;
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    /**
     * A location as Hadoop qualifies it (relative paths against the driver's working
     * directory), with the S3 schemes as one and no trailing slash.
     */
    static String qualified(String location, Configuration hadoop) {
        Path path = new Path(location);
        URI uri;
        try {
            uri = path.getFileSystem(hadoop).makeQualified(path).toUri();
        } catch (java.io.IOException | RuntimeException e) {
            uri = path.toUri(); // a scheme without a Hadoop filesystem here: compared as written
        }
        String scheme = uri.getScheme() == null ? "file" : uri.getScheme().toLowerCase(java.util.Locale.ROOT);
        if (scheme.equals("s3a") || scheme.equals("s3n")) {
            scheme = "s3";
        }
        String authority = uri.getAuthority() == null ? "" : uri.getAuthority();
        String rest = uri.getPath() == null ? "" : uri.getPath().replaceAll("/+$", "");
        return scheme + "://" + authority + rest;
    }
}
