package spark_statestore.bench;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.StateRestoreListener;

/**
 * The main job (examples/windowed_counts.py) in Kafka Streams' DSL: counts per key in tumbling
 * (10 s) and sliding (30 s, every 10 s) event-time windows, each window's final count written once
 * to the output topic, keyed {@code key|kind|window_start}, when the window closes (stream time
 * past its end plus the grace period); records later than that are dropped. Event time is the
 * record's timestamp; the key is the record's key (the value is not read).
 *
 * <p>Each count lives in a RocksDB window store with Kafka Streams' record cache in front of it,
 * both at their defaults, under exactly_once_v2. Arguments are {@code name=value} pairs:
 * bootstrap, input, output, application.id, state.dir, threads, grace.ms, and any number of
 * {@code config.<streams setting>=<value>} passed to Kafka Streams as they are.
 *
 * <p>Prints one line per event on stdout, for the benchmark that runs it: {@code state <NEW>
 * <ms since start>} on each state change and {@code restored <records> <ms>} when it first reaches
 * RUNNING (records restored from changelogs and the time from the first restore's start to the
 * last one's end).
 */
public final class WindowedCounts {
    private static final Map<String, long[]> WINDOWS = Map.of(
            "tumbling", new long[] {10_000, 10_000},
            "sliding", new long[] {30_000, 10_000});

    private WindowedCounts() {
    }

    public static void main(String[] args) throws InterruptedException {
        Properties arguments = new Properties();
        Properties streamsConfig = new Properties();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("argument " + arg + " is not name=value");
            }
            String name = arg.substring(0, eq);
            String value = arg.substring(eq + 1);
            if (name.startsWith("config.")) {
                streamsConfig.put(name.substring("config.".length()), value);
            } else {
                arguments.put(name, value);
            }
        }
        long graceMs = Long.parseLong(required(arguments, "grace.ms"));
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, required(arguments, "application.id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, required(arguments, "bootstrap"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, required(arguments, "state.dir"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, arguments.getProperty("threads", "1"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);  // a single broker
        props.putAll(streamsConfig);

        KafkaStreams streams = new KafkaStreams(
                topology(required(arguments, "input"), required(arguments, "output"), graceMs), props);
        long started = System.nanoTime();
        AtomicLong restoredRecords = new AtomicLong();
        AtomicLong firstRestore = new AtomicLong(-1);
        AtomicLong lastRestoreEnd = new AtomicLong(-1);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition partition, String store, long start, long end) {
                firstRestore.compareAndSet(-1, System.nanoTime());
            }

            @Override
            public void onBatchRestored(TopicPartition partition, String store, long endOffset, long count) {
                restoredRecords.addAndGet(count);
            }

            @Override
            public void onRestoreEnd(TopicPartition partition, String store, long total) {
                lastRestoreEnd.set(System.nanoTime());
            }
        });
        CountDownLatch stopped = new CountDownLatch(1);
        boolean[] reported = {false};
        streams.setStateListener((now, before) -> {
            System.out.printf("state %s %d%n", now, (System.nanoTime() - started) / 1_000_000);
            if (now == KafkaStreams.State.RUNNING && !reported[0]) {
                reported[0] = true;
                long ms = firstRestore.get() < 0 ? 0 : (lastRestoreEnd.get() - firstRestore.get()) / 1_000_000;
                System.out.printf("restored %d %d%n", restoredRecords.get(), ms);
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
            System.out.flush();
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(60));
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
    }

    /** The two windowed counts over the input topic, their final results to the output topic. */
    static org.apache.kafka.streams.Topology topology(String input, String output, long graceMs) {
        StreamsBuilder builder = new StreamsBuilder();
        KGroupedStream<String, byte[]> events = builder
                .stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .groupByKey();
        for (Map.Entry<String, long[]> window : WINDOWS.entrySet()) {
            String kind = window.getKey();
            long size = window.getValue()[0];
            long slide = window.getValue()[1];
            events.windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(size), Duration.ofMillis(graceMs))
                            .advanceBy(Duration.ofMillis(slide)))
                    .count(Materialized.as(kind + "-counts"))
                    .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName(kind + "-final"))
                    .toStream()
                    .map((windowed, count) -> {
                        long start = windowed.window().start();
                        String key = windowed.key();
                        return KeyValue.pair(key + "|" + kind + "|" + start,
                                "{\"key\":\"" + key.replace("\\", "\\\\").replace("\"", "\\\"") + "\",\"kind\":\""
                                        + kind + "\",\"window_start\":" + start + ",\"window_end\":"
                                        + (start + size) + ",\"count\":" + count + "}");
                    })
                    .to(output, Produced.with(Serdes.String(), Serdes.String()));
        }
        return builder.build();
    }

    private static String required(Properties arguments, String name) {
        String value = arguments.getProperty(name);
        if (value == null) {
            throw new IllegalArgumentException("missing argument " + name + "=...");
        }
        return value;
    }
}
