package io.sparkstatestore.shim;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;

import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * spark_statestore's Spark plugin: {@code --jars spark-statestore-shim.jar --conf
 * spark.plugins=io.sparkstatestore.shim.StateStorePlugin} on a spark-submit line (also a Spark
 * Connect server's) starts the driver part ({@link StateStoreDriver}) with the SparkContext,
 * before any session is made, so the early trigger works in every session of the driver,
 * classic or Spark Connect. Its metrics source is registered when Spark asks its plugins for
 * metrics (the application id is set by then, so the source's name in every sink is
 * {@code <app id>.driver.spark_statestore}). Nothing runs on executors.
 */
public final class StateStorePlugin implements SparkPlugin {

    @Override
    public DriverPlugin driverPlugin() {
        return new DriverPlugin() {
            @Override
            public Map<String, String> init(SparkContext context, PluginContext pluginContext) {
                try {
                    StateStoreDriver.start(context, "plugin");
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
                return Map.of();
            }

            @Override
            public void registerMetrics(String appId, PluginContext pluginContext) {
                StateStoreDriver driver = StateStoreDriver.current();
                if (driver != null) {
                    driver.registerMetrics();
                }
            }

            @Override
            public void shutdown() {
                StateStoreDriver.stopCurrent();
            }
        };
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return null;
    }
}
