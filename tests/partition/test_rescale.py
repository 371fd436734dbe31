"""`rescale`: a stopped query's state moved to another partition count, entry by entry to
where Spark's hash partitioning sends its key, as a new generation switched to by one
atomic layout write. The query goes on on the new count with every total right, time
travel reads the partitions each batch ran on, an interrupted rescale (an exception or a
SIGKILL at each step) leaves the old state as it was and usable, and bad input or a
query that may be running is refused with a message naming what was found."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

import rescale_workload as w
from spark_statestore import Serdes, faults
from spark_statestore.checkpoint.filesystem import NotAFileError
from spark_statestore.partition import read_query_layout
from spark_statestore.partition.layout import LayoutMismatchError
from spark_statestore.partition.rescale import RescaleError, rescale
from spark_statestore.partition.rescale_claim import RescaleClaimedError
from spark_statestore.partition.spark_log import QueryMayBeRunningError
from spark_statestore.partition import PartitionOptions, PartitionState, WorkerResources, record_query_layout
from spark_statestore.partition.key_mapping import Router
from spark_statestore.partition.layout import Layout
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.spark import KeyValue
from spark_statestore.tools.cli import main
from paths import SUPPORT

STEPS = ["rescale:after-read", "rescale:after-partition", "rescale:before-switch"]


def _query(tmp_path, batches: int = 3, partitions: int = 4) -> tuple[str, str]:
    location, local = str(tmp_path / "checkpoint"), str(tmp_path / "local")
    w.start(location)
    for batch in range(batches):
        w.run_batch(location, local, partitions, batch)
    return location, local


def _check(location: str, batch: int, partitions: int) -> None:
    totals, counts, count = w.read_state(location, batch)
    assert count == partitions
    assert (totals, counts) == w.reference(batch + 1)


def test_4_to_7_to_2_partitions_with_every_total_right(tmp_path):
    location, local = _query(tmp_path)
    done = rescale(location, 7)
    assert (done.old_partitions, done.partitions, done.base, done.generation) == (4, 7, 2, 1)
    totals, counts = w.reference(3)
    assert done.entries == {"totals": len(totals), "counts": len(counts)}
    for batch in range(3, 6):
        w.run_batch(location, local, 7, batch)
    assert rescale(location, 2).base == 5
    for batch in range(6, 9):
        w.run_batch(location, local, 2, batch)
    for batch, count in [(0, 4), (2, 4), (3, 7), (5, 7), (6, 2), (8, 2)]:
        _check(location, batch, count)  # time travel: the partitions each batch ran on
    layout = read_query_layout(location)
    assert layout.partitions == 2
    assert [(g.number, g.partitions, g.base) for g in layout.history] == [(0, 4, -1), (1, 7, 2), (2, 2, 5)]
    assert sorted(os.listdir(os.path.join(location, "statestore", "_g1"))) == [str(p) for p in range(7)]


def test_rescaled_twice_before_a_batch_runs(tmp_path):
    location, local = _query(tmp_path)
    rescale(location, 7)
    rescale(location, 3)
    w.run_batch(location, local, 3, 3)
    _check(location, 3, 3)
    _check(location, 2, 4)


def test_a_writer_on_the_old_count_is_refused_after_a_rescale(tmp_path):
    location, local = _query(tmp_path)
    rescale(location, 2)
    with pytest.raises(LayoutMismatchError, match="rescaled to 2 partitions, but partition 3 is being opened"):
        PartitionState(location, 3, w.SPECS, WorkerResources(local))
    with pytest.raises(LayoutMismatchError, match="move the stopped query's state to 4 partitions first"):
        record_query_layout(location, Layout.of(w.SPECS, 4))


@pytest.mark.parametrize("step", STEPS)
def test_an_exception_at_each_step_leaves_the_state_as_it_was(tmp_path, step):
    location, local = _query(tmp_path)
    before = read_query_layout(location).to_json()

    def fail(name: str) -> None:
        if name == step:
            raise RuntimeError(f"injected at {name}")

    with faults.injected(fail), pytest.raises(RuntimeError, match="injected"):
        rescale(location, 7)
    assert read_query_layout(location).to_json() == before
    _check(location, 2, 4)
    w.run_batch(location, local, 4, 3)  # the old state is usable as it was
    _check(location, 3, 4)
    assert rescale(location, 7).base == 3  # and a rescale run again completes
    w.run_batch(location, local, 7, 4)
    _check(location, 4, 7)


@pytest.mark.parametrize("step", STEPS + ["rescale:after-switch"])
def test_a_kill_at_each_step_leaves_the_old_state_or_the_new_one(tmp_path, step):
    location, local = _query(tmp_path)
    env = {**os.environ, "SPARK_STATESTORE_FAULT": step}
    script = str(SUPPORT / "rescale_workload.py")
    killed = subprocess.run([sys.executable, script, "rescale", location, "7"], env=env, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    batch = 3
    if step == "rescale:after-switch":
        assert read_query_layout(location).partitions == 7  # switched: done
    else:
        assert read_query_layout(location).partitions is None  # never switched: the old state
        w.run_batch(location, local, 4, 3)
        _check(location, 3, 4)
        rescale(location, 7)
        batch = 4
    w.run_batch(location, local, 7, batch)
    _check(location, batch, 7)


def test_a_query_that_may_be_running_is_refused(tmp_path):
    location, local = _query(tmp_path)
    state = PartitionState(location, 1, w.SPECS, WorkerResources(local + "-x"))
    state.open(3)
    state.prepare()
    state.close()  # batch 3 prepared, not committed
    with pytest.raises(QueryMayBeRunningError, match="partition 1 .* prepared version 3, above Spark's newest commit 2"):
        rescale(location, 7)
    os.makedirs(os.path.join(location, "offsets"))
    for batch in range(4):
        with open(os.path.join(location, "offsets", str(batch)), "w") as f:
            f.write("v1\n{}\n")
    with pytest.raises(QueryMayBeRunningError, match=r"batch 3 .* is planned \(offsets/3\) but not committed"):
        rescale(location, 7)
    assert read_query_layout(location).partitions is None


def test_bad_input_is_refused_naming_it(tmp_path):
    location, _ = _query(tmp_path, batches=1)
    with pytest.raises(ValueError, match="partitions .* 0"):
        rescale(location, 0)
    with pytest.raises(TypeError, match="partitions"):
        rescale(location, "7")
    with pytest.raises(RescaleError, match="already has 4 partitions"):
        rescale(location, 4)
    with pytest.raises(ValueError, match=r"key_mapping names stores \['nope'\]"):
        rescale(location, 3, {"nope": lambda key: (key,)})
    with pytest.raises(TypeError, match="key_mapping for store 'totals' must be a function"):
        rescale(location, 3, {"totals": 5})
    with pytest.raises(ValueError, match="key_mapping of store 'totals' returned 9 for key"):
        rescale(location, 3, {"totals": lambda key: 9})
    with pytest.raises(Exception, match="no spark_statestore state"):
        rescale(str(tmp_path / "nothing"), 3)
    assert read_query_layout(location).partitions is None


def test_a_key_mapping_for_keys_that_are_not_the_grouping_key(tmp_path):
    location, local = str(tmp_path / "checkpoint"), str(tmp_path / "local")
    specs = [StoreSpec.key_value("seen", key_serde="json", value_serde="int64")]
    record_query_layout(location, Layout.of(specs))
    state = PartitionState(location, 0, specs, WorkerResources(local))
    state.open(0)
    for user in range(20):
        state.store("seen").put(json.dumps({"user": user}).encode(), b"\x00" * 8)
    state.prepare()
    state.close()
    os.makedirs(os.path.join(location, "commits"))
    open(os.path.join(location, "commits", "0"), "w").close()
    with pytest.raises(ValueError, match="store 'seen' has key serde 'json'.*pass key_mapping"):
        rescale(location, 3)
    assert rescale(location, 3, lambda key: (key["user"],)).entries == {"seen": 20}
    from spark_statestore import murmur3
    from spark_statestore.partition.reading import StateLocation, VersionReader

    moved = StateLocation.open(location).at_batch(1)
    for p in moved.partitions:
        with VersionReader(moved, p, 0) as reader:
            for key, _ in reader.records(specs[0]):
                assert murmur3.partition_of([json.loads(key)["user"]], 3) == p


def test_cli_rescale(tmp_path):
    location, _ = _query(tmp_path, batches=2)
    out = io.StringIO()
    assert main(["rescale", location, "5"], out) == 0
    assert f"rescaled {location} from 4 to 5 partitions at batch 1 (generation 1)" in out.getvalue()
    out = io.StringIO()
    assert main(["rescale", location, "3", "--json"], out) == 0
    assert json.loads(out.getvalue())["partitions"] == 3
    assert main(["rescale", location, "3"], io.StringIO()) == 2
    assert main(["rescale", location, "0"], io.StringIO()) == 2


@pytest.mark.parametrize("key_serde", [Serdes.bytes(), Serdes.string()], ids=["bytes", "string"])
def test_a_ttl_store_moves_each_entry_to_its_key_s_partition(tmp_path, key_serde):
    """A TTL store's raw entries are `0x00 | key`, `0x01 | expiry | key` and its clock
    (`stores/ttl.py`): each entry and its index entry go where their key goes, the clock to
    every partition; the query then finds every key in its new partition, unexpired."""
    location, local = str(tmp_path / "checkpoint"), str(tmp_path / "local")
    declared = KeyValue("seen", key_serde, Serdes.int64(), ttl=1000)
    keys = [key_serde.decode(b"k%d" % i) for i in range(40)]
    plain = KeyValue("plain", key_serde).spec()  # where Spark sends each key
    by_count = {n: Router(plain, None, n).route([key_serde.encode(k) for k in keys]) for n in (2, 3)}
    record_query_layout(location, Layout.of([declared.spec()], 2))
    for batch, count in ((0, 2), (1, 3)):
        for partition in range(count):
            state = PartitionState(location, partition, [declared.spec()], WorkerResources(local),
                                   PartitionOptions(partitions=count))
            state.open(batch)
            state.advance_clocks(5 + batch, None)
            store = declared.typed(state.store("seen"))
            mine = [k for k, p in zip(keys, by_count[count]) if p == partition]
            if batch == 0:
                for k in mine:
                    store.put(k, keys.index(k))
            else:
                assert sorted(k for k, _ in store.all()) == sorted(mine)
                assert [store.get(k) for k in mine] == [keys.index(k) for k in mine]
            state.prepare()
            state.close()
            state.wait_for_snapshots()
        if batch == 0:
            os.makedirs(os.path.join(location, "commits"))
            with open(os.path.join(location, "commits", "0"), "w") as f:
                f.write("v1\n{}")
            rescale(location, 3)


def _during(step: str, action):
    """A fault handler running `action` once, when the rescale reaches `step`."""
    done = []

    def handler(name: str) -> None:
        if name == step and not done:
            done.append(True)
            action()

    return handler


def _offsets(location: str, batches: int, partitions: int | str) -> None:
    """Spark's offset log for batches 0..batches-1, recording its state partition count."""
    os.makedirs(os.path.join(location, "offsets"), exist_ok=True)
    for batch in range(batches):
        with open(os.path.join(location, "offsets", str(batch)), "w") as f:
            f.write("v1\n" + json.dumps({"conf": {"spark.sql.shuffle.partitions": str(partitions)}}) + "\n")


def test_a_second_rescale_while_one_runs_is_refused_changing_nothing(tmp_path):
    location, local = _query(tmp_path)
    refused = []

    def second() -> None:
        with pytest.raises(RescaleClaimedError, match="another rescale of .* holds its claim") as e:
            rescale(location, 5)
        refused.append(str(e.value))

    with faults.injected(_during("rescale:after-read", second)):
        assert rescale(location, 3).partitions == 3
    assert refused and read_query_layout(location).partitions == 3
    assert sorted(os.listdir(os.path.join(location, "statestore", "_g1"))) == ["0", "1", "2"]
    assert os.listdir(os.path.join(location, "statestore", "_rescale")) == []  # both claims gone
    w.run_batch(location, local, 3, 3)
    _check(location, 3, 3)


def test_a_rescale_that_finds_another_claim_is_refused(tmp_path):
    """A claim not of a dead process on this host (another host's, a live one's) is never
    taken over; the message names the file. A dead process's claim here is removed."""
    location, _ = _query(tmp_path, batches=1)
    claims = os.path.join(location, "statestore", "_rescale")
    os.makedirs(claims)
    with open(os.path.join(claims, "other.claim"), "w") as f:
        json.dump({"host": "elsewhere", "pid": 1, "started": 0, "what": "rescale to 5 partitions"}, f)
    with pytest.raises(RescaleClaimedError, match=r"other\.claim.*elsewhere.*delete that file"):
        rescale(location, 3)
    assert read_query_layout(location).partitions is None and os.listdir(claims) == ["other.claim"]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    with open(os.path.join(claims, "other.claim"), "w") as f:
        json.dump({"host": socket.gethostname(), "pid": int(dead.stdout), "started": 0, "what": "killed"}, f)
    assert rescale(location, 3).partitions == 3
    assert os.listdir(claims) == []


@pytest.mark.parametrize("planned_only", [False, True], ids=["committed", "planned"])
def test_a_query_run_while_the_state_is_staged_stops_the_switch(tmp_path, planned_only):
    location, local = _query(tmp_path)
    before = read_query_layout(location).to_json()

    def query_runs() -> None:
        if planned_only:
            _offsets(location, 4, 4)  # batch 3 planned: the query is running
        else:
            w.run_batch(location, local, 4, 3)  # batch 3 committed on the old partitions

    with faults.injected(_during("rescale:before-switch", query_runs)):
        with pytest.raises(RescaleError, match="does not switch"):
            rescale(location, 7)
    assert read_query_layout(location).to_json() == before
    if not planned_only:
        _check(location, 3, 4)  # the batch the query committed is the state
        w.run_batch(location, local, 4, 4)
        _check(location, 4, 4)


def _damage_changelog(location: str) -> None:
    os.remove(os.path.join(location, "statestore", "1", "2.changelog"))


def _damage_partition(location: str) -> None:
    import shutil

    shutil.rmtree(os.path.join(location, "statestore", "2"))


def _fifo_changelog(location: str) -> None:
    path = os.path.join(location, "statestore", "3", "2.changelog")
    os.remove(path)
    os.mkfifo(path)


# a FIFO is refused by the listing every read starts with (it names the file and what it is)
REFUSED = r"partition \d of the state .* cannot be read at batch 2.*nothing was changed"


@pytest.mark.parametrize(("damage", "error", "message"), [
    (_damage_changelog, RescaleError, REFUSED), (_damage_partition, RescaleError, REFUSED),
    (_fifo_changelog, NotAFileError, r"statestore/3/2\.changelog is a FIFO, not a regular file"),
], ids=["changelog", "partition", "fifo"])
def test_a_rescale_over_missing_files_is_refused_changing_nothing(tmp_path, damage, error, message):
    location, _ = _query(tmp_path)
    _offsets(location, 3, 4)
    damage(location)
    with pytest.raises(error, match=message):
        rescale(location, 7)
    assert main(["rescale", location, "7"], io.StringIO()) == 2  # the CLI: exit 2, not 0
    assert read_query_layout(location).partitions is None
    assert not os.path.exists(os.path.join(location, "statestore", "_g1"))
    assert main(["verify", location], io.StringIO()) == 1  # the damage stays visible


def test_a_layout_listing_no_stores_is_refused(tmp_path):
    location, _ = _query(tmp_path)
    path = os.path.join(location, "statestore", "_layout")
    with open(path, "w") as f:
        json.dump({"partitions": None, "stores": {}}, f)
    with pytest.raises(RescaleError, match="lists no stores"):
        rescale(location, 7)
    assert not os.path.exists(os.path.join(location, "statestore", "_g1", "0"))


def test_a_partition_count_beyond_the_bound_or_the_open_file_limit_is_refused(tmp_path):
    import resource

    location, _ = _query(tmp_path, batches=1)
    with pytest.raises(ValueError, match="partitions must be at most 10000, got 100000"):
        rescale(location, 100_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
    try:
        with pytest.raises(RescaleError, match=r"partitions 100 needs about 1600 open files.*limit of 256"):
            rescale(location, 100)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert read_query_layout(location).partitions is None


def test_a_killed_rescale_s_scratch_copy_and_claim_are_removed_by_the_next(tmp_path):
    location, _ = _query(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "SPARK_STATESTORE_FAULT": "rescale:after-partition", "TMPDIR": str(scratch)}
    script = str(SUPPORT / "rescale_workload.py")
    for _ in range(2):
        killed = subprocess.run([sys.executable, script, "rescale", location, "7"], env=env, capture_output=True)
        assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert len(os.listdir(scratch)) == 1  # the first one's was removed by the second
    assert len(os.listdir(os.path.join(location, "statestore", "_rescale"))) == 1
    assert rescale(location, 7, workdir=str(scratch)).partitions == 7
    assert os.listdir(scratch) == [] and os.listdir(os.path.join(location, "statestore", "_rescale")) == []


def _memory_limit() -> None:
    import resource

    # 12 GiB of address space: room for the threads and allocators a CLI process reserves (at 4 GiB
    # gRPC, imported with pyspark, aborted under load), far below what 10**12 partitions would take
    resource.setrlimit(resource.RLIMIT_AS, (12 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))


@pytest.mark.parametrize("where", ["layout", "offsets"])
def test_a_huge_partition_count_in_a_durable_file_fails_fast_naming_it(tmp_path, where):
    """10**12 partitions recorded: refused before anything is sized by it (no allocation)."""
    location, _ = _query(tmp_path, batches=1)
    if where == "layout":
        with open(os.path.join(location, "statestore", "_layout"), "w") as f:
            json.dump({"partitions": 10**12, "stores": {s.name: s.as_dict() for s in w.SPECS}}, f)
        named = r"statestore/_layout .*partitions must be at most 10000, got 1000000000000"
    else:
        _offsets(location, 1, 10**12)
        named = r"offsets/0 records spark.sql.shuffle.partitions = 1000000000000"
    for command in (["verify", location], ["read", location, "--store", "totals"]):
        err = subprocess.run([sys.executable, "-m", "spark_statestore", *command], capture_output=True, text=True,
                             timeout=120, preexec_fn=_memory_limit)  # unfixed: a MemoryError, not the machine's
        assert err.returncode in (1, 2) and re.search(named, err.stdout + err.stderr), err.stdout + err.stderr


def test_claims_on_an_object_store_let_one_rescale_through(s3_endpoint, bucket):
    """On S3 (moto), where there are no file locks: a claim made while another is held is
    refused and leaves nothing behind; crafted or unreadable claims block, naming the file."""
    import pyarrow.fs as pafs

    from spark_statestore.partition.rescale_claim import RescaleClaim

    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http")
    root, where = f"{bucket}/query", f"s3://{bucket}/query"
    listing = pafs.FileSelector(f"{root}/statestore/_rescale", allow_not_found=True)
    with RescaleClaim(fs, root, where, "first") as first:
        with pytest.raises(RescaleClaimedError, match=r"_rescale/\w+\.claim.*first"):
            RescaleClaim(fs, root, where, "second").__enter__()
        assert [i.base_name for i in fs.get_file_info(listing)] == [first.name]
        first.check_held()
    assert fs.get_file_info(listing) == []
    with fs.open_output_stream(f"{root}/statestore/_rescale/crafted.claim") as out:
        out.write(b"\xff not json")
    with pytest.raises(RescaleClaimedError, match=r"crafted\.claim.*unreadable"):
        RescaleClaim(fs, root, where, "third").__enter__()
    fs.delete_file(f"{root}/statestore/_rescale/crafted.claim")
    with RescaleClaim(fs, root, where, "fourth") as fourth:
        fs.delete_file(f"{root}/statestore/_rescale/{fourth.name}")  # an operator took it for a killed one's
        with pytest.raises(RescaleClaimedError, match="was removed while it ran"):
            fourth.check_held()


def test_a_query_run_reads_the_layout_once_and_the_run_after_a_rescale_reads_the_new_one(tmp_path):
    """Tasks of one query run read the layout file once per process (a rescale runs only
    while the query is stopped); the run that follows a rescale is another run and writes
    the new generation, never the old one (a stale layout would put its changelogs where
    nothing reads them)."""
    from spark_statestore.checkpoint.names import partition_dir

    location, local = str(tmp_path / "checkpoint"), str(tmp_path / "local")
    w.start(location)
    for batch in range(3):
        w.run_batch(location, local, 2, batch)

    def task(run: str, partition: int) -> PartitionState:
        return PartitionState(location, partition, w.SPECS, WorkerResources(os.path.join(local, run, str(partition))),
                              query_run=run)

    assert task("run-1", 1).durable.root == partition_dir(location, 1, 0)
    os.rename(os.path.join(location, "statestore", "_layout"), os.path.join(location, "layout.aside"))
    assert task("run-1", 0).durable.root == partition_dir(location, 0, 0)  # not read again in the run
    os.rename(os.path.join(location, "layout.aside"), os.path.join(location, "statestore", "_layout"))
    rescale(location, 3)
    for partition in range(3):  # the next run, on 3 partitions: generation 1, with the moved state
        state = task("run-2", partition)
        assert state.durable.root == partition_dir(location, partition, 1)
        state.open(3)
        state.close()
    assert w.read_state(location, 2)[:2] == w.reference(3)
