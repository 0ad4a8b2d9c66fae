"""Whether the job's requests pass their path: the processes between the RolloutManager and the
engines, and a hop on it that holds them (issue 34 item 2, miles PR#1602).

The rollout's requests go from the RolloutManager to the engines through hops: slime's router,
miles's session server, a proxy, an engine's own HTTP process. The hops are read from the sockets:
a process that holds a connection to another slime process's listening port sends it requests; the
path is every process reached that way from the RolloutManager, up to the engines' HTTP processes.
Without the sockets the path is the processes whose role puts them on it (the router, the engines'
HTTP processes).

A hop **holds the job's requests** when, at both samples:
- it is CPU-bound (markers.cpu_bound: 80 % of a core over the window; or on a CPU or waiting only
  for one 80 % of it, from the kernel source's /proc/<pid>/schedstat, as on a node whose cores are
  all taken; or, where that was not read, runnable (state R) at every process sample) with its
  serving thread running Python code in the same call of its own code at both samples (its calls
  outside the Python standard library agree from the outermost inwards, a handler under the
  loop's entry at least; the innermost that agrees is the place): a synchronous call on its only
  event loop (PR#1602: `json.dumps` of a GiB-scale session under `_render_json`, then the write
  of that body, both in the same handler), which serves nothing else meanwhile;
- and requests pile up at it: the same connections wait at both samples, not taken in between:
  its callers' connections to its listening port that it has not accepted (the caller's row
  exists, the hop holds no socket for it), or bytes in the receive queue of its own connections
  that it has not read (no fewer at the second sample). A busy loop that still serves accepts and
  reads them between the samples; one that holds its requests does neither. Or the callers gave
  them up: every request connection waiting at the first sample is closed by its caller before
  the second (a client whose timeout fired; a keep-alive client keeps a connection it was answered
  on), whether or not new ones wait at the second yet (PR#1602's client retrying in a loop).

Then no new request reaches the engines through it, whatever they still decode: an engine's
tokens are not the job's progress while the job's requests are held (progress.py), and the hop is
the culprit (a suspected hang: a CPU-bound frame can also be a slow one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from slime_hangdoctor.analysis.readers.hold import Hold
from slime_hangdoctor.analysis.readers.pyspy import ThreadRead
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.markers import cpu_bound
from slime_hangdoctor.parsers.processes import STATUS_RUNNING
from slime_hangdoctor.parsers.sockets import TCP_ESTABLISHED, TcpConnection
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Role

_LOCAL = ("127.", "::1", "::ffff:127.", "0.0.0.0", "::")
# Ray's own processes: a Ray actor (its listening port is its core worker's, for Ray's RPC) and the
# driver are not hops of the HTTP request path
_NOT_HOPS = frozenset({MemberKind.ACTOR, MemberKind.DRIVER})


def _listens(p: Proc) -> set[int]:
    ports: set[int] = set()
    for _s, info in p.infos:
        ports.update(info.listen_ports)
        for addr in info.listen_addrs:
            port = addr.rpartition(":")[2]
            if port.isdigit():
                ports.add(int(port))
    return ports


def _same_host(ip: str, p: Proc) -> bool:
    return ip.startswith(_LOCAL) or (p.node_ip is not None and ip == p.node_ip)


def _established(p: Proc, sample: int | None = None) -> tuple[TcpConnection, ...]:
    if not p.conns:
        return ()
    if sample is None:
        return tuple(c for c in p.conns[-1][1] if c.socket.state == TCP_ESTABLISHED)
    for s, conns in p.conns:
        if s == sample:
            return tuple(c for c in conns if c.socket.state == TCP_ESTABLISHED)
    return ()


def _is_engine_front(p: Proc) -> bool:
    return p.role is Role.SGLANG_ENGINE and p.kind is MemberKind.HTTP_SERVER


def request_path(world: World) -> tuple[tuple[Proc, ...], bool]:
    """The hops between the RolloutManager and the engines (not the RolloutManager), and whether
    the sockets showed them (False: by role only)."""
    managers = world.by_role(Role.ROLLOUT_MANAGER)
    if not any(p.conns for p in world.procs):
        return (
            tuple(p for p in world.procs if p.role is Role.ROUTER or _is_engine_front(p)),
            False,
        )
    by_port: dict[tuple[str | None, int], Proc] = {}
    for p in world.procs:
        for port in _listens(p):
            by_port[(p.node_ip, port)] = p
    seen = {(p.node_ip, p.pid) for p in managers}
    queue = deque(managers)
    hops: list[Proc] = []
    while queue:
        caller = queue.popleft()
        for c in _established(caller):
            s = c.socket
            hop = by_port.get((caller.node_ip, s.remote_port))
            if hop is None or not _same_host(s.remote_ip, caller) or hop is caller:
                continue
            if (hop.node_ip, hop.pid) in seen or hop.kind in _NOT_HOPS:
                continue
            seen.add((hop.node_ip, hop.pid))
            hops.append(hop)
            if not _is_engine_front(hop):
                queue.append(hop)
    return tuple(hops), True


def _stdlib(f: Frame) -> bool:
    path = f.filename or f.short_filename
    return "/lib/python3" in path and "-packages/" not in path


def _serving_thread(p: Proc, read_index: int) -> ThreadRead | None:
    read = p.reads[read_index]
    busy = [t for t in read.threads if t.block is Block.CPU]
    return read.primary if read.primary.block is Block.CPU else (busy[0] if busy else None)


def _same_place(p: Proc) -> Frame | None:
    """The innermost frame of its own code that its serving thread is in at both samples: the
    calls of its own code (frames outside the standard library), compared from the outermost
    inwards, agree up to it. One call of its own code under the outermost one must agree (a
    handler under the loop's entry), so a process that only shares its `main` is not in one
    place. A handler that renders a body at one sample and writes it at the other (PR#1602's
    session server under load) is in that handler at both."""
    if p.two_reads is None:
        return None
    first, last = _serving_thread(p, 0), _serving_thread(p, -1)
    if first is None or last is None:
        return None
    a, b = _own_chain(first), _own_chain(last)
    common = 0
    while common < min(len(a), len(b)) and _where(a[common]) == _where(b[common]):
        common += 1
    return b[common - 1] if common >= 2 else None


def _own_chain(t: ThreadRead) -> list[Frame]:
    """The frames of its own code (not native, not the standard library), outermost first."""
    return [f for f in reversed(t.frames) if not f.native and not _stdlib(f)]


def _where(f: Frame) -> tuple[str, str]:
    return (f.name, f.filename)


def _runnable(p: Proc) -> bool:
    """In state R (running, or waiting only for a CPU) at every sample of the process table, two
    samples at least."""
    return len({s for s, _ in p.infos}) >= 2 and all(
        i.status == STATUS_RUNNING for _s, i in p.infos
    )


def _key(c: TcpConnection) -> tuple[int, str, int]:
    return (c.socket.local_port, c.socket.remote_ip, c.socket.remote_port)


def _unaccepted(hop: Proc, callers: tuple[Proc, ...], sample: int) -> dict[tuple[int, ...], Proc]:
    """Callers' connections to the hop's listening ports with no socket of the hop for them, by
    (caller pid, caller's port)."""
    ports = _listens(hop)
    accepted = {(c.socket.remote_port, c.socket.local_port) for c in _established(hop, sample)}
    out: dict[tuple[int, ...], Proc] = {}
    for caller in callers:
        for c in _established(caller, sample):
            s = c.socket
            if (
                s.remote_port in ports
                and _same_host(s.remote_ip, caller)
                and (s.local_port, s.remote_port) not in accepted
            ):
                out[(caller.pid, s.local_port)] = caller
    return out


def _unread(hop: Proc, sample: int) -> dict[tuple[int, str, int], int]:
    """Bytes in the receive queue of each of the hop's own connections that has some."""
    return {_key(c): c.socket.rx_queue for c in _established(hop, sample) if c.socket.rx_queue > 0}


# Seconds of the window a process's main thread was on a CPU or waiting for one, where a source read
# it (None: not read): the caller asks the parts (source_analysis.cpu_wanted_s, the kernel's)
WantedFn = Callable[[World, Proc, float], float | None]


def holds(world: World, window_s: float, wanted: WantedFn | None = None) -> tuple[Hold, ...]:
    """The hops that hold the job's requests (module doc); none without stacks, processes' CPU
    times or sockets at two samples (what they need is then not seen, not ruled out)."""
    hops, from_sockets = request_path(world)
    if not from_sockets or window_s <= 0:
        return ()
    out: list[Hold] = []
    for hop in hops:
        cpu = hop.cpu_delta
        if cpu is None or not cpu_bound(
            cpu, window_s, _runnable(hop), wanted(world, hop, window_s) if wanted else None
        ):
            continue
        frame = _same_place(hop)
        samples = [s for s, _ in hop.conns]
        if frame is None or len(set(samples)) < 2:
            continue
        callers = tuple(
            p
            for p in world.procs
            if p is not hop and any(c.socket.remote_port in _listens(hop) for c in _established(p))
        )
        left, kept, renewed, resent = _piled(hop, callers, samples[0], samples[-1])
        if not (left or kept):
            continue
        per_caller: dict[int, tuple[Proc, int]] = {}
        for caller in left.values():
            per_caller[caller.pid] = (caller, per_caller.get(caller.pid, (caller, 0))[1] + 1)
        unaccepted = sorted(per_caller.values(), key=lambda x: -x[1])
        unread, unread_conns = sum(kept.values()), len(kept)
        out.append(
            Hold(
                hop,
                frame,
                cpu,
                window_s,
                tuple(unaccepted),
                unread,
                unread_conns,
                callers,
                _runnable(hop),
                renewed,
                resent,
            )
        )
    return tuple(out)


def _piled(
    hop: Proc, callers: tuple[Proc, ...], first: int, last: int
) -> tuple[dict[tuple[int, ...], Proc], dict[tuple[int, str, int], int], bool, bool]:
    """The requests that pile up at the hop: (its callers' connections it has not accepted, bytes
    unread in its receive queues, renewed, resent). The same connections wait at both samples,
    not drained in between: a loop that serves, however busy, accepts and reads them; one that
    holds its requests does neither. Or `renewed`: every request connection waiting at the first sample is
    gone from its caller at the last (the client's timeout fired and it closed it: a keep-alive
    client keeps a connection it was answered on), whether or not new ones wait at the last yet
    (PR#1602's client retrying in a loop, 1 s apart): the last sample's are returned (`resent`),
    or the first's where none waits at the last."""
    waiting = _unaccepted(hop, callers, first)
    now = _unaccepted(hop, callers, last)
    left = {k: p for k, p in now.items() if k in waiting}
    queued = _unread(hop, first)
    kept = {k: n for k, n in _unread(hop, last).items() if queued.get(k, 0) > 0 and n >= queued[k]}
    if left or kept:
        return left, kept, False, False
    ports = _listens(hop)
    asked = {k[1] for k in waiting} | {k[2] for k in queued if k[0] in ports}
    still = {
        c.socket.local_port
        for p in callers
        for c in _established(p, last)
        if c.socket.remote_port in ports
    }
    unread_now = {k: n for k, n in _unread(hop, last).items() if k[0] in ports}
    if not asked or asked & still:
        return {}, {}, False, False
    if now or unread_now:
        return now, unread_now, True, True
    return waiting, {k: n for k, n in queued.items() if k[0] in ports}, True, False
