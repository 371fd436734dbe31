"""A first run of `./dev` and of the package build: says what it installs, no deprecation
banner, and `./dev jupyter`'s setup (without starting a server)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
import warnings

import pytest
import paths

ROOT = str(paths.ROOT)
DEV = os.path.join(ROOT, "dev")


def _dev(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([DEV, *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def test_every_quiet_install_says_first_what_it_installs():
    """pip --quiet is silent for minutes on a first run: the line before says what comes."""
    with open(DEV) as f:
        lines = f.read().splitlines()
    installs = [n for n, line in enumerate(lines) if "pip install --quiet" in line and "--upgrade pip" not in line]
    assert installs
    for n in installs:
        said = [line for line in lines[n - 2:n] if re.search(r'echo "dev: installing .*few minutes\)" >&2', line)]
        assert said, f"./dev line {n + 1} installs without a word: {lines[n].strip()}"


def test_dev_jupyter_dry_run_names_the_extras_and_the_notebook_folder():
    done = _dev("jupyter", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "[notebooks,jupyter]" in done.stdout
    assert ".venv/bin/python -m jupyter lab --notebook-dir=examples/notebooks" in done.stdout
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert any(r.startswith("jupyterlab") for r in extras["jupyter"])
    assert "spark_statestore[notebooks]" in extras["jupyter"]


def test_dev_help_lists_the_commands_only():
    done = _dev("help")
    assert done.returncode == 0 and "./dev jupyter" in done.stdout
    assert "set -euo pipefail" not in done.stdout


def test_the_license_is_an_spdx_expression_without_setuptools_deprecation():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        pyproject = tomllib.load(f)
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in pyproject["build-system"]["requires"]  # the first to read SPDX licenses
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} predates SPDX licenses (builds get >=77)")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), os.path.join(ROOT, "pyproject.toml"))
    assert not [w for w in caught if "license" in str(w.message)]
