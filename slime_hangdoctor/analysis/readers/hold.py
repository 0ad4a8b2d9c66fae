"""A hop of the rollout's request path that holds the job's requests: the fact that
parts/request_path/hops.py finds (its module doc says when) and that the progress reader keeps from
counting an engine's tokens as the job's progress (readers/proof.py). A reader because both read it:
the part that finds a hold and the proof that it holds progress back."""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.world import Proc
from slime_hangdoctor.facts import Frame


@dataclass(frozen=True)
class Hold:
    """A hop of the request path that holds the job's requests (module doc)."""

    proc: Proc
    frame: Frame  # the innermost frame of its own code, the same at both samples
    cpu_s: float
    window_s: float
    unaccepted: tuple[tuple[Proc, int], ...]  # (caller, its connections not accepted), most first
    unread: int  # request bytes in its own receive queues, at the last sample
    unread_connections: int
    callers: tuple[Proc, ...]  # who sends it requests
    runnable: bool = False  # state R at every sample
    renewed: bool = False  # its callers gave up every request of the first sample (_piled)
    resent: bool = False  # and new ones wait at the last (these are the last sample's)

    def waiting(self) -> str:
        when = (
            ("at the last sample" if self.resent else "at the first sample")
            if self.renewed
            else "at both samples"
        )
        parts = [
            f"{n} connection(s) from {p.label} (pid {p.pid}) not accepted {when}"
            for p, n in self.unaccepted[:3]
        ]
        if self.unread:
            parts.append(
                f"{self.unread} bytes unread on {self.unread_connections} connection(s) {when}"
            )
        if self.renewed:
            parts.append(
                "every request waiting at the first sample was given up by its caller (its "
                "connection closed)"
                + (" and sent again" if self.resent else ", none sent again yet")
            )
        return "; ".join(parts)

    def describe(self) -> str:
        share = self.cpu_s / self.window_s if self.window_s > 0 else 0.0
        runnable = ", runnable at every sample" if self.runnable else ""
        return (
            f"{hop_label(self.proc)} on the rollout's request path is CPU-bound in "
            f"{self.frame.where} at both samples ({self.cpu_s:.1f} CPU-s in {self.window_s:.1f} s, "
            f"{share:.0%} of a core{runnable}) while requests pile up at it ({self.waiting()}): "
            "the job's requests do not pass it"
        )


def hop_label(p: Proc) -> str:
    """A hop as the reader knows it: its role and, where it has its own, its process title."""
    title = p.title.split(" ", 1)[0] if p.title else ""
    if title and not title.startswith("ray::") and title not in p.label:
        return f"{p.label} `{title}` (pid {p.pid})"
    return f"{p.label} (pid {p.pid})"


def hold_text(h: Hold) -> str:
    """The hold in a few words, for the signals it keeps from counting."""
    return (
        f"the job's requests are held at {hop_label(h.proc)}, CPU-bound in {h.frame.name} at both "
        f"samples while requests pile up at it"
    )
