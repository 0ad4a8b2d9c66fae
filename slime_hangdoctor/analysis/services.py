"""The services outside the job that its own configuration names: a remote reward model or LLM
judge (`--rm-url`), a sandbox or tool server of an agentic rollout, an external engine or router.
Pure.

A rollout that awaits such a service shows nothing in any stack (slime's `remote_rm` is an aiohttp
coroutine on the RolloutManager's event loop) and nothing in the engines (they finished their
share): only the RolloutManager's connections to a peer that is none of the job's processes say
where the requests went. This module reads what that peer is from where the job says it: the URL
values of the job's command lines (`--rm-url http://rm:8000/score`, `--flag=URL`) and of the
environment the doctor keeps. The flag's name says what the service is for (`rm`, `reward`,
`judge` -> the reward; `sandbox`, `tool`, `code`, `env` -> the rollout's tools).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.topology import running_entrypoints
from slime_hangdoctor.verdict import Stage


class ServiceKind(str, Enum):
    REWARD = "reward model"  # slime's --rm-url (remote_rm), an LLM judge
    TOOLS = "tool server"  # a sandbox, code-execution or tool server of an agentic rollout
    ENGINE = "external engine"  # an inference server or router the job does not run itself
    OTHER = "service"


@dataclass(frozen=True)
class Service:
    """One URL the job's configuration names, and what for."""

    url: str
    host: str
    port: int
    kind: ServiceKind
    named_by: str  # `--rm-url on the driver's command line (pid 123)`
    node_ip: str | None = None  # the node of the process that names it (a loopback URL is there)

    @property
    def stage(self) -> Stage:
        """The stage a rollout that waits on this service is in."""
        return Stage.REWARD if self.kind is ServiceKind.REWARD else Stage.ROLLOUT_DISPATCH

    @property
    def label(self) -> str:
        return f"{self.kind.value} {self.url} ({self.named_by})"


# Words of a flag or variable name, in order of precedence: the first kind whose word appears wins.
_KIND_WORDS: tuple[tuple[ServiceKind, frozenset[str]], ...] = (
    (ServiceKind.REWARD, frozenset({"rm", "reward", "judge", "verifier", "grader", "critic"})),
    (ServiceKind.TOOLS, frozenset({"sandbox", "tool", "tools", "code", "exec", "env", "mcp"})),
    (ServiceKind.ENGINE, frozenset({"sglang", "vllm", "engine", "router", "llm", "openai"})),
)
_URL = re.compile(r"https?://[^\s'\"<>]+", re.IGNORECASE)


def kind_of(name: str) -> ServiceKind:
    """What a flag or variable named `name` (`--rm-url`, `REWARD_SERVER`) points at."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    for kind, marks in _KIND_WORDS:
        if words & marks:
            return kind
    return ServiceKind.OTHER


def _service(url: str, name: str, where: str, node_ip: str | None) -> Service | None:
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return Service(url, parts.hostname, port, kind_of(name), f"{name} {where}", node_ip)


def _from_argv(argv: tuple[str, ...], where: str, node_ip: str | None) -> list[Service]:
    out: list[Service] = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if eq and flag.startswith("-"):
            name, text = flag, value
        elif i and argv[i - 1].startswith("-"):
            name, text = argv[i - 1], arg
        else:
            continue
        for url in _URL.findall(text):
            if (s := _service(url, name, where, node_ip)) is not None:
                out.append(s)
    return out


def job_services(world: World) -> tuple[Service, ...]:
    """Every URL a command line or a kept environment variable of the job's processes, or a running
    job's entrypoint (Ray's Job API), names: once, the first place it was seen naming it."""
    found: dict[tuple[str, int], Service] = {}
    for p in world.procs:
        if not p.infos:
            continue
        info = p.infos[-1][1]
        where = f"on the {p.label}'s command line (pid {p.pid})"
        for s in _from_argv(info.cmdline, where, p.node_ip):
            found.setdefault((s.host, s.port), s)
        for name, value in info.env.items():
            for url in _URL.findall(value or ""):
                svc = _service(
                    url, name, f"in the {p.label}'s environment (pid {p.pid})", p.node_ip
                )
                if svc is not None:
                    found.setdefault((svc.host, svc.port), svc)
    for job, argv in running_entrypoints(world.snapshot):
        for s in _from_argv(argv, f"in job {job.job_id or '?'}'s entrypoint", job.driver_node_ip):
            found.setdefault((s.host, s.port), s)
    return tuple(found.values())
