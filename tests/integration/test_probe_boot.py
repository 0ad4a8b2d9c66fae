"""The doctor's package reaches a node as sources its probe serves from memory (probe_boot): a node
sample must import nothing of the package from anywhere else.

A fresh interpreter stands in for a Ray worker on a node where the package is not installed: a
finder placed right after the probe's refuses every `slime_hangdoctor` module (this machine has the
package installed, so a module missing from the sources would otherwise be found there). The
interpreter has already imported the installed package once, as a worker reused from Ray's idle
pool may have; the probe replaces it. The sample is a real one of this machine's processes, read
from the probe's answer as the doctor reads it.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

from slime_hangdoctor.collect.ray_driver import package_sources
from slime_hangdoctor.collect.remote import unpack_answer

CHILD = r"""
import importlib, importlib.abc, os, pickle, sys

import slime_hangdoctor.collect.probe_boot as probe_boot  # the installed copy, imported first

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "slime_hangdoctor" or name.startswith("slime_hangdoctor."):
            raise ImportError(f"{name} was not served from the sent sources")
        return None

sources = pickle.loads(open(sys.argv[1], "rb").read())
probe = probe_boot.BootProbe(0, sources)
sys.meta_path.insert(1, Refuse())
node_probe = importlib.import_module("slime_hangdoctor.collect.node_probe")
options = importlib.import_module("slime_hangdoctor.collect.options")
spec = node_probe.NodeSpec("127.0.0.1", 0, frozenset({os.getppid()}))
answer = probe.sample(spec, options.CollectOptions(stacks=False), 20.0)
served = sorted(
    m for m, mod in sys.modules.items()
    if m.startswith("slime_hangdoctor") and type(mod.__spec__.loader).__name__ != "SourceFinder"
)
assert not served, served
sys.stdout.buffer.write(answer)
"""


def test_a_node_sample_imports_the_package_only_from_the_sent_sources(tmp_path: Path) -> None:
    sources = package_sources()
    assert "slime_hangdoctor" in sources and sources["slime_hangdoctor"][1]
    assert "slime_hangdoctor.collect.remote" in sources
    blob = tmp_path / "sources.pickle"
    blob.write_bytes(pickle.dumps(sources))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(blob)], check=False, capture_output=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    exported = unpack_answer(proc.stdout)
    assert exported is not None, proc.stdout[:300]
    records = [rec for rec, _blob, _suffix in exported]
    scans = [r for r in records if r.get("source") == "processes"]
    assert scans and all(r.get("outcome") == "ok" for r in scans), scans
