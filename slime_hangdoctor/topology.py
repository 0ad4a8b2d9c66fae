"""Who is who in a slime job: roles of processes, from Ray state and process titles. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.verdict import Role


@dataclass(frozen=True)
class Member:
    """One slime process and the role it plays."""

    role: Role
    pid: int
    node_ip: str | None
    kind: str  # actor | http_server | scheduler | detokenizer | driver | router
    title: str = ""
    actor_id: str | None = None
    class_name: str | None = None
    method: str | None = None  # running Ray method ("update_weights"), from the title or tasks
    rank: int | None = None  # train rank
    engine_url: str | None = None  # for engine actors, their servers and schedulers
    parent_pid: int | None = None
    source: str = "ray-state"  # ray-state | proc-title | job-api | user-flag

    @property
    def label(self) -> str:
        if self.role is Role.TRAIN_RANK and self.rank is not None:
            return f"train rank {self.rank}"
        if self.role is Role.SGLANG_ENGINE:
            what = {"actor": "engine actor", "http_server": "engine server"}.get(
                self.kind, self.kind
            )
            return f"{what} {self.engine_url or ''}".strip()
        return self.role.value.replace("_", " ")


@dataclass(frozen=True)
class Engine:
    """One SGLang engine (HTTP server) to probe."""

    url: str
    node_ip: str | None = None
    actor_pid: int | None = None
    server_pid: int | None = None
    source: str = "proc-listen"  # proc-listen | user-flag | router


@dataclass(frozen=True)
class Topology:
    members: tuple[Member, ...] = ()
    engines: tuple[Engine, ...] = ()
    routers: tuple[str, ...] = ()
    job_running: bool | None = None  # a Ray job (driver) is RUNNING

    def by_role(self, role: Role) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.role is role)

    def member(self, pid: int, node_ip: str | None = None) -> Member | None:
        for m in self.members:
            if m.pid == pid and (node_ip is None or m.node_ip in (None, node_ip)):
                return m
        return None
