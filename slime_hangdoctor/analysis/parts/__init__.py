"""The parts of the diagnosis: one module per typed source (what the NCCL RAS counts, the engines'
answers, the kernel's view of the processes ... add to a verdict) and one per rule that reads
several sources at once (the end of a ray.get chain, the rollout's event loop, the known bugs
matched by their frames). Each holds its `ANALYSIS`, a `source_analysis.SourceAnalysis` with every
hook it needs, and is reached one way: sources.ENTRIES (docs/architecture.md, "A rule has one
home"). Nothing here is imported by the modules above `analysis/parts/` but by that list."""
