"""The secrets corpus on the live demo job (issue 15): a real Ray head and the slime-shaped job
whose command line, runtime_env `env_vars`, SGLang server args and URLs carry marked secrets in
every place a slime job puts them, and a doctor given addresses with credentials in them.
`attach --bundle` must write none of them: not in the bundle directory, not in its tarball, not in
a file name, not in the report.

The secrets reach the job the general way: extra job arguments (slime's own `--wandb-key`,
`--wandb-host`, SGLang's ServerArgs under slime's `--sglang-` prefix, which the job hands to its
engines and the engines echo in /server_info) and the job's runtime_env env_vars (tests/reliability/secret_job.py). The job is the live pool's shared
"secret-job" (`train_rank_stuck`: quiet once it holds; tests/live_jobs.py), which the read-only
checks use too."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor_demo.launch import DemoRun
from tests.live_jobs import SECRET_JOB
from tests.live_pool import LivePool, Slot, job_part
from tests.reliability.harness import CliRun, assert_clean, run_cli
from tests.reliability.secret_job import CMDLINE, DOCTOR_URLS, ENV, MARKER

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.timeout(700),
    pytest.mark.live(f"{SECRET_JOB}/secrets"),
]


@dataclass
class Corpus:
    run: DemoRun
    cli: CliRun
    out: Path
    files: dict[str, bytes]


@job_part(SECRET_JOB, "secrets")
def _corpus(run: DemoRun, slot: Slot, work: Path) -> Corpus:
    """One `attach --bundle` with credentials in its addresses and an API key, on the job with the
    secrets: every file it wrote, its tarball's members and its output."""
    dash = run.head.dashboard_url.replace("://", f"://hd:{DOCTOR_URLS['ray']}@", 1)
    engine = next(iter(run.engine_urls().values()))
    engine = engine.replace("://", f"://eng:{DOCTOR_URLS['sglang']}@", 1)
    out = work / "bundle"
    cli = run_cli(
        "attach", dash, "--sglang-url", engine, "--api-key", CMDLINE["sglang_api_key"],
        "--bundle", str(out), "-f", "json", hard_limit_s=150.0,
    )  # fmt: skip
    assert_clean(cli, bound_s=150.0)
    files = {str(f): f.read_bytes() for f in out.rglob("*") if f.is_file()}
    with tarfile.open(f"{out}.tar.gz", "r:gz") as tar:
        for member in tar.getmembers():
            files[f"tar!{member.name}"] = b""
            if (fh := tar.extractfile(member)) is not None:
                files[f"tar!{member.name}"] = fh.read()
    files["stdout"] = cli.stdout.encode()
    files["stderr"] = cli.stderr.encode()
    return Corpus(run, cli, out, files)


@pytest.fixture
def corpus(live_pool: LivePool) -> Corpus:
    result: Corpus = live_pool.result(f"{SECRET_JOB}/secrets")
    return result


SECRETS = (*CMDLINE.values(), *DOCTOR_URLS.values())
ENV_SECRETS = tuple(v if "@" not in v else v.split(":")[2].split("@")[0] for v in ENV.values())


@pytest.mark.parametrize("secret", (*SECRETS, *ENV_SECRETS))
def test_attach_out_writes_no_secret(corpus: Corpus, secret: str) -> None:
    """No marked secret in any bundle file, tarball member, file name or report."""
    leaks = [n for n, data in corpus.files.items() if secret.encode() in data or secret in n]
    assert not leaks, f"{secret} leaked into {leaks}"


def test_no_marker_at_all(corpus: Corpus) -> None:
    """The same, for every marked value at once (a secret forgotten in the lists above)."""
    leaks = [n for n, data in corpus.files.items() if MARKER in data or "SECRETX-" in n]
    assert not leaks, leaks


def test_the_search_covers_every_place(corpus: Corpus) -> None:
    """The evidence holds each place the secrets were, blanked: so the search above can fail."""
    blob = b"\n".join(corpus.files.values()).replace(b'\\"', b'"').replace(b"\\\\", b"\\")
    for needle in (
        b"--wandb-key",  # the driver's command line (processes) / the Job API entrypoint
        b"--sglang-model-loader-extra-config",
        b"wandb.corp.example",  # the URL's host is kept
        b"hicache_storage_backend_extra_config",  # the engines' /server_info
        b'"TEAM_NAMELESS_CRED": "<redacted>"',  # runtime_env env_vars in Ray's answers
    ):
        assert needle in blob, needle
    assert corpus.cli.verdict()["status"] == "hung"
