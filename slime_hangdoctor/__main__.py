"""The `slime-hangdoctor` console script and `python -m slime_hangdoctor`."""

from __future__ import annotations


def main() -> int:
    import gc

    # A run of the CLI lives for seconds and allocates mostly while it starts (imports, hundreds of
    # dataclass definitions): the cyclic collector would walk those objects again and again for
    # nothing (~35 ms of a cron `check`, 7 % of its CPU). What a run leaves is freed when it exits.
    # `watch`, the one command that lives on, turns the collector back on (watchdog/run.py).
    gc.disable()
    from slime_hangdoctor.cli import main as cli_main
    from slime_hangdoctor.cli import mark_program_start

    mark_program_start()  # a one-shot run's --timeout counts from the process's start

    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
