package io.sparkstatestore.shim;

/** Rethrows a checked exception through an interface method that does not declare it. */
final class Unchecked {
    private Unchecked() {}

    /**
     * Throws {@code error} unchanged. Spark's Scala {@code Clock.waitTillTime} declares no
     * exceptions, yet a stopped query's thread must see the {@link InterruptedException}
     * its interrupt caused, as it does with Spark's own clock. The return type lets callers
     * write {@code throw Unchecked.rethrow(e)}.
     */
    @SuppressWarnings("unchecked")
    static <T extends Throwable> RuntimeException rethrow(Throwable error) throws T {
        throw (T) error;
    }
}
