"""`python -m spark_statestore`: the command-line tools (`spark_statestore.tools.cli`)."""

import sys

from spark_statestore.tools.cli import main

sys.exit(main())
