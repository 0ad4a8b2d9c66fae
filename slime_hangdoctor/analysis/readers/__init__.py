"""The shared readers of the analysis: what more than one part reads of the world (docs/architecture.md,
"The analysis wing"). Named by the source they read where there is one (`sglang`, `nvml`, `pyspy`, as
the parsers are), else by what they give (`proof`: progress proven or not; `proxies`; `hold`;
`fr_groups`). A reader imports readers and the world only, never a part nor the contract."""
