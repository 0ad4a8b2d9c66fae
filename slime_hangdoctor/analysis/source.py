"""The typed name of a source of evidence.

What a suspect, a piece of evidence or a progress signal came from, shown to the user ("sources:
ras, stacks", "[sglang] ...", the progress lines). A name is made once, by the part of the
diagnosis that owns it (`KERNEL = Source("kernel")` in analysis/parts/kernel.py), and imported by
any other part that speaks in its name; a bare string is not a `Source`, so mypy rejects a misspelt
one where a source is expected. tests/unit/test_source_names.py checks that each name is made once
and that every part gives only the names it declares (`SourceAnalysis.gives`).

It is not the bundle's name of a source (`SourceSpec.name`: `nccl_ras`, `pyspy`), which an old
bundle fixes; the name shown to the user (`ras`, `stacks`) is the part's."""

from __future__ import annotations

from typing import NewType

Source = NewType("Source", str)
