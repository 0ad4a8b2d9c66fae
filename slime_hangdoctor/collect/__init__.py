"""All I/O: read a live job and write what it saw into an evidence bundle, verbatim.

`run.collect` takes two samples `window_s` apart. At each sample it runs, in order:
the dashboard probes (`run_dashboard.DASHBOARD_PROBES`: the Ray state capture), the node-local sample of
every slime node (`node.sample_node`: the process scan, then every source's `NODE_PROBE`
(`node.node_probes()`, from `sources.SPECS`): procfs, py-spy stacks, NCCL RAS, log heads and the rest;
other nodes through a Ray task pinned to them, `remote.py`), then the engines and routers
the scan found (`sglang.py`, from the endpoint table in `parsers/sglang.py`). NVML is sampled
across the window (`nvml.py`); the flight recorder is asked last, and only when opted in.

The run's phases are modules of their own (`run_connect`, `run_window`, `run_sample`, ...), each
handed the immutable `run_context.RunContext` and returning what it found.

`options.py` says what a run may do and for how long (`CollectOptions`, the run's `Deadline`).
Every probe has a timeout and a byte cap and ends as one `ProbeRecord`; nothing here raises past a
probe. Heavy libraries (ray, psutil, pynvml, urllib3) are imported inside the functions that use them.
"""
