"""Every code block of README.md runs as written, or is listed here with why it is not
(a new block fails `test_every_block_is_run_or_says_why` until it is one or the other).
Paths under `/tmp/` (and `s3://bucket/`) are the test's own directory; `python` in shell
blocks is the interpreter running the tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pandas as pd
import pytest

from spark_statestore.spark import compat
import paths

ROOT = str(paths.ROOT)
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<code>.*?)^(?P=indent)```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    section: str
    index: int  # within its section
    lang: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.section}#{self.index}"


def readme_blocks() -> list[Block]:
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    blocks, counts, section, end = [], {}, "", 0
    for match in FENCE.finditer(text):
        headings = re.findall(r"^#+ (.+)$", text[end: match.start()], re.MULTILINE)  # outside code blocks
        section, end = (headings[-1] if headings else section), match.end()
        counts[section] = counts.get(section, -1) + 1
        code = textwrap.dedent("\n".join(line[len(match["indent"]):] for line in match["code"].splitlines()))
        blocks.append(Block(section, counts[section], match["lang"], code))
    return blocks


# run without Spark, each on its own; a fragment gets what the text around it says exists
WITHOUT_SPARK = {
    "Changing a store's value schema#0": "",
    "Changing a store's value schema#1": (
        "from dataclasses import dataclass\nfrom spark_statestore import Serdes\n"
        "@dataclass\nclass TotalV3:\n    purchases: str\n"
    ),
    "Stores#0": "",
    "Expiring entries (TTL)#0": "",
    "Transactions (KIP-892)#0": "",
    "Record cache (KIP-63)#0": "",
    "Durable partition state#0": "",
}
# run in order on one query's state, in a classic and a Spark Connect session
WITH_SPARK = ("In Spark#0", "Reading state#0", "Reading state#1", "Changing the partition count#0")
NOT_RUN = {
    "spark_statestore#0": (
        "./dev example runs examples/windowed_counts.py (test_examples runs it); ./dev test is this suite, ./dev matrix "
        "this suite and the versioned tests on the other pyspark minors (CI)"
    ),
    "Spark Connect#0": "starts a Spark Connect server that runs until stopped; test_driver_log runs it (on a free port)",
    "Spark Connect#1": (
        "the same server from an installed package: test_the_connect_server_blocks_agree checks it has what "
        "./dev connect-server passes"
    ),
    "Early trigger (KIP-892's early commit, the way Spark can)#0": (
        "submits the user's my_job.py; test_early_trigger_shim starts drivers and a Connect server with this jar and plugin"
    ),
    "On a cluster#0": "needs a standalone master; test_cluster runs the same settings on one",
    "Kafka#0": "needs a Kafka broker of the user's; test_kafka runs the same job against a broker on loopback",
    "Changing the partition count#1": (
        "its second call needs a state with a `seen` store keyed by user and day; test_rescale runs key mappings"
    ),
}


def _local(code: str, tmp: str) -> str:
    return code.replace("/tmp/", f"{tmp}/").replace("s3://bucket/", f"{tmp}/")


def _by_name() -> dict[str, Block]:
    return {block.name: block for block in readme_blocks()}


def test_every_block_is_run_or_says_why():
    names = [block.name for block in readme_blocks()]
    classified = [*WITHOUT_SPARK, *WITH_SPARK, *NOT_RUN]
    assert sorted(names) == sorted(classified), "classify the README's new or moved blocks in tests/tools/test_readme.py"


@pytest.mark.parametrize("name", sorted(WITHOUT_SPARK))
def test_a_block_without_spark_runs(name, tmp_path):
    block = _by_name()[name]
    assert block.lang == "python"
    namespace = {"__name__": __name__}  # a module that exists, for the blocks' dataclasses
    exec(compile(WITHOUT_SPARK[name] + _local(block.code, str(tmp_path)), f"README.md: {name}", "exec"), namespace)  # noqa: S102


def _shell(code: str, tmp_path) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    python = bindir / "python"  # a wrapper, not a symlink: a venv's interpreter finds its venv by its own path
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, f"{code}\nexit {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.spark  # on the newest minor: the others run the adapters and reader of these blocks
def test_the_spark_blocks_run_in_order_on_one_query(spark, tmp_path):
    """The "In Spark" processor counts the input per key, the reader reads the totals back,
    the command line reads and verifies them, and the rescale command moves them."""
    import spark_jobs

    spark_jobs.skip_without_tws(spark)
    tmp = str(tmp_path)
    os.makedirs(f"{tmp}/events")
    keys = [["a", "b", "a"], ["b", "c"], ["a", "c", "c", "c"]]
    for n, batch in enumerate(keys):
        pd.DataFrame({"key": batch}).to_json(f"{tmp}/events/{n}.json", orient="records", lines=True)
    expected = pd.Series([key for batch in keys for key in batch]).value_counts().to_dict()
    blocks = _by_name()
    namespace = {"spark": spark, "__name__": "readme_spark"}
    spark.conf.set("spark.statestore.localDir", f"{tmp}/local")
    try:
        exec(compile(_local(blocks[WITH_SPARK[0]].code, tmp), f"README.md: {WITH_SPARK[0]}", "exec"), namespace)  # noqa: S102
    finally:
        spark.conf.unset("spark.statestore.localDir")
    # the reader's block is complete in a session where no operator was built (a classic
    # session's new session has no data sources registered; a Connect client has no newSession)
    namespace["spark"] = spark if compat.is_connect(spark) else spark.newSession()
    name = WITH_SPARK[1]
    exec(compile(_local(blocks[name].code, tmp), f"README.md: {name}", "exec"), namespace)  # noqa: S102
    assert pd.read_parquet(f"{tmp}/totals").groupby("key")["total"].max().to_dict() == expected
    state = namespace["totals"].toPandas()
    assert dict(zip(state["key"], state["value"], strict=True)) == expected
    assert len(namespace["processor"].metrics.recent()) == len(keys)
    cli = _shell(_local(blocks["Reading state#1"].code, tmp), tmp_path)
    assert '"key": "a"' in cli.replace('"key":"a"', '"key": "a"')
    _shell(_local(blocks["Changing the partition count#0"].code, tmp), tmp_path)


def test_the_connect_server_blocks_agree():
    """The spark-submit line for an installed package passes what `./dev connect-server`
    passes: the server class, conf/spark-defaults.conf, the shim jar and its plugin."""
    raw = _by_name()["Spark Connect#1"].code
    with open(os.path.join(ROOT, "dev")) as f:
        dev = f.read()
    for part in ("--class org.apache.spark.sql.connect.service.SparkConnectServer",
                 "--properties-file conf/spark-defaults.conf", "spark.plugins=io.sparkstatestore.shim.StateStorePlugin",
                 "spark-internal"):
        assert part in raw and part in dev, part


SUBMIT = re.compile(r"`(\./dev submit [^`]+)`")


@pytest.mark.spark
@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".venv", "bin", "spark-submit")),
                    reason="./dev submit runs .venv's spark-submit: ./dev test makes .venv")
def test_the_documented_submit_commands_run_as_written(tmp_path):
    """Each `./dev submit ...` the README gives runs from the repository root as written
    (its /tmp/ paths the test's; `totals.py` is the "In Spark" block as the script the text
    describes), with nothing activated or exported."""
    with open(os.path.join(ROOT, "README.md")) as f:
        commands = [c for c in SUBMIT.findall(f.read()) if not c.endswith("...")]  # not `./dev submit ...`
    assert len(commands) == 2, commands
    tmp = str(tmp_path)
    os.makedirs(f"{tmp}/events")
    pd.DataFrame({"key": ["a", "b", "a"]}).to_json(f"{tmp}/events/0.json", orient="records", lines=True)
    script = os.path.join(tmp, "totals.py")
    with open(script, "w") as f:
        f.write("from pyspark.sql import SparkSession\nspark = SparkSession.builder.getOrCreate()\n"
                + _local(_by_name()["In Spark#0"].code, tmp))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "VIRTUAL_ENV")}
    for command in commands:
        command = _local(command, tmp).replace(" totals.py", f" {script}")
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=900, check=False)
        assert done.returncode == 0, f"{command}\nexit {done.returncode}:\n{done.stderr[-3000:]}"
    assert pd.read_parquet(f"{tmp}/totals").groupby("key")["total"].max().to_dict() == {"a": 2, "b": 1}
    assert os.path.isdir(f"{tmp}/windowed_counts/checkpoint/statestore")
