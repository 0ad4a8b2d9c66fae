"""The secrets corpus on the live demo job (issue 15): a real Ray head and the slime-shaped job
whose command line, runtime_env `env_vars`, SGLang server args and URLs carry marked secrets in
every place a slime job puts them, and a doctor given addresses with credentials in them.
`attach --out` must write none of them: not in the bundle directory, not in its tarball, not in
a file name, not in the report.

The secrets reach the job the general way: extra job arguments (slime's own `--wandb-key`,
`--wandb-host`, SGLang's ServerArgs under slime's `--sglang-` prefix, which the job hands to its
engines and the engines echo in /server_info) and the job's runtime_env env_vars. One demo run
(`train_rank_stuck`: quiet once it holds), ~40 s, in the session's live pool."""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor.demo.launch import DemoRun, start_demo
from tests.live_pool import LivePool, Slot, scenario
from tests.reliability.harness import CliRun, assert_clean, run_cli

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.timeout(700),
    pytest.mark.live("secrets"),
]


def _mark(where: str) -> str:
    return f"SECRETX-{where}-7c1e"


CMDLINE = {
    "wandb_key": _mark("wandbkey"),  # --wandb-key X
    "wandb_key_eq": _mark("wandbkeyeq"),  # --wandb-key=X
    "wandb_host_url": _mark("wandbhosturl"),  # --wandb-host https://oauth2:X@host
    "sglang_api_key": _mark("sglapikey"),  # --sglang-api-key X (engines: --api-key X)
    "extra_config_secret": _mark("hicachesecret"),  # JSON in a JSON string in /server_info
    "extra_config_url": _mark("hicacheurlpw"),  # a URL with credentials inside that JSON
    "loader_token": _mark("loaderhftoken"),  # --sglang-model-loader-extra-config {"hf_token"}
}
ENV = {
    "HF_TOKEN": _mark("envhf"),
    "WANDB_API_KEY": _mark("envwandb"),
    "TEAM_NAMELESS_CRED": _mark("envnameless"),  # a name no pattern knows
    "HTTPS_PROXY": f"http://proxyuser:{_mark('envproxypw')}@proxy.corp.example:3128",
    "PIP_EXTRA_INDEX_URL": f"git+https://oauth2:{_mark('envpipgit')}@gitlab.corp.example/x.git",
}
DOCTOR_URLS = {"ray": _mark("rayurlpw"), "sglang": _mark("sglurlpw")}
MARKER = b"SECRETX-"


def _job_args() -> list[str]:
    c = CMDLINE
    extra = json.dumps(
        {
            "backend": "s3",
            "secret_key": c["extra_config_secret"],
            "endpoint": f"https://ak:{c['extra_config_url']}@s3.corp.example",
        }
    )
    return [
        "--wandb-key", c["wandb_key"],
        f"--wandb-key={c['wandb_key_eq']}",
        "--wandb-host", f"https://oauth2:{c['wandb_host_url']}@wandb.corp.example",
        "--sglang-api-key", c["sglang_api_key"],
        "--sglang-hicache-storage-backend-extra-config", extra,
        "--sglang-model-loader-extra-config", json.dumps({"hf_token": c["loader_token"]}),
    ]  # fmt: skip


@dataclass
class Corpus:
    run: DemoRun
    cli: CliRun
    out: Path
    files: dict[str, bytes]


@scenario("secrets")
def _corpus(slot: Slot) -> Corpus:
    """The job with the secrets, on the slot's head; one `attach --out` with credentials in its
    addresses and an API key; every file it wrote, its tarball's members and its output."""
    work = slot.workdir("secrets-demo")
    run = start_demo(
        "train_rank_stuck", workdir=work, extra_args=_job_args(), extra_env=ENV, head=slot.head
    )
    try:
        run.wait_until_ready(timeout=200.0)
        dash = run.head.dashboard_url.replace("://", f"://hd:{DOCTOR_URLS['ray']}@", 1)
        engine = next(iter(run.engine_urls().values()))
        engine = engine.replace("://", f"://eng:{DOCTOR_URLS['sglang']}@", 1)
        out = work / "bundle"
        cli = run_cli(
            "attach", dash, "--sglang-url", engine, "--api-key", CMDLINE["sglang_api_key"],
            "--out", str(out), "-f", "json", hard_limit_s=150.0,
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
    finally:
        run.stop()


@pytest.fixture
def corpus(live_pool: LivePool) -> Corpus:
    result: Corpus = live_pool.result("secrets")
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
