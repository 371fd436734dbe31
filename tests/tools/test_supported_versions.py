"""One source for each spelling the project repeats: the supported pyspark versions
(`compat.minors.MINORS`: pyproject's bounds, `./dev`'s patches and the README's version
table are checked against it) and the defaults the `spark.statestore.*` settings share
with `PartitionOptions` (the lock timeout was 120 s in one and 60 s in the other)."""

from __future__ import annotations

import os
import re
import tomllib

from spark_statestore.partition.options import PartitionOptions
from spark_statestore.spark.compat.minors import MINORS
from spark_statestore.spark.driver.settings import StateStoreSettings
import paths

ROOT = str(paths.ROOT)


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def _next_minor(minor: str) -> str:
    major, number = minor.split(".")
    return f"{major}.{int(number) + 1}"


def test_pyproject_admits_exactly_the_minors_of_MINORS():
    project = tomllib.loads(_read("pyproject.toml"))
    wanted = f">={min(MINORS)},<{_next_minor(max(MINORS))}"
    requirements = project["build-system"]["requires"] + project["project"]["dependencies"]
    requirements += [r for extra in project["project"]["optional-dependencies"].values() for r in extra]
    pyspark = [r for r in requirements if re.match(r"pyspark\b", r)]
    assert len(pyspark) >= 3  # the build, the package and the connect extra
    for requirement in pyspark:
        assert re.sub(r"^pyspark(\[[a-z]+\])?", "", requirement) == wanted, requirement


def test_dev_installs_the_patch_of_each_minor_in_MINORS():
    case = re.search(r"pyspark_patch\(\) \{\n  case \"\$1\" in\n(.*?)\n  esac", _read("dev"), re.S)
    assert case, "./dev has no pyspark_patch case"
    patches = dict(re.findall(r"^    ([0-9.]+)\) echo ([0-9.]+) ;;$", case.group(1), re.M))
    assert patches == {minor: facts.patch for minor, facts in MINORS.items()}
    assert f"({', '.join(MINORS)})" in case.group(1)  # what a wrong minor is told


def test_the_readme_names_the_patches_of_MINORS():
    readme = _read("README.md")
    patches = [facts.patch for facts in MINORS.values()]
    assert "| feature (classic / Connect) | tests | " + " | ".join(patches) + " |" in readme
    newest, older = patches[-1], patches[:-1]
    said = f"runs the whole suite on {newest} and the `versioned` tests on\n{', '.join(older[:-1])} and {older[-1]}"
    assert said in readme


def test_the_lock_timeout_and_the_protocol_defaults_have_one_source():
    settings, options = StateStoreSettings.defaults(), PartitionOptions()
    assert settings.lock_timeout == options.lock_timeout == 120.0
    assert settings.snapshot_interval == options.snapshot_interval
    assert settings.min_batches_to_retain == options.min_batches_to_retain
    assert "`.lockTimeout` (120 s)" in _read("README.md")
