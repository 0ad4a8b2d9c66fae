"""`--keep` holds on disk at every moment (issue 43 item 2): the two-hour soak saw 4 stall bundles for
the ten minutes of a full disk and 5 at the next stall with `--keep 3`. A stall bundle that a full
disk cut short stayed and nothing was pruned, since pruning came only after a bundle written whole,
and the new bundle was written before the old ones made room.

The real `_keep_evidence` runs against a real directory; the collection it calls (`pipeline.attach`)
is replaced by one that writes into the bundle's folder as attach does (its first record) and then
meets the full disk (ENOSPC, as the kernel raised it in the soak) or ends."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor import pipeline
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.watchdog import run as watchdog

KEEP = 3


def _stalls(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.is_dir() and p.name.startswith("stall-"))


@pytest.mark.parametrize("disk_full", [False, True])
def test_keep_holds_while_writing_and_after_a_cut_short_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk_full: bool
) -> None:
    bundles = tmp_path / "bundles"
    bundles.mkdir(mode=0o700)
    for i in range(KEEP):
        (bundles / f"stall-20261207T00000{i}-old{i}").mkdir()
    seen_while_writing: list[int] = []

    def writing_attach(_address: Any, _opts: Any, *, out: Path, command: str) -> None:
        out.mkdir(mode=0o700)
        (out / "manifest.json").write_text("{}")
        seen_while_writing.append(len(_stalls(bundles)))
        if disk_full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pipeline, "attach", writing_attach)
    check = watchdog.CheckOptions(
        state_file=tmp_path / "state.json", bundle_dir=bundles, keep_bundles=KEEP
    )
    root, problem = watchdog._keep_evidence(None, CollectOptions(), check, 1_800_000_000.0)
    assert seen_while_writing == [KEEP]
    left = _stalls(bundles)
    assert len(left) == KEEP
    assert "stall-20261207T000000-old0" not in left  # the oldest made room
    newest = [n for n in left if not n.startswith("stall-20261207T")]
    assert len(newest) == 1  # the new bundle, whole or cut short, is kept
    if disk_full:
        assert root is None and problem and "No space left on device" in problem
    else:
        assert root is not None and root.name == newest[0] and problem is None
