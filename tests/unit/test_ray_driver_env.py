"""The doctor's Ray driver process (collect/ray_driver.py) holds none of the doctor's secrets but
the Ray token it needs, and only where it may send it (docs/reliability.md, TM21). Read from the
real process's /proc/PID/environ, started by remote.RayTasks against a GCS port that accepts and
never answers (it stays connecting while it is read)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from slime_hangdoctor.collect.remote import RayTasks

SECRETS = {
    "SGLANG_API_KEY": "hd-env-sglang-key",
    "WANDB_API_KEY": "hd-env-wandb-key",
    "HF_TOKEN": "hd-env-hf-token",
    "AWS_SECRET_ACCESS_KEY": "hd-env-aws-secret",
    "RAY_AUTH_TOKEN": "hd-env-ray-token-from-env",
    "https_proxy": "http://user:hd-env-proxy-pass@proxy:3128",
}


def _environ_of(tasks: RayTasks) -> dict[str, str]:
    assert tasks.pid is not None
    raw = Path(f"/proc/{tasks.pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


@pytest.mark.parametrize("token", ["hd-env-ray-token-given", None], ids=["token-ok", "no-token"])
def test_the_driver_process_gets_no_secret_but_the_token_it_may_send(
    monkeypatch: pytest.MonkeyPatch, token: str | None
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RAY_BACKEND_LOG_LEVEL", "error")  # one of Ray's settings: it travels
    with socket.create_server(("0.0.0.0", 0)) as gcs:
        tasks = RayTasks(f"127.0.0.1:{gcs.getsockname()[1]}", 20.0, token=token)
        try:
            time.sleep(0.2)
            env = _environ_of(tasks)
        finally:
            tasks.close()
    text = "\0".join(f"{k}={v}" for k, v in env.items())
    assert not [v for v in SECRETS.values() if v in text], env
    assert env.get("RAY_AUTH_TOKEN") == token  # the one the run may send to this GCS, or none
    assert env["RAY_BACKEND_LOG_LEVEL"] == "error" and env["PATH"]
    # the package the CLI runs is the one the driver imports
    import slime_hangdoctor

    assert env["PYTHONPATH"].split(":")[0] == str(Path(slime_hangdoctor.__file__).parent.parent)


def test_proxies_travel_only_where_rays_grpc_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from slime_hangdoctor.collect.remote import driver_env

    environ = {"PATH": "/bin", "https_proxy": SECRETS["https_proxy"], "NO_PROXY": "10.0.0.0/8"}
    assert "https_proxy" not in driver_env(environ, None)
    on = driver_env({**environ, "RAY_grpc_enable_http_proxy": "1"}, None)
    assert on["https_proxy"] == SECRETS["https_proxy"] and on["NO_PROXY"] == "10.0.0.0/8"
