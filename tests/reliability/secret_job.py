"""The secrets of the shared "secret-job" (tests/live_jobs.py): marked values in every place a
slime job puts them. The job gets them the general way: extra job arguments (slime's own
`--wandb-key`, `--wandb-host`, SGLang's ServerArgs under slime's `--sglang-` prefix, which the job
hands to its engines and the engines echo in /server_info) and the job's runtime_env env_vars; the
doctor gets addresses with credentials in them (DOCTOR_URLS)."""

from __future__ import annotations

import json


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
API_KEY = CMDLINE["sglang_api_key"]  # the engines' API key (on their and the driver's argv)


def job_args() -> list[str]:
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
