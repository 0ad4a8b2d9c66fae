"""Secrets never reach reports or bundles."""

from __future__ import annotations

from slime_hangdoctor.redact import REDACTED, filter_env, redact_cmdline, redact_text


def test_json_fields_with_secret_names_are_blanked() -> None:
    """/server_info returns every ServerArgs field, api_key and admin_api_key included."""
    body = '{"model_path": "/m", "api_key": "abc123", "admin_api_key": "zzz999", "port": 15000}'
    out = redact_text(body)
    assert "abc123" not in out and "zzz999" not in out
    assert '"model_path": "/m"' in out and '"port": 15000' in out


def test_null_secret_fields_stay_null() -> None:
    assert redact_text('{"api_key": null}') == '{"api_key": null}'


def test_flags_assignments_and_bearer_tokens() -> None:
    text = "python -m sglang --api-key k1k1k1 RAY_AUTH_TOKEN=tok777 Authorization: Bearer bbb.ccc"
    out = redact_text(text)
    for secret in ("k1k1k1", "tok777", "bbb.ccc"):
        assert secret not in out
    assert out.count(REDACTED) == 3


def test_known_secrets_are_blanked_anywhere() -> None:
    assert "my-key-42" not in redact_text("weird place: my-key-42!", ("my-key-42",))


def test_cmdline_flag_value_in_next_argument() -> None:
    argv = ["python", "-m", "sglang.launch_server", "--api-key", "hunter22", "--port", "30000"]
    assert redact_cmdline(argv) == ("python", "-m", "sglang.launch_server", "--api-key", REDACTED, "--port", "30000")


def test_environment_keeps_only_the_allow_list() -> None:
    env = {"RANK": "1", "WANDB_API_KEY": "w", "HF_TOKEN": "h", "PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert filter_env(env) == {"RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
