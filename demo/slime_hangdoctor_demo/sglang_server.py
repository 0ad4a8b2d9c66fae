"""A stand-in for one SGLang engine (0.5.15.post1 + slime's patches): command line and Python API.

    python -m slime_hangdoctor_demo.sglang_server --host 127.0.0.1 --port P [--api-key K]
        [--admin-api-key K] [--fault NAME] [--fault-after-s S] [--request-log FILE]
        [--model-path demo/model] [--served-model-name NAME] [--step-s 0.02] [--load-s 0]
        [--scheduler-title sglang::scheduler_TP0] [--exit-with-parent]

`launch_server(argv)` runs the same server in the calling process (blocking), as slime's
`launch_server_process` does in a multiprocessing spawn child. The implementation lives in
`demo/slime_hangdoctor_demo/sglang/srt/entrypoints/http_server.py` (SGLang's own file layout, so py-spy
frames carry SGLang's paths); its docstring describes the protocol and the faults.
"""

from __future__ import annotations

from slime_hangdoctor_demo.sglang.srt.entrypoints.http_server import VERSION, launch_server, main
from slime_hangdoctor_demo.sglang.srt.managers.io_struct import FAULTS
from slime_hangdoctor_demo.sglang.srt.server_args import parse_args

__all__ = ["FAULTS", "VERSION", "launch_server", "main", "parse_args"]

if __name__ == "__main__":
    main()
