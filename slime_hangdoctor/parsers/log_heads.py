"""Parse the head of a slime actor's worker log (`actor_log_head`): the engine and router URLs it
names.

Line shapes, written once at an engine's start-up (shared/reference/slime.md §2, §7; sglang.md):
- slime's SGLangEngine (`sglang_engine.py` `_init_normal`, `logging` to stderr):
  `[YYYY-mm-dd HH:MM:SS] sglang_engine.py:N - Launch HttpServerEngineAdapter at: HOST:PORT`,
  before the server starts; slime's clients call `http://HOST:PORT`.
- uvicorn in SGLang's HTTP server (the actor's child: it inherits the actor's stderr):
  `INFO:     Uvicorn running on http://HOST:PORT (Press CTRL+C to quit)`, once it listens.
- slime's RolloutManager, once it forked sgl-router (`_start_router`, slime/ray/rollout.py:967 at
  624b824 and the January layout; miles `router_manager.py:76`):
  `Router launched at HOST:PORT, Prometheus port: P` (miles: no Prometheus part). Not written when
  the user gave `--sglang-router-ip`: slime starts no router then.
Ray writes a worker's lines to its file without the `(Class pid=N)` prefix it adds in the driver's
log; colour codes are dropped. tqdm redraws with carriage returns, so `\\r` ends a line too. A last
line without its newline (a head cut at the byte cap, or a line being written) is not read. Pure:
no I/O; never raises but ParseError.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from slime_hangdoctor.bundle import ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.json_text import meta_str
from slime_hangdoctor.source_spec import SourceSpec

# The first bytes of one stream (err / out) of a slime actor's Ray worker log, read on its node;
# meta: pid, class_name, stream, file, bytes, max_bytes, truncated
ACTOR_LOG_HEAD = "actor_log_head"

MAX_TEXT = 300  # characters kept of one line
MAX_URLS = 16  # URLs kept (a head names one engine's URL twice)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HOST = r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+)"
_PORT = r"(?P<port>\d{1,5})(?![\d])"
_LAUNCH = re.compile(r"Launch HttpServerEngineAdapter at: " + _HOST + ":" + _PORT)
_UVICORN = re.compile(r"Uvicorn running on (?P<scheme>https?)://" + _HOST + ":" + _PORT)
_ROUTER = re.compile(r"Router launched at " + _HOST + ":" + _PORT)


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class LoggedUrl:
    """An engine URL one of its start-up lines names."""

    url: str  # scheme://host:port, as logged (the host is not resolved)
    line: str  # the line (cut)
    served: bool  # SGLang's uvicorn line (the server listened there); False: slime's launch line


@dataclass(frozen=True)
class ActorLogHead:
    """What the first bytes of a slime actor's worker log say: engine URLs, and the routers a
    RolloutManager launched."""

    urls: tuple[LoggedUrl, ...] = ()
    lines: int = 0  # whole lines read
    # which log: the actor's pid and class, the stream (err / out) and the log's file name
    pid: int = 0
    class_name: str = ""
    stream: str = ""
    file: str | None = None
    # slime's `Router launched at HOST:PORT` lines, oldest first (`served` is False: a launch, not
    # a listening socket)
    routers: tuple[LoggedUrl, ...] = ()

    @property
    def served_url(self) -> LoggedUrl | None:
        """The URL the server last said it listens on (None: no uvicorn line in the head)."""
        served = [u for u in self.urls if u.served]
        return served[-1] if served else None

    @property
    def launched_url(self) -> LoggedUrl | None:
        """The URL slime last said it launched the server at (None: no launch line)."""
        launched = [u for u in self.urls if not u.served]
        return launched[-1] if launched else None


def parse_log_head(data: bytes) -> ActorLogHead:
    """The engine URLs that the whole lines of `data` name, oldest first."""
    if not isinstance(data, bytes | bytearray):
        raise ParseError("a log head is bytes")
    text = bytes(data).decode("utf-8", "replace")
    lines = re.split(r"\r\n|\r|\n", text)
    whole = lines[:-1]  # the last element is what follows the last line end
    urls: list[LoggedUrl] = []
    routers: list[LoggedUrl] = []
    for raw in whole:
        line = _ANSI.sub("", raw)
        found = _url(line)
        if found is not None and len(urls) < MAX_URLS:
            urls.append(found)
        router = _router(line)
        if router is not None and len(routers) < MAX_URLS:
            routers.append(router)
    return ActorLogHead(
        tuple(urls), sum(1 for line in whole if line.strip()), routers=tuple(routers)
    )


def _router(line: str) -> LoggedUrl | None:
    match = _ROUTER.search(line)
    if match is None or not 0 < int(match["port"]) < 65536:
        return None
    return LoggedUrl(f"http://{match['host']}:{int(match['port'])}", line.strip()[:MAX_TEXT], False)


def _url(line: str) -> LoggedUrl | None:
    match = _UVICORN.search(line)
    served = match is not None
    if match is None:
        match = _LAUNCH.search(line)
    if match is None or not 0 < int(match["port"]) < 65536:
        return None
    scheme = match.groupdict().get("scheme") or "http"
    return LoggedUrl(
        f"{scheme}://{match['host']}:{int(match['port'])}", line.strip()[:MAX_TEXT], served
    )


def _parse_record(data: bytes, rec: ProbeRecord) -> ActorLogHead:
    pid = rec.meta.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        raise ParseError("log head record without a pid")
    return dataclasses.replace(
        parse_log_head(data),
        pid=pid,
        class_name=str(rec.meta.get("class_name") or ""),
        stream=str(rec.meta.get("stream") or ""),
        file=meta_str(rec.meta.get("file")),
    )


# The head of one stream of an engine actor's worker log, read on its node (collect/log_heads.py:
# 64 KiB a stream). Discovery reads it: the URL of a server that is gone.
SPEC = SourceSpec[ActorLogHead](
    name=ACTOR_LOG_HEAD,
    parse=_parse_record,
    max_bytes=1 * 1024 * 1024,
    discovery=True,
    node_probe="slime_hangdoctor.collect.log_heads",
    switch="logs",
)
