"""Secrets never reach bundles or reports, end to end; bundles are private (0700 / 0600).

Setup, as a leaky slime job looks: an SGLang stand-in started with --api-key and --admin-api-key
(its /server_info echoes both, as SGLang's does); a stand-in train rank whose environment holds
tokens under names no pattern knows and whose command line carries `--api-key`; a Ray dashboard
stand-in replaying the real answers with runtime-env `env_vars` secrets injected (Ray echoes a
job's env_vars in /api/jobs/, /api/v0/actors and /api/v0/tasks) and echoing the Ray token. Then
`collect` and `attach` write bundles (with a permissive umask), `analyse` renders all three
formats, and every byte (bundle files, the unpacked tarball, stdout, stderr) is searched for every
secret value. Issue 22: the job's entrypoint (in /api/jobs/) holds quoted values, `wandb login
--relogin KEY` and `mysql -pX` in a compound command; an engine answers /server_info with a byte
that is not UTF-8 ahead of the API key.

Cases SE1-SE5 of docs/reliability.md."""

from __future__ import annotations

import json
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.fixtures import transforms as tf
from tests.integration.sglang_standin_harness import start_standin
from tests.reliability.harness import (
    COMMON,
    REAL_RAY,
    CliRun,
    assert_clean,
    free_port,
    http_stub,
    rank_running,
    run_cli,
)

pytestmark = pytest.mark.timeout(180)

SERVER_INFO = Path(__file__).parents[1] / "fixtures" / "sglang" / "server_info.json"

API_KEY = "sk-SECRET-apikey-7f3a9c1e5b"  # given to the doctor with --api-key
ADMIN_KEY = "SECRET-adminkey-2b8d4f6a0c"  # never given to the doctor: only patterns can catch it
CMDLINE_KEY = "SECRET-cmdline-9e1c3a5b7d"  # on the rank's command line after --api-key
RAY_TOKEN = "SECRET-raytoken-4c6e8a0b2d"  # given with --ray-token; the dashboard echoes it
ENV_SECRETS = {  # the rank's environment: names no redaction pattern knows
    "HF_HUB_CREDENTIAL": "SECRET-envhf-1a2b3c4d5e",
    "S3_BLOB": "SECRET-envs3-6f7a8b9c0d",
    "WANDB_API_KEY": "SECRET-envwandb-5e4d3c2b1a",
}
RUNTIME_ENV_SECRETS = {  # a Ray job's runtime_env env_vars
    "TEAM_SHARED_CRED": "SECRET-rtenv-0a9b8c7d6e",
    "HF_TOKEN": "SECRET-rtenvhf-1f2e3d4c5b",
}
URL_PASSWORDS = {  # issue 15 point 3: in the addresses given to the doctor itself
    "ray": "SECRET-rayurlpw-8d7c6b5a4e",
    "sglang": "SECRET-sglurlpw-3e4f5a6b7c",
}
# Issue 22 points 4 and 13: secrets in the job's entrypoint (as /api/jobs/ echoes it, its quotes
# JSON-escaped): a compound command with `wandb login --relogin KEY`, a MySQL client's `-pX` and
# quoted values; and point 2: an engine whose /server_info holds a byte that is not UTF-8 ahead of
# the API key the doctor is given.
ENTRYPOINT_SECRETS = {
    "login": "SECRET-wandblogin-3b5d7f9a1c",
    "mysql": "MYSQLPW-6d4b2f0e8a",  # no secret word: only the mysql rule can catch it
    "quoted": "SECRET-quotedkey-8e6c4a2b0d",
    "dquoted": "SECRET-hftoken-1c3e5a7b9d",
    # issue 32 point 1: a secret option right after an ordinary one, as slime's command lines
    # give them (`--colocate --wandb-key X`), and inside another assignment's value
    "after_flag": "SECRET-afterflag-2d4f6b8a0c",
    "after_bool": "SECRET-afterbool-7a5c3e1b9d",
    "after_short": "SECRET-aftershort-4b6d8f0a2c",
    "env_value": "SECRET-envvalue-9c7e5a3b1d",
}
ENTRYPOINT = (
    f"cd /job && wandb login --relogin {ENTRYPOINT_SECRETS['login']} && "
    f"mysql -h db -p{ENTRYPOINT_SECRETS['mysql']} -e 'select 1' && python3 driver.py hang "
    f"--wandb-key '{ENTRYPOINT_SECRETS['quoted']}' --hf-token \"{ENTRYPOINT_SECRETS['dquoted']}\" "
    f"--colocate --wandb-key {ENTRYPOINT_SECRETS['after_flag']} "
    f"--use-wandb --sglang-api-key {ENTRYPOINT_SECRETS['after_bool']} "
    f"-v --hf-token={ENTRYPOINT_SECRETS['after_short']} env=HF_TOKEN={ENTRYPOINT_SECRETS['env_value']}"
)
SECRETS = (
    *URL_PASSWORDS.values(),
    *ENTRYPOINT_SECRETS.values(),
    API_KEY,
    ADMIN_KEY,
    CMDLINE_KEY,
    RAY_TOKEN,
    *ENV_SECRETS.values(),
    *RUNTIME_ENV_SECRETS.values(),
)


@dataclass
class Evidence:
    """Everything the doctor wrote or printed, by where it came from."""

    files: dict[str, bytes] = field(default_factory=dict)  # path -> bytes (tarballs unpacked)
    bundles: list[Path] = field(default_factory=list)
    archives: list[Path] = field(default_factory=list)
    runs: list[CliRun] = field(default_factory=list)

    def add_tree(self, root: Path) -> None:
        for f in root.rglob("*"):
            if f.is_file():
                self.files[str(f)] = f.read_bytes()

    def add_archive(self, path: Path) -> None:
        self.archives.append(path)
        self.files[str(path)] = path.read_bytes()
        with tarfile.open(path, "r:gz") as tar:
            for member in tar.getmembers():
                fh = tar.extractfile(member)
                if fh is not None:
                    self.files[f"{path}!{member.name}"] = fh.read()

    def add_run(self, run: CliRun) -> None:
        assert_clean(run, bound_s=60.0)
        self.runs.append(run)
        label = f"run {len(self.runs)} ({run.argv[3]})"  # not the argv: it holds the secrets
        self.files[f"stdout of {label}"] = run.stdout.encode()
        self.files[f"stderr of {label}"] = run.stderr.encode()


def _engine_with_a_stray_byte() -> dict[str, tuple[int, bytes, str, float]]:
    """The stand-in's recorded /server_info with the doctor's API key in `api_key` and a byte
    that is not UTF-8 ahead of it (`transforms.insert_invalid_utf8`)."""
    body = tf.set_json_path(SERVER_INFO.read_text(encoding="utf-8"), ("api_key",), API_KEY)
    data = tf.insert_invalid_utf8(body.encode(), body.index('"api_key"'))
    return {"/server_info": (200, data, "application/json", 0.0)}


def _leaky_dashboard() -> dict[str, tuple[int, bytes, str, float]]:
    """The real dashboard answers with runtime-env secrets in jobs, actors and tasks
    (`transforms.ray_with_runtime_env`) and the Ray token echoed in /api/cluster_status."""
    answers = json.loads((REAL_RAY / "hang" / "dashboard.json").read_text(encoding="utf-8"))
    routes: dict[str, tuple[int, bytes, str, float]] = {}
    for url, ans in answers.items():
        path = urlsplit(url).path
        body = tf.ray_with_runtime_env(path, ans["body"], RUNTIME_ENV_SECRETS)
        if path == "/api/jobs/":
            for i in range(len(json.loads(body))):
                body = tf.set_json_path(body, (i, "entrypoint"), ENTRYPOINT)
        if path == "/api/cluster_status":
            doc = json.loads(body)
            doc["msg"] = f"proxy echo: Authorization: Bearer {RAY_TOKEN}"
            body = json.dumps(doc)
        routes[path] = (int(ans["status"]), body.encode(), "application/json", 0.0)
    return routes


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Evidence]:
    work = tmp_path_factory.mktemp("secrets")
    ev = Evidence()
    engine = start_standin(work, "--api-key", API_KEY, "--admin-api-key", ADMIN_KEY)
    try:
        rank_args = ("--api-key", CMDLINE_KEY)
        with rank_running(work, *rank_args, env=ENV_SECRETS):
            local = ("--local", "--sglang-url", engine.url, "--api-key", API_KEY, *COMMON[2:])
            ev.add_run(run_cli("collect", "--bundle", str(work / "c"), *local, umask=0))
            ev.add_run(run_cli("attach", "--bundle", str(work / "a"), "-f", "json", *local, umask=0))
            ev.add_run(run_cli("attach", "-f", "markdown", *local))
    finally:
        engine.stop()
    with http_stub(_leaky_dashboard()) as dash, http_stub(_engine_with_a_stray_byte()) as eng:
        ray = (dash.url, "--ray-token", RAY_TOKEN, *COMMON[2:])
        stray = ("--sglang-url", eng.url, "--api-key", API_KEY)
        ev.add_run(run_cli("attach", "--bundle", str(work / "r"), "-f", "text", *ray, *stray, umask=0))
        ev.add_run(run_cli("collect", "--bundle", str(work / "rc"), *ray, umask=0))
        # Point 3: credentials in the Ray address and an --sglang-url (a closed port)
        host = dash.url.split("://", 1)[1]
        with_pw = (
            f"http://hd:{URL_PASSWORDS['ray']}@{host}",
            "--sglang-url",
            f"http://eng:{URL_PASSWORDS['sglang']}@127.0.0.1:{free_port()}",
            *COMMON[2:],
        )
        ev.add_run(run_cli("attach", "--bundle", str(work / "u"), *with_pw, umask=0))
        ev.add_run(
            run_cli(
                "collect",
                "--bundle",
                str(work / "uc"),
                f"http://hd:{URL_PASSWORDS['ray']}@127.0.0.1:{free_port()}",
                *COMMON[2:],
            )
        )
    for name in ("c", "a", "r", "rc", "u", "uc"):
        ev.bundles.append(work / name)
        ev.add_tree(work / name)
        ev.add_archive(work / f"{name}.tar.gz")
    for name in ("a", "r"):
        for fmt in ("text", "json", "markdown"):
            ev.add_run(run_cli("analyse", str(work / f"{name}.tar.gz"), "-f", fmt))
    yield ev


def _leaks(ev: Evidence, secret: str) -> list[str]:
    """Files holding the secret, or named after it (an artefact's file name is evidence too)."""
    return [name for name, data in ev.files.items() if secret.encode() in data or secret in name]


@pytest.mark.parametrize("secret", SECRETS)
def test_no_secret_anywhere(evidence: Evidence, secret: str) -> None:
    """SE1: no secret value in any bundle file, unpacked tarball member, report or message."""
    assert not _leaks(evidence, secret), f"{secret} leaked into: {_leaks(evidence, secret)}"


def test_the_search_covers_what_holds_the_secrets(evidence: Evidence) -> None:
    """SE2: the searched evidence does hold the places the secrets were (so SE1 can fail): the
    engine's server args, the rank's command line and environment, the runtime envs, the token
    echo, each with its value blanked."""
    blob = b"\n".join(evidence.files.values())
    assert b'"admin_api_key": "<redacted>"' in blob  # /server_info, pattern-redacted
    assert b"--api-key" in blob and b"ray::MegatronTrainRayActor.train" in blob
    assert b'"TEAM_SHARED_CRED": "<redacted>"' in blob  # /api/jobs/ runtime_env.env_vars
    assert b'\\"TEAM_SHARED_CRED\\": \\"<redacted>\\"' in blob  # serialized_runtime_env
    assert b"proxy echo: Authorization: Bearer <redacted>" in blob
    assert b'"RANK": "0"' in blob  # allow-listed environment is kept
    # issue 22: the entrypoint's secrets, blanked in place; the engine body's stray byte kept
    assert b"wandb login --relogin <redacted> && mysql -h db -p<redacted> -e" in blob
    assert b"--wandb-key '<redacted>' --hf-token \\\"<redacted>\\\"" in blob
    assert b"--colocate --wandb-key <redacted> --use-wandb --sglang-api-key <redacted>" in blob
    assert b"-v --hf-token=<redacted> env=HF_TOKEN=<redacted>" in blob
    assert b'\xff\xfe\x80"api_key": "<redacted>"' in blob
    assert any("markdown" in " ".join(r.argv) for r in evidence.runs)


def test_bundles_are_private(evidence: Evidence) -> None:
    """SE3: bundle directories 0700, files and tarballs 0600, even under umask 000."""
    for root in evidence.bundles:
        for path in (root, *root.rglob("*")):
            mode = stat.S_IMODE(path.stat().st_mode)
            want = 0o700 if path.is_dir() else 0o600
            assert mode == want, f"{path} is {oct(mode)}"
    for archive in evidence.archives:
        assert stat.S_IMODE(archive.stat().st_mode) == 0o600, archive


def test_manifest_records_that_keys_were_given_not_their_values(evidence: Evidence) -> None:
    """SE4: the manifest says an API key / Ray token was used, never which."""
    for root in evidence.bundles:
        options = json.loads((root / "manifest.json").read_text())["options"]
        assert isinstance(options.get("api_key_given"), bool)
        assert isinstance(options.get("ray_token_given"), bool)
        assert "api_key" not in options and "ray_token" not in options


def test_environment_keeps_only_the_allow_list(evidence: Evidence) -> None:
    """SE5: processes artefacts keep allow-listed variables only (names and values), and the proxy
    variables (`facts.PROXY_ENV`, any letter case) as URLs without user or password."""
    from slime_hangdoctor.parsers.processes import PROXY_ENV
    from slime_hangdoctor.redact import ENV_ALLOWLIST

    seen = 0
    for name, data in evidence.files.items():
        if "/raw/processes/" in name and name.endswith(".json") and "!" not in name:
            for proc in json.loads(data)["processes"]:
                env = proc.get("env") or {}
                other = {k for k in env if k not in ENV_ALLOWLIST and k.lower() not in PROXY_ENV}
                assert not other, (name, sorted(other))
                for key, value in env.items():
                    if key.lower() in PROXY_ENV:
                        assert "@" not in value or "<redacted>@" in value, (name, key)
                seen += 1
    assert seen, "no process rows were searched"
    assert os.environ.get("PATH")  # the rank inherited PATH, HOME...: none of them was kept
