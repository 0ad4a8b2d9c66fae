"""The stand-in SGLang HTTP/tokenizer process (as `sglang/srt/entrypoints/http_server.py`).

A stand-in for one SGLang engine (0.5.15.post1 + slime's patches), for the demo job and tests.

It speaks the HTTP protocol of reference/sglang.md: the same paths, methods, status codes, bodies,
Prometheus metric names and API-key rules. Like the real engine it is two processes (plus an idle
`sglang::detokenizer`): this HTTP/tokenizer process, and a single-threaded scheduler child whose
cmdline starts with `sglang::scheduler_TP0` (module `sglang_scheduler`). Control calls round-trip to
the scheduler with no server-side timeout, so a stuck scheduler makes them hang, while `/model_info`,
`/v1/models`, `/metrics`, `/v1/loads` and `/get_load` still answer from the last published snapshot
(frozen values). `/server_info` gives `internal_states: []` after `SGLANG_SERVER_INFO_TIMEOUT` (2 s),
and keeps doing so after the scheduler recovers, as 0.5.15's queueing communicator does once one
call timed out (see TokenizerManager._queueing_call). `/v1/loads` answers `{"loads": []}` until the
scheduler published its first snapshot. `/metrics` carries the HTTP middleware's per-endpoint
`sglang:http_requests_total`, `sglang:http_responses_total` and `sglang:http_requests_active`. A
pause in mode `in_place` or `retract` stops the scheduler loop before it publishes its load
(scheduler.py:1551), so `/v1/loads` freezes. `/ready` is 404 (>=0.5.20 only), `/ping` always 200.

Command line::

    python -m slime_hangdoctor_demo.sglang_server --host 127.0.0.1 --port P [--api-key K]
        [--admin-api-key K] [--fault NAME] [--fault-after-s S] [--request-log FILE]
        [--model-path demo/model] [--served-model-name NAME] [--step-s 0.02] [--load-s 0]
        [--scheduler-title sglang::scheduler_TP0] [--exit-with-parent]

Faults (armed `--fault-after-s` seconds after start):

- `never_healthy`: the server stays Starting: `/health` and `/health_generate` answer 503 at once.
- `stuck_scheduler`: the next decode step blocks forever inside `forward_decode` (requests stay in
  flight, counters freeze, control calls hang).
- `stuck_prefill`: the next prefill step blocks forever inside `forward_extend`. Live from the start,
  it catches the first 1-token generation of `/health_generate`: the server is up and listening
  (`/model_info`, `/metrics` answer) but never turns healthy, as an engine whose warm-up forward
  never returns (slime#1484: stuck right after "Capture cuda graph" / "Uvicorn running").
- `skip_weight_sync`: the scheduler never joins the weight-update group (it dials a port nobody
  listens on) and never receives a broadcast: `/init_weights_update_group` and
  `/update_weights_from_distributed` hang, the trainer waits in its rendezvous / broadcast.
- `stuck_before_weight_broadcast`: `/update_weights_from_distributed` reaches the scheduler, which
  then blocks forever before it joins the first broadcast (a device sync of the last batch that never
  returns): the trainer and the other engines wait in the broadcast without it.
- `hang_update_weights_from_tensor`: the colocated update never returns.
- `hang_release_memory_occupation`: a colocate offload (`/release_memory_occupation`) never returns.
- `hang_pause_generation`: `/pause_generation` (mode abort) never returns: its drain of the requests
  in flight never ends, and the pause holds the tokenizer's pause condition meanwhile.
- `pause_continue_shared_future`: pause and continue take the tokenizer-worker path of
  `--tokenizer-worker-num N` (one shared completion future per worker, sglang#33696): a continue
  made while a pause waits for its broadcast orphans the pause, whose HTTP call never returns.
- `stay_paused_after_update`: a second after a weight update (after the caller's own pause /
  continue pair) generation is paused again and never continued (as AReaL#1160, where the update
  endpoint paused and nothing continued): later `/generate` requests wait at the tokenizer's pause
  gate, outside the scheduler, which reports nothing running or queued.
- `blocked_http_loop`: the next `/generate` makes a synchronous call on the HTTP process's event
  loop that never returns (in `_tokenize_one_request`): the process lives, but no endpoint answers
  again, `/metrics`, `/model_info` and `/health` included (the real HTTP process is one asyncio
  loop; see tokenizer_manager.py's docstring). The scheduler is idle and well.
- `killed_mid_generate`: as soon as the first `/generate` of the armed phase reached the
  scheduler, this HTTP process SIGKILLs itself (as the kernel's OOM killer would): requests in
  flight are cut, new connections are refused, the scheduler and detokenizer die with it (their
  parent-death signal, as SGLang's). The SGLangEngine actor that spawned it stays alive.
- `detokenizer_stalled` (sglang#36333, #40809): the next output batch stops the `sglang::detokenizer`
  inside `_decode_batch_token_id_output`; it lives, but nothing more reaches this process:
  `/generate` never returns, the scheduler goes idle, `/health` answers 503 after
  SGLANG_HEALTH_CHECK_TIMEOUT with SGLang's "couldn't get a response from detokenizer" line (see
  managers/detokenizer_manager.py for the real path and what is not modelled).
- `stuck_begin_weight_update`: the scheduler's `begin_weight_update` never returns (its restore of
  the packed weights, 0.5.23 model_runner_components/weight_updater.py:312-315, never ends):
  `/begin_weight_update` hangs in the HTTP process, the caller (miles's SGLangEngine actor, whose
  requests carry no timeout) waits on it.
- `tp_rank_killed_at_launch` (sglang PR#20287; needs `--tp-size` >= 2): the last TP rank is
  SIGKILLed while it loads, before it joins the TP group; rank 0 waits for it in the group's
  rendezvous (`init_process_group`), and this process, an SGLang from before PR#20287, waits on
  rank 0's ready pipe for ever: it never listens, the `sglang::scheduler_TP<last>` title is gone.
- `tp_rank_killed` (needs `--tp-size` >= 2): the last TP rank is SIGKILLed in its next batch; the
  SubprocessWatchdog (started once the schedulers are ready, as 0.5.15.post1) sees exit code -9
  and SIGQUITs this process, which kills every child: the engine is gone.
- `running_timeout_diverged` (sglang#27221, PR#37143; needs `--tp-size` >= 2): the upper half of
  the TP ranks abort the running batch on their own clocks (`_abort_on_running_timeout`); the
  others post the next decode's all_reduce, they wait in `broadcast_pyobj`: every rank waits.
- `tp_rank_stuck` (needs `--tp-size` >= 2): the last TP rank's next decode forward never
  returns (a CUDA sync of a kernel that never finishes on that rank's GPU alone); it never posts
  the forward's all_reduce, which the other ranks posted and wait for at the batch's result. With
  `--nnodes 2` that rank runs on node rank 1.
`never_healthy` and `tp_rank_killed_at_launch` ignore `--fault-after-s`.

Multi-node (`--nnodes N --node-rank K --dist-init-addr HOST:PORT`, SGLang's flags): node rank 0 is
this process with TP ranks `0 .. tp/N - 1`; a node of rank K >= 1 runs its TP ranks and SGLang's
dummy health server only (entrypoints/engine.py).

SGLang 0.5.23's weight-update session (`/begin_weight_update`, `/end_weight_update`) is served as
0.5.23 serves it (miles main calls it around every weight update); every other endpoint follows
0.5.15.post1 (`/update_weight_version` is the same in both).

Where it differs from a real engine: one DP rank and one TP rank; no streaming, no batch input on
`/generate` (400); token ids and text are deterministic filler; a forward step is a sleep; weight
groups use gloo whatever `backend` says; `flattened_bucket` broadcasts one flat tensor of the first
dtype; `/update_weights_from_tensor` accepts any strings (no CUDA IPC); generation outputs go
scheduler -> `sglang::detokenizer` -> HTTP as in SGLang, but the detokenizer decodes nothing; requests are served on threads that take
turns on one lock where SGLang runs coroutines on one asyncio loop (the same stalls: a handler that
blocks without awaiting stalls every endpoint; py-spy shows the blocked handler on its own thread,
not on MainThread). Kept on purpose, as in SGLang: the LoadSnapshot published after a prefill batch,
every 15 decode batches and when idle; realtime counters only after their first non-zero count, no
forward timer without SGLANG_ENABLE_METRICS_DEVICE_TIMER, `num_paused_reqs` always 0; metric gauges
refresh only at prefill, every 40 decode steps and every 30 s idle (so `num_running_reqs` can stay
stale after requests end), counters move only while generating, and `/health` runs a 1-token
generation through the pause gate and the update lock.

Python API: `launch_server(argv)` runs the server in the calling process (blocking), which is what
slime's `launch_server_process` does in a multiprocessing spawn child of the SGLangEngine actor.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from slime_hangdoctor_demo.sglang.srt.managers.tokenizer_manager import TokenizerManager
from slime_hangdoctor_demo.sglang.srt.observability.metrics_collector import render_metrics
from slime_hangdoctor_demo.sglang.srt.server_args import parse_args
from slime_hangdoctor_demo.sglang.srt.utils.auth import ADMIN_OPTIONAL, NORMAL, authorized

VERSION = "0.5.15.post1"


MAX_BODY = 256 * 2**20


VOCAB = (
    "the",
    "answer",
    "is",
    "so",
    "we",
    "get",
    "then",
    "step",
    "thus",
    "and",
    "=",
    "+",
    "1",
    "2",
)


Msg = dict[str, Any]


Reply = tuple[int, str, bytes]  # status, content type, body


JSON = "application/json"


TEXT = "text/plain; charset=utf-8"


PROM = "text/plain; version=0.0.4; charset=utf-8"


logger = logging.getLogger("sglang_standin.http")


def _json_reply(status: int, obj: Any) -> Reply:
    return status, JSON, json.dumps(obj).encode("utf-8")


def _not_found() -> Reply:
    return _json_reply(404, {"detail": "Not Found"})


def _missing_body() -> Reply:
    return _json_reply(
        422,
        {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]},
    )


class BodyError(Exception):
    def __init__(self, reply: Reply) -> None:
        super().__init__("bad body")
        self.reply = reply


def json_body(raw: bytes, *, required: bool) -> Msg:
    if not raw.strip():
        if required:
            raise BodyError(_missing_body())
        return {}
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BodyError(
            _json_reply(
                422,
                {
                    "detail": [
                        {
                            "type": "json_invalid",
                            "loc": ["body", 0],
                            "msg": f"JSON decode error: {exc}",
                        }
                    ]
                },
            )
        ) from exc
    if not isinstance(obj, dict):
        raise BodyError(
            _json_reply(
                422,
                {
                    "detail": [
                        {
                            "type": "model_attributes_type",
                            "loc": ["body"],
                            "msg": "Input should be a valid dictionary",
                        }
                    ]
                },
            )
        )
    return obj


def model_config(model_path: str) -> tuple[str, list[str]]:
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
        model_type = str(cfg.get("model_type") or "qwen2")
        archs = [str(a) for a in cfg.get("architectures") or []] or ["Qwen2ForCausalLM"]
        return model_type, archs
    except (OSError, ValueError, AttributeError):
        return "qwen2", ["Qwen2ForCausalLM"]


def detokenize(ids: list[int]) -> str:
    return "".join(f" {VOCAB[i % len(VOCAB)]}" for i in ids if i != 2)


Handler = Callable[[TokenizerManager, str, str, bytes], Reply]


def ep_health(tm: TokenizerManager, method: str, query: str, raw: bytes, path: str) -> Reply:
    return tm.health_check(path), TEXT, b""


def ep_model_info(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    model_type, archs = model_config(tm.ns.model_path)
    return _json_reply(
        200,
        {
            "model_path": tm.ns.model_path,
            "tokenizer_path": tm.ns.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": tm.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": model_type,
            "architectures": archs,
        },
    )


def ep_server_info(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    states = tm.get_internal_state()
    return _json_reply(
        200,
        {
            **tm.server_args,
            **tm.scheduler_info,
            "internal_states": states,
            "version": VERSION,
            "kv_events": None,
        },
    )


def ep_v1_models(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    return _json_reply(
        200,
        {
            "object": "list",
            "data": [
                {
                    "id": tm.served_model_name,
                    "object": "model",
                    "created": int(tm.started_at),
                    "owned_by": "sglang",
                    "root": tm.ns.model_path,
                    "max_model_len": tm.ns.context_length,
                }
            ],
        },
    )


_CORE_LOAD_KEYS = (
    "dp_rank",
    "num_running_reqs",
    "num_waiting_reqs",
    "num_waiting_uncached_tokens",
    "num_used_tokens",
    "num_total_tokens",
    "max_total_num_tokens",
    "max_running_requests",
    "token_usage",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
)


def ep_v1_loads(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    params = parse_qs(query)
    # No `include`: every section (0.5.15.post1 LoadSnapshot.to_dict(include=None) -> include_all,
    # managers/load_snapshot.py); `include=core` alone: the core keys only.
    include = {x for v in params.get("include", ["all"]) for x in v.split(",") if x}
    load: Msg = dict(tm.snapshot.get("load") or {})
    entry: Msg = {k: load.get(k, 0) for k in _CORE_LOAD_KEYS}
    if include & {"memory", "all"}:
        entry["memory"] = {
            "weight_gb": 0.5,
            "kv_cache_gb": round(tm.ns.max_total_tokens * 2 / 2**20, 3),
            "graph_gb": 0.0,
            "token_capacity": tm.ns.max_total_tokens,
        }
    if include & {"queues", "all"}:
        entry["queues"] = {
            "waiting": load.get("num_waiting_reqs", 0),
            "grammar": 0,
            "paused": load.get("num_paused_reqs", 0),
            "retracted": load.get("num_retracted_reqs", 0),
        }
    loads = [entry]
    if "dp_rank" in params and params["dp_rank"][0] != "0":
        loads = []
    if not tm.snapshot:
        # No LoadSnapshot published yet: the real reader's `_attach()` fails (or the slot is
        # empty) and `read_all` returns [] (managers/load_snapshot.py:571-573).
        loads = []
    return _json_reply(
        200,
        {"timestamp": datetime.now(timezone.utc).isoformat(), "version": VERSION, "loads": loads},
    )


def ep_get_load(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    """A shim over the same shared-memory read as /v1/loads (http_server.py:730-756)."""
    if not tm.snapshot:
        return _json_reply(200, [])
    load: Msg = dict(tm.snapshot.get("load") or {})
    running = int(load.get("num_running_reqs", 0))
    waiting = int(load.get("num_waiting_reqs", 0))
    return _json_reply(
        200,
        [
            {
                "dp_rank": 0,
                "num_reqs": running + waiting,
                "num_waiting_reqs": waiting,
                "num_tokens": int(load.get("num_used_tokens", 0)),
                "num_pending_tokens": int(load.get("num_waiting_uncached_tokens", 0)),
                "ts_tic": float(tm.snapshot.get("ts") or 0.0),
            }
        ],
    )


def ep_weight_version(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    return _json_reply(200, {"weight_version": tm.weight_version})


def ep_ping(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    """SageMaker's health check: always 200 in 0.5.15.post1 (http_server.py:1915-1918)."""
    return 200, TEXT, b""


def ep_metrics(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    return 200, PROM, render_metrics(tm).encode("utf-8")


def ep_generate(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    text, input_ids = obj.get("text"), obj.get("input_ids")
    if text is None and input_ids is None:
        return _json_reply(
            400,
            {"error": {"message": "Either text, input_ids or input_embeds should be provided."}},
        )
    if isinstance(text, list) or (
        isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list)
    ):
        return _json_reply(
            400, {"error": {"message": "batch input is not supported by the stand-in"}}
        )
    if input_ids is not None:
        input_len = len(input_ids) if isinstance(input_ids, list) else 1
    else:
        input_len = max(len(str(text).encode("utf-8")) // 4, 1)
    params = obj.get("sampling_params") or {}
    max_new = int(params.get("max_new_tokens", 128)) if isinstance(params, dict) else 128
    rid = str(obj.get("rid") or uuid.uuid4().hex)
    tic = time.time()
    out = tm.generate_request(
        {
            "rid": rid,
            "input_len": input_len,
            "max_new_tokens": max_new,
            "return_logprob": bool(obj.get("return_logprob")),
        }
    )
    assert out is not None
    ids = [int(i) for i in out.get("output_ids") or []]
    meta: Msg = {
        "id": rid,
        "finish_reason": out.get("finish_reason"),
        "prompt_tokens": input_len,
        "weight_version": tm.weight_version,
        "total_retractions": 0,
        "completion_tokens": len(ids),
        "cached_tokens": 0,
        "e2e_latency": round(time.time() - tic, 4),
    }
    if obj.get("return_logprob"):
        logprobs = out.get("logprobs") or []
        meta["output_token_logprobs"] = [
            [lp, tok, None] for lp, tok in zip(logprobs, ids, strict=False)
        ]
    return _json_reply(200, {"text": detokenize(ids), "output_ids": ids, "meta_info": meta})


def ep_flush_cache(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    timeout = parse_qs(query).get("timeout", [None])[0]
    msg: Msg = {"type": "flush_cache"}
    if timeout:
        try:
            msg["timeout"] = float(timeout)
        except ValueError:
            return _json_reply(
                422, {"detail": [{"type": "float_parsing", "loc": ["query", "timeout"]}]}
            )
    result = tm.roundtrip(msg) or {}
    if result.get("success"):
        return (
            200,
            TEXT,
            b"Cache flushed.\nPlease check backend logs for more details. (When there are running "
            b"or waiting requests, the operation will not be performed.)\n",
        )
    return 400, TEXT, (str(result.get("message") or "") or "Flush cache failed.\n").encode()


def ep_pause(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    mode = str(obj.get("mode") or "abort")
    if mode not in ("abort", "retract", "in_place"):
        return _json_reply(422, {"detail": [{"type": "literal_error", "loc": ["body", "mode"]}]})
    tm.pause_generation(mode)
    return _json_reply(200, {"message": "Generation paused successfully.", "status": "ok"})


def ep_continue(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    json_body(raw, required=True)
    tm.continue_generation()
    return _json_reply(200, {"message": "Generation continued successfully.", "status": "ok"})


def ep_abort(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    rid, abort_all = obj.get("rid") or "", bool(obj.get("abort_all"))
    if not rid and not abort_all:
        logger.warning("abort_request with an empty rid and abort_all=False is ignored")
    else:
        tm.send({"type": "abort", "rid": rid or None, "abort_all": abort_all})
    return 200, TEXT, b""


def _success_reply(result: Msg) -> Reply:
    ok = bool(result.get("success"))
    return _json_reply(
        200 if ok else 400, {"success": ok, "message": str(result.get("message", ""))}
    )


def ep_init_group(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    return _success_reply(tm.roundtrip({**obj, "type": "init_weights_update_group"}) or {})


def ep_destroy_group(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=False)
    return _success_reply(tm.roundtrip({**obj, "type": "destroy_weights_update_group"}) or {})


def ep_update_distributed(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    if "flush_cache" not in obj:
        obj["flush_cache"] = True
    return _success_reply(tm.weight_update({**obj, "type": "update_weights_from_distributed"}))


def ep_update_tensor(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    if "flush_cache" not in obj:
        obj["flush_cache"] = True
    return _success_reply(tm.weight_update({**obj, "type": "update_weights_from_tensor"}))


def ep_weight_update_session(kind: str) -> Handler:
    """`/begin_weight_update`, `/end_weight_update` as SGLang 0.5.23 answers them (entrypoints/
    http_server.py:1458-1485; 0.5.15.post1 has neither: 404): the model-update writer lock unless
    the engine is paused, then the scheduler's begin / end (tokenizer_control_mixin.py:471-500,
    `tm.weight_update`); 200 `{"success": true, "message": "Success"}`, 400 with the same body when
    the scheduler refuses (a session already open, or none to end). No server-side timeout: a
    scheduler that never answers holds the request."""

    def handler(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
        obj = json_body(raw, required=True)
        msg: Msg = {"type": kind}
        if kind == "begin_weight_update":
            selector = obj.get("selector", "all")
            if selector not in ("target", "draft", "all"):  # io_struct.py:2197-2200, a Literal
                return _json_reply(422, {"detail": f"selector: unexpected value {selector!r}"})
            msg["selector"] = selector
        return _success_reply(tm.weight_update(msg))

    return handler


def ep_update_weight_version(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    """`/update_weight_version` (0.5.23 http_server.py:1527-1556; 0.5.15.post1 :1325): abort every
    request first when asked, then a scheduler round trip (tokenizer_control_mixin.py:1065-1070),
    the version recorded; 200 `{"success", "message", "new_version"}`."""
    obj = json_body(raw, required=True)
    version = obj.get("new_version")
    if not isinstance(version, str):
        return _json_reply(422, {"detail": "new_version: a string is required"})
    if obj.get("abort_all_requests", True):
        tm.send({"type": "abort", "abort_all": True})
    tm.roundtrip({"type": "update_weight_version", "new_version": version})
    tm.weight_version = version
    tm.server_args["weight_version"] = version
    return _json_reply(
        200,
        {
            "success": True,
            "message": f"Weight version updated to {version}",
            "new_version": version,
        },
    )


def ep_update_disk(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    """`/update_weights_from_disk` as 0.5.15.post1 answers it (entrypoints/http_server.py:1128-1154,
    tokenizer_manager.py:1717-1748): paused, the reload runs under the pause lock; else under the
    writer side of `model_update_lock`; the scheduler reloads (its ModelRunner reads the
    checkpoint); 200 `{"success", "message", "num_paused_requests"}`, 400 with the same body on a
    failed load (model_runner.py:1876-1910: "Failed to get weights iterator: ...")."""
    obj = json_body(raw, required=True)
    model_path = obj.get("model_path")
    if not isinstance(model_path, str):
        detail = {"type": "missing", "loc": ["body", "model_path"], "msg": "Field required"}
        return _json_reply(422, {"detail": [detail]})
    result = tm.weight_update({**obj, "type": "update_weights_from_disk"})
    ok = bool(result.get("success"))
    body = {"success": ok, "message": str(result.get("message", "")), "num_paused_requests": 0}
    return _json_reply(200 if ok else 400, body)


def ep_release(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=False)
    tm.roundtrip({"type": "release_memory_occupation", "tags": obj.get("tags")})
    return _json_reply(200, None)


def ep_resume(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=False)
    tm.roundtrip({"type": "resume_memory_occupation", "tags": obj.get("tags")})
    return _json_reply(200, None)


@dataclass(frozen=True)
class Route:
    methods: tuple[str, ...]
    fn: Handler
    auth: str = NORMAL
    deprecated_for: str | None = None


def _health(path: str) -> Handler:
    def handler(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
        return ep_health(tm, method, query, raw, path)

    return handler


_GET, _POST, _BOTH = ("GET",), ("POST",), ("GET", "POST")


ROUTES: dict[str, Route] = {
    "/health": Route(_GET, _health("/health")),
    "/health_generate": Route(_GET, _health("/health_generate")),
    "/model_info": Route(_GET, ep_model_info),
    "/get_model_info": Route(_GET, ep_model_info, deprecated_for="/model_info"),
    "/server_info": Route(_GET, ep_server_info),
    "/get_server_info": Route(_GET, ep_server_info, deprecated_for="/server_info"),
    "/v1/models": Route(_GET, ep_v1_models),
    "/v1/loads": Route(_GET, ep_v1_loads),
    "/get_load": Route(_GET, ep_get_load),
    "/get_weight_version": Route(_GET, ep_weight_version),
    "/weight_version": Route(_GET, ep_weight_version),
    "/metrics": Route(_GET, ep_metrics),
    "/ping": Route(_GET, ep_ping),
    "/generate": Route(("POST", "PUT"), ep_generate),
    "/flush_cache": Route(_BOTH, ep_flush_cache, ADMIN_OPTIONAL),
    "/pause_generation": Route(_POST, ep_pause, ADMIN_OPTIONAL),
    "/continue_generation": Route(_POST, ep_continue, ADMIN_OPTIONAL),
    "/abort_request": Route(_POST, ep_abort, ADMIN_OPTIONAL),
    "/init_weights_update_group": Route(_POST, ep_init_group, ADMIN_OPTIONAL),
    "/destroy_weights_update_group": Route(_POST, ep_destroy_group, ADMIN_OPTIONAL),
    "/update_weights_from_distributed": Route(_POST, ep_update_distributed, ADMIN_OPTIONAL),
    "/update_weights_from_tensor": Route(_POST, ep_update_tensor, ADMIN_OPTIONAL),
    "/update_weights_from_disk": Route(_POST, ep_update_disk, ADMIN_OPTIONAL),
    "/begin_weight_update": Route(
        _POST, ep_weight_update_session("begin_weight_update"), ADMIN_OPTIONAL
    ),
    "/end_weight_update": Route(
        _POST, ep_weight_update_session("end_weight_update"), ADMIN_OPTIONAL
    ),
    "/update_weight_version": Route(_POST, ep_update_weight_version, ADMIN_OPTIONAL),
    "/release_memory_occupation": Route(_BOTH, ep_release, ADMIN_OPTIONAL),
    "/resume_memory_occupation": Route(_BOTH, ep_resume, ADMIN_OPTIONAL),
}


def auth_failure(tm: TokenizerManager, method: str, path: str, header: str | None) -> Reply | None:
    route = ROUTES.get(path)
    level = route.auth if route is not None else NORMAL
    if authorized(level, method, path, header, tm.ns.api_key, tm.ns.admin_api_key):
        return None
    return _json_reply(401, {"error": "Unauthorized"})


class StandinHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], tm: TokenizerManager) -> None:
        self.tm = tm
        super().__init__(address, RequestHandler)


class RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # uvicorn's --timeout-keep-alive (5 s): an idle keep-alive connection is closed by the server
    timeout = 5.0
    server_version = "uvicorn"
    sys_version = ""
    server: StandinHTTPServer

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return  # uvicorn-style access lines are written by _access_log

    def _dispatch(self, method: str) -> None:
        tm = self.server.tm
        path, _, query = self.path.partition("?")
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        try:
            raw = self._read_body()  # uvicorn reads the body without holding the loop
        except ValueError:
            raw = None
        # Everything else runs on the one event loop (tokenizer_manager.py's docstring): a
        # blocked loop answers nothing, /metrics, /model_info and /health included.
        with tm.on_loop():
            tm.log_request(method, path, query, client)
            # The HTTP middleware (0.5.15.post1 utils/common.py:2350-2372, installed with
            # --enable-metrics, outermost): every request counted by its route's path, in flight
            # (`sglang:http_requests_active`, livesum) until its response is made.
            endpoint = path  # the matched route's path; the stand-in's routes are exact paths
            tm.http_request_started(endpoint, method)
            status: int | None = None
            try:
                if raw is None:
                    status = 413
                    reply: Reply = (413, TEXT, b"Request Entity Too Large")
                else:
                    reply = auth_failure(
                        tm, method, path, self.headers.get("Authorization")
                    ) or self._route(tm, method, path, query, raw)
                status = reply[0]
                with tm.awaiting():  # sending the response awaits the socket
                    self._respond(method, path, reply)
            finally:
                tm.http_request_ended(endpoint, method, status)

    def _route(self, tm: TokenizerManager, method: str, path: str, query: str, raw: bytes) -> Reply:
        route = ROUTES.get(path)
        if route is None:
            return _not_found()
        if method not in route.methods:
            return _json_reply(405, {"detail": "Method Not Allowed"})
        if route.deprecated_for:
            logger.warning(
                "Endpoint '%s' is deprecated and will be removed in a future version. "
                "Please use '%s' instead.",
                path,
                route.deprecated_for,
            )
        try:
            return route.fn(tm, method, query, raw)
        except BodyError as exc:
            return exc.reply
        except Exception as exc:
            logger.exception("error in %s", path)
            return _json_reply(500, {"error": {"message": str(exc)}})

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _respond(self, method: str, path: str, reply: Reply) -> None:
        status, ctype, body = reply
        try:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            return  # the client went away
        phrase = self.responses.get(status, ("",))[0]
        sys.stderr.write(
            f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{method} '
            f'{self.path} HTTP/1.1" {status} {phrase}\n'
        )


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    )
    root = logging.getLogger("sglang_standin")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def _install_signals(tm: TokenizerManager) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be installed from the main thread

    def on_sigquit(signum: int, frame: Any) -> None:
        logger.error(
            "SIGQUIT received. signum=%s, frame=%s. It usually means one child failed.",
            signum,
            frame,
        )
        tm.kill_children()
        os._exit(1)

    def on_sigterm(signum: int, frame: Any) -> None:
        logger.info(
            "SIGTERM received. signum=%s, frame=%s. Draining requests and shutting down...",
            signum,
            frame,
        )
        tm.gracefully_exit = True
        threading.Thread(target=_graceful_exit, args=(tm,), daemon=True).start()

    signal.signal(signal.SIGQUIT, on_sigquit)
    signal.signal(signal.SIGTERM, on_sigterm)
    tm.signals_installed = True


def _graceful_exit(tm: TokenizerManager) -> None:
    deadline = time.time() + 5.0
    while tm.model_update_lock.readers > 0 and time.time() < deadline:
        time.sleep(0.2)
    logger.info(
        "Gracefully exiting... Remaining number of requests %d", tm.model_update_lock.readers
    )
    tm.kill_children()
    os._exit(0)


def _subprocess_watchdog(tm: TokenizerManager) -> None:
    while True:
        time.sleep(1.0)
        for name, proc in zip(tm.child_names, tm.children, strict=False):
            code = proc.poll()
            if code is not None:
                logger.error(
                    "Subprocess sglang::%s (pid=%d) crashed with exit code %s. Triggering SIGQUIT "
                    "for cleanup...",
                    name,
                    proc.pid,
                    code,
                )
                if tm.signals_installed:
                    os.kill(os.getpid(), signal.SIGQUIT)
                    time.sleep(1.0)
                tm.kill_children()
                os._exit(1)


def _parent_watch(tm: TokenizerManager, parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            logger.info("The parent process %d is gone; exiting.", parent)
            tm.kill_children()
            os._exit(0)


def launch_server(args: list[str]) -> None:
    """Run one stand-in engine in this process until it is killed (blocking)."""
    ns = parse_args(list(args))
    _setup_logging()
    if ns.node_rank >= 1:
        # a node of a multi-node engine other than rank 0: its schedulers and SGLang's dummy
        # health server, no HTTP API (entrypoints/engine.py)
        if not ns.dist_init_addr:
            raise SystemExit("--node-rank >= 1 needs --dist-init-addr (where the nodes meet)")
        from slime_hangdoctor_demo.sglang.srt.entrypoints.engine import Engine

        Engine._launch_subprocesses(ns)
        return
    tm = TokenizerManager(ns)
    _install_signals(tm)
    tm.start_subprocesses()
    if ns.exit_with_parent:
        threading.Thread(
            target=_parent_watch, args=(tm, os.getppid()), name="parent-watch", daemon=True
        ).start()
    if not tm.wait_ready():
        # as SGLang's _launch_subprocesses when the scheduler's pipe closes before it is ready
        codes = [proc.poll() for proc in tm.children]
        logger.error("Rank 0 scheduler is dead. Please check if there are relevant logs.")
        logger.error("Exit code: %s", codes[0] if codes else None)
        tm.kill_children()
        raise EOFError
    # the SubprocessWatchdog starts once the schedulers are ready (0.5.15.post1
    # entrypoints/engine.py:883-900: `wait_for_ready()`, then `SubprocessWatchdog(...).start()`)
    threading.Thread(
        target=_subprocess_watchdog, args=(tm,), name="subprocess-watchdog", daemon=True
    ).start()
    if ns.load_s > 0:
        time.sleep(ns.load_s)
    try:
        server = StandinHTTPServer((ns.host, ns.port), tm)
    except OSError as exc:
        # uvicorn's own line when the bind fails (it then exits 1)
        sys.stderr.write(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"({ns.host!r}, {ns.port}): {(exc.strerror or str(exc)).lower()}\n"
        )
        tm.kill_children()
        raise SystemExit(1) from exc
    port = server.server_address[1]
    tm.server_args["port"] = port
    sys.stderr.write(
        f"INFO:     Uvicorn running on http://{ns.host}:{port} (Press CTRL+C to quit)\n"
    )
    sys.stderr.write("INFO:     Application startup complete.\n")
    if ns.fault != "never_healthy":
        tm.server_status = "Up"
        logger.info("The server is fired up and ready to roll!")
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        tm.kill_children()


def main(argv: list[str] | None = None) -> None:
    launch_server(sys.argv[1:] if argv is None else argv)
