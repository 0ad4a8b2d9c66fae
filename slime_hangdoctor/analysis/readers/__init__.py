"""The shared readers of the analysis: what more than one part reads of the world (docs/architecture.md,
"The analysis wing"). Named by the source they read where there is one (`nvml`, `pyspy`, as the
parsers are; `sglang_http`, since signatures/sglang.py is SGLang's frame vocabulary), else by what
they give (`proof`: progress proven or not; `proxies`; `hold`; `fr_groups`; `gone_routers`). A
reader imports readers and the world only, never a part nor the contract."""
