"""Two Ray clusters on one machine (issue 43 item 3): the local process scan keeps only the
diagnosed cluster's processes, never the other's.

Two real heads (`ray start --head`, each with its own ports and temp dir: the demo's
cluster.start_head), each running a detached actor of slime's class `RolloutManager` (so both
carry the title `ray::RolloutManager`, which the title discovery of `--local` takes). The
doctor, pointed at one cluster in each of the ways a user does (its dashboard, its GCS address,
`--local` with its Ray temp dir, an address where no Ray answers), lists that cluster's actor
and not the other's: in the bundle's process artefacts and anywhere in the verdict. The control:
the scan without a scope takes both (what it did before)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_hangdoctor_demo.cluster import RayHead, start_head
from tests.integration.cli import run_cli

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]

# A detached actor of slime's RolloutManager class, left running after its driver exits; prints
# its pid (the real Ray API, the head's GCS address in argv[1]).
ACTOR = """
import os, sys, ray
ray.init(address=sys.argv[1], namespace="two-clusters", logging_level="ERROR")

@ray.remote(num_cpus=0)
class RolloutManager:
    def pid(self):
        return os.getpid()

a = RolloutManager.options(name="rm", lifetime="detached").remote()
print("PID", ray.get(a.pid.remote()), flush=True)
"""


def _actor(head: RayHead) -> int:
    done = subprocess.run(
        [sys.executable, "-c", ACTOR, head.gcs_address],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    return int(next(ln for ln in done.stdout.splitlines() if ln.startswith("PID")).split()[1])


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[RayHead, int]]]:
    work = tmp_path_factory.mktemp("two")
    heads: list[RayHead] = []
    try:
        for name in ("a", "b"):
            heads.append(start_head(work / name, num_cpus=1, timeout=300.0))
        yield [(head, _actor(head)) for head in heads]
    finally:
        for head in heads:
            head.stop()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    return {**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'demo'}", **extra}


def _scanned_pids(bundle: Path) -> set[int]:
    """Every pid of every process artefact of the bundle (the .tar.gz the CLI wrote, else its
    folder: a run that reached no Ray keeps the folder only)."""
    pids: set[int] = set()
    if not bundle.exists():
        for f in bundle.with_name(bundle.name.removesuffix(".tar.gz")).rglob("raw/processes/**/*.json"):
            pids |= {int(p["pid"]) for p in json.loads(f.read_bytes()).get("processes", [])}
        return pids
    with tarfile.open(bundle) as tar:
        for member in tar.getmembers():
            if "/raw/processes/" in f"/{member.name}" and member.isfile():
                fh = tar.extractfile(member)
                assert fh is not None
                doc = json.loads(fh.read())
                pids |= {int(p["pid"]) for p in doc.get("processes", [])}
    return pids


def _attach(tmp_path: Path, name: str, *args: str, env: dict[str, str]) -> tuple[set[int], str]:
    out = tmp_path / name
    proc, _ = run_cli(
        "attach", *args, "--window", "1", "--timeout", "40", "--json", "--out", str(out),
        timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode in (0, 1, 2, 3), proc.stderr[-2000:]
    tar = out.with_name(out.name + ".tar.gz")
    return _scanned_pids(tar), proc.stdout


@pytest.mark.parametrize("how", ["dashboard", "gcs", "local"])
def test_the_doctor_lists_only_the_diagnosed_clusters_processes(
    clusters: list[tuple[RayHead, int]], tmp_path: Path, how: str
) -> None:
    for mine, other in ((0, 1), (1, 0)):
        head, pid = clusters[mine]
        other_pid = clusters[other][1]
        if how == "dashboard":
            args, env = [head.dashboard_url], _env()
        elif how == "gcs":
            args, env = [head.gcs_address], _env()
        else:  # no Ray connection: found by titles, in the cluster of RAY_TMPDIR's session
            args, env = ["--local"], _env(RAY_TMPDIR=str(head.temp_dir.parent))
        pids, verdict = _attach(tmp_path, f"{how}-{mine}", *args, env=env)
        assert pid in pids, (how, mine, sorted(pids))
        assert other_pid not in pids, (how, mine, other_pid, sorted(pids))
        assert f'"pid": {other_pid}' not in verdict and f"pid {other_pid}" not in verdict


def test_an_address_where_no_ray_answers_takes_neither_cluster(
    clusters: list[tuple[RayHead, int]], tmp_path: Path
) -> None:
    pids, _ = _attach(tmp_path, "nowhere", "http://127.0.0.1:9", env=_env())
    assert not pids & {pid for _, pid in clusters}, sorted(pids)


def test_the_scan_without_a_scope_takes_both(clusters: list[tuple[RayHead, int]]) -> None:
    """The control: without knowing the cluster, title discovery takes both actors (so the tests
    above would see the other cluster's, were the scan not scoped)."""
    from slime_hangdoctor.collect.cluster_scope import session_scope
    from slime_hangdoctor.collect.processes import scan_processes

    every = {p["pid"] for p in scan_processes(None, uid=os.geteuid())["processes"]}
    assert {pid for _, pid in clusters} <= every
    head, pid = clusters[0]
    scope = session_scope(head.temp_dir, frozenset({os.geteuid()}))
    assert scope.session_name and scope.session_name.startswith("session_")
    doc = scan_processes(None, uid=os.geteuid(), cluster=scope)
    scoped = {p["pid"] for p in doc["processes"]}
    assert pid in scoped and clusters[1][1] not in scoped
    assert clusters[1][1] in doc["other_cluster"]


def test_each_actor_names_its_own_clusters_raylet(clusters: list[tuple[RayHead, int]]) -> None:
    """How a process's cluster is told, on the real processes: the actor's RAY_RAYLET_PID names a
    raylet whose command line gives its cluster's GCS address and session (the one its Ray temp
    dir's session_latest names), and a node id the other raylet does not have."""
    import psutil

    from slime_hangdoctor.collect.cluster_scope import (
        ClusterScope,
        belongs,
        raylet_pid,
        read_raylet,
        same_gcs,
        session_scope,
    )

    raylets = []
    for head, pid in clusters:
        at = raylet_pid(pid, psutil.Process(pid).environ(), {})
        assert at is not None
        raylet = read_raylet(at)
        assert raylet is not None and raylet.gcs_address and raylet.node_id
        assert same_gcs(raylet.gcs_address, head.gcs_address), (raylet, head.gcs_address)
        own = session_scope(head.temp_dir, frozenset({os.geteuid()}))
        assert raylet.session_name == own.session_name
        raylets.append(raylet)
    a, b = raylets
    assert a.node_id != b.node_id and a.session_name != b.session_name
    assert belongs(a, ClusterScope(node_id=a.node_id)) and not belongs(b, ClusterScope(node_id=a.node_id))
    assert not belongs(a, ClusterScope(gcs_address=clusters[1][0].gcs_address))
