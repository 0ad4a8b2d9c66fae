"""Give the C heap's freed memory back to the system between `watch` runs (issue 43 item 2).

Measured in the soak (docs/reliability.md 5c): the Python objects a run leaves behind are flat
(tracemalloc ~15.7 MiB over 70 runs) and so is what malloc holds in use (~36-39 MiB), but the free
bytes glibc keeps in its arenas grew from 11 to 81 MiB: each run's collection threads allocate in
arenas of their own (glibc makes up to 8 per core), and the pages a run frees stay mapped. A `watch`
that lives for weeks must not keep them, so between runs it
- caps the arenas (`mallopt(M_ARENA_MAX, ARENA_MAX)`, the knob MALLOC_ARENA_MAX sets; once, at
  the start of the loop: arenas already made stay, new threads share these), and
- after each run collects garbage and calls `malloc_trim(0)`, which returns the free pages of every
  arena to the system (glibc >= 2.8 madvises the free chunks inside a heap, not just its top).

Both are glibc's; on another libc (musl, macOS) they are skipped and nothing else changes."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

M_ARENA_MAX = -8  # glibc malloc.h
ARENA_MAX = 2


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None  # not glibc: no malloc_trim / mallopt
    return libc


def cap_arenas(arenas: int = ARENA_MAX) -> bool:
    """Cap glibc's malloc arenas for threads made from now on; False where that cannot be done."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1)


def release_free_memory() -> bool:
    """Collect garbage, then return malloc's free pages to the system; True where any went back."""
    gc.collect()
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)
