"""What the demo tells a newcomer while its job starts and when the job fails: the start-up stage
read from the job's own log, the first error lines of that log in plain words (exit 3, never
"internal error ... a bug"), a missing job dependency named before any Ray process starts, and a
demo that is not installed at all (its own distribution, demo/) named with the command that
installs it.

The logs are real: tests/fixtures/demo_logs/ (provenance in tests/fixtures/README.md); earlier
moments of a run are the log cut at a line (`transforms.lines_until`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slime_hangdoctor import cli
from slime_hangdoctor_demo import launch
from slime_hangdoctor_demo.cluster import RayHead
from slime_hangdoctor_demo.faults import get_fault
from slime_hangdoctor_demo.launch import DemoRun, error_lines
from tests.fixtures.transforms import lines_until

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "demo_logs"
READY = (LOGS / "weight_sync_engine_missing.ready.log").read_text(encoding="utf-8")
NO_TORCH = (LOGS / "weight_sync_engine_missing.no_torch.log").read_text(encoding="utf-8")


def _run(tmp_path: Path, fault: str = "weight_sync_engine_missing") -> DemoRun:
    return DemoRun(
        fault=get_fault(fault),
        head=RayHead(temp_dir=tmp_path / "ray"),
        submission_id="slime-demo-test",
        workdir=tmp_path,
        fault_after_steps=0,
    )


def test_error_lines_name_the_engines_missing_torch_once() -> None:
    lines = error_lines(NO_TORCH)
    assert lines, "the real failing log holds error lines"
    assert "No module named 'torch'" in lines[0] and lines[0].endswith("(x2)")  # both engines
    assert lines[0].startswith("(SGLangEngine pid=")  # which process said it
    assert any('"POST /init_weights_update_group HTTP/1.1" 400' in line for line in lines)
    assert not any("\x1b" in line for line in lines)  # Ray's colour codes removed


def test_a_healthy_start_has_no_error_lines() -> None:
    assert error_lines(READY) == []


def test_error_lines_skip_traceback_frames_and_keep_the_exception() -> None:
    log = (
        "(RolloutManager pid=7) Traceback (most recent call last):\n"
        '(RolloutManager pid=7)   File "rollout.py", line 3, in f\n'
        "(RolloutManager pid=7)     raise HTTPError(msg)\n"
        "(RolloutManager pid=7) requests.exceptions.HTTPError: 400 Client Error\n"
    )
    assert error_lines(log) == [
        "(RolloutManager pid=7) requests.exceptions.HTTPError: 400 Client Error"
    ]


def test_stage_follows_the_start_up(tmp_path: Path) -> None:
    run = _run(tmp_path)
    seen = [
        run.stage(lines_until(READY, marker))
        for marker in (
            "Running entrypoint",
            "Ports for engine 0",
            "Launch HttpServerEngineAdapter",
            "The server is fired up",
            "[Rank 1] joined the train",
            "DEMO FAULT ARMED",
        )
    ]
    assert seen == [
        "waiting for Ray to start the job's driver",
        "the job's driver is creating its placement group and rollout manager",
        "waiting for SGLang engines to start (0 of 2 up) and the training ranks to start",
        "waiting for SGLang engines to start (0 of 2 up) and the training ranks to start",
        "waiting for the first train step (training ranks up: 1)",
        "training: step 1; waiting for the fault weight_sync_engine_missing to arm",
    ]
    assert run.stage(READY) == (
        "fault weight_sync_engine_missing armed; letting the job reach its blocking call"
    )


def test_failure_says_why_and_keeps_the_log(tmp_path: Path) -> None:
    err = _run(tmp_path).failure("the demo job did not reach its fault", NO_TORCH)
    text = str(err)
    assert text.startswith("the demo job did not reach its fault; first errors in the job's log:")
    assert "No module named 'torch'" in text
    assert (tmp_path / "job.log").read_text(encoding="utf-8") == NO_TORCH
    assert str(tmp_path / "job.log") in text


def test_failure_without_error_lines_shows_the_log_tail(tmp_path: Path) -> None:
    text = str(_run(tmp_path).failure("late", READY))
    assert "last lines of the job's log:" in text and "DEMO FAULT ARMED" in text


def test_demo_names_a_missing_job_dependency_before_starting_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's demo error path: exit 3 and the reason, not "internal error ... a bug"."""
    monkeypatch.setattr(launch, "JOB_MODULES", ("torch", "slime_hangdoctor_no_such_module"))
    started: list[object] = []
    monkeypatch.setattr(launch.cluster, "start_head", lambda *a, **k: started.append(a))
    rc = cli.main(["demo", "--workdir", str(tmp_path), "-q"])
    err = " ".join(capsys.readouterr().err.split())  # as one line (rich wraps at the width)
    assert rc == 3
    assert "needs slime_hangdoctor_no_such_module in this Python environment" in err
    assert "internal error" not in err and "bug" not in err
    assert "python3 -m pip install -e ./demo" in err
    assert started == []


# The demo's package made unimportable as Python itself does it (a None in sys.modules: `import`
# raises ModuleNotFoundError and importlib.util.find_spec answers None), then the real CLI.
_WITHOUT_DEMO = (
    "import sys; sys.modules['slime_hangdoctor_demo'] = None; "
    "from slime_hangdoctor.cli import main; raise SystemExit(main(sys.argv[1:]))"
)


@pytest.mark.parametrize("args", [["demo"], ["demo", "--list-faults"], ["demo", "-q", "--json"]])
def test_demo_not_installed_names_the_command_that_installs_it(args: list[str]) -> None:
    """The doctor alone (its wheel holds no demo): `slime-hangdoctor demo` says the demo is not
    installed and the one command that installs it; exit 3 as for any other unusable input, no
    traceback, no "internal error"."""
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_DEMO, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 3, proc.stderr
    assert f"the demo is not installed in this Python ({sys.executable})" in err, err
    assert "python3 -m pip install -e ./demo" in err, err
    assert "Traceback" not in proc.stderr and "internal error" not in err, proc.stderr
    assert proc.stdout == ""


def test_a_failed_ray_start_is_told_by_its_last_message(tmp_path: Path) -> None:
    """`ray start` ends a failed start with a traceback: the message keeps its last line."""
    from slime_hangdoctor_demo.cluster import _last_message, _tail

    tail = _tail(LOGS / "ray_head.start_timed_out.log", 40)
    assert _last_message(tail).startswith("Exception: The current node timed out during startup.")
    assert _last_message("") == "(its log is empty)"
