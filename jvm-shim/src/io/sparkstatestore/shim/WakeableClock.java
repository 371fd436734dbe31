package io.sparkstatestore.shim;

import java.util.Objects;
import java.util.function.Supplier;

import org.apache.spark.util.Clock;

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
 * <p>A wake is used up by a batch, not by an empty look: when the trigger a wake started ran
 * no batch (the input was not there yet: it arrives between looks), the next waits end after
 * {@value #FIRST_POLL_MS} ms, doubling up to {@value #LAST_POLL_MS} ms, so the query looks
 * again soon instead of waiting out its interval; a batch, the wait's own target time or the
 * last poll ends that. Whether a batch ran comes from {@code latestBatch}: anything that
 * changes when the query runs a batch (the execution's latest batch plan).
 *
 * <p>Thread-safe: waits run on the query's thread, wakes come from any thread.
 */
public final class WakeableClock implements Clock {
    static final long FIRST_POLL_MS = 100;
    static final long LAST_POLL_MS = 3_200;
    private final Object lock = new Object();
    private final Supplier<Object> latestBatch;
    private boolean wakePending;
    private Object batchAtWake; // latestBatch when a wake last ended a wait
    private long pollMs;        // the next poll's delay after an empty woken trigger; 0: none
    private long earlyReturns;
    private long polls;

    /** A clock whose query's batches are told by {@code latestBatch} (see class doc). */
    public WakeableClock(Supplier<Object> latestBatch) {
        this.latestBatch = latestBatch;
    }

    /** A clock that takes every woken trigger for one that ran a batch (it never polls). */
    public WakeableClock() {
        this(Object::new);
    }

    @Override
    public long getTimeMillis() {
        return System.currentTimeMillis();
    }

    @Override
    public long nanoTime() {
        return System.nanoTime();
    }

    /**
     * Blocks until {@code targetTime} (milliseconds since the epoch), a wake, or a poll after
     * an empty woken trigger, whichever comes first, and returns the current time. An
     * interrupt (a query's {@code stop()}) ends the wait with {@link InterruptedException},
     * as {@code SystemClock} does.
     */
    @Override
    public long waitTillTime(long targetTime) {
        Object latest = latestBatch.get(); // outside the lock: it reads the query's state
        synchronized (lock) {
            long now = getTimeMillis();
            long until = targetTime;
            if (pollMs > 0 && Objects.equals(latest, batchAtWake)) {
                until = Math.min(targetTime, now + pollMs);
            } else {
                pollMs = 0; // a batch ran since the wake (or no wake): the plain schedule
            }
            try {
                while (!wakePending && now < until) {
                    lock.wait(until - now);
                    now = getTimeMillis();
                }
            } catch (InterruptedException e) {
                throw Unchecked.rethrow(e);
            }
            if (wakePending && now < targetTime) {
                earlyReturns++;
                pollMs = FIRST_POLL_MS;
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

    /** Ends the current wait, or the next one if no wait is in progress. */
    public void wake() {
        synchronized (lock) {
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
}
