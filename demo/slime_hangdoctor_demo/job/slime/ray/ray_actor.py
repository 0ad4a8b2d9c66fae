"""Base class of slime's Ray actors."""

from __future__ import annotations

from slime.utils.misc import get_current_node_ip, get_free_port


class RayActor:
    @staticmethod
    def _get_current_node_ip_and_free_port(
        start_port: int = 10000, consecutive: int = 1
    ) -> tuple[str, int]:
        return get_current_node_ip(), get_free_port(start_port=start_port, consecutive=consecutive)

    @staticmethod
    def _get_node_ip() -> str:
        """The IP of this actor's Ray node (slime's `get_host_info()[1]`, slime/utils/http_utils.py:42,
        the node's address): where an engine on several nodes meets (`dist_init_addr`) and where
        each of its nodes serves. The demo's other engines stay on loopback."""
        import ray

        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
