"""A sweep of local copies is housekeeping and must never fail a task, also when the
local directory is a file (not a directory)."""

from __future__ import annotations

from spark_statestore.partition.local import sweep_idle_copies


def test_sweep_of_a_local_dir_that_is_a_file_deletes_nothing_and_does_not_raise(tmp_path):
    path = tmp_path / "local"
    path.write_text("not a directory")
    assert sweep_idle_copies(str(path), 0) == []
    assert path.read_text() == "not a directory"
