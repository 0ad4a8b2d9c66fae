"""Hand-built `Diagnosis` objects for the renderer tests, the goldens and docs/img screenshots.

The stacks are the real py-spy frames of the 2x H200 reproducer (tests/fixtures/render/, copied from
shared/fixtures/gpu-2xh200-nccl-broadcast-hang/), formatted as `Frame.where` does; the readings
quoted in findings are copied from the same run's NVML/GPM/RAS files. The verdict wording is
written by hand: these objects exercise the renderers, not the analysis.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from slime_hangdoctor.facts import Frame
from slime_hangdoctor.render import render_markdown, render_terminal
from slime_hangdoctor.verdict import (
    Culprit,
    Diagnosis,
    Finding,
    NextStep,
    Role,
    RoleRow,
    Severity,
    StackExcerpt,
    Stage,
    Status,
    Verdict,
    unknown_verdict,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "render"
# The same 2x H200 run's bundle: when its evidence was taken (its first sample).
RUN_MANIFEST = FIXTURES.parent / "bundles" / "gpu-2xh200-nccl-broadcast-hang" / "manifest.json"
NODE = "192.0.2.2"
_DUMP_HEADER = re.compile(r"^== py-spy dump --json (\d+)$", re.MULTILINE)


def steps_of(*lines: str) -> tuple[NextStep, ...]:
    """Next steps from the lines a report prints (NextStep.text)."""
    return tuple(NextStep.parse(line) for line in lines)


def pyspy_frames(name: str) -> dict[int, tuple[str, ...]]:
    """pid -> frames (innermost first, `Frame.where` form) of the main thread in a fixture file."""
    text = (FIXTURES / name).read_text()
    parts = _DUMP_HEADER.split(text)[1:]
    stacks: dict[int, tuple[str, ...]] = {}
    for pid, body in zip(parts[::2], parts[1::2], strict=True):
        thread = json.loads(body)[0]
        stacks[int(pid)] = tuple(
            Frame(
                name=f["name"],
                filename=f["filename"],
                line=f["line"],
                short_filename=f["short_filename"],
            ).where
            for f in thread["frames"]
        )
    return stacks


def hung_diagnosis() -> Diagnosis:
    """Weight-sync NCCL broadcast that train rank 1 never joins (run3_hang of the 2x H200 run)."""
    stacks = pyspy_frames("run3_hang.pyspy.json.txt")
    culprit = Culprit(
        role=Role.TRAIN_RANK,
        why=(
            "Rank 1 sleeps in never_join and has launched no Broadcast, while rank 0 launched "
            "Broadcast #1 and waits for it in torch.cuda.synchronize."
        ),
        node_ip=NODE,
        pid=572,
        rank=1,
        gpu=1,
    )
    findings = (
        Finding(
            rule="nccl_ras.count_mismatch",
            severity=Severity.CRITICAL,
            message="NCCL RAS: the ranks of communicator e95c687864ce5cf7 disagree on Broadcast counts.",
            evidence=(
                "Rank 0 has launched up to operation 1 -- GPU 0 managed by process 571 on node 192.0.2.2",
                "Rank 1 has not launched any operations -- GPU 1 managed by process 572 on node 192.0.2.2",
            ),
        ),
        Finding(
            rule="stacks.collective_odd_one_out",
            severity=Severity.CRITICAL,
            message="Rank 0 is inside the weight-sync broadcast; rank 1 is not.",
            evidence=(
                f"rank 0 (pid 571): {stacks[571][0]} <- {stacks[571][1]}",
                f"rank 1 (pid 572): {stacks[572][0]} <- {stacks[572][1]}",
            ),
        ),
        Finding(
            rule="gpu.spin_in_collective",
            severity=Severity.WARNING,
            message=(
                "GPU 0 reads 100 % busy but does no work: a kernel spinning in a collective, not compute."
            ),
            evidence=(
                "GPU 0: util 100 %, memory util 0 %, 127.5 W, SM_UTIL 18.2 %, tensor 0 %",
                "GPU 1: util 0 %, memory util 0 %, 128.9 W",
                "CPU over 10 s: pid 571 1182 ticks (spinning), pid 572 3 ticks (sleeping)",
            ),
        ),
    )
    verdict = Verdict(
        status=Status.HUNG,
        stage=Stage.NCCL_BROADCAST,
        summary=(
            "The weight-sync NCCL broadcast is stuck: train rank 1 (pid 572) never joined it, "
            "so rank 0 waits forever."
        ),
        culprits=(culprit,),
        findings=findings,
        next_steps=steps_of(
            "Read rank 1's log and the code path at never_join (nccl_hang.py:11): find why it "
            "skipped the broadcast that rank 0 entered.",
            "Compare the weight-sync bucket lists (names, shapes, counts) of all ranks: a rank "
            "with fewer buckets skips a broadcast.",
            "Stop the job (ray job stop <id>) and restart it once fixed: NCCL does not recover a "
            "rank that never enters a collective.",
            "Attach this report and the evidence bundle (`slime-hangdoctor collect --out DIR`) "
            "to the issue.",
        ),
        blind_spots=(
            "Ray state API not reachable: roles were read from process command lines.",
            "No flight-recorder dump (opt in with --flight-recorder).",
        ),
        window_s=5.0,
        elapsed_s=8.7,
        confidence="high",
    )
    rows = (
        RoleRow(
            role=Role.TRAIN_RANK,
            label="train rank 0",
            node_ip=NODE,
            pid=571,
            stage=Stage.NCCL_BROADCAST,
            state="waiting for Broadcast #1 in torch.cuda.synchronize; GPU 0 spinning",
        ),
        RoleRow(
            role=Role.TRAIN_RANK,
            label="train rank 1",
            node_ip=NODE,
            pid=572,
            stage=Stage.UNKNOWN,
            state="sleeping in never_join; launched no Broadcast",
            culprit=True,
        ),
    )
    excerpt = StackExcerpt(
        title="train rank 1 (pid 572, MainThread, idle)", frames=stacks[572], highlight=(0,)
    )
    taken_at = min(json.loads(RUN_MANIFEST.read_text())["sample_times"])
    return Diagnosis(verdict=verdict, rows=rows, excerpt=excerpt, taken_at=taken_at)


def engine_culprit_diagnosis() -> Diagnosis:
    """`hung_diagnosis` with an SGLang engine culprit, to show engine URL and actor id."""
    base = hung_diagnosis()
    engine = Culprit(
        role=Role.SGLANG_ENGINE,
        why="POST /update_weights_from_distributed has had no answer for 300 s.",
        node_ip=NODE,
        pid=2217,
        engine_url="http://192.0.2.2:15000",
        actor_id="7d2f1c0a9be64e2f8c31a5d04e6b7f10a1b2c3d4",
        gpu=2,
    )
    verdict = replace(base.verdict, culprits=(*base.verdict.culprits, engine))
    return replace(base, verdict=verdict)


def progressing_diagnosis() -> Diagnosis:
    """A compute-bound rank (run3_matmul of the 2x H200 run): nothing is wrong."""
    stacks = pyspy_frames("run3_matmul.pyspy.json.txt")
    verdict = Verdict(
        status=Status.PROGRESSING,
        stage=Stage.NONE,
        summary="The job is making progress: rank 0 is compute-bound and its GPU does real work.",
        findings=(
            Finding(
                rule="gpu.compute_bound",
                severity=Severity.INFO,
                message="GPU 0 is doing tensor work at full power.",
                evidence=(
                    "GPU 0: util 99 %, memory util 30 %, 592.8 W, SM_UTIL 96.4 %, tensor 89.0 %",
                    "CPU over 10 s: pid 840 1187 ticks",
                ),
            ),
        ),
        next_steps=steps_of(
            "Nothing to do now; run `slime-hangdoctor check` again if a step stalls."
        ),
        window_s=5.0,
        elapsed_s=7.9,
        confidence="high",
    )
    rows = (
        RoleRow(
            role=Role.TRAIN_RANK,
            label="train rank 0",
            node_ip=NODE,
            pid=840,
            stage=Stage.TRAIN,
            state="computing in busy_matmul; GPU 0 99 % util, 593 W",
        ),
        RoleRow(
            role=Role.TRAIN_RANK,
            label="train rank 1",
            node_ip=NODE,
            pid=841,
            stage=Stage.NONE,
            state="idle (sleeping)",
        ),
    )
    excerpt = StackExcerpt(
        title="train rank 0 (pid 840, MainThread, active)", frames=stacks[840], highlight=(1,)
    )
    return Diagnosis(verdict=verdict, rows=rows, excerpt=excerpt)


def idle_diagnosis() -> Diagnosis:
    """No work in flight: ranks sleeping, GPUs at idle power."""
    verdict = Verdict(
        status=Status.IDLE,
        stage=Stage.NONE,
        summary="No work in flight: both ranks sleep and both GPUs are idle.",
        findings=(
            Finding(
                rule="gpu.idle",
                severity=Severity.INFO,
                message="Both GPUs are at 0 % utilisation and idle power.",
                evidence=("GPU 0: util 0 %, 128.4 W", "GPU 1: util 0 %, 128.9 W"),
            ),
        ),
        next_steps=steps_of(
            "If the job should be training, check the driver's log for the last step."
        ),
        blind_spots=("No SGLang engine was found: rollout health not checked.",),
        window_s=5.0,
        elapsed_s=6.2,
        confidence="medium",
    )
    rows = tuple(
        RoleRow(
            role=Role.TRAIN_RANK,
            label=f"train rank {rank}",
            node_ip=NODE,
            pid=pid,
            stage=Stage.NONE,
            state="idle (sleeping)",
        )
        for rank, pid in ((0, 840), (1, 841))
    )
    return Diagnosis(verdict=verdict, rows=rows)


def unknown_diagnosis() -> Diagnosis:
    """Nothing could be seen: no Ray dashboard, no slime processes."""
    verdict = unknown_verdict(
        "Could not diagnose: no slime process was found and the Ray dashboard did not answer.",
        blind_spots=(
            "Ray dashboard at http://127.0.0.1:8265: connection refused.",
            "py-spy: no target process.",
            "NVML: libnvidia-ml.so.1 not found.",
        ),
        elapsed_s=3.2,
    )
    steps = (
        "Give the cluster address: `slime-hangdoctor attach http://HEAD:8265` (or set RAY_ADDRESS).",
        "Without Ray, run `slime-hangdoctor attach --local` on a node of the job, as the user that "
        "owns its processes.",
    )
    return Diagnosis(verdict=replace(verdict, next_steps=steps_of(*steps)))


def all_diagnoses() -> dict[str, Diagnosis]:
    """Every example by name: hung, engine_culprit, progressing, idle, unknown."""
    return {
        "hung": hung_diagnosis(),
        "engine_culprit": engine_culprit_diagnosis(),
        "progressing": progressing_diagnosis(),
        "idle": idle_diagnosis(),
        "unknown": unknown_diagnosis(),
    }


# --------------------------------------------------------------------------- rendered forms

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"


def terminal_text(diagnosis: Diagnosis, width: int = 100) -> str:
    """The plain-text terminal report, as a non-tty console of `width` columns writes it."""
    console = Console(width=width, force_terminal=False, no_color=True)
    with console.capture() as capture:
        render_terminal(diagnosis, console)
    return capture.get()


def goldens() -> dict[str, str]:
    """Golden file name -> expected text; regenerate with `python scripts/make_screenshots.py`."""
    examples = all_diagnoses()
    return {
        "terminal_hung.txt": terminal_text(examples["hung"]),
        "terminal_progressing.txt": terminal_text(examples["progressing"]),
        "markdown_hung.md": render_markdown(examples["hung"]),
    }
