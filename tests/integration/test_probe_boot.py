"""The doctor's package reaches a node as sources its probe serves from memory (probe_boot): a node
sample must import nothing of the package from anywhere else.

A fresh interpreter stands in for a Ray worker on a node where the package is not installed: a
finder placed right after the probe's refuses every `slime_hangdoctor` module (this machine has the
package installed, so a module missing from the sources would otherwise be found there). The
interpreter has already imported the installed package once, as a worker reused from Ray's idle
pool may have; the probe replaces it. The sample is a real one of this machine's processes, read
from the probe's answer as the doctor reads it. Each module travels with its code compiled by the
doctor's Python: the node compiles none of them where its bytecode is the same, every one it
imports where it is not, and one whose code does not load (`SENT`); either way the code carries
the sent file name, not a path of the doctor's machine.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

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

compiled = []
real_compile = compile

def counting_compile(source, filename, *args, **kwargs):
    if str(filename).startswith("<slime_hangdoctor sent by the doctor>"):
        compiled.append(filename)
    return real_compile(source, filename, *args, **kwargs)

import builtins
builtins.compile = counting_compile
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
remote = sys.modules["slime_hangdoctor.collect.remote"]
where = remote.NodeProbe.sample.__code__.co_filename
assert where == "<slime_hangdoctor sent by the doctor>/slime_hangdoctor/collect/remote.py", where
print(len(compiled), file=sys.stderr)
sys.stdout.buffer.write(answer)
"""


# How the package is sent: as the doctor's Python compiled it, to a node of the same bytecode
# (nothing compiled there); to a node of another bytecode (the sent code is not run: each module
# it imports is compiled from its source); with a module's code unreadable (that one compiled)
SENT = ("same_bytecode", "other_bytecode", "unreadable_code")


@pytest.mark.parametrize("sent", SENT)
def test_a_node_sample_imports_the_package_only_from_the_sent_sources(
    tmp_path: Path, sent: str
) -> None:
    magic, sources = package_sources()
    assert "slime_hangdoctor" in sources and sources["slime_hangdoctor"][1]
    assert all(code is not None for _, _, code in sources.values())
    remote = "slime_hangdoctor.collect.remote"
    if sent == "other_bytecode":
        magic = bytes(b ^ 0xFF for b in magic)
    elif sent == "unreadable_code":
        source, package, code = sources[remote]
        assert code is not None
        sources = {**sources, remote: (source, package, code[: len(code) // 2])}
    blob = tmp_path / "sources.pickle"
    blob.write_bytes(pickle.dumps((magic, sources)))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(blob)], check=False, capture_output=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    compiled = int(proc.stderr.decode().strip().splitlines()[-1])
    if sent == "same_bytecode":
        assert compiled == 0
    elif sent == "unreadable_code":
        assert compiled == 1
    else:
        assert compiled > 10  # every module the sample imported
    exported = unpack_answer(proc.stdout)
    assert exported is not None, proc.stdout[:300]
    records = [rec for rec, _blob, _suffix in exported]
    scans = [r for r in records if r.get("source") == "processes"]
    assert scans and all(r.get("outcome") == "ok" for r in scans), scans
