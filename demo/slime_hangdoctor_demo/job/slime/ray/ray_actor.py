"""Base class of slime's Ray actors."""

from __future__ import annotations

from slime.utils.misc import get_current_node_ip, get_free_port


class RayActor:
    @staticmethod
    def _get_current_node_ip_and_free_port(
        start_port: int = 10000, consecutive: int = 1
    ) -> tuple[str, int]:
        return get_current_node_ip(), get_free_port(start_port=start_port, consecutive=consecutive)
