"""Reach the other nodes through Ray itself: node-local collection as Ray tasks pinned to each node.

The doctor connects as a short-lived Ray driver (its own namespace, no logs forwarded), runs zero-CPU
tasks with hard node affinity (a busy node still takes them; no actor is ever created, so nothing is
left behind), waits for each under the run's deadline, and disconnects. Our own package travels as a
`py_modules` runtime env, so the node runs the same code as the CLI. A node whose task fails or times
out becomes a named blind spot; its stacks may still come from the dashboard's /worker/traceback.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord, safe_suffix
from slime_hangdoctor.collect.node import run_detached_sample
from slime_hangdoctor.collect.node_probe import NodeSpec
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.processes import PROCESSES

NAMESPACE = "slime-hangdoctor"


@dataclass(frozen=True)
class RemoteNode:
    node_id: str
    node_ip: str


class RayTasks:
    """A lazily connected Ray driver that runs node-local samples on other nodes."""

    def __init__(self, gcs_address: str | None, timeout_s: float) -> None:
        self.gcs_address = gcs_address
        self._ready = threading.Event()
        self._error: str | None = None
        self._remote: Any = None
        self._thread = threading.Thread(
            target=self._connect, args=(timeout_s,), daemon=True, name="ray-connect"
        )
        self._thread.start()

    def _connect(self, timeout_s: float) -> None:
        try:
            if not self.gcs_address:
                raise RuntimeError("the GCS address of the cluster is unknown (give host:6379)")
            import ray

            import slime_hangdoctor

            pkg = str(Path(slime_hangdoctor.__file__).parent)
            if not ray.is_initialized():
                ray.init(
                    address=self.gcs_address,
                    namespace=NAMESPACE,
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                    configure_logging=False,
                    runtime_env={"py_modules": [pkg]},
                )
            self._remote = ray.remote(num_cpus=0, max_retries=0)(_task)
        except Exception as exc:  # noqa: BLE001 - any failure is a blind spot, never a crash
            self._error = f"could not connect to Ray as a driver: {type(exc).__name__}: {exc}"[:400]
        finally:
            self._ready.set()

    def ready(self, timeout: float) -> str | None:
        """None when connected, else why not."""
        if not self._ready.wait(timeout):
            return "connecting to Ray as a driver took too long"
        return self._error

    def submit(
        self, node: RemoteNode, spec: NodeSpec, opts: CollectOptions, budget_s: float, gpus: bool
    ) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)
        return self._remote.options(
            scheduling_strategy=strategy, name=f"slime-hangdoctor:{node.node_ip}"
        ).remote(spec, opts, budget_s, gpus)

    def fetch(
        self, ref: Any, timeout: float
    ) -> tuple[list[tuple[dict[str, Any], bytes | None, str]] | None, str | None]:
        import ray

        try:
            return ray.get(ref, timeout=max(0.1, timeout)), None
        except Exception as exc:  # noqa: BLE001 - GetTimeoutError, NodeDiedError, RayTaskError ...
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001
                pass
            return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[
                :300
            ]

    def close(self) -> None:
        self._thread.join(timeout=0.1)
        if self._remote is None:
            return
        try:
            import ray

            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass


def _task(
    spec: NodeSpec, opts: CollectOptions, budget_s: float, gpus: bool
) -> list[tuple[dict[str, Any], bytes | None, str]]:
    return run_detached_sample(spec, opts, budget_s, gpus)


def add_exported(
    writer: BundleWriter, exported: list[tuple[dict[str, Any], bytes | None, str]]
) -> int:
    """Re-add a remote node's records (and bytes) to the main bundle; returns how many.

    A node's answer is untrusted input: its record's source, target and node become safe file
    names (BundleWriter), and so does its artefact suffix; a suffix that had to be changed is
    said in the record's reason. Nothing it says can place a file outside the bundle."""
    n = 0
    for item in exported:
        try:
            rec_json, data, suffix = item
            rec = ProbeRecord.from_json(rec_json)
        except Exception:  # noqa: BLE001 - a malformed record from a node is skipped
            continue
        reason = rec.reason
        if not isinstance(data, (bytes, str)):
            data = None
        suffix = suffix if isinstance(suffix, str) else ""
        if data is not None and safe_suffix(suffix) != suffix:
            note = f"the node's artefact suffix {suffix[:80]!r} was unsafe: saved as {safe_suffix(suffix)!r}"
            reason = f"{reason}; {note}" if reason else note
        writer.add(
            ProbeRecord(**{**rec.__dict__, "artifact": None, "reason": reason}), data, suffix=suffix
        )
        n += 1
    return n


def collect_remote(
    tasks: RayTasks,
    writer: BundleWriter,
    nodes: list[tuple[RemoteNode, NodeSpec]],
    opts: CollectOptions,
    deadline: Deadline,
    *,
    gpus: bool = False,
    budget_s: float | None = None,
) -> list[tuple[RemoteNode, Any]]:
    """Start one task per node; returns (node, ref) pairs, or records a blind spot per node on failure."""
    problem = tasks.ready(deadline.clamp(opts.probe_timeout_s * 3))
    started: list[tuple[RemoteNode, Any]] = []
    for node, spec in nodes:
        if problem is not None:
            node_blind_spot(writer, node, spec.sample, problem)
            continue
        try:
            budget = (
                budget_s if budget_s is not None else deadline.clamp(opts.probe_timeout_s * 2 + 2.0)
            )
            started.append((node, tasks.submit(node, spec, opts, budget, gpus)))
        except Exception as exc:  # noqa: BLE001
            node_blind_spot(writer, node, spec.sample, f"could not start a task there: {exc}"[:300])
    return started


def gather_remote(
    tasks: RayTasks,
    writer: BundleWriter,
    started: list[tuple[RemoteNode, Any]],
    sample: int | None,
    deadline: Deadline,
    wait_s: float,
) -> list[RemoteNode]:
    """Wait (bounded) for started tasks; add their evidence; returns the nodes that failed."""
    failed: list[RemoteNode] = []

    def one(pair: tuple[RemoteNode, Any]) -> None:
        node, ref = pair
        exported, error = tasks.fetch(ref, deadline.clamp(wait_s))
        if exported is None:
            node_blind_spot(writer, node, sample, error or "no answer")
            failed.append(node)
        else:
            add_exported(writer, exported)

    if started:
        with cf.ThreadPoolExecutor(max_workers=min(32, len(started))) as pool:
            list(pool.map(one, started))
    return failed


def node_blind_spot(writer: BundleWriter, node: RemoteNode, sample: int | None, why: str) -> None:

    writer.add(
        ProbeRecord(
            PROCESSES,
            f"node {node.node_ip}",
            Outcome.UNAVAILABLE,
            f"node {node.node_ip} ({node.node_id[:12]}) not inspected: {why}",
            node_ip=node.node_ip,
            sample=sample,
            meta={"node_id": node.node_id},
        )
    )
