"""The cluster-wide probes of a sample, through the Ray dashboard: the registries and their run."""

from __future__ import annotations

from typing import Protocol

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.dashboard import DashboardClient, capture_state, capture_task_history
from slime_hangdoctor.collect.run_context import Background, RunContext


class DashboardProbe(Protocol):
    """A probe of the whole cluster through the Ray dashboard, run at each sample in order."""

    def __call__(
        self, writer: BundleWriter, client: DashboardClient, *, sample: int | None, timeout: float
    ) -> object: ...


# The registry of cluster-wide dashboard probes: a new dashboard-read source adds one line (a later
# probe may read what an earlier one stored through `partial_snapshot(writer)`). DASHBOARD_PROBES
# run in order before the sample's node probes; BACKGROUND_DASHBOARD_PROBES start after them, in a
# thread of their own beside the node probes (nothing in the sample reads their answers), and are
# joined before the bundle is finished.
DASHBOARD_PROBES: tuple[DashboardProbe, ...] = (capture_state,)
# Each background probe with the CollectOptions flag that turns it off.
BACKGROUND_DASHBOARD_PROBES: tuple[tuple[DashboardProbe, str], ...] = (
    (capture_task_history, "history"),
)


def read_cluster(ctx: RunContext, background: Background, index: int) -> None:
    """The dashboard probes (DASHBOARD_PROBES), in order, under one probe timeout each; then the
    background ones (BACKGROUND_DASHBOARD_PROBES) in a thread that `background` joins."""
    client = ctx.client
    if client is None or ctx.deadline.expired:
        return
    ctx.say(f"sample {index + 1}/2: reading Ray state")
    timeout = ctx.deadline.clamp(ctx.opts.probe_timeout_s)
    for probe in DASHBOARD_PROBES:
        probe(ctx.writer, client, sample=index, timeout=timeout)

    wanted = [probe for probe, switch in BACKGROUND_DASHBOARD_PROBES if getattr(ctx.opts, switch)]
    if not wanted:
        return

    def run_background() -> None:
        for probe in wanted:
            probe(ctx.writer, client, sample=index, timeout=timeout)

    background.start(run_background, f"ray-state-bg{index}")
