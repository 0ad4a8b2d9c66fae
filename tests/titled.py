"""Python children titled as Ray and SGLang title their processes (`ray::Class.method`,
`sglang::scheduler_TP0`): the real interpreter (`sys.executable`, so a venv, `uv venv` or conda
environment stays that environment) started normally, then `setproctitle` first thing, which
rewrites /proc/<pid>/cmdline (what the doctor's psutil `cmdline()` reads) and, on Linux, comm
(psutil `name()`).

A custom argv[0] (`Popen([title, ...], executable=sys.executable)`) is not used: CPython then cannot
find the virtualenv and starts the base interpreter without the environment's site-packages.
"""

from __future__ import annotations

import sys


def title_prelude(title: str) -> str:
    """Python source that sets this process's title (to put first in a `-c` program). SPT_NOENV=1
    as the raylet starts Ray workers: the title stays within the command line and
    /proc/<pid>/environ stays readable (setproctitle would otherwise write over it)."""
    return (
        "import os\nos.environ['SPT_NOENV'] = '1'\n"
        f"import setproctitle\nsetproctitle.setproctitle({title!r})\n"
    )


def titled_python(title: str, code: str, *args: str) -> list[str]:
    """argv of a Python child that runs `code` (as `-c`) under the process title `title`."""
    return [sys.executable, "-c", title_prelude(title) + code, *args]
