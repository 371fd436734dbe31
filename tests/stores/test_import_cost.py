"""What importing the stores costs: a store user without Spark never needs pandas, so
importing the package and its partition state must not pull it in (pyarrow imports pandas
when it builds its first array or scalar, so no module may build one at import)."""

from __future__ import annotations

import subprocess
import sys


def test_the_stores_and_the_partition_state_import_without_pandas():
    code = "import sys, spark_statestore, spark_statestore.partition\nprint('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "False"
