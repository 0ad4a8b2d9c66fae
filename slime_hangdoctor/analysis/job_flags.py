"""The job's own settings, read from its command lines: the flags slime's driver was started with
(`--pipeline-model-parallel-size 2`, `--sglang-speculative-algorithm EAGLE`, `--flag=value`), as
the process scans list each job process's argv and Ray's Job API the running job's entrypoint.
Pure: reads the world. A flag that no command line shows is unknown (a wrapper script, a config
file or a default may set it), never its default."""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.topology import running_entrypoints


@dataclass(frozen=True)
class FlagValue:
    flag: str  # as written: `--pipeline-model-parallel-size`
    value: str
    where: str  # `on the driver's command line (pid 123)`, `in job 02000000's entrypoint`


def _in_argv(argv: tuple[str, ...], flags: frozenset[str]) -> tuple[str, str] | None:
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name not in flags:
            continue
        if eq:
            return name, value
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            return name, argv[i + 1]
    return None


def job_flag(world: World, flags: frozenset[str]) -> FlagValue | None:
    """The value of the first of `flags` found on a job process's command line (the driver's
    first, in the world's order) or on a running job's entrypoint; None where none shows it."""
    for p in world.procs:
        if not p.infos:
            continue
        found = _in_argv(tuple(p.infos[-1][1].cmdline), flags)
        if found is not None:
            return FlagValue(*found, f"on the {p.label}'s command line (pid {p.pid})")
    for job, argv in running_entrypoints(world.snapshot):
        found = _in_argv(argv, flags)
        if found is not None:
            return FlagValue(*found, f"in job {job.job_id or '?'}'s entrypoint")
    return None


def as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None
