"""The shipped units (slime_hangdoctor/deploy/, issue 43 item 6): linted and tried as far as a
machine without systemd as PID 1 or a Kubernetes cluster allows.

- the systemd service, check service and timer pass `systemd-analyze verify` (Debian's systemd,
  installed by apt where the test can), each copied with one named transformation: the
  doctor's path (/opt/slime-hangdoctor/bin/slime-hangdoctor, where the docs install it) replaced
  by the installed console script's, since verify refuses an ExecStart that does not exist;
- they run as a user that is not root with CAP_SYS_PTRACE and no other capability, read
  `EnvironmentFile=`, and are hardened (ProtectSystem=strict with the state, log and textfile
  directories writable, NoNewPrivileges), and what they run is a command line the real CLI
  accepts;
- the cron.d line's setpriv(1) prefix, run for real as `nobody`: CAP_SYS_PTRACE ambient,
  effective and nothing else, no_new_privs;
- the KubeRay head pod's template passes kubernetes-validate (strict) as a v1 Pod, with a shared
  process namespace and a sidecar that adds SYS_PTRACE and drops the rest;
- docs/watchdog.md shows each of them as the file is (its code blocks equal the files).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.debian_tools import require_tool
from tests.fixtures.cli import record_cli

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "slime_hangdoctor" / "deploy"
UNITS = ("slime-hangdoctor.service", "slime-hangdoctor-check.service", "slime-hangdoctor-check.timer")
SERVICES = UNITS[:2]
INSTALLED_AT = "/opt/slime-hangdoctor/bin/slime-hangdoctor"  # where docs/watchdog.md installs it
K8S = DEPLOY / "kuberay-head-sidecar.yaml"


def _unit(name: str) -> dict[str, list[str]]:
    """`Key=value` settings of a unit file (continuation lines joined), each key's values."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / name).read_text())
    out: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def _doctor() -> str:
    found = shutil.which("slime-hangdoctor") or str(Path(sys.executable).with_name("slime-hangdoctor"))
    if not os.access(found, os.X_OK):
        pytest.skip("the slime-hangdoctor console script is not installed")
    return found


def _verify(tmp_path: Path, names: tuple[str, ...], edit: Any = None) -> subprocess.CompletedProcess[str]:
    tool = require_tool("systemd-analyze", "systemd")
    for name in names:
        text = (DEPLOY / name).read_text().replace(INSTALLED_AT, _doctor())
        (tmp_path / name).write_text(edit(text) if edit else text)
    return subprocess.run(
        [tool, "verify", *(str(tmp_path / n) for n in names)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"},
    )  # fmt: skip


def test_the_units_are_package_data() -> None:
    from importlib.resources import files

    shipped = files("slime_hangdoctor") / "deploy"
    for name in (*UNITS, "slime-hangdoctor.cron", "slime-hangdoctor.env",
                 "slime-hangdoctor.sysusers", K8S.name):  # fmt: skip
        assert (shipped / name).is_file(), name
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"deploy/*"' in pyproject


def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    done = _verify(tmp_path, UNITS)
    assert done.returncode == 0 and not done.stderr.strip(), done.stdout + done.stderr


def test_systemd_analyze_verify_fails_a_broken_unit(tmp_path: Path) -> None:
    """The control: verify does refuse (a misspelt key, an ExecStart that is not absolute)."""
    done = _verify(
        tmp_path,
        ("slime-hangdoctor.service",),
        lambda t: t.replace("ExecStart=" + _doctor(), "ExecStart=slime-hangdoctor-nowhere"),
    )
    assert done.returncode != 0 or done.stderr.strip(), done.stdout + done.stderr


@pytest.mark.parametrize("name", SERVICES)
def test_a_service_runs_unprivileged_with_ptrace_and_its_environment(name: str) -> None:
    unit = _unit(name)
    assert unit["User"][0] not in ("root", "0")
    assert unit["AmbientCapabilities"] == ["CAP_SYS_PTRACE"]
    assert unit["CapabilityBoundingSet"] == ["CAP_SYS_PTRACE"]
    assert unit["NoNewPrivileges"] == ["yes"]
    assert unit["EnvironmentFile"] == ["-/etc/slime-hangdoctor/env"]
    assert unit["ProtectSystem"] == ["strict"]
    assert "PrivateTmp" not in unit  # Ray's /tmp/ray names the local cluster
    argv = shlex.split(unit["ExecStart"][0])
    assert argv[0] == INSTALLED_AT
    opts = dict(zip(argv[2::2], argv[3::2], strict=False))
    state = Path(opts["--state-file"]).parent
    assert state == Path("/var/lib") / unit["StateDirectory"][0]
    assert Path(opts["--log-file"]).parent == Path("/var/log") / unit["LogsDirectory"][0]
    assert str(Path(opts["--prom-file"]).parent) in unit["ReadWritePaths"][0].split()


def _reaches(argv: list[str], call: str) -> dict[str, Any]:
    """The real CLI's parse of `argv` (record_cli: its calls recorded, nothing run): the call
    it reached, or the test fails with why it was refused."""
    parsed = record_cli.parse(argv, {})
    calls = [c for c in parsed.get("calls", []) if c["call"] == call]
    assert calls, parsed
    return calls[0]


@pytest.mark.parametrize("name", SERVICES)
def test_a_service_runs_a_command_line_the_cli_accepts(name: str) -> None:
    argv = shlex.split(_unit(name)["ExecStart"][0])[1:]
    call = _reaches(argv, "watch_loop" if argv[0] == "watch" else "run_check")
    assert "/var/lib/slime-hangdoctor/state.json" in str(call)


def _cron_line() -> list[str]:
    lines = [
        ln for ln in (DEPLOY / "slime-hangdoctor.cron").read_text().splitlines()
        if ln.strip() and not ln.startswith("#") and "=" not in ln.split()[0]
    ]  # fmt: skip
    assert len(lines) == 1, lines
    fields = lines[0].split(None, 6)
    assert fields[:5] == ["*"] * 5 and fields[5] == "root", fields
    return shlex.split(fields[6].split(" >")[0])


def test_the_cron_line_runs_a_command_line_the_cli_accepts() -> None:
    argv = _cron_line()
    script = argv[argv.index("-c") + 1]
    doctor = shlex.split(script.split("exec ", 1)[1])
    assert doctor[0] == INSTALLED_AT
    _reaches(doctor[1:], "run_check")
    assert ". /etc/slime-hangdoctor/env" in script


def test_the_cron_lines_setpriv_keeps_ptrace_only(tmp_path: Path) -> None:
    """The cron line's privilege drop, run for real with the user `nobody` (a named
    transformation of `slime-hangdoctor`, which this machine lacks): the process it starts has
    CAP_SYS_PTRACE effective and ambient, no other capability, and no_new_privs."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux)")
    argv = _cron_line()
    prefix = [a.replace("slime-hangdoctor", "nobody") for a in argv[: argv.index("/bin/sh")]]
    prefix = [a.replace("--regid=nobody", "--regid=65534") for a in prefix]
    done = subprocess.run(
        [*prefix, "/bin/sh", "-c", "id -u; grep -E '^(CapEff|CapAmb|CapBnd|NoNewPrivs)' /proc/self/status"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    lines = done.stdout.split()
    status = dict(zip(lines[1::2], lines[2::2], strict=False))
    ptrace = f"{1 << 19:016x}"  # CAP_SYS_PTRACE is capability 19
    assert lines[0] != "0"
    assert status == {"CapEff:": ptrace, "CapBnd:": ptrace, "CapAmb:": ptrace, "NoNewPrivs:": "1"}


def _pod() -> dict[str, Any]:
    doc = yaml.safe_load(K8S.read_text())
    assert doc["kind"] == "RayCluster"
    spec = doc["spec"]["headGroupSpec"]["template"]["spec"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slime-head"}, "spec": spec}


def test_kubernetes_validate_accepts_the_kuberay_head_pod() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="the test extra is not installed")
    pod = _pod()
    kv.validate(pod, kv.latest_version(), strict=True)
    spec = pod["spec"]
    assert spec["shareProcessNamespace"] is True
    sidecar = next(c for c in spec["containers"] if c["name"] == "slime-hangdoctor")
    caps = sidecar["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert sidecar["securityContext"]["allowPrivilegeEscalation"] is False
    args = [a.replace("$(POD_NAME)", "slime-head") for a in sidecar["args"]]
    _reaches(args, "watch_loop")
    # the control: a misspelt field is refused under strict validation
    sidecar["securityContext"]["capabilitiez"] = caps
    with pytest.raises(kv.ValidationError):
        kv.validate(pod, kv.latest_version(), strict=True)


def test_the_watchdog_doc_shows_each_shipped_file_as_it_is() -> None:
    """docs/watchdog.md: each code block marked `<!-- file: PATH -->` is that file verbatim, and
    every shipped unit, the cron file and the manifest has one."""
    doc = (ROOT / "docs" / "watchdog.md").read_text()
    blocks = re.findall(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)```\n", doc, re.S)
    shown = dict(blocks)
    for path, text in shown.items():
        assert (ROOT / path).read_text() == text, f"docs/watchdog.md's copy of {path} differs"
    for name in (*UNITS, "slime-hangdoctor.cron", K8S.name):
        assert f"slime_hangdoctor/deploy/{name}" in shown, name
