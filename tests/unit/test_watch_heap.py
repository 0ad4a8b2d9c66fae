"""`watch` hands the heap a run freed back to the system (issue 43 item 2; watchdog/heap.py).

The soak showed Python's own objects flat and malloc's in-use bytes flat while the free bytes glibc
kept in its arenas grew run after run (11 -> 81 MiB over 70 runs). Each test runs in a child Python
of its own, so that its RSS is its own: threads allocate ~120 MiB through malloc (bytearrays above
pymalloc's 512-byte limit, each thread in an arena of its own, as the collection's threads do) and
keep every 64th object alive, as a run's results pin pages. Skipped where libc is not glibc."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slime_hangdoctor.watchdog import heap

pytestmark = pytest.mark.skipif(heap._glibc() is None, reason="malloc_trim is glibc's")

_CHURN = textwrap.dedent(
    """
    import threading

    def rss_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20

    keep = []

    def work():
        objs = [bytearray(2048) for _ in range(60000)]
        keep.extend(objs[::64])

    def churn():
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    """
)


def _child(body: str, tmp_path: Path) -> dict[str, int]:
    script = tmp_path / "child.py"
    script.write_text(_CHURN + textwrap.dedent(body))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_release_returns_the_freed_heap_a_plain_collect_keeps(tmp_path: Path) -> None:
    got = _child(
        """
        import gc, json
        from slime_hangdoctor.watchdog.heap import release_free_memory
        churn()
        peak = rss_mib()
        gc.collect()
        collected = rss_mib()
        release_free_memory()
        print(json.dumps({"peak": peak, "collected": collected, "released": rss_mib()}))
        """,
        tmp_path,
    )
    assert got["peak"] >= 100, got
    assert got["collected"] >= got["peak"] - 20, got  # without the trim glibc keeps it all
    assert got["released"] <= got["peak"] // 3, got


def test_watch_releases_the_heap_after_every_run(tmp_path: Path) -> None:
    got = _child(
        f"""
        import json
        from pathlib import Path
        from slime_hangdoctor.collect.options import CollectOptions
        from slime_hangdoctor.watchdog import run as watchdog

        real = watchdog.run_check

        def churning_run(*args, **kwargs):
            churn()
            return real(*args, **kwargs)

        watchdog.run_check = churning_run
        seen = []
        watchdog.watch_loop(
            None,
            CollectOptions(local=True, uid=65533, timeout_s=30.0),
            watchdog.CheckOptions(state_file=Path({str(tmp_path / "state.json")!r})),
            interval_s=0.0,
            max_runs=3,
            on_result=lambda _r: seen.append(rss_mib()),
        )
        print(json.dumps({{"after_runs": max(seen), "kept_objects_mib": len(keep) * 2 // 1024}}))
        """,
        tmp_path,
    )
    # three runs pinned ~6 MiB of objects; each freed ~120 MiB that the watch must not keep
    assert got["after_runs"] <= 90, got
