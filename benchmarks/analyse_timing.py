"""Time analysis and rendering of a bundle in a fresh interpreter, as the CLI does after collecting.

``python -m benchmarks.analyse_timing BUNDLE`` prints ``{"analysis_s": .., "render_s": ..}``. The
modules that the CLI has already imported while collecting (pipeline, collect, load, parsers) are
imported first, so their import time is not counted; the analysis and render modules are imported
lazily by the product at that moment and are counted, as in a real run.
"""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path


def time_bundle(bundle: Path) -> dict[str, float]:
    import slime_hangdoctor.collect.run  # noqa: F401 - already imported by a CLI that collected
    from slime_hangdoctor.pipeline import analyse_bundle

    t0 = time.perf_counter()
    analysed = analyse_bundle(bundle)
    t1 = time.perf_counter()
    from rich.console import Console

    from slime_hangdoctor.render import render

    render(analysed.diagnosis, "text", Console(file=io.StringIO(), width=120, soft_wrap=False))
    t2 = time.perf_counter()
    return {"analysis_s": round(t1 - t0, 3), "render_s": round(t2 - t1, 3)}


def main() -> None:
    print(json.dumps(time_bundle(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
