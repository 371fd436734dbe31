package io.sparkstatestore.shim;

import org.apache.spark.util.Clock;

/**
 * A system-time {@link Clock} whose {@link #waitTillTime} can be cut short.
 *
 * <p>Spark's {@code ProcessingTimeExecutor} waits for the next trigger time with
 * {@code clock.waitTillTime(next)} between micro-batches. {@link #wake()} makes the current
 * wait return at once; a wake that arrives while no wait is in progress (a batch is
 * running) is remembered and ends the next wait instead. Every return from a wait
 * consumes the pending wake, so one wake skips at most one wait and the schedule of a
 * query that nobody wakes is exactly that of Spark's own {@code SystemClock}.
 *
 * <p>Thread-safe: waits run on the query's thread, wakes come from any thread.
 */
public final class WakeableClock implements Clock {
    private final Object lock = new Object();
    private boolean wakePending;
    private long earlyReturns;

    @Override
    public long getTimeMillis() {
        return System.currentTimeMillis();
    }

    @Override
    public long nanoTime() {
        return System.nanoTime();
    }

    /**
     * Blocks until {@code targetTime} (milliseconds since the epoch) or a wake, whichever
     * comes first, and returns the current time. An interrupt (a query's {@code stop()})
     * ends the wait with {@link InterruptedException}, as {@code SystemClock} does.
     */
    @Override
    public long waitTillTime(long targetTime) {
        synchronized (lock) {
            long now = getTimeMillis();
            try {
                while (!wakePending && now < targetTime) {
                    lock.wait(targetTime - now);
                    now = getTimeMillis();
                }
            } catch (InterruptedException e) {
                throw Unchecked.rethrow(e);
            }
            if (wakePending && now < targetTime) {
                earlyReturns++;
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
}
