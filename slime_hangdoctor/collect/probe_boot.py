"""How the doctor's own code reaches a node without a runtime env: the probe's class travels by
value (this module imports the standard library only) and carries the package's sources, which it
serves from memory to the node's import system.

A Ray job with a runtime env (`py_modules`) gets workers of its own: each node starts a fresh
worker after its runtime-env agent has fetched and unpacked the package, about 1.5 to 3 s before a
probe answers. A job without one can take a worker the raylet already started and keeps idle
(Ray prestarts workers with no runtime env), and needs no agent. Nothing is written on the node:
the sources live in the probe's process and die with it.

Ray requires the cluster to run the driver's Python (major.minor) and Ray versions, so the node
runs the same sources the CLI runs. Each module travels compiled as well (its code object,
marshalled by the doctor's Python from the bytecode cache the CLI's own imports use): a node whose
Python has the same bytecode (`importlib.util.MAGIC_NUMBER`) runs it as sent, and compiles
nothing: compiling the probe's modules was about 40 % of its boot's CPU (issue 46, 64 nodes
booting their probes on 16 cores; docs/performance.md). A node of another bytecode, or a module
whose code does not load, compiles the source, as before.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import marshal
import pickle
import sys
import types
from collections.abc import Sequence
from typing import Any

PACKAGE = "slime_hangdoctor"

# A module as the doctor sends it: its source, whether it is a package, and its code object as
# `marshal` wrote it on the doctor's Python (None: compile the source)
Module = tuple[bytes, bool, bytes | None]
# The package as the doctor sends it: the bytecode its code was marshalled for, and its modules
Sent = tuple[bytes, dict[str, Module]]


def sent_filename(name: str) -> str:
    """The file name a sent module's code carries (its tracebacks on the node say where it came
    from, not a path of the doctor's machine)."""
    return f"<{PACKAGE} sent by the doctor>/{name.replace('.', '/')}.py"


class SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `PACKAGE`'s modules from `sources` (dotted module name -> Module); their code as
    sent where `magic` is this Python's bytecode."""

    def __init__(self, sources: dict[str, Module], magic: bytes = b"") -> None:
        self.sources = sources
        self.compiled = magic == importlib.util.MAGIC_NUMBER

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
        source, is_package, sent_code = self.sources[module.__name__]
        if is_package:
            module.__path__ = []
        code = self._loaded(sent_code)
        if code is None:
            code = compile(source, sent_filename(module.__name__), "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the doctor's own sources, sent by the doctor

    def _loaded(self, sent_code: bytes | None) -> types.CodeType | None:
        """The module's code as sent, where this Python reads it; else None (compile it)."""
        if sent_code is None or not self.compiled:
            return None
        try:
            code = marshal.loads(sent_code)  # noqa: S302 - the doctor's own code, sent by the doctor
        except (EOFError, ValueError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None


def install(sent: Sent) -> None:
    """Put the doctor's sources first on this process's import path (once: the actor's
    constructor, before any call), and drop any copy of the package another version left
    imported. (No lock: this module travels by value, and a lock does not pickle.)"""
    if any(type(f).__name__ == "SourceFinder" for f in sys.meta_path):
        return
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    magic, modules = sent
    sys.meta_path.insert(0, SourceFinder(modules, magic))


class BootProbe:
    """The node's probe as Ray creates it: installs the sources, then is `NodeProbe`."""

    def __init__(self, first_sample: int, sources: Sent) -> None:
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
