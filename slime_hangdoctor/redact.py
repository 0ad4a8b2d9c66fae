"""Keep secrets out of reports and bundles: API keys, tokens, passwords, environment values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

REDACTED = "<redacted>"

# Environment variables whose values help a diagnosis and carry no secret. Every other value is dropped.
ENV_ALLOWLIST: frozenset[str] = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
        "TORCH_FR_DUMP_TEMP_FILE",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
        "TORCH_FR_BUFFER_SIZE",
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_NCCL_ENABLE_TIMING",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "NCCL_DEBUG",
        "NCCL_RAS_ENABLE",
        "NCCL_RAS_ADDR",
        "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_LAUNCH_BLOCKING",
        "RAY_JOB_ID",
        "RAY_RAYLET_PID",
        "SGLANG_SERVER_INFO_TIMEOUT",
        "SLIME_HOST_IP",
        "PYTHONUNBUFFERED",
    }
)

_SECRET_KEY = (
    r"(?:api[_-]?key|admin[_-]?api[_-]?key|token|secret|password|passwd|authorization|auth)"
)
# "api_key": "abc"  /  'api_key': 'abc'  (JSON and Python reprs); null stays null.
_JSON_FIELD = re.compile(
    r"""(?P<k>["'][A-Za-z0-9_\-]*"""
    + _SECRET_KEY
    + r"""[A-Za-z0-9_\-]*["']\s*:\s*)(?P<q>["'])(?P<v>[^"']*)(?P=q)""",
    re.IGNORECASE,
)
# --api-key abc  /  --ray-token=abc  /  api_key=abc (query strings, env dumps)
_FLAG = re.compile(
    r"(?P<k>--?[A-Za-z0-9\-]*" + _SECRET_KEY + r"[A-Za-z0-9\-]*(?:=|\s+))(?P<v>[^\s\"',&]+)",
    re.IGNORECASE,
)
_ASSIGN = re.compile(
    r"(?P<k>\b[A-Za-z0-9_]*" + _SECRET_KEY + r"[A-Za-z0-9_]*=)(?P<v>[^\s\"',&]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<k>Bearer\s+)(?P<v>[A-Za-z0-9._~+/=\-]+)", re.IGNORECASE)


_HINT = r"key|token|secret|passw|auth|bearer"
# Necessary conditions of _JSON_FIELD and _ASSIGN: a secret key word followed by what must come
# after it, matched in linear time. The full patterns start with a run of word characters before the
# key word, which the engine retries at every word start: most of the cost of redacting a /metrics
# page or a Ray state answer. A text that fails a condition skips that pass (same result).
_JSON_FIELD_TAIL = _SECRET_KEY + r"""[A-Za-z0-9_\-]*+["']\s*+:\s*+["']"""
_ASSIGN_TAIL = _SECRET_KEY + r"[A-Za-z0-9_]*+=[^\s\"',&]"


@dataclass(frozen=True)
class _Hints:
    any: re.Pattern[str]
    json_field: re.Pattern[str]
    assign: re.Pattern[str]


# Case-insensitive scanning is slow in `re`; an ASCII text is searched lower-cased with
# case-sensitive patterns (the same matches), any other text with the case-insensitive ones (Unicode
# case folding: a pattern may match letters that lower() does not turn into ASCII).
_ASCII_HINTS = _Hints(*(re.compile(p) for p in (_HINT, _JSON_FIELD_TAIL, _ASSIGN_TAIL)))
_UNICODE_HINTS = _Hints(
    *(re.compile(p, re.IGNORECASE) for p in (_HINT, _JSON_FIELD_TAIL, _ASSIGN_TAIL))
)


def redact_text(text: str, known_secrets: tuple[str, ...] = ()) -> str:
    """Blank secret values in free text (JSON bodies, command lines, logs)."""
    for secret in known_secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    if text.isascii():
        hints, probe = _ASCII_HINTS, text.lower()
    else:
        hints, probe = _UNICODE_HINTS, text
    if not hints.any.search(probe):
        return text  # none of the patterns below can match: skip every pass
    if hints.json_field.search(probe):
        text = json_field_pass(text)
    text = flag_pass(text)
    if hints.assign.search(probe):
        text = assign_pass(text)
    return bearer_pass(text)


# The four passes, each alone (redact_text runs a pass only where its pre-check found a candidate).
def json_field_pass(text: str) -> str:
    return _JSON_FIELD.sub(
        lambda m: (
            m.group(0)
            if not m.group("v")
            else f"{m.group('k')}{m.group('q')}{REDACTED}{m.group('q')}"
        ),
        text,
    )


def flag_pass(text: str) -> str:
    return _FLAG.sub(lambda m: f"{m.group('k')}{REDACTED}", text)


def assign_pass(text: str) -> str:
    return _ASSIGN.sub(lambda m: f"{m.group('k')}{REDACTED}", text)


def bearer_pass(text: str) -> str:
    return _BEARER.sub(lambda m: f"{m.group('k')}{REDACTED}", text)


def redact_cmdline(
    argv: tuple[str, ...] | list[str], known_secrets: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Redact a command line argument by argument (`--api-key X` spans two arguments)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if re.fullmatch(
            r"--?[A-Za-z0-9\-_]*" + _SECRET_KEY + r"[A-Za-z0-9\-_]*", arg, re.IGNORECASE
        ):
            out.append(arg)
            hide_next = True
            continue
        out.append(redact_text(arg, known_secrets))
    return tuple(out)


def filter_env(env: Mapping[str, str]) -> dict[str, str]:
    """Keep only allow-listed, non-secret environment variables."""
    return {k: v for k, v in env.items() if k in ENV_ALLOWLIST}
