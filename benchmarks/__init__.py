"""Performance benchmarks of slime-hangdoctor (not part of the test suite; see benchmarks/README.md).

Run them all with ``python -m benchmarks.run`` from the repository root; the results go to
docs/performance.md (and benchmarks/results/latest.json).
"""
