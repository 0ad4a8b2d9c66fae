"""The matching machinery of the stack vocabulary: the row types (`FrameSig`, `MethodSig`,
`WaitSig`, `Layout`), what a thread is doing (`Block`), and how a row matches a py-spy frame.

The rows themselves live in one module per framework (slime, miles, sglang, megatron, torch, ray,
python); `lookup` assembles them and answers the questions (which stage, which wait).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from slime_hangdoctor.facts import Frame
from slime_hangdoctor.verdict import Stage

ANY = "*"


@dataclass(frozen=True)
class FrameSig:
    """One stack frame shape that places a process in a stage.

    `file`: a path suffix (`slime/ray/rollout.py`) or a folder ending in `/` (`sglang/srt/`); None: any
    file (only for distinctive function names). `cls`: the class, matched against the qualified name
    py-spy prints on Python >= 3.11 (`MegatronTrainRayActor.update_weights`).
    """

    func: str
    stage: Stage
    file: str | None = None
    cls: str | None = None
    what: str = ""
    generic: bool = False

    @property
    def specificity(self) -> tuple[int, int]:
        """(what is pinned, how long the file pattern is): a deeper folder is more specific."""
        score = 0
        if self.func != ANY:
            score += 8
        if self.cls is not None:
            score += 4
        if self.file is not None:
            score += 1 if self.file.endswith("/") else 2
        return score, len(self.file or "")


@dataclass(frozen=True)
class MethodSig:
    """A Ray actor method (process title `ray::Class.method`, running task `Class.method`)."""

    cls: str
    method: str
    stage: Stage
    what: str = ""


@dataclass(frozen=True)
class Layout:
    name: str
    frames: tuple[FrameSig, ...]
    methods: tuple[MethodSig, ...]
    source: str = ""  # the tree its rows were read from (`owner/repo@commit`)


def rows(
    stage: Stage, file: str | None, funcs: str, *, cls: str | None = None, what: str = ""
) -> tuple[FrameSig, ...]:
    """Several functions of one file (and class) with one stage. `funcs` is space-separated."""
    return tuple(
        FrameSig(func=f, stage=stage, file=file, cls=cls, what=what) for f in funcs.split()
    )


def methods(cls: str, stage: Stage, names: str, what: str = "") -> tuple[MethodSig, ...]:
    return tuple(MethodSig(cls, m, stage, what) for m in names.split())


# --------------------------------------------------------------------------- matching


def norm_path(path: str) -> str:
    return path.replace("\\", "/")


def file_matches(pattern: str, frame: Frame) -> bool:
    for path in (frame.filename, frame.short_filename):
        if not path:
            continue
        p = "/" + norm_path(path).lstrip("/")
        if pattern.endswith("/"):
            if "/" + pattern in p:
                return True
        elif p.endswith("/" + pattern):
            return True
    return False


def split_name(name: str) -> tuple[str | None, str]:
    """`Class.method` -> (`Class`, `method`); `<locals>` chains keep their last owner."""
    if "." not in name:
        return None, name
    owner, func = name.rsplit(".", 1)
    return owner.rsplit(".", 1)[-1], func


def sig_matches(sig: FrameSig, frame: Frame) -> bool:
    owner, func = split_name(frame.name)
    if sig.func not in (ANY, func):
        return False
    if sig.cls is not None and owner is not None and owner != sig.cls:
        return False
    if sig.file is not None:
        if file_matches(sig.file, frame):
            return True
        # py-spy on Python >= 3.11 qualifies methods: the class alone identifies a slime method even
        # when the file is not where this table expects it (a fork, a copied script).
        return sig.func != ANY and sig.cls is not None and owner == sig.cls
    return sig.func != ANY and (sig.cls is None or owner == sig.cls)


# --------------------------------------------------------------------------- what a thread waits on


class Block(str, Enum):
    """What a thread is doing, from its innermost recognisable frame."""

    COLLECTIVE = "collective"  # inside a torch.distributed collective / Work.wait / PP p2p
    RENDEZVOUS = "rendezvous"  # creating a process group: waiting for peers to join
    CUDA_SYNC = "cuda_sync"  # at a CUDA sync point (a stuck NCCL kernel shows here)
    RAY_GET = "ray_get"  # ray.get / ray.wait on another actor's result
    WAIT = "wait"  # in-process wait: Future.result, Event/Condition.wait, Queue.get, join
    HTTP = "http"  # blocking HTTP / socket read
    EVENT_LOOP = "event_loop"  # asyncio / uvloop loop idle in select: coroutines wait on I/O
    SUBPROCESS = "subprocess"  # waiting for a child process
    SLEEP = "sleep"  # time.sleep (native frames only)
    IDLE_WORKER = "idle_worker"  # a Ray worker waiting for its next task
    CPU = "cpu"  # running Python code (active thread, no wait frame)
    PARKED = "parked"  # idle thread in user code: time.sleep or another blocking C call
    UNKNOWN = "unknown"


WAITING_BLOCKS = frozenset(
    {
        Block.COLLECTIVE,
        Block.RENDEZVOUS,
        Block.CUDA_SYNC,
        Block.RAY_GET,
        Block.WAIT,
        Block.HTTP,
        Block.EVENT_LOOP,
        Block.SUBPROCESS,
        Block.SLEEP,
        Block.IDLE_WORKER,
    }
)
COLLECTIVE_BLOCKS = frozenset({Block.COLLECTIVE, Block.RENDEZVOUS, Block.CUDA_SYNC})


@dataclass(frozen=True)
class WaitSig:
    """`own_call`: a Python frame that waits in a native call it makes itself, with no Python frame
    below it (`handle.wait()` on a c10d Work): it is the wait only as the thread's innermost Python
    frame, and only while the thread is idle (the GIL released) or --native shows no other wait."""

    block: Block
    func: str
    file: str | None = None  # suffix or folder, as FrameSig.file
    native: bool = False  # matches native frames (py-spy --native): substring of the name
    own_call: bool = False


def waits(block: Block, file: str | None, funcs: str) -> tuple[WaitSig, ...]:
    return tuple(WaitSig(block, f, file) for f in funcs.split())


def native_waits(block: Block, names: str) -> tuple[WaitSig, ...]:
    return tuple(WaitSig(block, n, None, native=True) for n in names.split())
