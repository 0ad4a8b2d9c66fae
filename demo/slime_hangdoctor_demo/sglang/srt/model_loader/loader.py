"""The stand-in's DefaultModelLoader (as `sglang/srt/model_loader/loader.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from slime_hangdoctor_demo.sglang.srt.model_loader.weight_utils import (
    weight_files,
    weights_iterator,
)


class DefaultModelLoader:
    """Reads a local checkpoint directory; `load_weights_and_postprocess` consumes the iterator,
    so the files are read inside the load (as SGLang's model `load_weights` pulls the tensors)."""

    def _get_weights_iterator(self, model_path: str) -> Iterator[tuple[str, str]]:
        return weights_iterator(weight_files(model_path))

    def load_weights_and_postprocess(
        self,
        load_weights: Callable[[Iterable[tuple[str, str]]], None],
        weights: Iterable[tuple[str, str]],
    ) -> None:
        load_weights(weights)
