package io.sparkstatestore.shim;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.net.Inet6Address;
import java.nio.ByteBuffer;
import java.nio.channels.DatagramChannel;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.security.SecureRandom;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Consumer;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver's UDP receiver of the tasks' signals: a daemon thread that checks each datagram
 * ({@link Signal#decode}: format and HMAC), rejects replays and stale batches, and hands
 * accepted signals to its sink (the governor).
 *
 * <p>Replays: a task attempt sends at most one signal of each kind, so each (kind, query,
 * batch, task attempt id) is accepted once; Spark's task attempt id is unique per attempt in a
 * SparkContext, also across the stages of a restarted query (its attempt number is not: it
 * starts at 0 again in every stage). A signal for a batch far behind the newest one of its query
 * is stale (its key may have been forgotten). {@link #drain()} handles every datagram already
 * waiting in the socket, so a decision taken after it misses none that arrived before.
 */
final class SignalReceiver implements AutoCloseable {
    static final int REPLAY_WINDOW_BATCHES = 100;
    private static final Logger LOG = LoggerFactory.getLogger(SignalReceiver.class);

    private record Key(int kind, String queryId, long batchId, long taskAttemptId) {}

    private final byte[] secret = new byte[32];
    private final DatagramChannel channel;
    private final Selector selector;
    private final Consumer<Signal> sink;
    private final String target;
    private final Thread thread;
    private final Object lock = new Object();
    private final ByteBuffer buffer = ByteBuffer.allocate(Signal.MAX_BYTES + 1);
    private final Map<String, Long> stats = new TreeMap<>();
    private final Set<Key> seen = new HashSet<>();
    private final Map<String, Long> newest = new HashMap<>();
    private volatile boolean closed;

    /** Binds {@code bindHost:port} (port 0: any free one); tasks send to {@code advertisedHost}. */
    SignalReceiver(String bindHost, String advertisedHost, int port, Consumer<Signal> sink) throws IOException {
        this.sink = sink;
        new SecureRandom().nextBytes(secret);
        InetAddress bind = InetAddress.getByName(bindHost);
        channel = DatagramChannel.open(bind instanceof Inet6Address ? StandardProtocolFamily.INET6 : StandardProtocolFamily.INET);
        try {
            channel.bind(new InetSocketAddress(bind, port));
            channel.configureBlocking(false);
            selector = Selector.open();
            channel.register(selector, SelectionKey.OP_READ);
        } catch (IOException e) {
            channel.close();
            throw new IOException("cannot bind the early-trigger signal receiver to " + bindHost + " port " + port + ": " + e, e);
        }
        InetAddress advertised = InetAddress.getByName(advertisedHost);
        String host = advertised.getHostAddress(); // numeric: tasks never look names up
        int bound = ((InetSocketAddress) channel.getLocalAddress()).getPort();
        target = (advertised instanceof Inet6Address ? "[" + host + "]" : host) + ":" + bound;
        thread = new Thread(this::serve, "spark_statestore-signals");
        thread.setDaemon(true);
        thread.start();
    }

    /** Where tasks send signals: {@code host:port}, the host numeric ({@code [v6]:port}). */
    String target() {
        return target;
    }

    /** The secret signals are authenticated with, as hex. */
    String secretHex() {
        StringBuilder hex = new StringBuilder();
        for (byte b : secret) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }

    /** Datagrams by outcome: accepted, malformed, bad_tag, replayed, stale, sink_errors. */
    Map<String, Long> stats() {
        synchronized (lock) {
            return new TreeMap<>(stats);
        }
    }

    /** Handles every datagram waiting in the socket now. */
    void drain() {
        synchronized (lock) {
            while (!closed && receiveOne()) {
                // next
            }
        }
    }

    private void serve() {
        while (!closed) {
            try {
                selector.select();
                selector.selectedKeys().clear();
            } catch (IOException | RuntimeException e) {
                if (!closed) {
                    LOG.warn("spark_statestore early trigger: the signal receiver stopped: {}", e.toString());
                }
                return;
            }
            drain();
        }
    }

    private boolean receiveOne() {
        buffer.clear();
        try {
            if (channel.receive(buffer) == null) {
                return false;
            }
        } catch (IOException e) {
            return false;
        }
        buffer.flip();
        byte[] datagram = new byte[buffer.remaining()];
        buffer.get(datagram);
        Signal signal;
        try {
            if (datagram.length > Signal.MAX_BYTES) {
                throw new Signal.Rejected("malformed", datagram.length + " bytes is too long");
            }
            signal = admit(Signal.decode(datagram, secret));
        } catch (Signal.Rejected e) {
            count(e.reason);
            LOG.debug("spark_statestore signal rejected: {}", e.getMessage());
            return true;
        }
        count("accepted");
        try {
            sink.accept(signal);
        } catch (RuntimeException e) {
            count("sink_errors");
            LOG.warn("spark_statestore early trigger: handling {} failed", signal, e);
        }
        return true;
    }

    private Signal admit(Signal signal) throws Signal.Rejected {
        long latest = newest.getOrDefault(signal.queryId(), signal.batchId());
        if (signal.batchId() < latest - REPLAY_WINDOW_BATCHES) {
            throw new Signal.Rejected("stale", "batch " + signal.batchId() + " is far behind batch " + latest);
        }
        if (!seen.add(new Key(signal.kind(), signal.queryId(), signal.batchId(), signal.taskAttemptId()))) {
            throw new Signal.Rejected("replayed", "already accepted " + signal);
        }
        if (signal.batchId() > latest || !newest.containsKey(signal.queryId())) {
            newest.put(signal.queryId(), signal.batchId());
            long horizon = signal.batchId() - REPLAY_WINDOW_BATCHES;
            seen.removeIf(k -> k.queryId().equals(signal.queryId()) && k.batchId() < horizon);
        }
        return signal;
    }

    private void count(String outcome) {
        stats.merge(outcome, 1L, Long::sum);
    }

    /** Stops the thread and releases the port; idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        selector.wakeup();
        try {
            thread.join(10_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        synchronized (lock) {
            try {
                selector.close();
                channel.close();
            } catch (IOException e) {
                LOG.debug("closing the signal receiver: {}", e.toString());
            }
        }
    }
}
