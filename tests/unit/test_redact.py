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


def _every_pass(text: str) -> str:
    """The four passes run unconditionally: what redact_text must equal whatever its pre-checks skip."""
    from slime_hangdoctor import redact as r

    return r.bearer_pass(r.assign_pass(r.flag_pass(r.json_field_pass(text))))


_PIECES = (
    "api_key", "API-KEY", "Token", "tokens_total", "SECRET", "passwd", "Password", "auth",
    "Authorization", "bearer ", "Bearer x.y", '"', "'", ":", " ", "=", "-", "--", "_", "x", "7",
    "{", "}", ",", "&", "\n", "\u017fecret", "\u212aey", "\u0130", "é", "ß",
)


def test_pre_checks_never_change_the_result() -> None:
    """The linear-time pre-checks (lower-cased for ASCII texts) skip only passes that would not
    have matched: same output as running every pass, on texts built from key words, quotes and
    separators in any case, Unicode case-folding look-alikes included (U+017F, U+212A)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=3000, deadline=None)
    @given(st.lists(st.sampled_from(_PIECES), max_size=24).map("".join))
    def check(text: str) -> None:
        assert redact_text(text) == _every_pass(text)

    check()


def test_real_metrics_page_is_unchanged() -> None:
    """A real SGLang /metrics page (`tokens` everywhere, no secret) comes out as it went in."""
    from pathlib import Path

    page = (Path(__file__).parents[1] / "fixtures/sglang/metrics_busy.txt").read_text()
    assert redact_text(page) == page == _every_pass(page)
