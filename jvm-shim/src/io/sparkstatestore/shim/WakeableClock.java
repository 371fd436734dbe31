package io.sparkstatestore.shim;

import java.util.function.BooleanSupplier;
import java.util.function.LongSupplier;

import org.apache.spark.util.Clock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A system-time {@link Clock} whose {@link #waitTillTime} can be cut short.
 *
 * <p>Spark's {@code ProcessingTimeExecutor} waits for the next trigger time with
 * {@code clock.waitTillTime(next)} between micro-batches. {@link #wake()} makes the current
 * wait return at once; a wake that arrives while no wait is in progress (a batch is
 * running) is remembered and ends the next wait instead. Every return from a wait
 * consumes the pending wake, so the schedule of a query that nobody wakes is exactly that of
 * Spark's own {@code SystemClock}.
 *
 * <p>A wake may be meant for one batch: {@link #wakeAfter wakeAfter(b)} asks for the batch
 * after batch {@code b} to start now. Once that batch has run, the wake is stale and dropped
 * (counted in {@link #droppedWakes}): a decision taken at batch {@code b}'s end that reaches the
 * query only after {@code b + 1} started must not start {@code b + 2} too, before the driver
 * has decided anything about {@code b + 1} (its admission limit, above all).
 *
 * <p>A wake is used up by a batch, not by an empty look: when the trigger a wake started ran
 * no batch (the input was not there yet: it arrives between looks), the next waits end after
 * {@value #FIRST_POLL_MS} ms, doubling up to {@value #LAST_POLL_MS} ms, so the query looks
 * again soon instead of waiting out its interval; a batch, the wait's own target time or the
 * last poll ends that.
 *
 * <p>Which batch the query ran last comes from {@code latestBatch}, read on the query's thread
 * at the start of each wait (no batch runs while the query waits); {@link #UNKNOWN} when it
 * cannot be told: then no wake is ever stale and every woken trigger counts as one that ran a
 * batch (no polls).
 *
 * <p>Thread-safe: waits run on the query's thread, wakes come from any thread.
 */
public final class WakeableClock implements Clock {
    private static final Logger LOG = LoggerFactory.getLogger(WakeableClock.class);
    static final long FIRST_POLL_MS = 100;
    static final long LAST_POLL_MS = 3_200;
    /** What {@code latestBatch} returns when the query's latest batch cannot be told. */
    public static final long UNKNOWN = Long.MIN_VALUE;
    private static final long ANY = Long.MAX_VALUE; // a wake for whichever batch comes next
    private final Object lock = new Object();
    private final LongSupplier latestBatch;
    private volatile BooleanSupplier beforeFirstTrigger;
    private boolean wakePending;
    private long wakeAfter;     // the pending wake starts the batch after this one (ANY: the next)
    private long batchAtWake;   // the latest batch when a wake last ended a wait
    private long pollMs;        // the next poll's delay after an empty woken trigger; 0: none
    private long earlyReturns;
    private long polls;
    private long dropped;

    /** A clock whose query's latest batch id is told by {@code latestBatch} (see class doc). */
    public WakeableClock(LongSupplier latestBatch) {
        this.latestBatch = latestBatch;
    }

    /** A clock that cannot tell its query's batches (no stale wakes, no polls). */
    public WakeableClock() {
        this(() -> UNKNOWN);
    }

    /**
     * Runs {@code hook} on the query's thread before the query plans its first batch: Spark's
     * trigger executor reads the clock's time at the start of every trigger, after the query's
     * sources are made. Asked again at each reading until it returns true (done).
     */
    public void beforeFirstTrigger(BooleanSupplier hook) {
        beforeFirstTrigger = hook;
    }

    @Override
    public long getTimeMillis() {
        BooleanSupplier hook = beforeFirstTrigger;
        if (hook != null) {
            boolean done = true;
            try {
                done = hook.getAsBoolean();
            } catch (OperatorCheckpoints.Mismatch e) { // the one refusal: the query fails with it, before batch 0
                beforeFirstTrigger = null;
                throw e;
            } catch (RuntimeException e) { // a clock reading must never fail the query otherwise
                LOG.warn("spark_statestore: the hook before the first trigger failed: {}", e.toString());
            }
            if (done) {
                beforeFirstTrigger = null;
            }
        }
        return System.currentTimeMillis();
    }

    @Override
    public long nanoTime() {
        return System.nanoTime();
    }

    /**
     * Blocks until {@code targetTime} (milliseconds since the epoch), a wake that is not stale,
     * or a poll after an empty woken trigger, whichever comes first, and returns the current
     * time. An interrupt (a query's {@code stop()}) ends the wait with
     * {@link InterruptedException}, as {@code SystemClock} does.
     */
    @Override
    public long waitTillTime(long targetTime) {
        long latest = latestBatch.getAsLong(); // outside the lock: it reads the query's state
        boolean known = latest != UNKNOWN;
        synchronized (lock) {
            long now = getTimeMillis();
            long until = targetTime;
            if (pollMs > 0 && known && latest == batchAtWake) {
                until = Math.min(targetTime, now + pollMs);
            } else {
                pollMs = 0; // a batch ran since the wake (or no wake): the plain schedule
            }
            try {
                while (!awake(latest) && now < until) {
                    lock.wait(until - now);
                    now = getTimeMillis();
                }
            } catch (InterruptedException e) {
                throw Unchecked.rethrow(e);
            }
            if (wakePending && now < targetTime) {
                earlyReturns++;
                pollMs = known ? FIRST_POLL_MS : 0;
                batchAtWake = latest;
            } else if (pollMs > 0 && now < targetTime) {
                polls++;
                pollMs = pollMs >= LAST_POLL_MS ? 0 : pollMs * 2;
            } else {
                pollMs = 0;
            }
            wakePending = false;
            return now;
        }
    }

    /** Whether a wake is pending that is not stale; a stale one is dropped. Holds the lock. */
    private boolean awake(long latest) {
        if (wakePending && wakeAfter != ANY && latest != UNKNOWN && latest > wakeAfter) {
            wakePending = false;
            dropped++;
        }
        return wakePending;
    }

    /** Ends the current wait, or the next one if no wait is in progress. */
    public void wake() {
        wakeAfter(ANY);
    }

    /**
     * Starts the batch after {@code batchId} now: ends the current wait, or the next one if
     * no wait is in progress, unless the query has run that batch by then (the wake is stale).
     * {@code Long.MAX_VALUE}: whichever batch is next ({@link #wake}).
     */
    public void wakeAfter(long batchId) {
        synchronized (lock) {
            wakeAfter = wakePending ? Math.max(wakeAfter, batchId) : batchId;
            wakePending = true;
            lock.notifyAll();
        }
    }

    /** Whether a wake is waiting for the next {@link #waitTillTime}. */
    public boolean isWakePending() {
        synchronized (lock) {
            return wakePending;
        }
    }

    /** How many waits a wake ended before their target time. */
    public long earlyReturns() {
        synchronized (lock) {
            return earlyReturns;
        }
    }

    /** How many waits ended early to look again after a woken trigger that ran no batch. */
    public long polls() {
        synchronized (lock) {
            return polls;
        }
    }

    /** How many wakes were dropped because the batch they were meant to start had run. */
    public long droppedWakes() {
        synchronized (lock) {
            return dropped;
        }
    }
}
