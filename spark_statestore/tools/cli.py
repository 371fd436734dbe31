"""`python -m spark_statestore`: look at a query's state from a shell, without Spark.

    python -m spark_statestore inspect CHECKPOINT [--json]
    python -m spark_statestore read CHECKPOINT [--store NAME] [--batch N | --uncommitted]
                                   [--changes --start A [--end B]] [--partition P ...] [--format csv|json]
    python -m spark_statestore verify CHECKPOINT [--json]
    python -m spark_statestore rescale CHECKPOINT N [--json]

Exit codes: 0 done (verify: no problem), 1 verify found problems, 2 a usage error, no
state where the command looked, or a state that cannot be rescaled now (the message names
the option or path and the value).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence, TextIO

from spark_statestore.errors import StateStoreError
from spark_statestore.partition.reading import StateLocation
from spark_statestore.tools import export
from spark_statestore.tools.inspection import inspect_state, render
from spark_statestore.tools.verification import verify_state


class UsageError(Exception):
    """A command line that names something the state does not have."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spark_statestore", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    inspect = commands.add_parser("inspect", help="stores, partitions, versions and sizes of the state")
    inspect.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI such as s3://...)")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of a text report")
    read = commands.add_parser("read", help="a store's records or changes, to stdout")
    read.add_argument("checkpoint", help="the query's checkpoint location")
    read.add_argument("--store", help="the store to read (needed when the state has several)")
    read.add_argument("--batch", type=int, help="read the records as of this committed batch (default: the newest)")
    read.add_argument("--uncommitted", action="store_true", help="include the prepared, not yet committed batch")
    read.add_argument("--changes", action="store_true", help="read changes (put/delete/expire) instead of records")
    read.add_argument("--start", type=int, help="with --changes: the first batch")
    read.add_argument("--end", type=int, help="with --changes: the last batch (default: the newest committed)")
    read.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
    read.add_argument("--format", choices=export.FORMATS, default="csv", help="csv (with a header) or json lines")
    verify = commands.add_parser("verify", help="check every durable file's checksums and each partition's chain")
    verify.add_argument("checkpoint", help="the query's checkpoint location")
    verify.add_argument("--json", action="store_true", help="print JSON instead of a text report")
    rescale = commands.add_parser(
        "rescale", help="move a stopped query's state to N partitions (where Spark's hash partitioning sends each key)"
    )
    rescale.add_argument("checkpoint", help="the query's checkpoint location")
    rescale.add_argument("partitions", type=int, help="the new partition count")
    rescale.add_argument("--json", action="store_true", help="print JSON instead of a text report")
    return parser


def _store(state: StateLocation, name: str | None):
    if name is None:
        if len(state.layout.stores) != 1:
            raise UsageError(f"--store is needed: the state under {state.location} has stores {state.layout.names}")
        return state.layout.stores[0]
    if name not in state.layout.names:
        raise UsageError(f"--store {name!r}: the state under {state.location} has stores {state.layout.names}")
    return state.store(name)


def _partitions(state: StateLocation, wanted: list[int] | None) -> list[int]:
    found = list(state.committed_partitions)  # one whose files are gone fails its read, naming it
    for partition in wanted or []:
        if partition not in found:
            raise UsageError(f"--partition {partition}: the state under {state.location} has partitions {found}")
    return sorted(set(wanted)) if wanted else found


def _read(args: argparse.Namespace, out: TextIO) -> int:
    state = StateLocation.open(args.checkpoint)
    spec = _store(state, args.store)
    committed = state.committed_batch()
    if committed is None:
        raise UsageError(f"no batch is committed under {args.checkpoint} (no commits/ in Spark's commit log)")
    read_batch = args.start if args.changes else (committed if args.batch is None else args.batch)
    partitions = _partitions(state.at_batch(read_batch if read_batch is not None else committed), args.partition)
    if args.changes:
        if args.start is None:
            raise UsageError("--changes needs --start (the first batch)")
        if args.batch is not None or args.uncommitted:
            raise UsageError("--changes reads the changes of committed batches --start..--end: it cannot go with "
                             "--batch or --uncommitted")
        end = committed if args.end is None else args.end
        if end > committed or args.start > end or args.start < 0:
            raise UsageError(f"--start {args.start} --end {end}: batches must be in 0..{committed}, start <= end")
        rows = export.change_rows(state, spec, args.start, end, partitions)
    else:
        if args.start is not None or args.end is not None:
            raise UsageError("--start and --end go with --changes")
        batch = committed if args.batch is None else args.batch
        if not 0 <= batch <= committed:
            raise UsageError(f"--batch {batch}: the committed batches are 0..{committed}")
        if args.uncommitted and args.batch is not None:
            raise UsageError("--uncommitted reads past the newest committed batch: it cannot go with --batch")
        rows = export.records(state, spec, batch, partitions, args.uncommitted)
    export.write(rows, out, args.format, export.columns_of(spec, args.changes))
    return 0


def _rescale(args: argparse.Namespace, out: TextIO) -> int:
    from spark_statestore.partition.rescale import rescale

    done = rescale(args.checkpoint, args.partitions)
    if args.json:
        out.write(json.dumps(done.__dict__) + "\n")
        return 0
    moved = ", ".join(f"{name}: {count}" for name, count in done.entries.items())
    out.write(
        f"rescaled {done.location} from {done.old_partitions} to {done.partitions} partitions at batch {done.base} "
        f"(generation {done.generation}); entries moved: {moved}\n"
    )
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run one command; returns the exit code."""
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        if args.command == "inspect":
            facts = inspect_state(args.checkpoint)
            out.write((json.dumps(facts.as_dict(), indent=1) if args.json else render(facts)) + "\n")
            return 0
        if args.command == "verify":
            report = verify_state(args.checkpoint)
            text = json.dumps({**report.__dict__, "problems": [p.__dict__ for p in report.problems], "ok": report.ok})
            out.write((text if args.json else report.render()) + "\n")
            return 0 if report.ok else 1
        if args.command == "rescale":
            return _rescale(args, out)
        return _read(args, out)
    except (UsageError, StateStoreError, ValueError, OSError) as e:
        print(f"python -m spark_statestore {args.command}: {e}", file=sys.stderr)
        return 2
