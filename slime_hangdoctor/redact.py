"""Keep secrets out of reports and bundles: API keys, tokens, passwords, URL credentials, signed
query strings, environment values.

A value is blanked where its *name* says it is a secret: a command-line option (`--wandb-key X`,
`--api-key=X`), an assignment (`HF_TOKEN=X`), a JSON or Python-repr field (`"api_key": "X"`, also
inside an escaped JSON string), a header (`X-Api-Key: X`), a query parameter (`?sig=X`); and the
userinfo of every URL (`https://oauth2:X@host` keeps the host). Names are judged by their words
(`--wandb-key`: `wandb` `key`), so that `--tokenizer-path`, `--input-key` or `--fim-pad-token` stay
readable while every secret-bearing option of slime, SGLang, Megatron and W&B is caught
(`SECRET_OPTIONS`, read from their argument parsers, is checked in tests/unit/test_redact.py).

Every name is judged wherever it stands, never taken for the value of the name before it:
`--colocate --wandb-key X`, `-v --hf-token=X`, `env=HF_TOKEN=X`, `ServerArgs(api_key='X')`, an argv
as a JSON list (`"--wandb-key", "X"`), Megatron's argument table (`wandb_key ..... X`), a signed URL
inside another URL's query. A value may be quoted (`--wandb-key 'X'`, `\\"X\\"` inside a JSON
string: blanked to its closing quote); shell text (an `sh -c` argument) is split into words with
`shlex` and judged word by word like an argv (a line continued with `\\` is one line); secrets
no option names are the `wandb login KEY` word, a MySQL client's `-pX`, `wandb.login(key=X)` and
`aws configure set NAME X`. An unquoted value runs to a blank or a quote (`abc,X`, `Tr0ub&X`).
Bytes are redacted as bytes (`redact_bytes`): what is not UTF-8 comes back exactly, never unread.

A secret is also known by its *value*, whatever names it (`value_pass`, `SECRET_FORMS`): the forms
of AWS key ids, GitHub, GitLab, Hugging Face, OpenAI-style, Slack, Stripe keys, JWTs and PEM private
keys, patterns taken from detect-secrets and gitleaks (NOTICE). No entropy guess: a hash or an id
has no form. Every entry point (`redact_text`, so `redact_bytes`, `redact_cmdline`, `redact_shell`)
runs both passes.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

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
        # which interface each rank's NCCL / Gloo / TensorPipe sockets use (OpenRLHF#865)
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "NCCL_SOCKET_FAMILY",
        "NCCL_IB_HCA",
        "NCCL_IB_DISABLE",
        "NCCL_NET",
    }
)


@dataclass(frozen=True)
class SecretOption:
    """A secret-bearing option (or field) a project defines, and where it is defined."""

    name: str  # as given on a command line
    project: str
    where: str


# Every secret-bearing option the projects of a slime job define, read from their argument
# parsers (slime 2026-11 main, SGLang 0.5.23, Megatron-LM core_r0.15 main, wandb 0.23 CLI). The
# generic rule below catches each of them; tests/unit/test_redact.py proves it, flag by flag.
# Megatron's parser (megatron/training/arguments.py) defines none: its `--fim-*-token` options
# are special-token strings, `--wandb-*` names and paths.
SECRET_OPTIONS: tuple[SecretOption, ...] = (
    SecretOption("--wandb-key", "slime", "slime/utils/arguments.py (wandb.login(key=...))"),
    SecretOption("--sglang-api-key", "slime", "SGLang's --api-key under slime's --sglang- prefix"),
    SecretOption("--sglang-admin-api-key", "slime", "SGLang's --admin-api-key, --sglang- prefix"),
    SecretOption(
        "--sglang-ssl-keyfile-password", "slime", "SGLang's --ssl-keyfile-password, prefixed"
    ),
    SecretOption("--api-key", "SGLang", "srt/arg_groups/fields/serving.py api_key"),
    SecretOption("--admin-api-key", "SGLang", "srt/arg_groups/fields/serving.py admin_api_key"),
    SecretOption(
        "--ssl-keyfile-password", "SGLang", "srt/arg_groups/fields/serving.py ssl_keyfile_password"
    ),
    SecretOption("watermark_key", "SGLang", "srt/arg_groups/fields/exec_.py (in /server_info)"),
    SecretOption("watermark_key_b", "SGLang", "srt/arg_groups/fields/exec_.py (in /server_info)"),
    SecretOption("WANDB_API_KEY", "W&B", "wandb/env.py API_KEY"),
    SecretOption("wandb login KEY", "W&B", "wandb/cli/cli.py login: positional `key`"),
    SecretOption("--ray-token", "slime-hangdoctor", "cli.py; Ray's RAY_AUTH_TOKEN"),
    SecretOption("--aws-access-key-id", "AWS CLI", "aws configure / s3 tools"),
    SecretOption("--aws-secret-access-key", "AWS CLI", "aws configure / s3 tools"),
    SecretOption("--credentials", "generic", "gcloud, docker, s3 tools"),
    SecretOption("--private-key", "generic", "ssh, TLS, signing tools"),
    SecretOption("-u user:pw", "curl", "curl --user (also glued: -uuser:pw)"),
    SecretOption("-pPASSWORD", "MySQL / MariaDB clients", "mysql --password, glued short form"),
    SecretOption("X-Api-Key:", "HTTP", "API-key header"),
)

# Words that make a name a secret wherever they stand in it.
_SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "credential",
        "credentials",
        "creds",
        "authorization",
        "apikey",
        "cookie",
    }
)
# `..._token` is a secret unless it names a special token of a tokenizer (`--fim-pad-token`).
_SPECIAL_TOKEN_WORDS = frozenset(
    {
        "pad", "bos", "eos", "unk", "sep", "cls", "mask", "eod", "eot", "prefix", "middle",
        "suffix", "stop", "special", "start", "end", "image", "video", "audio", "fim", "think",
        "im", "per", "max", "min", "num", "first", "last", "next", "new",
    }
)  # fmt: skip
# `..._key` is a secret unless it names a field of the data (slime's `--input-key`, `--label-key`).
_DATA_KEY_WORDS = frozenset(
    {
        "input", "label", "tool", "tools", "reward", "metadata", "multimodal", "prompt", "response",
        "sort", "cache", "group", "partition", "dict", "primary", "foreign", "hash", "routing",
        "shard", "column", "field", "lookup", "image", "message", "messages", "answer", "hotkey",
    }
)  # fmt: skip
# A last word `pass` is a password (`DB_PASS`, `--db-pass`, `SMTP_PASS`) unless it names a pass of
# a compiler or a training loop (`--first-pass`, `post_grad_custom_pre_pass`).
_NOT_PASSWORD_PASS_WORDS = frozenset(
    {
        "first", "second", "third", "last", "pre", "post", "forward", "backward", "fwd", "bwd",
        "num", "skip", "disable", "enable", "custom", "grad", "multi", "single", "one", "two",
        "each", "per", "max", "min", "next", "prev", "compile", "compiler", "fusion", "opt",
        "optimization", "lowering", "graph", "by", "joint", "inference", "train", "eval", "warmup",
    }
)  # fmt: skip
# Secret words that a name may hold glued to another (`PGPASSWORD`, `HFTOKEN`, `DBSECRET`).
_GLUED_SECRET_ENDS = ("password", "passwd", "passphrase", "secret", "apikey", "credentials")
# Query parameters that carry a signature or a credential (S3/GCS presigned URLs, Azure SAS, ...).
_QUERY_SECRETS = frozenset(
    {
        "sig", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token",
        "x-goog-signature", "x-goog-credential", "awsaccesskeyid", "googleaccessid", "key",
        "token", "access_token", "id_token", "refresh_token", "code", "password", "auth",
    }
)  # fmt: skip

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    """Whether an option, variable, field or header called `name` holds a secret. (Remembered for
    names of up to REMEMBERED_NAME characters: a body's names repeat, every metric's labels, every
    row's fields; a longer one, which only a crafted text has, is judged afresh, not kept.)"""
    return _remembered(name) if len(name) <= REMEMBERED_NAME else _judge_name(name)


REMEMBERED_NAME = 128


@functools.lru_cache(maxsize=4096)
def _remembered(name: str) -> bool:
    return _judge_name(name)


def _judge_name(name: str) -> bool:
    words = [w for w in re.split(r"[-_.\s]+", _CAMEL.sub("_", name.strip("-")).lower()) if w]
    if not words:
        return False
    if any(w in _SECRET_WORDS or w.endswith(_GLUED_SECRET_ENDS) for w in words):
        return True
    last, prev = words[-1], (words[-2] if len(words) > 1 else "")
    if last in ("token", "auth"):
        return prev not in _SPECIAL_TOKEN_WORDS
    if last.endswith("token") and last[:-5] not in _SPECIAL_TOKEN_WORDS:
        return True  # `HFTOKEN`, `GHTOKEN`; not `padtoken`
    if last == "pass" and prev:
        return prev not in _NOT_PASSWORD_PASS_WORDS
    if last == "key" and len(words) > 1:
        return prev not in _DATA_KEY_WORDS
    if last in ("id", "b") and len(words) > 2 and words[-2] == "key":
        return words[-3] not in _DATA_KEY_WORDS  # AWS_ACCESS_KEY_ID, watermark_key_b
    return False


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The credentials in a URL's userinfo (password, and the whole userinfo), to blank anywhere."""
    if not url or "@" not in url:
        return ()
    try:
        parts = urlsplit(url if "://" in url else f"//{url}")
    except ValueError:
        return ()
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    if not userinfo:  # a password holding `/`, `?` or `#` (urlsplit ends the userinfo there)
        m = _URL_USERINFO.match(url if "://" in url else f"x://{url}")
        userinfo = m["v"] if m else ""
    if not userinfo:
        return ()
    found = [userinfo, unquote(userinfo)]
    user, _, password = userinfo.partition(":")
    if password:
        found += [password, unquote(password)]
    return tuple(dict.fromkeys(s for s in found if len(s) >= 4))


# ---------------------------------------------------------------- the passes

# scheme://user:password@host  ->  scheme://<redacted>@host  (the host is kept)
# A password may hold `/`, `?` or `#` (`user:pa/ss@host`): after `user:` the userinfo runs to the
# first `@`, unless what follows the `:` is a port (`host:8080/a@b` keeps its host).
_URL_USERINFO = re.compile(
    r"(?P<k>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<v>[^\s/?#\"'<>\\@]*(?:@[^\s/?#\"'<>\\@]*)*(?=@)"
    r"|[^\s/?#\"'<>\\@:\[\]]*:(?![0-9]*(?:[/?#\s\"'<>\\]|$))[^\s\"'<>\\@]{0,256}(?=@))"
)
# curl -u user:pw / --user user:pw / -uuser:pw  ->  user:<redacted>
_USER_PW = re.compile(
    r"(?P<k>(?<![\w-])(?:-u(?:=|[ \t]+)?|(?:--user|--proxy-user)(?:=|[ \t]+))[^\s:\"']+:)"
    r"(?P<v>[^\s\"']+)"
)
# Each pass that judges a name finds KEYS (a name and what separates it from its value, nothing
# after it) and reads a value only at the key of a secret name. A key never swallows the text after
# it, so every name is judged wherever it stands: after another option (`--colocate --wandb-key X`,
# `-v --hf-token=X`), inside another's value (`env=HF_TOKEN=X`, `server_args=ServerArgs(api_key=
# 'X')`, a URL in a query, a repr in a JSON string). Keys are found in linear time, and a value is
# read only for a secret name outside the values blanked already (a crafted `a=a=a=...` costs one
# scan, not one per key).
#
# Every secret name holds one of the HINT words (each word that makes `_judge_name` call a name a
# secret holds one), so most keys are found from their hint: a case-sensitive search of the text
# folded to lower case (an alternation of lower-case literals: ~10x faster than any pattern that
# tries a name at every word), then the name's start found by walking back over its characters.
_HINT_WORDS = ("key", "token", "secret", "pass", "pwd", "cred", "auth", "cookie")
_HINT_ALT = "(?:" + "|".join(_HINT_WORDS) + ")"
_ASCII_LOWER = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"
)  # fmt: skip
_BEFORE_NAME = re.compile(r"[\w.-]")  # a name cannot start right after one of these
_BEFORE_FLAG = re.compile(r"[\w-]")


def _fold(text: str) -> str:
    """`text` in lower case, each character where it was (str.lower, unless a character grew:
    then only A-Z are lowered). Remembered for the text last folded, so that the passes of one
    call share it (`redact_text` forgets it as it returns)."""
    last = _FOLDED[0]
    if last[0] is text:
        return last[1]
    folded = text.lower()
    if len(folded) != len(text):
        folded = text.translate(_ASCII_LOWER)
    _FOLDED[0] = (text, folded)
    return folded


_FOLDED: list[tuple[str, str]] = [("", "")]
_HINT_RE = re.compile(_HINT_ALT)


def _hints(text: str) -> list[int]:
    """Where a hint word starts in the folded `text`: one scan that every hinted pass shares
    (remembered, like the folded text, for the text last scanned; `redact_text` forgets it as it
    returns). A text with no hint word (most logs) then costs one scan, not one per pass."""
    last = _HINTED[0]
    if last[0] is text:
        return last[1]
    starts = [m.start() for m in _HINT_RE.finditer(_fold(text))]
    _HINTED[0] = (text, starts)
    return starts


_HINTED: list[tuple[str, list[int]]] = [("", [])]


def _forget() -> None:
    """Drop the folded copy and the hint positions: not kept past a call."""
    _FOLDED[0] = ("", "")
    _HINTED[0] = ("", [])


# (name, where its key starts, where its value may start)
NameAt = tuple[str, int, int]
Keys = Callable[[str], Iterator[NameAt]]


def _starts_name(text: str, i: int, before: re.Pattern[str]) -> bool:
    """Whether a name may start at `text[i]`: nothing of `before` ahead of it, unless that is a
    JSON string's escape (`\n`, `\t`: a name on the next line of a JSON-escaped text)."""
    if i == 0 or before.match(text, i - 1) is None:
        return True
    return text[i - 1] in "nrt" and i >= 2 and text[i - 2] == "\\"


def _hinted_keys(tail: str, name_chars: str, first: str, before: re.Pattern[str]) -> Keys:
    """Keys found from a hint word: `tail` (on the folded text) is the rest of the name after the
    hint and the separator, its group `end` where the name ends; the name is made of `name_chars`
    (folded), starts with one of `first` and after nothing of `before`."""
    pattern = re.compile(_HINT_ALT + tail)
    chars, firsts = frozenset(name_chars), frozenset(first)

    def keys(text: str) -> Iterator[NameAt]:
        folded = _fold(text)
        after = 0
        for hint in _hints(text):
            if hint < after:
                continue  # inside the last key found (finditer's rule: no overlap)
            m = pattern.match(folded, hint)
            if m is None:
                continue
            after, start = m.end(), m.start()
            while start and folded[start - 1] in chars:
                start -= 1
            if text[start] in firsts and _starts_name(text, start, before):
                yield text[start : m.start("end")], start, m.end()

    return keys


def _regex_keys(pattern: re.Pattern[str]) -> Keys:
    """Keys a pattern matches: group `n` the name; the match ends where the value may start."""

    def keys(text: str) -> Iterator[NameAt]:
        for m in pattern.finditer(text):
            yield m["n"], m.start(), m.end()

    return keys


_LOWER_NAME = "abcdefghijklmnopqrstuvwxyz0123456789_"
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

# ?sig=X  &X-Amz-Signature=X  (only names that carry a secret; `sig` and `code` hold no hint word)
_QUERY_KEY = re.compile(r"[?&;](?P<n>[A-Za-z0-9_.\-]+)=")
_QUERY_VALUE = re.compile(r"(?P<v>[^&\s\"'#<>;]+)")
# The same, percent-encoded (once or more: `%3F`, `%253F`) as a URL inside another URL's query
# (`?next=https%3A%2F%2Fbucket%2Fk%3FX-Amz-Signature%3DX`): `%3F`/`%26`/`%3B` before the name,
# `%3D` after it; the value ends at an encoded `&`, `;` or `#`.
_ENCODED_QUERY_KEY = re.compile(r"%(?:25)*(?:3[Ff]|26|3[Bb])(?P<n>[A-Za-z0-9_.\-]+)%(?:25)*3[Dd]")
_ENCODED_QUERY_VALUE = re.compile(r"(?P<v>(?:[^%&\s\"'#<>;]|%(?!(?:25)*(?:26|3[Bb]|23)))+)")
# "api_key": "X"  'api_key': 'X'  "api_key": ["X", "Y"]  (JSON, Python reprs); a value may hold
# escaped quotes. The name ends at a quote, and the same quote opens it.
_JSON_KEYS = _hinted_keys(
    r"""[a-z0-9_.\-]*(?P<end>)(?P<q>["'])\s*:\s*""",
    _LOWER_NAME + ".-",
    _LETTERS + "0123456789_.-",
    re.compile(r"""[^"']"""),
)
_JSON_VALUE = re.compile(
    r"""(?:(?P<vq>["'])(?P<v>(?:\\.|[^\\\n]){0,8192}?)(?P=vq)|\[(?P<list>[^\[\]{}]{0,8192})\])"""
)
# \"api_key\": \"X\"  (a JSON document inside a JSON string, e.g. SGLang's *_extra_config)
_JSON_ESCAPED = re.compile(
    r"""(?P<k>(?P<bs>\\+)"(?P<n>[A-Za-z0-9_.\-]*(?:key|token|secret|pass|pwd|cred|auth|cookie)"""
    r"""[A-Za-z0-9_.\-]*)(?P=bs)"\s*:\s*(?P=bs)")(?P<v>[^\n]{0,8192}?)(?<!\\)(?P=bs)\"""",
    re.IGNORECASE,  # only names with a secret word: another field's value may hold a whole document
)
# A value after `=` or a flag: unquoted, or opening with a quote (`'X'`, `"X"`, `\"X\"` inside a
# JSON string; the quote is kept, and a quoted value is blanked up to its closing quote), after an
# optional authorization scheme (`authorization=Token X`: the scheme is kept, the token blanked).
_OPEN_QUOTE = r"""(?P<q>\\{0,3}["'])?(?:(?i:token|bearer|basic|digest)[ \t]+)?"""
_VALUE = (
    r"""(?P<v>(?:[^\s"'\\]|\\+(?=[^\s"'\\]))"""
    r"""(?:[^\s"'\\]|\\+(?=[^\s"'\\])|'(?=[^\s"'\\,;:)\]}>]))*)"""
)
_QUOTED_VALUE = re.compile(_OPEN_QUOTE + _VALUE)
# --api-key X  --wandb-key=X  --hf-token "X"  "--wandb-key", "X" (an argv as a JSON list or a
# Python repr, as Ray's node summary lists its processes' command lines). In a JSON string a tab
# or a line break is an escape (`\t`, `\n`): a name may follow one, and a tab separate it from
# its value. After a blank or a list comma, a word that looks like an option is the next option,
# not a value (argparse's rule: `--use-auth-token --hf-token X` gives `--use-auth-token` no
# value); after `=` anything is. The pattern opens with its literal `-` (the regex engine then
# skips to each `-`), the boundary is checked behind it.
# A shell line continued (`--api-key \\` at a line's end, the value on the next: a KubeRay
# `entrypoint: |`, a `bash -c '...'` script), as written and inside a JSON or repr string.
_LINE_CONTINUED = r"(?:\\\r?\n|(?:\\\\)+\\(?:r\\)?n)"
_FLAG_KEY = re.compile(
    r"-(?<![\w-](?<!\\[nrt])-)-?(?P<n>[A-Za-z][A-Za-z0-9_\-]*)"
    r"""(?:=(?:""" + _LINE_CONTINUED + r"""[ \t]*)?"""
    r"""|(?:[ \t]|\\t|""" + _LINE_CONTINUED + r""")+(?!-[A-Za-z\-])"""  # `'-x'` is a value
    r"""|\\{0,3}["'][ \t]*,(?:\s|\\[nrt])*(?=\\{0,3}["'])(?!\\{0,3}["']-[A-Za-z\-]))"""
)
# HF_TOKEN=X  api_key='X'  authorization=Token X  api_key = 'X' (a config file's form; not `==`)
_ASSIGN_KEYS = _hinted_keys(
    r"[a-z0-9_]*(?P<end>)(?:=|[ \t]+=[ \t]*)(?!=)(?:" + _LINE_CONTINUED + r"[ \t]*)?",
    _LOWER_NAME,
    _LETTERS + "_",
    _BEFORE_NAME,
)
# X-Api-Key: X  password: X  password: "X"  (to the end of the line or the enclosing string;
# `Authorization: Bearer X` keeps its scheme)
_HEADER_KEYS = _hinted_keys(
    r"[a-z0-9_\-]*(?P<end>)[ \t]*:[ \t]*", _LOWER_NAME + "-", _LETTERS, _BEFORE_NAME
)
_HEADER_VALUE = re.compile(
    r"""(?P<q>\\{0,3}["'])?(?:(?i:token|bearer|basic|digest)[ \t]+)?"""
    r"""(?P<v>(?:[^\s"',;\\]|\\(?![\\"']))(?:[^\r\n"',;\\]|\\(?![\\"']))*)"""
)
# `  wandb_key ........................ X`: the argument table Megatron-LM prints at start
# (megatron/training/arguments.py `_print_args`: '  {} {} {}'.format(arg, '.' * (48 - len(arg)),
# value)), which slime's driver log holds; many trainers copy it.
_ARG_TABLE_KEYS = _hinted_keys(
    r"[a-z0-9_]*(?P<end>)[ \t]+\.+[ \t]+", _LOWER_NAME, _LETTERS + "_", _BEFORE_NAME
)
_BEARER = re.compile(r"(?P<k>\b(?:Bearer|Basic)\s+)(?P<v>[A-Za-z0-9._~+/=\-]{6,})", re.IGNORECASE)

# Secrets that no option names: W&B's `wandb login [OPTIONS] KEY` (the options of wandb/cli/cli.py
# login; `--host` takes a value) and the MySQL / MariaDB clients' glued `-pPASSWORD` (a bare `-p`
# is a port, a pid or a flag of every other tool: only these commands' `-p` is a password).
WANDB_LOGIN_VALUE_OPTIONS = frozenset({"--host"})
MYSQL_CLIENTS = frozenset(
    {
        "mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump",
        "mysqlslap", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-show",
        "mariadb-check", "mariadb-slap",
    }
)  # fmt: skip
_WANDB_LOGIN = re.compile(
    r"(?P<k>(?<![\w.-])wandb[ \t]+login(?:[ \t]+(?:"
    + "|".join(re.escape(o) for o in sorted(WANDB_LOGIN_VALUE_OPTIONS))
    + r")(?:=|[ \t]+)[^\s\"']+|[ \t]+--?[A-Za-z][\w-]*)*[ \t]+(?P<q>\\{0,3}[\"'])?)"
    + _VALUE
)
_MYSQL_PW = re.compile(
    r"(?P<k>(?<![\w.-])(?:"
    + "|".join(re.escape(c) for c in sorted(MYSQL_CLIENTS, key=len, reverse=True))
    + r")(?![\w.-])(?:[ \t]+[^\s|;&]+){0,32}?[ \t]+-p(?P<q>\\{0,3}[\"'])?)"
    + _VALUE
)

# `wandb.login(key='X')` (a call in a script or a traceback): `key` alone names no secret elsewhere.
_LOGIN_KEY = re.compile(
    r"(?P<k>(?<![\w])login\([^()]{0,256}?(?<![\w.])key[ \t]*=[ \t]*)" + _OPEN_QUOTE + _VALUE
)
# `aws configure set [--profile P] aws_secret_access_key X`: a secret name with a blank, no `=`.
_AWS_SET_KEY = re.compile(
    r"(?<![\w.-])aws[ \t]+configure[ \t]+set[ \t]+(?:--[\w-]+[ \t]+[^\s-]\S*[ \t]+)*"
    r"(?P<n>[A-Za-z][\w.\-]*)[ \t]+"
)

Pass = Callable[[str], str]


# ---------------------------------------------------------------- secrets known by their form
# Secrets that no name announces (a token pasted into a prompt file, a key in a config dump) are
# found by their form: the patterns of two maintained secret scanners, taken with their licences
# (NOTICE at the repository root):
#   detect-secrets 1.5.0, Copyright (c) 2018 Yelp, Inc., Apache License 2.0:
#     detect_secrets/plugins/{aws,github_token,gitlab_token,slack,stripe,jwt,private_key,openai}.py
#   gitleaks v8, Copyright (c) 2019 Zachary Rice, MIT License: config/gitleaks.toml rules
#     github-fine-grained-pat, huggingface-access-token (detect-secrets has neither)
# Changed here: ASCII classes (`[A-Za-z0-9_]` for `\w`, `[0-9]` for `\d`: a token ends before a
# non-ASCII letter); a match must start a word (`_word`: not inside a longer word nor after a
# `-`; a JSON string's `\n` escape counts as a blank); each pattern opens with its literal
# prefix (Slack's `xox?-` as written, where detect-secrets ignores case), so that the regex
# engine skips to it;
# the part blanked is group `v`, so the prefix that names the kind stays readable
# (`ghp_<redacted>`), and it runs on over the token's own characters (a longer key of the same
# kind is blanked whole); detect-secrets' JWT check (header and payload decode to JSON) kept; a
# PEM block is blanked from its BEGIN line to its END line, or over its base64 lines where the
# END was cut off (detect-secrets reports the BEGIN line only). Left out: GitLab's runner
# registration `GR1348941` tokens, PuTTY key files. One form is this project's: an
# OpenAI-compatible `sk-` key without OpenAI's `T3BlbkFJ` mark (DeepSeek's, the keys users give
# vLLM/SGLang `--api-key` in the same form): `sk-`, up to three lower-case words, then 32 or more
# key characters holding a digit and a letter. No entropy guess: a hash, an id, a stack is no form.


@dataclass(frozen=True)
class SecretForm:
    """A kind of secret known by its form. `pattern` opens with a literal (the regex engine then
    skips to it: one fast scan per form) and matches only at the start of a word (`_word`);
    group `v` (or `v2`, ...) is the part blanked; `check`, where given, must accept the match. A
    form whose extent a pattern cannot bound in linear time finds its spans itself (`spans`)."""

    name: str
    pattern: re.Pattern[str]
    source: str
    check: Callable[[re.Match[str]], bool] | None = None
    spans: Callable[[str, re.Match[str], list[int]], tuple[int, int] | None] | None = None


def _word(literal: str, lead: str = "") -> str:
    """`literal` (a regex of fixed width), then the check that `lead` + `literal` (`lead`: one
    character's class ahead of it that belongs to the key, checked behind) starts a word: nothing
    of a token's characters ahead of it, unless a JSON string's `\\n`, `\\r`, `\\t` escape. Only the
    first of a run (`sk-sk-sk-...`) is tried further: a crafted text costs one scan of each run."""
    key = lead + literal
    behind = f"(?<={key})" if lead else ""
    return f"{literal}{behind}(?:(?<![A-Za-z0-9_\\-]{key})|(?<=\\\\[nrt]{key}))"


def _jwt_decodes(m: re.Match[str]) -> bool:
    """detect-secrets' JWT check: the header and the payload are base64url-encoded JSON."""
    for part in m[0].split(".")[:2]:
        try:
            doc = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        except ValueError:
            return False
        if not isinstance(doc, dict):
            return False
    return True


# A PEM block's body: up to its END line (found with str.find, once for every BEGIN after the
# last END found), or, cut before it, its base64 and header lines.
_PEM_END = "-----END"
_PEM_MAX = 16384
_PEM_LINES = re.compile(
    r"(?:(?:\r?\n|(?:\\r)?\\n|[ \t])+(?:[A-Za-z0-9+/=]{16,}"
    r"|[A-Z][A-Za-z\-]+:[ \t][^\r\n\\]{0,256}(?=\r?\n|\\[rn]|$)))+"
)


def _pem_body(text: str, m: re.Match[str], next_end: list[int]) -> tuple[int, int] | None:
    """The body after a BEGIN line; `next_end` holds where the next END line was found (-1:
    none after the last search; [] at first), so every BEGIN of a text shares one search."""
    start = m.end()
    if not next_end or -1 < next_end[0] < start:
        next_end[:] = [text.find(_PEM_END, start)]
    end = next_end[0]
    if end != -1 and end - start <= _PEM_MAX:
        return (start, end) if end > start else None
    lines = _PEM_LINES.match(text, start)
    return lines.span() if lines else None


_MORE = r"[A-Za-z0-9_\-]*"  # the rest of a longer token of the same kind
SECRET_FORMS: tuple[SecretForm, ...] = (
    SecretForm(
        "AWS access key id",
        re.compile(
            _word("A(?:3T[A-Z0-9]|BIA|CCA|KIA|SIA)") + r"(?P<v>[0-9A-Z]{16})(?![A-Za-z0-9])"
        ),
        "detect-secrets aws.py",
    ),
    SecretForm(
        "GitHub token",
        re.compile(_word("gh[pousr]_") + r"(?P<v>[A-Za-z0-9_]{36}" + _MORE + ")"),
        "detect-secrets github_token.py",
    ),
    SecretForm(
        "GitHub fine-grained token",
        re.compile(_word("github_pat_") + r"(?P<v>[A-Za-z0-9_]{82}" + _MORE + ")"),
        "gitleaks github-fine-grained-pat",
    ),
    SecretForm(
        "GitLab token",
        re.compile(
            _word("gl") + r"(?:(?:pat|dt|ft|soat|rt)-(?P<v>[A-Za-z0-9_\-]{20,50})"
            r"|cbt-(?P<v2>(?:[0-9a-fA-F]{2}_)?[A-Za-z0-9_\-]{20,50})|imt-(?P<v3>[A-Za-z0-9_\-]{25})"
            r"|ptt-(?P<v4>[A-Za-z0-9_\-]{40})|agent-(?P<v5>[A-Za-z0-9_\-]{50,1024})"
            r"|oas-(?P<v6>[A-Za-z0-9_\-]{64}))(?![A-Za-z0-9_])"
        ),
        "detect-secrets gitlab_token.py",
    ),
    SecretForm(
        "Hugging Face token",
        re.compile(_word("hf_") + r"(?P<v>[A-Za-z]{34})(?![A-Za-z0-9])"),
        "gitleaks huggingface-access-token",
    ),
    SecretForm(
        "OpenAI-style key",
        re.compile(
            _word("sk-")
            + r"(?:(?P<v>[A-Za-z0-9_\-]{0,160}?[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}"
            + _MORE
            + r")|(?:[a-z]+-){0,3}(?P<v2>(?=[A-Za-z_\-]{0,64}[0-9])(?=[0-9_\-]{0,64}[A-Za-z])"
            r"[A-Za-z0-9_\-]{32,}))"
        ),
        "detect-secrets openai.py; the generic form: this project",
    ),
    SecretForm(
        "Stripe live key",
        re.compile(_word("k_live_", lead="[rs]") + r"(?P<v>[0-9a-zA-Z]{24}[0-9a-zA-Z]*)"),
        "detect-secrets stripe.py",
    ),
    SecretForm(
        "Slack token",
        re.compile(_word("xox[abposr]-") + r"(?P<v>(?:[0-9]+-)+[A-Za-z0-9]+" + _MORE + ")"),
        "detect-secrets slack.py",
    ),
    SecretForm(
        "Slack webhook",
        re.compile(
            r"https://hooks\.slack\.com/services/(?P<v>T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+)"
        ),
        "detect-secrets slack.py",
    ),
    SecretForm(
        "JSON Web Token",
        re.compile(_word("eyJ") + r"[A-Za-z0-9_=\-]*\.[A-Za-z0-9_=\-]+\.?[A-Za-z0-9_=+/\-]*"),
        "detect-secrets jwt.py",
        _jwt_decodes,
    ),
    SecretForm(
        "PEM private key",
        re.compile(r"-----BEGIN[A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----"),
        "detect-secrets private_key.py",
        spans=_pem_body,
    ),
)


def _form_spans(text: str) -> list[tuple[int, int]]:
    """Where a secret known by its form is in `text` (the part blanked), in no order."""
    spans: list[tuple[int, int]] = []
    for form in SECRET_FORMS:
        memo: list[int] = []
        after = 0
        for m in form.pattern.finditer(text):
            if form.spans is not None:
                found = None if m.start() < after else form.spans(text, m, memo)
                if found is not None and not text.startswith(REDACTED, found[0]):
                    spans.append(found)
                    after = found[1]  # a BEGIN inside this body is part of it
                continue
            if form.check is not None and not form.check(m):
                continue
            named = [g for g, v in m.groupdict().items() if v and g.startswith("v")]
            groups: list[str | int] = [*named] if named else [0]
            for group in groups:
                if not text.startswith(REDACTED, m.start(group)):
                    spans.append(m.span(group))
    return spans


def value_pass(text: str) -> str:
    """Blank every secret known by its form (SECRET_FORMS), whatever names it or not."""
    spans = _form_spans(text)
    if not spans:
        return text
    out: list[str] = []
    pos = 0
    for start, end in sorted(spans):
        if start < pos:  # overlaps the last one: one blank
            pos = max(pos, end)
            continue
        out += (text[pos:start], REDACTED)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _blank(pattern: re.Pattern[str], text: str) -> str:
    """Blank the value (group `v`) of every match; a value that opens with a quote (group `q`) is
    blanked up to its closing quote on the same line."""
    out: list[str] = []
    pos = 0
    for m in pattern.finditer(text):
        value = m["v"]
        if m.start() < pos or not value or _blanked_already(value):
            continue
        start, end = _quoted_span(text, m)
        out += (text[pos:start], REDACTED)
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


_QUERY_REST = re.compile(r"[&;][\w.\-%]+=")


def _blanked_already(value: str) -> bool:
    """A value blanked by an earlier pass: the blank alone, or the blank and the next field of a
    query (`token=<redacted>&b=2`). The blank and more of the word (`PW=<redacted>&X`, a known
    secret found inside it) is blanked whole."""
    if not value.startswith(REDACTED):
        return False
    return len(value) == len(REDACTED) or _QUERY_REST.match(value, len(REDACTED)) is not None


def _quoted_span(text: str, m: re.Match[str]) -> tuple[int, int]:
    """The span of a match's value (group `v`), to its closing quote on the same line where it
    opens with one (group `q`)."""
    start, end = m.span("v")
    quote = m.groupdict().get("q")
    if quote:
        close = text.find(quote, start, start + 8192)
        if close != -1 and "\n" not in text[start:close]:
            end = max(end, close)
    elif end - start > 1 and text[end - 1] == ",":
        end -= 1  # `api_key=X, model=M`: the comma is the list's (one inside a value is not)
    return start, end


# Where a secret name's value is, and what it becomes: (start, end, replacement), or None.
Blank = Callable[[str, int], "tuple[int, int, str] | None"]


@dataclass(frozen=True)
class _Named:
    """A pass that judges names: `keys` finds them, and `blank(text, key_end)` says where a
    secret name's value is and what it becomes."""

    keys: Keys
    secret: Callable[[str], bool]
    blank: Blank

    def __call__(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        for name, start, key_end in self.keys(text):
            if start < pos or not self.secret(name):
                continue  # a name inside a value blanked already, or no secret (the most)
            found = self.blank(text, key_end)
            if found is None:
                continue
            value_start, value_end, replacement = found
            out += (text[pos:value_start], replacement)
            pos = value_end
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)


def _value_after(value: re.Pattern[str]) -> Blank:
    """The value `value` matches at the key's end (groups `v`, and `q` for an opening quote)."""

    def blank(text: str, at: int) -> tuple[int, int, str] | None:
        m = value.match(text, at)
        if m is None or not m["v"] or _blanked_already(m["v"]):
            return None
        start, end = _quoted_span(text, m)
        return start, end, REDACTED

    return blank


def _json_value(text: str, at: int) -> tuple[int, int, str] | None:
    """A JSON or repr field's value: a string blanked inside its quotes, a list of secrets made
    one blank (`["<redacted>"]`: the JSON stays valid); null and empty lists kept."""
    m = _JSON_VALUE.match(text, at)
    if m is None:
        return None
    listed = m["list"]
    if listed is not None:
        if listed.strip() in ("", "null", "None"):
            return None
        k = at
        while k and text[k - 1] in " \t\r\n:":
            k -= 1
        quote = text[k - 1]  # the name's closing quote
        return m.start(), m.end(), f"[{quote}{REDACTED}{quote}]"
    if not m["v"] or m["v"] == REDACTED:
        return None
    return m.start("v"), m.end("v"), REDACTED


def _plain(pattern: re.Pattern[str], needs: tuple[str, ...] = ()) -> Pass:
    def run(text: str) -> str:
        if needs and not any(word in text for word in needs):
            return text  # a literal every match holds is absent (linear time, no regex)
        return _blank(pattern, text)

    return run


def _json_escaped(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        if not m.group("v") or not is_secret_name(m.group("n")):
            return m.group(0)
        return f'{m.group("k")}{REDACTED}{m.group("bs")}"'

    return _JSON_ESCAPED.sub(sub, text)


def _query_secret(name: str) -> bool:
    return name.lower() in _QUERY_SECRETS or is_secret_name(name)


url_userinfo_pass = _plain(_URL_USERINFO)
user_pw_pass = _plain(_USER_PW)
query_pass = _Named(_regex_keys(_QUERY_KEY), _query_secret, _value_after(_QUERY_VALUE))
encoded_query_pass = _Named(
    _regex_keys(_ENCODED_QUERY_KEY), _query_secret, _value_after(_ENCODED_QUERY_VALUE)
)
aws_set_pass = _Named(_regex_keys(_AWS_SET_KEY), is_secret_name, _value_after(_QUOTED_VALUE))
json_field_pass = _Named(_JSON_KEYS, is_secret_name, _json_value)
json_escaped_pass = _json_escaped
flag_pass = _Named(_regex_keys(_FLAG_KEY), is_secret_name, _value_after(_QUOTED_VALUE))
assign_pass = _Named(_ASSIGN_KEYS, is_secret_name, _value_after(_QUOTED_VALUE))
header_pass = _Named(_HEADER_KEYS, is_secret_name, _value_after(_HEADER_VALUE))
arg_table_pass = _Named(_ARG_TABLE_KEYS, is_secret_name, _value_after(_QUOTED_VALUE))
bearer_pass = _plain(_BEARER)
# The literals that every match of a pass holds, as written (both passes are case-sensitive).
_WANDB_LOGIN_NEEDS = ("login",)
_MYSQL_NEEDS = ("mysql", "mariadb")
wandb_login_pass = _plain(_WANDB_LOGIN, _WANDB_LOGIN_NEEDS)
mysql_password_pass = _plain(_MYSQL_PW, _MYSQL_NEEDS)
login_key_pass = _plain(_LOGIN_KEY, ("login(",))

# In this order: structure first (URLs, JSON fields), then the looser text forms.
PASSES: tuple[Pass, ...] = (
    value_pass,
    url_userinfo_pass,
    user_pw_pass,
    query_pass,
    encoded_query_pass,
    json_escaped_pass,
    json_field_pass,
    flag_pass,
    assign_pass,
    bearer_pass,
    wandb_login_pass,
    mysql_password_pass,
    login_key_pass,
    aws_set_pass,
    header_pass,
    arg_table_pass,
)

# Whether a pass can match `text` at all: a literal that every match of its pattern holds is
# absent, so the pass would return the text unchanged (substring tests: linear time, no regex).
# Each is judged on the text as the passes before it left it.
MayMatch = Callable[[str], bool]


def _holds_all(*literals: str) -> MayMatch:
    return lambda text: all(word in text for word in literals)


def _holds_any(*literals: str) -> MayMatch:
    return lambda text: any(word in text for word in literals)


def _bearer_may_match(text: str) -> bool:
    """Case-insensitive; on a text that is not ASCII, Unicode folding (U+017F is an `s`) decides."""
    if not text.isascii():
        return True
    lower = text.lower()
    return "bearer" in lower or "basic" in lower


def _always(_text: str) -> bool:
    return True


_MAY_MATCH: tuple[MayMatch, ...] = (
    _always,  # value_pass tests each form's literals itself
    _holds_all("://", "@"),  # url_userinfo: scheme://userinfo followed by `@`
    _holds_any("-u"),  # user_pw: -u, --user, --proxy-user
    lambda text: "=" in text and ("?" in text or "&" in text or ";" in text),  # query
    lambda text: "%" in text and ("3D" in text or "3d" in text),  # encoded query
    _holds_any('\\"'),  # json_escaped: a backslash-escaped quote
    lambda text: ":" in text and ('"' in text or "'" in text),  # json_field
    _holds_any("-"),  # flag
    _holds_any("="),  # assign
    _bearer_may_match,
    _always,  # wandb_login, mysql_password and login_key test their literals themselves
    _always,
    _always,
    _holds_all("configure"),  # aws configure set
    _holds_any(":"),  # header
    _holds_any(" .", "\t."),  # arg_table: a name, a blank, then the dots
)


# A necessary condition of every pass: a secret word, a URL's `@`, a signed query's `sig`/`amz`/
# `goog`/`code`, curl's `-u`/`--user`, or the literal a case-sensitive pass needs (`login` of
# `wandb login`, a MySQL client's name). Most texts (/metrics pages, stacks) hold none and skip
# every pass. ASCII texts are searched lower-cased; others case-insensitively (Unicode folding);
# the literals as written (a substring test: no cost on the hot path).
_HINT = r"key|token|secret|pass|pwd|cred|auth|cookie|bearer|basic|@|sig|amz|goog|code|-u|user"
_ASCII_HINT = re.compile(_HINT)
_UNICODE_HINT = re.compile(_HINT, re.IGNORECASE)
_LITERAL_HINTS = (*_WANDB_LOGIN_NEEDS, *_MYSQL_NEEDS)  # `login(` holds `login`


def every_pass(text: str) -> str:
    """Every pass, unconditionally (what `redact_text` equals, whatever its pre-check skips)."""
    for run in PASSES:
        text = run(text)
    _forget()
    return text


def redact_text(text: str, known_secrets: tuple[str, ...] = ()) -> str:
    """Blank secret values in free text (JSON bodies, command lines, logs, messages)."""
    for secret in sorted(known_secrets, key=len, reverse=True):
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    hint = _ASCII_HINT.search(text.lower()) if text.isascii() else _UNICODE_HINT.search(text)
    if hint is None and not any(word in text for word in _LITERAL_HINTS):
        return value_pass(text)  # no pass that judges names can match
    for run, may_match in zip(PASSES, _MAY_MATCH, strict=True):
        if may_match(text):
            text = run(text)
    _forget()
    return text


def redact_bytes(data: bytes, known_secrets: tuple[str, ...] = ()) -> bytes:
    """`redact_text` on bytes, whatever they hold: bytes that are not UTF-8 (a multibyte
    character cut by a byte cap, a binary body, a mis-encoded log) are carried through as
    `surrogateescape` code points, so every byte outside a blanked value comes back exactly."""
    text = data.decode("utf-8", "surrogateescape")
    return redact_text(text, known_secrets).encode("utf-8", "surrogateescape")


def utf8_prefix(data: bytes, limit: int) -> bytes:
    """The first `limit` bytes of `data` without a UTF-8 character that the cut leaves incomplete
    at its end (at most 3 bytes fewer): what a byte cap keeps of a text."""
    cut = data[: max(limit, 0)]
    for back in range(1, min(3, len(cut)) + 1):
        byte = cut[-back]
        if byte < 0x80 or byte >= 0xF8:
            break  # ASCII (the last character is whole), or no UTF-8 here
        if byte >= 0xC0:  # the lead byte of the last character: is its sequence complete?
            size = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return cut[:-back] if size > back else cut
    return cut


def redact_cmdline(
    argv: tuple[str, ...] | list[str], known_secrets: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Redact a command line argument by argument (`--api-key X` spans two arguments; so do
    `-u user:pw` and W&B's `wandb login [OPTIONS] KEY`; a MySQL client's `-pPASSWORD` is one).
    An argument with a blank in it is shell text (`sh -c "python train.py --wandb-key 'X'"`, as
    Ray's job supervisor runs an entrypoint): `redact_shell`."""
    out: list[str] = []
    hide_next = False
    mysql = False  # a MySQL client named in this command (`mysql`, `sudo mysql`, `docker exec`)
    login = False  # between `wandb login` (`python -m wandb login`) and its KEY
    skip_value = False  # the value of a `wandb login` option
    for i, arg in enumerate(argv):
        if _SHELL_OPERATOR.fullmatch(arg):  # `&&`, `;`, `|` in shell words: a new command
            out.append(arg)
            mysql, login, hide_next, skip_value = False, False, False, False
            continue
        word = arg.rsplit("/", 1)[-1]
        mysql = mysql or word in MYSQL_CLIENTS
        if hide_next:
            hide_next = False
            if not arg.startswith("-") or arg == "-":
                out.append(REDACTED)
                continue
        if login:
            if skip_value:
                skip_value = False
            elif not arg.startswith("-"):
                out.append(REDACTED)
                login = False
                continue
            else:
                skip_value = arg in WANDB_LOGIN_VALUE_OPTIONS
        elif arg == "login" and i and argv[i - 1].rsplit("/", 1)[-1] == "wandb":
            login = True
        if (
            re.fullmatch(r"--?[A-Za-z][A-Za-z0-9_\-]*", arg) or _aws_set_name(argv, i)
        ) and is_secret_name(arg):
            out.append(arg)
            hide_next = True
            continue
        prev = argv[i - 1] if i else ""
        if prev in ("-u", "--user", "--proxy-user") and re.fullmatch(r"[^\s:]+:\S+", arg):
            out.append(arg.partition(":")[0] + ":" + REDACTED)
            continue
        if mysql and len(arg) > 2 and arg.startswith("-p") and word not in MYSQL_CLIENTS:
            out.append("-p" + REDACTED)
            continue
        if any(c.isspace() for c in arg):
            out.append(redact_shell(arg, known_secrets))
            continue
        out.append(redact_text(arg, known_secrets))
    return tuple(out)


def _aws_set_name(argv: tuple[str, ...] | list[str], i: int) -> bool:
    """Whether `argv[i]` is the name of `aws configure set [--profile P] NAME VALUE`."""
    k = i - 1
    while k >= 2 and argv[k - 1].startswith("--") and not argv[k].startswith("-"):
        k -= 2  # an option and its value between `set` and the name
    return k >= 2 and argv[k] == "set" and argv[k - 1] == "configure" and argv[k - 2] == "aws"


_SHELL_OPERATOR = re.compile(r"[();<>|&]+")
_LINE_JOIN = re.compile(r"(?<!\\)((?:\\\\)*)\\\r?\n")


def redact_shell(command: str, known_secrets: tuple[str, ...] = ()) -> str:
    """Redact shell text (an `sh -c` argument, a job's entrypoint): split into words with `shlex`
    (quotes removed, `&&` / `;` / `|` apart), each word judged as `redact_cmdline` judges an
    argument. The values it blanks are then blanked in the text as written, with every free-text
    pattern (`redact_text`), so the quoting, the redirections and a JSON document in the text stay
    as they were; a value not found there as written (`a\\ b`) or shorter than a known secret may
    be has the words joined again instead (shell-quoted). Text that does not parse (an unbalanced
    quote) is redacted as free text."""
    try:  # a line continued (`\\` newline) is one line to the shell, not a word
        lexer = shlex.shlex(_LINE_JOIN.sub(r"\1", command), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        words = list(lexer)
    except ValueError:
        return redact_text(command, known_secrets)
    if len(words) == 1 and words[0] == command:
        return redact_text(command, known_secrets)  # one plain word: nothing to split
    redacted = redact_cmdline(words, known_secrets)
    pairs = zip(words, redacted, strict=True)
    values = [v for w, r in pairs if w != r for v in _blanked_values(w, r)]
    if all(len(v) >= 4 and v in command for v in values):
        return redact_text(command, (*known_secrets, *values))
    return " ".join(
        w if _SHELL_OPERATOR.fullmatch(w) or REDACTED in w else shlex.quote(w) for w in redacted
    )


def _blanked_values(original: str, redacted: str) -> tuple[str, ...]:
    """The parts of `original` that `redacted` shows as REDACTED (`-pX` -> `-p<redacted>`: X)."""
    parts = redacted.split(REDACTED)
    found = re.fullmatch("(.*?)".join(re.escape(p) for p in parts), original, re.DOTALL)
    return tuple(g for g in found.groups() if g) if found else (original,)


def filter_env(
    env: Mapping[str, str], urls_any_case: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Keep only allow-listed, non-secret environment variables; also the names of `urls_any_case`
    (lower case) in any letter case, as URLs without their user and password (proxy variables:
    `facts.PROXY_ENV`)."""
    out = {k: v for k, v in env.items() if k in ENV_ALLOWLIST}
    out.update({k: redact_url_userinfo(v) for k, v in env.items() if k.lower() in urls_any_case})
    return out


_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)?"
    r"(?P<user>[^/@\s,]*|[^/@\s,:]*:(?![0-9]*(?:[/?#]|$))[^@\s,]{0,256})@"
)


def redact_url_userinfo(value: str) -> str:
    """``http://user:pass@proxy:3128`` -> ``http://<redacted>@proxy:3128`` (each URL of a list)."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme') or ''}{REDACTED}@", value)
