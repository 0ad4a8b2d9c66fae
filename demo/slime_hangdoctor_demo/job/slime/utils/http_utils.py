"""Async HTTP helpers for the rollout: like slime's, the client has NO timeout and `_post` retries
only on exceptions (60 times, 1 s apart). aiohttp stands in for httpx (same semantics here).

Proxies: slime's `httpx.AsyncClient(...)` keeps httpx's default `trust_env=True`, so it sends its
requests through `http_proxy` / `https_proxy` / `all_proxy` unless `no_proxy` covers the host
(slime#1026). aiohttp's default is `trust_env=False`; the stand-in sets it to True to behave the
same (aiohttp then reads the variables through urllib's getproxies / proxy_bypass)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

logger = logging.getLogger(__name__)

_http_client: Any = None  # aiohttp.ClientSession, created on the loop thread
_api_key: str | None = None


def init_http_client(args: argparse.Namespace) -> None:
    """Remember the settings; the session itself is created lazily on the asyncio loop thread."""
    global _api_key
    _api_key = args.sglang_api_key


def _client() -> Any:
    global _http_client
    if _http_client is None or _http_client.closed:
        import aiohttp

        _http_client = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None),
            connector=aiohttp.TCPConnector(limit=0),
            trust_env=True,  # as httpx's default in slime
        )
    return _http_client


def _headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {_api_key}"} if _api_key else {}


async def _post(client: Any, url: str, payload: dict[str, Any], max_retries: int = 60) -> Any:
    retry = 0
    while True:
        try:
            async with client.post(url, json=payload, headers=_headers()) as response:
                response.raise_for_status()
                return await response.json(content_type=None)
        except Exception as e:
            retry += 1
            logger.info(f"Error: {e}, retrying... (attempt {retry}/{max_retries}, url={url})")
            if retry >= max_retries:
                raise
            await asyncio.sleep(1)


async def post(url: str, payload: dict[str, Any], max_retries: int = 60) -> Any:
    return await _post(_client(), url, payload, max_retries=max_retries)


async def get_retrying(url: str, timeout_s: float, max_retries: int = 60) -> Any:
    """A GET that gives up after `timeout_s` and blind-retries any error, 1 s apart (as
    `_post`, miles's `post()` that PR#1602's tracer went through)."""
    import aiohttp

    retry = 0
    while True:
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            async with _client().get(url, headers=_headers(), timeout=timeout) as response:
                response.raise_for_status()
                return await response.json(content_type=None)
        except Exception as e:
            retry += 1
            logger.info(f"Error: {e!r}, retrying... (attempt {retry}/{max_retries}, url={url})")
            if retry >= max_retries:
                raise
            await asyncio.sleep(1)


async def get(url: str) -> Any:
    async with _client().get(url, headers=_headers()) as response:
        response.raise_for_status()
        return await response.json(content_type=None)


async def delete(url: str) -> Any:
    async with _client().delete(url, headers=_headers()) as response:
        response.raise_for_status()
        return await response.json(content_type=None)


def run_router(args: Any) -> int:
    """slime's run_router, verbatim (slime main 624b824, slime/utils/http_utils.py:117-127): the
    target of the multiprocessing child that `_start_router` forks from the RolloutManager's
    constructor. `launch_router` blocks in the router's native code for the life of the child."""
    try:
        from sglang_router.launch_router import launch_router  # type: ignore[import-untyped]

        router = launch_router(args)
        if router is None:
            return 1
        return 0
    except Exception as e:
        logger.info(e)
        return 1
