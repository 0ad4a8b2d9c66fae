"""The assembled tables (every layout, every wait, every plumbing file) and the questions asked of
a frame: which stage row matches it most specifically, what wait it is, whether it is plumbing,
a scheduler's request intake, or a hint of the slime layout that runs.

Matching is order-independent: when several rows match one frame, the most specific row wins
(exact function name beats a wildcard, a class qualifier and an exact file beat a folder). A row
marked `generic` is shared by several stages (e.g. `generate_rollout` runs for rollout and for
eval, megatron core runs in training and in weight export): it decides the stage only when no outer
frame matches a non-generic row. `WAITS` is read in order (the first wait that matches is the one).
"""

from __future__ import annotations

from functools import lru_cache

from slime_hangdoctor.analysis.signatures import megatron, miles, python, ray, sglang, slime, torch
from slime_hangdoctor.analysis.signatures.common import (
    ANY,
    FrameSig,
    Layout,
    MethodSig,
    WaitSig,
    file_matches,
    sig_matches,
    split_name,
)
from slime_hangdoctor.facts import Frame

# Every row names a real function of a real tree: tests/unit/test_signature_layouts.py checks each
# against the (file, function) lists that scripts/extract_layout_functions.py read from the trees
# (tests/fixtures/layouts/: these slime commits, Megatron-LM, Megatron-Bridge, the SGLang 0.5.15.post1
# and 0.5.23 wheels, torch 2.13.0, sympy, math-verify, latex2sympy2).
LAYOUTS: dict[str, Layout] = {
    "2026-01": Layout(
        "2026-01",
        slime.COMMON_FRAMES + slime.JAN_FRAMES,
        slime.COMMON_METHODS + slime.JAN_METHODS,
        "THUDM/slime@9bfe15250e82baebf405fc824d1708f779d44406",
    ),
    "2026-08": Layout(
        "2026-08",
        slime.COMMON_FRAMES + slime.HEAD_FRAMES,
        slime.COMMON_METHODS + slime.HEAD_METHODS,
        "THUDM/slime@624b824a898ab0ec1fcb4d373004c7f3852bf515",
    ),
    "miles-2026-08": Layout(
        "miles-2026-08",
        miles.in_miles(slime.COMMON_FRAMES + slime.HEAD_FRAMES) + miles.MILES_FRAMES,
        slime.COMMON_METHODS + miles.MILES_METHODS,
        "radixark/miles@31f1ca961a94cb860cec3b2dea34ec332bfa8f76",
    ),
    # only the rows slime's next layout adds: its other files are main's (2026-08)
    "slime-next": Layout(
        "slime-next",
        slime.NEXT_FRAMES,
        slime.NEXT_METHODS,
        "THUDM/slime@15b8e507118c1f53a7e56966ecc86202bca4a284",
    ),
}


def _all_frame_sigs() -> tuple[FrameSig, ...]:
    seen: dict[FrameSig, None] = {}
    for layout in LAYOUTS.values():
        for sig in layout.frames:
            seen.setdefault(sig, None)
    return tuple(seen)


def _all_method_sigs() -> dict[tuple[str, str], MethodSig]:
    out: dict[tuple[str, str], MethodSig] = {}
    for layout in LAYOUTS.values():
        for sig in layout.methods:
            out.setdefault((sig.cls, sig.method), sig)
    return out


ALL_FRAME_SIGS = _all_frame_sigs()
_METHODS = _all_method_sigs()


def _index(sigs: tuple[FrameSig, ...]) -> dict[str, tuple[FrameSig, ...]]:
    out: dict[str, list[FrameSig]] = {}
    for sig in sigs:
        out.setdefault(sig.func, []).append(sig)
    return {k: tuple(v) for k, v in out.items()}


_BY_FUNC = _index(ALL_FRAME_SIGS)


def match_frame(frame: Frame) -> FrameSig | None:
    """The most specific signature that matches one frame (None: the frame tells no stage)."""
    if frame.native:
        return None
    return _match(frame.name, frame.filename, frame.short_filename)


@lru_cache(maxsize=65536)
def _match(name: str, filename: str, short_filename: str) -> FrameSig | None:
    frame = Frame(name=name, filename=filename, short_filename=short_filename)
    func = split_name(name)[1]
    # A row matched by its class alone (its file is elsewhere: a fork, a copied script) yields to
    # one whose file matches too: slime's RolloutManager.generate in slime/ray/rollout.py is
    # slime's row, not miles's (miles/ray/rollout/rollout_manager.py), however long its path.
    best: FrameSig | None = None
    best_key: tuple[bool, tuple[int, int]] | None = None
    for sig in _BY_FUNC.get(func, ()) + _BY_FUNC.get(ANY, ()):
        if not sig_matches(sig, frame):
            continue
        key = (sig.file is None or file_matches(sig.file, frame), sig.specificity)
        if best_key is None or key > best_key:
            best, best_key = sig, key
    return best


def layouts_of(sig: FrameSig) -> tuple[str, ...]:
    """The slime layouts whose tables hold this row."""
    return tuple(name for name, layout in LAYOUTS.items() if sig in layout.frames)


def method_stage(class_name: str | None, method: str | None) -> MethodSig | None:
    if not class_name or not method:
        return None
    return _METHODS.get((class_name, method))


# --------------------------------------------------------------------------- what a thread waits on

WAITS: tuple[WaitSig, ...] = (
    *torch.RENDEZVOUS_WAITS,
    *slime.RENDEZVOUS_WAITS,
    *sglang.RENDEZVOUS_WAITS,
    *torch.COLLECTIVE_WAITS,
    *slime.COLLECTIVE_WAITS,
    *megatron.COLLECTIVE_WAITS,
    *sglang.LOOP_WAITS,
    *torch.CUDA_WAITS,
    *ray.WAITS,
    *python.WAITS,
    *torch.NATIVE_WAITS,
    *python.NATIVE_WAITS,
)

# Frames that are plumbing around a call (decorators, tracing): never the answer to "where".
TRANSPARENT_FILES = (
    *torch.TRANSPARENT_FILES,
    *ray.TRANSPARENT_FILES,
    *slime.TRANSPARENT_FILES,
    *python.TRANSPARENT_FILES,
)
# The communication layers a collective is issued through, as (function or ANY, file or folder):
# torch.distributed, Megatron's and SGLang's process groups and collective wrappers, slime's
# reloadable group. The first frame outside them, outward from a collective's wait, is the code
# that issued it: "the job's own code" of a collective (the call site a mismatch names).
COMM_LAYERS: tuple[tuple[str, str], ...] = (
    *torch.COMM_LAYERS,
    *megatron.COMM_LAYERS,
    *sglang.COMM_LAYERS,
    *slime.COMM_LAYERS,
)
INTAKE_CALLERS = sglang.INTAKE_CALLERS
INTAKE_VIA = sglang.INTAKE_VIA
LAYOUT_HINT_FILES = slime.LAYOUT_HINT_FILES


def is_intake_caller(frame: Frame) -> bool:
    """Whether the frame is a scheduler's request-intake broadcast (see INTAKE_CALLERS)."""
    if frame.native:
        return False
    func = split_name(frame.name)[1]
    return any(func == f and file_matches(path, frame) for f, path in INTAKE_CALLERS)


def is_intake_via(frame: Frame) -> bool:
    """Whether the frame is a helper between an intake collective and its caller (INTAKE_VIA)."""
    if frame.native:
        return False
    func = split_name(frame.name)[1]
    return any(func == f and file_matches(path, frame) for f, path in INTAKE_VIA)


def is_comm_layer(frame: Frame) -> bool:
    """Whether a Python frame is a communication layer's (COMM_LAYERS), not the code that issued
    the collective."""
    if frame.native:
        return False
    func = split_name(frame.name)[1]
    return any(f in (ANY, func) and file_matches(path, frame) for f, path in COMM_LAYERS)


def wait_of(frame: Frame) -> WaitSig | None:
    """The wait primitive a frame is, if any."""
    return _wait_of(frame.name, frame.filename, frame.short_filename, frame.native)


@lru_cache(maxsize=65536)
def _wait_of(name: str, filename: str, short_filename: str, native: bool) -> WaitSig | None:
    frame = Frame(name=name, filename=filename, short_filename=short_filename, native=native)
    for sig in WAITS:
        if sig.native:
            if frame.native and sig.func in frame.name:
                return sig
            continue
        if frame.native:
            continue
        _, func = split_name(frame.name)
        if sig.func not in (ANY, func):
            continue
        if sig.file is None or file_matches(sig.file, frame):
            return sig
    return None


def is_transparent(frame: Frame) -> bool:
    return any(file_matches(f, frame) for f in TRANSPARENT_FILES)


@lru_cache(maxsize=8192)
def layout_hint(frame: Frame) -> str | None:
    """The slime layout a frame belongs to, when its file exists in one layout only. Cached by
    the frame's value: the ranks of a large job share most frames (issue 46: 64 nodes read
    ~44,000 frames of ~1,300 processes, a few hundred distinct)."""
    for pattern, layout in LAYOUT_HINT_FILES:
        if file_matches(pattern, frame):
            return layout
    sig = match_frame(frame)
    if sig is not None:
        names = layouts_of(sig)
        if len(names) == 1:
            return names[0]
    return None
