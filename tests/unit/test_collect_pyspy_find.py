"""find_pyspy: PATH first, except a pyenv shim, which gives way to the py-spy beside this Python.

A pyenv shim is a bash script that runs `pyenv exec` (~50 ms of CPU per call, several times a
dump's own cost); any other py-spy on PATH (a stand-in, a wrapper, another version) is used as is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from slime_hangdoctor.collect.pyspy import find_pyspy

# the text of a real pyenv 2.x shim (`pyenv rehash` writes one per executable)
PYENV_SHIM = """#!/usr/bin/env bash
set -e
[ -n "$PYENV_DEBUG" ] && set -x

program="${0##*/}"

export PYENV_ROOT="/root/.pyenv"
exec "/root/.pyenv/libexec/pyenv" exec "$program" "$@"
"""
STAND_IN = '#!/bin/sh\nexec python3 -m some.standin "$@"\n'
BESIDE = Path(sys.executable).parent / "py-spy"


def _on_path(monkeypatch: pytest.MonkeyPatch, directory: Path, text: str) -> Path:
    exe = directory / "py-spy"
    exe.write_text(text)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")
    return exe


@pytest.mark.skipif(not BESIDE.is_file(), reason="no py-spy installed beside this Python")
def test_pyenv_shim_gives_way_to_the_binary_beside_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _on_path(monkeypatch, tmp_path, PYENV_SHIM)
    assert find_pyspy() == str(BESIDE)


def test_other_py_spy_on_path_is_used_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = _on_path(monkeypatch, tmp_path, STAND_IN)
    assert find_pyspy() == str(exe)


def test_pyenv_shim_without_a_binary_beside_is_still_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shims = tmp_path / "shims"
    shims.mkdir()
    exe = _on_path(monkeypatch, shims, PYENV_SHIM)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python3"))
    assert find_pyspy() == str(exe)
