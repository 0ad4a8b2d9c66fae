"""Pure parsers: the raw bytes of one artefact -> frozen facts (`facts.py`), or `ParseError`.

No I/O, no paths, no clocks: `analyse` re-parses an old bundle with today's parsers. One module per
evidence source; each keeps its source's table beside the parsers (what the collector asks, and
which parser reads each answer: `sglang.ENGINE_ENDPOINTS`, `ray_state.STATE_ENDPOINTS`, the SGLang
counters that mean work, `sglang.WORK_COUNTERS`); collectors, the loader and the analysis derive
from those tables. Every parser is tested on real output in tests/fixtures/ and on named
transformations of it.
"""
