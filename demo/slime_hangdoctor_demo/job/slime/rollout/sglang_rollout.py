"""Rollout against the SGLang engines: generate_rollout -> generate_rollout_async ->
generate_and_rm_group -> generate_and_rm -> generate (POST /generate) -> async_rm.
All coroutines run on the RolloutManager's AsyncLoopThread; the caller blocks in `run`.
Every /generate goes to the router (`http://{sglang_router_ip}:{sglang_router_port}/generate`,
slime main 624b824 slime/rollout/sglang_rollout.py:158), which picks the engine."""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from slime.backends.sglang_utils.server_control import abort_servers_until_idle
from slime.observability.logging_utils import log_fault_armed
from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput
from slime.rollout.rm_hub import async_rm
from slime.utils.async_utils import run
from slime.utils.http_utils import delete, get, get_retrying, post
from slime.utils.misc import fault_armed
from slime.utils.types import Sample

logger = logging.getLogger(__name__)

# The answer a misbehaving policy produces when the `reward_hang` fault is armed: the math
# grader falls through to its sympy path on it and never comes back.
PATHOLOGICAL_ANSWER = "\\sqrt{\\sqrt{2}+\\sqrt{3}+\\sqrt{5}+\\sqrt{7}}**9 - x**7*y**5"


class GenerateState:
    """Per-process rollout state (a singleton in slime)."""

    _instance: GenerateState | None = None

    def __new__(cls, args: argparse.Namespace) -> GenerateState:
        if cls._instance is None:
            inst = super().__new__(cls)
            inst._setup(args)
            cls._instance = inst
        return cls._instance

    def _setup(self, args: argparse.Namespace) -> None:
        self.args = args
        self.semaphore = asyncio.Semaphore(args.sglang_server_concurrency * args.num_engines)
        self.sampling_params: dict[str, Any] = {
            "temperature": args.rollout_temperature,
            "max_new_tokens": args.rollout_max_response_len,
        }
        self.reset()

    def reset(self) -> None:
        self.aborted = False
        self.slots_leaked = getattr(self, "slots_leaked", 0)  # kept across rollouts, as the slots
        self.pendings: set[asyncio.Task[list[Sample]]] = set()
        self.rollout_id = -1
        self.bad_answer_sent = False
        self.router_broken = getattr(self, "router_broken", False)  # once per job, as the slots
        self.rm_announced = False
        self.session_records_announced = False

    def submit_generate_tasks(self, samples: list[list[Sample]]) -> None:
        for group in samples:
            self.pendings.add(
                asyncio.create_task(
                    generate_and_rm_group(
                        self.args, group, dict(self.sampling_params), evaluation=False
                    )
                )
            )


async def _leak_slots(args: argparse.Namespace, state: GenerateState) -> None:
    """Demo fault `rollout_slots_leaked`: the concurrency slots that a custom rollout's abort path
    took from GenerateState's semaphore and never gave back (the semaphore lives as long as the
    process). Every generate_and_rm of the next rollout then waits in `async with
    state.semaphore` forever: nothing reaches an engine, the loop sits idle in select."""
    if not fault_armed(args, "rollout_slots_leaked", state.rollout_id) or state.slots_leaked:
        return
    while not state.semaphore.locked():
        await state.semaphore.acquire()
        state.slots_leaked += 1
    log_fault_armed(
        logger,
        args.fault,
        f"generate_and_rm waiting for a rollout slot ({state.slots_leaked} leaked)",
        state.rollout_id,
    )


def _announce_proxy(args: argparse.Namespace, state: GenerateState) -> None:
    """Demo fault `rollout_behind_proxy`: the first rollout's requests go to the proxy."""
    if args.fault == "rollout_behind_proxy" and state.rollout_id == args.start_rollout_id:
        import os

        where = f"requests to the engines through http_proxy={os.environ.get('http_proxy')}"
        log_fault_armed(logger, args.fault, where, state.rollout_id)


async def _break_router(args: argparse.Namespace, state: GenerateState) -> None:
    """Demo faults of the router, once the armed rollout's first group is back and the others'
    requests are in flight at the router:
    - `router_worker_removed`: every engine's worker is taken out of the router as slime's
      SGLangEngine.shutdown does it (GET /workers, then DELETE /workers/{id}; slime main 624b824,
      sglang_engine.py:301-317). sgl-router 0.3.2 lets the requests in flight finish; every later
      /generate gets 503 `no_available_workers`, and the rollout retries it.
    - `router_killed`: the router process (this process's multiprocessing child) is SIGKILLed, as
      by the OOM killer; requests in flight are cut, new ones are refused, and the rollout retries
      them (slime gives up after 60 tries; the demo keeps retrying)."""
    if state.router_broken or not (
        fault_armed(args, "router_worker_removed", state.rollout_id)
        or fault_armed(args, "router_killed", state.rollout_id)
    ):
        return
    state.router_broken = True
    base = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    if args.fault == "router_worker_removed":
        removed = []
        for worker in (await get(f"{base}/workers"))["workers"]:
            await delete(f"{base}/workers/{worker['id']}")
            removed.append(str(worker["url"]))
        where = f"the router at {base}: workers {', '.join(removed)} removed"
    else:
        import multiprocessing
        import os
        import signal

        pids = [p.pid for p in multiprocessing.active_children() if p.pid is not None]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        where = f"the router at {base}: process {', '.join(map(str, pids))} killed"
    log_fault_armed(logger, args.fault, where, state.rollout_id)


def _encode(text: str) -> list[int]:
    return [ord(c) % 32000 for c in text]


# miles's tracer gives a session request this long before its blind retry (PR#1602's chain: each
# attempt held on the server side, then retried 60 x 1 s)
SESSION_REQUEST_TIMEOUT_S = 2.0
# demo fault `rollout_session_server_blocked`: at the armed rollout every other trajectory is long
LONG_TRAJECTORY_TOKENS = 800


async def _generate_in_session(
    args: argparse.Namespace, state: GenerateState, sample: Sample, payload: dict[str, Any]
) -> dict[str, Any]:
    """An agentic trajectory through miles's session server (`--use-session-server`, miles
    31f1ca961 `OpenAIEndpointTracer`): create a session on one session server (`POST /sessions`),
    send the turn through it (`/sessions/{id}/generate`, proxied to the router), then fetch the
    session's records (`GET /sessions/{id}`, retried on any error as PR#1602's tracer was) and
    delete it. The demo adds the rollout id to the create call (the session server's demo
    fault arms from it)."""
    session_url = f"http://{args.session_server_ip}:{random.choice(args.session_server_ports)}"
    armed = fault_armed(args, "rollout_session_server_blocked", state.rollout_id)
    if armed and (sample.index or 0) % 2:
        payload["sampling_params"]["max_new_tokens"] = LONG_TRAJECTORY_TOKENS
    created = await post(f"{session_url}/sessions", {"rollout_id": state.rollout_id})
    base = f"{session_url}/sessions/{created['session_id']}"
    output = await post(f"{base}/generate", payload, max_retries=args.rollout_max_retries)
    if armed and not state.session_records_announced:
        state.session_records_announced = True
        where = f"the session server's get_session of {base}"
        log_fault_armed(logger, args.fault, where, state.rollout_id)
    await get_retrying(base, SESSION_REQUEST_TIMEOUT_S)
    await delete(base)
    return dict(output)


async def generate(
    args: argparse.Namespace,
    sample: Sample,
    sampling_params: dict[str, Any],
    evaluation: bool = False,
) -> Sample:
    state = GenerateState(args)
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
    prompt_ids = _encode(sample.prompt)
    payload = {
        "input_ids": prompt_ids,
        "sampling_params": sampling_params,
        "return_logprob": True,
    }
    if args.use_session_server:
        output = await _generate_in_session(args, state, sample, payload)
    else:
        output = await post(url, payload, max_retries=args.rollout_max_retries)
    text = str(output.get("text", ""))
    meta = output.get("meta_info", {}) or {}
    output_ids = [int(t) for t in output.get("output_ids", [])] or _encode(text)
    sample.tokens = prompt_ids + output_ids
    sample.response = text
    sample.response_length = len(output_ids)
    logprobs = meta.get("output_token_logprobs")
    sample.rollout_log_probs = [float(x[0]) for x in logprobs] if logprobs else None
    finish = (meta.get("finish_reason") or {}).get("type", "stop")
    sample.status = {
        "length": Sample.Status.TRUNCATED,
        "abort": Sample.Status.ABORTED,
    }.get(finish, Sample.Status.COMPLETED)
    armed = fault_armed(args, "reward_hang", state.rollout_id) or fault_armed(
        args, "reward_verifier_pool_stuck", state.rollout_id
    )
    if armed and not evaluation and not state.bad_answer_sent:
        state.bad_answer_sent = True
        sample.response = PATHOLOGICAL_ANSWER
    return sample


async def generate_and_rm(
    args: argparse.Namespace,
    sample: Sample,
    sampling_params: dict[str, Any],
    evaluation: bool = False,
) -> Sample:
    state = GenerateState(args)
    async with state.semaphore:
        if state.aborted:
            sample.status = Sample.Status.ABORTED
            return sample
        sample = await generate(args, sample, sampling_params, evaluation=evaluation)
    if sample.status == Sample.Status.ABORTED:
        return sample
    if sample.reward is None:
        if sample.response == PATHOLOGICAL_ANSWER:
            where = "async_rm on the rollout loop thread"
            if args.custom_rm_path is not None:
                where = f"the custom reward's {args.reward_pool} pool ({args.custom_rm_path})"
            log_fault_armed(logger, args.fault, where, state.rollout_id)
        if fault_armed(args, "reward_service_stuck", state.rollout_id) and not state.rm_announced:
            state.rm_announced = True
            where = f"remote_rm awaiting the reward service at {args.rm_url}"
            log_fault_armed(logger, args.fault, where, state.rollout_id)
        sample.reward = await async_rm(args, sample)
    return sample


async def generate_and_rm_group(
    args: argparse.Namespace,
    group: list[Sample],
    sampling_params: dict[str, Any],
    evaluation: bool = False,
) -> list[Sample]:
    state = GenerateState(args)
    if state.aborted:
        return group
    tasks = [
        asyncio.create_task(
            generate_and_rm(args, sample, dict(sampling_params), evaluation=evaluation)
        )
        for sample in group
    ]
    return list(await asyncio.gather(*tasks))


async def abort(args: argparse.Namespace, rollout_id: int) -> list[list[Sample]]:
    """Abort what is still running on every engine the router knows, until each is idle, and
    collect the unfinished groups (slime main 624b824, slime/rollout/sglang_rollout.py:339-354)."""
    state = GenerateState(args)
    assert not state.aborted
    state.aborted = True
    urls = await get_worker_urls(args)
    await abort_servers_until_idle(urls)
    aborted: list[list[Sample]] = []
    while state.pendings:
        done, state.pendings = await asyncio.wait(
            state.pendings, return_when=asyncio.FIRST_COMPLETED
        )
        aborted.extend(task.result() for task in done)
    return aborted


async def generate_rollout_async(
    args: argparse.Namespace, rollout_id: int, data_source: Callable[[int], list[list[Sample]]]
) -> tuple[RolloutFnTrainOutput, list[list[Sample]]]:
    state = GenerateState(args)
    state.reset()
    state.rollout_id = rollout_id
    target = args.rollout_batch_size
    data: list[list[Sample]] = []
    start = time.time()
    _announce_proxy(args, state)
    await _leak_slots(args, state)
    state.submit_generate_tasks(data_source(target))
    while len(data) < target:
        done, state.pendings = await asyncio.wait(
            state.pendings, return_when=asyncio.FIRST_COMPLETED
        )
        for task in done:
            group = task.result()
            if not data:
                logger.info(
                    f"First rollout sample: {[group[0].prompt + group[0].response]}, "
                    f"label: {group[0].label}, reward: {group[0].reward}"
                )
            data.append(group)
            await _break_router(args, state)
    logger.info(f"Finish rollout: {len(data)} groups in {time.time() - start:.2f}s")
    aborted_samples = await abort(args, rollout_id) if state.pendings else []
    data.sort(key=lambda g: g[0].index or 0)
    return RolloutFnTrainOutput(samples=data, metrics={}), aborted_samples


async def eval_rollout(
    args: argparse.Namespace, rollout_id: int, data_source: Any
) -> tuple[dict[str, dict[str, list[Any]]], list[list[Sample]]]:
    results = await asyncio.gather(
        eval_rollout_single_dataset(args, rollout_id, "math", data_source)
    )
    merged: dict[str, dict[str, list[Any]]] = {}
    for r in results:
        merged.update(r)
    return merged, []


async def eval_rollout_single_dataset(
    args: argparse.Namespace, rollout_id: int, name: str, data_source: Any
) -> dict[str, dict[str, list[Any]]]:
    state = GenerateState(args)
    state.reset()
    state.rollout_id = rollout_id
    params = {"temperature": 0.0, "max_new_tokens": args.rollout_max_response_len}
    samples: list[Sample] = data_source.eval_samples()
    for s in samples:
        s.group_index = s.index
    tasks = [generate_and_rm(args, s, dict(params), evaluation=True) for s in samples]
    done: list[Sample] = []
    for coro in asyncio.as_completed(tasks):
        done.append(await coro)
    return {name: {"rewards": [s.reward for s in done], "truncated": [0 for _ in done]}}


def generate_rollout(
    args: argparse.Namespace, rollout_id: int, data_source: Any, evaluation: bool = False
) -> RolloutFnTrainOutput | RolloutFnEvalOutput:
    if evaluation:
        output, _ = run(eval_rollout(args, rollout_id, data_source))
        return RolloutFnEvalOutput(data=output)
    train_output, aborted_samples = run(
        generate_rollout_async(args, rollout_id, data_source.get_samples)
    )
    data_source.add_samples(aborted_samples)
    return train_output


async def get_worker_urls(args: argparse.Namespace) -> list[str]:
    """The engines the router knows, as slime's `abort` asks for them (`GET /workers`, slime main
    624b824 slime/rollout/sglang_rollout.py:346-347)."""
    response = await get(f"http://{args.sglang_router_ip}:{args.sglang_router_port}/workers")
    return [str(w["url"]) for w in response["workers"]]
