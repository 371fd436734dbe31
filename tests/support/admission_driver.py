"""A driver process of its own for the admission tests (run as `python admission_driver.py ROOT`):
a burst query (test_admission's) sets its limit over batch 0 and one limited batch of 6 more
files, is stopped, and the process ends; prints the limit in force at the stop as JSON."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark"))  # test_admission's room
    import test_admission as admission
    from pyspark.sql import SparkSession
    from shim_queries import shim_session, wait_until

    from spark_statestore.spark.driver.jvm import wake

    spark = (SparkSession.builder.master("local[2,4]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    session = shim_session(spark)
    session.conf.set("spark.statestore.uncommitted.maxBytes", str(admission.LIMIT))
    session.conf.set("spark.statestore.cache.maxBytes", "0")
    burst = admission.Burst(Path(sys.argv[1]))
    burst.add(1)
    query = burst.start(session)
    hang = 200  # each wait's bound: their sum is less than the test's wait for this process
    wait_until(lambda: burst.facts(0) is not None, timeout=hang, what="batch 0")
    burst.add(6)
    assert wake(session, str(query.id))
    last = burst.drained(query, 7 * admission.ROWS, "the first 7 files", timeout=hang)
    query.stop()
    print(json.dumps({"last": last, "limit": burst.facts(last).admission[0].limit}), flush=True)
    spark.stop()
