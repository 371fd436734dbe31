"""Where the tests' files are: the repository's root, its examples, and this folder of
drivers and workloads that tests start as processes of their own."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parent.parent
EXAMPLES = ROOT / "examples"
