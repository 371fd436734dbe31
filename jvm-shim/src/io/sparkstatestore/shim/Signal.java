package io.sparkstatestore.shim;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.Arrays;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * One datagram from a task (wire format 3, written by {@code spark_statestore.spark.signals}).
 *
 * <p>Network byte order: magic {@code SSE3}, kind (1 byte: 1 = the task's uncommitted bytes
 * crossed the limit while it runs, 2 = the task's end-of-task report of its peak), query id
 * length (1), query id (UTF-8), batch id (8), partition (4), task attempt id (8: Spark's
 * {@code taskAttemptId()}, unique per attempt in a SparkContext), uncommitted bytes (8),
 * limit (8), for a report only its {@link Figures} (8 each), then an HMAC-SHA256 of everything
 * before it, keyed by the receiver's secret (32). A datagram must have exactly its kind's length.
 */
record Signal(int kind, String queryId, long batchId, int partition, long taskAttemptId,
              long uncommittedBytes, long limit, Figures figures) {

    /** What a report tells besides the peak (a crossing's are all 0): the task's counters and times. */
    record Figures(long rowsWritten, long changelogBytes, long spills, long cacheHits, long cacheMisses,
                   long droppedRecords, long rowsExpired, long openMicros, long prepareMicros) {
        static final int COUNT = 9;
        static final Figures NONE = new Figures(0, 0, 0, 0, 0, 0, 0, 0, 0);

        /** These and {@code other} as one batch: counters summed, times the maximum. */
        Figures combine(Figures o) {
            return new Figures(rowsWritten + o.rowsWritten, changelogBytes + o.changelogBytes, spills + o.spills,
                    cacheHits + o.cacheHits, cacheMisses + o.cacheMisses, droppedRecords + o.droppedRecords,
                    rowsExpired + o.rowsExpired, Math.max(openMicros, o.openMicros),
                    Math.max(prepareMicros, o.prepareMicros));
        }

        static Figures read(ByteBuffer body) {
            return new Figures(body.getLong(), body.getLong(), body.getLong(), body.getLong(), body.getLong(),
                    body.getLong(), body.getLong(), body.getLong(), body.getLong());
        }
    }

    static final int CROSSING = 1;
    static final int REPORT = 2;
    static final byte[] MAGIC = {'S', 'S', 'E', '3'};
    static final int TAG_BYTES = 32;
    static final int FIXED_BYTES = MAGIC.length + 1 + 1 + 8 + 4 + 8 + 8 + 8;
    static final int MAX_BYTES = FIXED_BYTES + 255 + Figures.COUNT * 8 + TAG_BYTES;

    /** A datagram that is not an authentic signal; {@code reason} names the receiver's counter. */
    static final class Rejected extends Exception {
        private static final long serialVersionUID = 1L;
        final String reason;

        Rejected(String reason, String detail) {
            super(reason + ": " + detail);
            this.reason = reason;
        }
    }

    boolean crossing() {
        return kind == CROSSING;
    }

    /** The signal in {@code datagram}, checked against {@code secret}. */
    static Signal decode(byte[] datagram, byte[] secret) throws Rejected {
        if (datagram.length < FIXED_BYTES + TAG_BYTES) {
            throw new Rejected("malformed", datagram.length + " bytes is too short");
        }
        if (!Arrays.equals(datagram, 0, MAGIC.length, MAGIC, 0, MAGIC.length)) {
            throw new Rejected("malformed", "unknown magic");
        }
        int bodyLength = datagram.length - TAG_BYTES;
        byte[] tag = Arrays.copyOfRange(datagram, bodyLength, datagram.length);
        if (!MessageDigest.isEqual(tag, hmac(secret, datagram, bodyLength))) {
            throw new Rejected("bad_tag", "the HMAC does not match this receiver's secret");
        }
        ByteBuffer body = ByteBuffer.wrap(datagram, MAGIC.length, bodyLength - MAGIC.length);
        try {
            int kind = body.get();
            if (kind != CROSSING && kind != REPORT) {
                throw new Rejected("malformed", "unknown kind " + kind);
            }
            int length = body.get() & 0xff;
            int figures = kind == REPORT ? Figures.COUNT * 8 : 0;
            if (body.remaining() != length + FIXED_BYTES - MAGIC.length - 2 + figures) {
                throw new Rejected("malformed", "query id length " + length + " does not fit " + bodyLength
                        + " bytes of kind " + kind);
            }
            byte[] query = new byte[length];
            body.get(query);
            String queryId = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(query)).toString();
            long batchId = body.getLong();
            int partition = body.getInt();
            long taskAttemptId = body.getLong();
            long uncommitted = body.getLong();
            long limit = body.getLong();
            return new Signal(kind, queryId, batchId, partition, taskAttemptId, uncommitted, limit,
                    kind == REPORT ? Figures.read(body) : Figures.NONE);
        } catch (CharacterCodingException e) {
            throw new Rejected("malformed", "query id is not UTF-8");
        } catch (BufferUnderflowException e) {
            throw new Rejected("malformed", "truncated");
        }
    }

    static byte[] hmac(byte[] secret, byte[] data, int length) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            mac.update(data, 0, length);
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available in this JVM", e);
        }
    }
}
