"""The watchdog: `check` (one look, for cron) and `watch` (the same in a loop).

A look collects in the watchdog's light mode (`run.py`: no stacks while work moves), reduces the
snapshot to progress markers (`markers.py`), and compares them with the last look's, kept in the
state file (`state.py`, under a lock). `decide.py` (pure) turns the verdict, the changed markers
and how long nothing moved into an exit code; on a new stall `run.py` writes an evidence bundle,
runs the --on-stall-exec hook and `prom.py` writes the Prometheus textfile.
"""
