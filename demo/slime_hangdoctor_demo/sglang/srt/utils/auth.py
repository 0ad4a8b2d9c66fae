"""API-key rules of SGLang >= 0.5.9 (as `sglang/srt/utils/auth.py`)."""

from __future__ import annotations

import hmac

NORMAL, ADMIN_OPTIONAL = "normal", "admin_optional"


def authorized(
    level: str,
    method: str,
    path: str,
    header: str | None,
    api_key: str | None,
    admin_api_key: str | None,
) -> bool:
    """OPTIONS, /health* and /metrics are open; NORMAL needs api_key if set; ADMIN_OPTIONAL needs
    admin_api_key if set, else api_key if set. The Bearer scheme is case-insensitive."""
    if method == "OPTIONS" or path.startswith(("/health", "/metrics")):
        return True
    needed = (admin_api_key or api_key) if level == ADMIN_OPTIONAL else api_key
    if not needed:
        return True
    token = ""
    if header:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() == "bearer":
            token = value.strip()
    return hmac.compare_digest(token.encode(), str(needed).encode())
