"""How the doctor's own code reaches a node without a runtime env: the probe's class travels by
value (this module imports the standard library only) and carries the package's sources, which it
serves from memory to the node's import system.

A Ray job with a runtime env (`py_modules`) gets workers of its own: each node starts a fresh
worker after its runtime-env agent has fetched and unpacked the package, about 1.5 to 3 s before a
probe answers. A job without one can take a worker the raylet already started and keeps idle
(Ray prestarts workers with no runtime env), and needs no agent. Nothing is written on the node:
the sources live in the probe's process and die with it.

Ray requires the cluster to run the driver's Python (major.minor) and Ray versions, so the node
compiles the same sources the CLI runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import pickle
import sys
import types
from collections.abc import Sequence
from typing import Any

PACKAGE = "slime_hangdoctor"


class SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `PACKAGE`'s modules from `sources` (dotted module name -> (source, is_package))."""

    def __init__(self, sources: dict[str, tuple[bytes, bool]]) -> None:
        self.sources = sources

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        entry = self.sources.get(fullname)
        if entry is None:
            return None
        spec = importlib.util.spec_from_loader(fullname, self, is_package=entry[1])
        if spec is not None:
            spec.has_location = False
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        source, is_package = self.sources[module.__name__]
        filename = f"<{PACKAGE} sent by the doctor>/{module.__name__.replace('.', '/')}.py"
        if is_package:
            module.__path__ = []
        code = compile(source, filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the doctor's own sources, sent by the doctor


def install(sources: dict[str, tuple[bytes, bool]]) -> None:
    """Put the doctor's sources first on this process's import path (once: the actor's
    constructor, before any call), and drop any copy of the package another version left
    imported. (No lock: this module travels by value, and a lock does not pickle.)"""
    if any(type(f).__name__ == "SourceFinder" for f in sys.meta_path):
        return
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    sys.meta_path.insert(0, SourceFinder(sources))


class BootProbe:
    """The node's probe as Ray creates it: installs the sources, then is `NodeProbe`."""

    def __init__(self, first_sample: int, sources: dict[str, tuple[bytes, bool]]) -> None:
        install(sources)
        remote = importlib.import_module(PACKAGE + ".collect.remote")
        self._probe: Any = remote.NodeProbe(first_sample)

    def sample(self, spec: Any, opts: Any, budget_s: float) -> bytes:
        answer: bytes = self._probe.sample(spec, opts, budget_s)
        return answer

    def gpus(self, spec: Any, opts: Any, budget_s: float, until: float) -> bytes:
        answer: bytes = self._probe.gpus(spec, opts, budget_s, until)
        return answer

    def asked(self, payload: bytes) -> bytes:
        """A call as the doctor pickled it (`remote.RayTasks.submit`): ("sample", spec, opts,
        budget_s) or ("gpus", spec, opts, budget_s, until). The doctor's Ray driver passes it on
        unread, so that process needs none of the package's types (nor their imports)."""
        kind, *args = pickle.loads(payload)  # noqa: S301 - the doctor's own call, as sent
        return self.gpus(*args) if kind == "gpus" else self.sample(*args)
