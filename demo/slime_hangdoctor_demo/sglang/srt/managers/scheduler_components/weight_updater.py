"""The scheduler's weight-update and memory handlers (as `managers/scheduler_components/weight_updater.py`)."""

from __future__ import annotations

import time
from typing import Any

from slime_hangdoctor_demo.sglang.srt.managers.tp_worker import TpModelWorker

Msg = dict[str, Any]


class SchedulerWeightUpdaterMixin:
    """Handlers mixed into `Scheduler`; the attributes and helpers below are the Scheduler's."""

    tp_worker: TpModelWorker
    weight_load_duration: dict[str, float]
    offload_tags: set[str]

    def flush_cache(self) -> Msg:
        raise NotImplementedError

    def is_fully_idle(self) -> bool:
        raise NotImplementedError

    def fault_active(self, name: str) -> bool:
        raise NotImplementedError

    def refresh_gauges(self) -> None:
        raise NotImplementedError

    def publish_snapshot(self) -> None:
        raise NotImplementedError

    def init_weights_update_group(self, req: Msg) -> Msg | None:
        success, message = self.tp_worker.init_weights_update_group(req)
        return {"success": success, "message": message}

    def destroy_weights_update_group(self, req: Msg) -> Msg | None:
        success, message = self.tp_worker.destroy_weights_update_group(req)
        return {"success": success, "message": message}

    def update_weights_from_disk(self, req: Msg) -> Msg | None:
        """In-place update of the weights from disk (scheduler_update_weights_mixin.py in 0.5.15.post1:
        tp_worker.update_weights_from_disk, then the cache flush)."""
        tic = time.perf_counter()
        success, message = self.tp_worker.update_weights_from_disk(req)
        return self._after_weight_update(req, success, message, "disk", tic)

    def update_weights_from_distributed(self, req: Msg) -> Msg | None:
        tic = time.perf_counter()
        success, message = self.tp_worker.update_weights_from_distributed(req)
        if success and self._session is not None:
            self._session["loaded_weights"] = True
        return self._after_weight_update(req, success, message, "distributed", tic)

    def update_weights_from_tensor(self, req: Msg) -> Msg | None:
        tic = time.perf_counter()
        success, message = self.tp_worker.update_weights_from_tensor(req)
        return self._after_weight_update(req, success, message, "tensor", tic)

    def _after_weight_update(
        self, req: Msg, success: bool, message: str, source: str, tic: float
    ) -> Msg:
        if success and req.get("flush_cache", True):
            flushed = self.flush_cache()
            assert flushed["success"], "Cache flush failed after updating weights"
        self.weight_load_duration[source] = time.perf_counter() - tic
        self.refresh_gauges()
        self.publish_snapshot()
        return {"success": success, "message": message}

    # SGLang 0.5.23's weight-update session (managers/scheduler_components/weight_updater.py:
    # 309-335): `begin_weight_update` refuses a second session ("a weight-update session is already
    # open"), restores the packed weights on the selected runners, then waits for the other TP
    # ranks on the TP CPU group; `end_weight_update` refuses without a session, post-processes the
    # weights, and waits on the same barrier. The stand-in has one runner per scheduler (no draft)
    # and a TP group only with tp_size > 1.
    _session: Msg | None = None

    def begin_weight_update(self, req: Msg) -> Msg | None:
        if self._session is not None:
            return {
                "success": False,
                "message": "a weight-update session is already open; "
                "call end_weight_update() first",
            }
        self.tp_worker.model_runner.begin_weight_update()
        self._session = {"selector": req.get("selector", "all"), "loaded_weights": False}
        self.barrier_tp_cpu_group()
        return {"success": True, "message": "Success"}

    def end_weight_update(self, req: Msg) -> Msg | None:
        if self._session is None:
            return {
                "success": False,
                "message": "no weight-update session is open; call begin_weight_update() first",
            }
        run_post_load = not self._session["loaded_weights"]
        self.tp_worker.model_runner.end_weight_update(run_post_load=run_post_load)
        self._session = None
        self.barrier_tp_cpu_group()
        return {"success": True, "message": "Success"}

    def barrier_tp_cpu_group(self) -> None:
        raise NotImplementedError

    def release_memory_occupation(self, req: Msg) -> Msg | None:
        assert self.is_fully_idle(), (
            "release_memory_occupation should be called only when server is idle."
        )
        tags = req.get("tags") or ["weights", "kv_cache", "cuda_graph"]
        if self.fault_active("hang_release_memory_occupation"):
            self._pause_memory_saver(tags)
        self.offload_tags |= set(map(str, tags))
        return {"success": True}

    def _pause_memory_saver(self, tags: Any) -> None:
        """torch_memory_saver.pause() / the tp_cpu_group barrier that never returns (the fault)."""
        from slime_hangdoctor_demo.sglang.srt.model_executor.model_runner import _block_forever

        _block_forever(f"torch_memory_saver.pause({tags}) that never returns")

    def resume_memory_occupation(self, req: Msg) -> Msg | None:
        tags = req.get("tags") or ["weights", "kv_cache", "cuda_graph"]
        self.offload_tags -= set(map(str, tags))
        return {"success": True}
