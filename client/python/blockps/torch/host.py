"""Host-level aggregation: the ranks of one host combine their gradients before anything leaves the host.

A GPU host runs one rank per GPU behind one NIC. If every rank were a worker of its own, the host's link would
carry L x M bytes each way per step (L ranks, a model of M bytes); a ring all-reduce over ranks ordered by host
carries 2(N-1)/N x M. Here the L ranks of a host sum their staged gradients at the host's leader (its lowest
rank), the leader alone pushes and pulls each block (one iSCSI session per shard for the whole host), and every
local rank takes what the leader pulled: the link carries M each way whatever L is, as with BytePS's servers.

Why a leader, not BytePS's split (a local reduce-scatter, every local rank exchanging its slice with the
shards): the exchange from one process already reaches 0.89-0.95 of the link (bench/RESULTS.md), so the link, not
the leader, is what binds; and with one session per host pushing, a sync shard's rounds count hosts with no
change on the shard (membership, workers=, min_workers, straggler_ms, push_lead and the fixed summation order
stay what they are, with "worker" meaning "host"). The split would make a round's contributions for one host
come from L sessions, which the shards would have to learn to group.

How the ranks meet: in shared memory (one /dev/shm file per host: a slot per rank, summed by the leader, and the
pulled result, copied out by each rank), with two torch.distributed gloo subgroups only for the signals (a
one-element reduction: "my slot is written"; the leader's verdict: "the result is there", or its error). Over gloo
alone every byte would cross loopback TCP twice with the kernel's copies: measured, that was what bound the host
(bench/RESULTS.md). Where /dev/shm cannot hold the slots (a container's 64 MB default), or BLOCKPS_HOST_SHM=0, the
gradients are reduced and the result broadcast over gloo instead. Not NCCL on the GPUs: the exchange needs the
sum in host memory anyway, one mechanism then serves CPU and CUDA tensors and both worker paths, and it can be
tested on the machines CI has. (On a host with NVLink, reducing on the GPUs before the copy to host memory would
save each non-leader's copy; that needs a multi-GPU machine to build and test, and is left for one.)

How a host is recognised (host_key): BLOCKPS_HOST when set (ranks with the same value are one host); else, under
torchrun, the hostname and torchrun's node (GROUP_RANK), so two torchruns on one machine are two hosts; else the
hostname. BLOCKPS_HOST_AGGREGATION=0 (or the worker paths' host_aggregation=False) turns it off: every rank is
then a worker of its own, as before.

Arithmetic: the leader pushes its host's sum times H/N (H hosts, N ranks). A sync shard averages over the H hosts'
pushes, so the result is the sum over all N ranks divided by N, as DDP's; with L ranks on every host H/N is 1/L.
The sum is taken in f32 whatever the wire dtype, and rounded once to the wire dtype for the push.

Faults: the local collectives run with a timeout (BLOCKPS_HOST_TIMEOUT_S, default 60 s), so a stopped local rank
cannot hang its host. A local rank that died or failed makes every pending and later exchange of its host fail
with an error naming the rank, its pid and the host; a failed exchange of the leader (a shard unreachable) reaches
the other local ranks with the leader's message. The script raises at step(), torchrun restarts the host's ranks,
and the other hosts go on as with a dead worker.
"""
import datetime
import os
import queue
import socket
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

from ..shard_settings import shard_options
from .wire import element_size, integer_view

_ENV_KEY = "BLOCKPS_HOST"
_ENV_SWITCH = "BLOCKPS_HOST_AGGREGATION"
_ENV_TIMEOUT = "BLOCKPS_HOST_TIMEOUT_S"
_ENV_SHM = "BLOCKPS_HOST_SHM"
_DEFAULT_TIMEOUT_S = 60
_HEADER_BYTES = 1024  # the leader's verdict on each exchange: 1 byte ok/failed, then its message (UTF-8)


def host_key():
    """The name of the host this rank runs on (see the module's doc)."""
    env = os.environ
    if env.get(_ENV_KEY):
        return env[_ENV_KEY]
    if "GROUP_RANK" in env and "TORCHELASTIC_RUN_ID" in env:
        return f"{socket.gethostname()}:node{env['GROUP_RANK']}"
    return socket.gethostname()


def aggregation_requested(host_aggregation=True):
    """False when the caller or BLOCKPS_HOST_AGGREGATION (0/1) turns host aggregation off; ValueError on another
    value."""
    value = os.environ.get(_ENV_SWITCH, "1")
    if value not in ("0", "1"):
        raise ValueError(f"blockps: {_ENV_SWITCH}={value!r}: must be 0 (every rank a worker of its own) or 1 (the "
                         "ranks of a host push once for the host; the default)")
    return bool(host_aggregation) and value == "1"


def _timeout_s():
    value = os.environ.get(_ENV_TIMEOUT, str(_DEFAULT_TIMEOUT_S))
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1
    if not 1 <= seconds <= 86400:
        raise ValueError(f"blockps: {_ENV_TIMEOUT}={value!r}: must be a number of seconds in 1..86400")
    return seconds


class Host:
    """The ranks of this rank's host, found over the default process group (every rank must build one, in the
    same order as its other collectives: it runs an all_gather and creates one subgroup pair per host).

    key: this host's name; ranks: its global ranks, ascending; leader: ranks[0]; local_rank: this rank's index in
    ranks; hosts: how many hosts the job has; world_size: N. is_leader: this rank talks to the shards."""

    def __init__(self, everyone=None):
        """everyone: every rank's _whoami() as host_of_this_rank gathered them; None: gathered here."""
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("blockps: host aggregation needs torch.distributed's process group (torchrun, then "
                             "init_process_group) before the worker path is built")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.timeout_s = _timeout_s()
        if everyone is None:
            everyone = [None] * self.world_size
            dist.all_gather_object(everyone, _whoami())
        mine = everyone[self.rank]
        keys = []
        for key, _, _ in everyone:
            if key not in keys:
                keys.append(key)  # in the order of the hosts' lowest ranks
        self.key = mine[0]
        self.hosts = len(keys)
        self.ranks = [r for r, (key, _, _) in enumerate(everyone) if key == self.key]
        self.leader = self.ranks[0]
        self.local_rank = self.ranks.index(self.rank)
        self.is_leader = self.rank == self.leader
        self._peers = {r: everyone[r] for r in self.ranks}
        self.largest = max(sum(1 for k, _, _ in everyone if k == key) for key in keys)
        self._check_torchrun_agrees()
        # Every rank creates every host's groups (torch.distributed's rule), and keeps its own host's: one for the
        # reductions onto the leader, one for the leader's broadcasts, so that each runs in order on its own thread.
        timeout = datetime.timedelta(seconds=self.timeout_s)
        self.reduce_group = self.broadcast_group = None
        for key in keys:
            ranks = [r for r, (k, _, _) in enumerate(everyone) if k == key]
            if len(ranks) < 2:
                continue
            groups = (dist.new_group(ranks, timeout=timeout, backend="gloo"),
                      dist.new_group(ranks, timeout=timeout, backend="gloo"))
            if key == self.key:
                self.reduce_group, self.broadcast_group = groups

    def _check_torchrun_agrees(self):
        local_world = os.environ.get("LOCAL_WORLD_SIZE")
        if local_world and not os.environ.get(_ENV_KEY) and int(local_world) != len(self.ranks):
            raise ValueError(f"blockps: host {self.key!r} has ranks {self.ranks}, but torchrun says LOCAL_WORLD_SIZE="
                             f"{local_world}: set BLOCKPS_HOST to the same value on the ranks of each host, or "
                             f"{_ENV_SWITCH}=0")

    @property
    def size(self):
        """L: the ranks on this host."""
        return len(self.ranks)

    @property
    def in_use(self):
        """Some host of the job runs several ranks: every host pushes through a HostExchange (a host with one rank
        scales its pushes by H/N all the same). With one rank on every host the flat path is the same thing."""
        return self.largest > 1

    @property
    def push_scale(self):
        """What the leader multiplies its host's sum by (H/N; see the module's doc)."""
        return self.hosts / self.world_size

    def describe(self, rank):
        key, hostname, pid = self._peers[rank]
        return f"local rank {self.ranks.index(rank)} (rank {rank}, pid {pid}) of host {key!r}"

    def gone_peers(self):
        """The local ranks whose process no longer exists (same machine only), in words."""
        gone = []
        for r in self.ranks:
            key, hostname, pid = self._peers[r]
            if r == self.rank or hostname != socket.gethostname():
                continue
            if not _process_lives(pid):
                gone.append(self.describe(r))
        return gone

    def failure(self, what, error):
        """RuntimeError for a failed local collective, naming the local ranks that are gone (or all of them). A
        killed peer's sockets close while it is still exiting: it is looked for for up to 2 s."""
        deadline = time.monotonic() + 2
        gone = self.gone_peers()
        while not gone and time.monotonic() < deadline:
            time.sleep(0.05)
            gone = self.gone_peers()
        who = ("; gone: " + ", ".join(gone)) if gone else (
            f"; the host's ranks are {self.ranks} (one failed, was stopped past {self.timeout_s:g} s "
            f"({_ENV_TIMEOUT}), or diverged)")
        return RuntimeError(f"blockps host aggregation, {self.describe(self.rank)}: {what} failed{who}: {error}")


def _process_lives(pid):
    """False once `pid` exited, also while it waits to be reaped (a zombie: its parent did not wait yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


class _Operation:
    """One host exchange: wait() returns when the pulled blocks are in this rank's buffer, or raises. on_done, when
    given, is then called once with None or that error, on the broadcast thread (as Cluster.exchange_blocks_async's
    on_done on an I/O thread)."""

    def __init__(self, on_done=None):
        self._done = threading.Event()
        self._error = None
        self._on_done = on_done

    def _finish(self, error=None):
        self._error = error
        self._done.set()
        if self._on_done is None:
            return
        try:
            self._on_done(error)
        except Exception:  # nothing to raise it into, and the broadcast thread must serve the exchanges after it
            print(f"blockps host aggregation: exception ignored in on_done {self._on_done!r}:", file=sys.stderr)
            traceback.print_exc()

    def wait(self):
        self._done.wait()
        if self._error is not None:
            raise self._error


class _SharedSlots:
    """The host's shared memory (one file in /dev/shm, unlinked once every local rank mapped it, so nothing is
    left behind whatever ends the ranks): a slot per local rank for its f32 gradients, where the leader sums them,
    and the result the leader pulls into and every local rank copies out. Over gloo on loopback each of those
    bytes would cross TCP twice, with the kernel's copies and wake-ups: it was the host's CPU cost
    (bench/RESULTS.md, "Hosts with several ranks")."""

    def __init__(self, memory, ranks, elements, wire_dtype):
        slot_bytes = ranks * elements * 4
        self.slots = memory[:slot_bytes].view(torch.float32).view(ranks, elements)
        offset = _page_rounded(slot_bytes)
        self.result = memory[offset:offset + elements * element_size(wire_dtype)].view(wire_dtype)

    @staticmethod
    def bytes_for(ranks, elements, wire_dtype):
        return _page_rounded(ranks * elements * 4) + elements * element_size(wire_dtype)

    @classmethod
    def open(cls, host, elements, wire_dtype):
        """A collective of the host's ranks: the leader makes the file (or says why not: None everywhere, the
        ranks combine over gloo instead), every rank maps it, the leader unlinks it."""
        size = cls.bytes_for(host.size, elements, wire_dtype)
        verdict = None
        if host.is_leader:
            verdict = _make_shared_file(size)
        box = [verdict]
        dist.broadcast_object_list(box, src=host.leader, group=host.broadcast_group)
        kind, detail = box[0]
        if kind != "file":
            if host.is_leader:
                print(f"blockps host aggregation, host {host.key!r}: {detail}; its ranks combine over gloo "
                      "(TCP on loopback) instead", file=sys.stderr, flush=True)
            return None
        memory = torch.from_file(detail, shared=True, size=size, dtype=torch.uint8)
        dist.barrier(group=host.broadcast_group)
        if host.is_leader:
            os.unlink(detail)
        return cls(memory, host.size, elements, wire_dtype)


def _make_shared_file(size):
    """("file", path) of a new file of `size` bytes in /dev/shm, its pages reserved (a tmpfs that runs out later
    would kill the ranks with SIGBUS); ("why not", reason) when BLOCKPS_HOST_SHM=0 or it cannot be had."""
    if os.environ.get(_ENV_SHM, "1") == "0":
        return ("why not", f"{_ENV_SHM}=0")
    path = f"/dev/shm/blockps-host-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        return ("why not", f"cannot create {path}: {e.strerror}")
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        os.unlink(path)
        return ("why not", f"/dev/shm cannot hold {size} bytes ({e.strerror}; enlarge it, e.g. docker --shm-size)")
    finally:
        os.close(fd)
    return ("file", path)


def _page_rounded(n):
    return -(-n // 4096) * 4096


class HostExchange:
    """exchange_async(first, count, grads, pulled, on_done=None) as Cluster.exchange_blocks_async, for the ranks of a
    host: every local rank calls it with the same blocks in the same order (the same model and buckets: as DDP
    requires).

    grads and pulled are CPU tensors of the wire dtype holding blocks first..first+count-1 of a flat model of
    `elements` elements (both may end early at the model's end). On the leader, exchange(first, count, grads,
    pulled) does the shards' part (a callable that returns an object with wait(), e.g. Cluster's exchange over the
    tensors' bytes).

    The host's ranks meet in shared memory (_SharedSlots): each copies its gradients into its slot and tells the
    leader over gloo (a one-element reduction), the leader sums the slots, pushes, pulls into the shared result and
    tells the others (a broadcast of its verdict), and each copies the result out. Where /dev/shm cannot hold the
    slots, the gradients themselves are reduced and the result broadcast over gloo. A rank writes its slot of a
    block again only after its previous exchange of that block completed, which the leader's verdict orders after
    the leader's sum and pull: no slot or result is overwritten while in use."""

    def __init__(self, host, elements, block_elements, wire_dtype, exchange=None):
        self.host = host
        self._exchange = exchange
        self._block_elements = block_elements
        self._shared = _SharedSlots.open(host, elements, wire_dtype) if host.size > 1 else None
        self._ready = torch.zeros(1, dtype=torch.int32)
        # The host's sum: the leader's (shared memory), or every rank's staging for gloo's reduction.
        self._sum = torch.zeros(elements if host.is_leader or self._shared is None else 0, dtype=torch.float32)
        # The leader's pushes: the scaled sum in the wire dtype (the callers' gradient buffers stay theirs).
        self._push = torch.zeros(elements if host.is_leader else 0, dtype=wire_dtype)
        self._broken = None  # the first local failure: every later operation fails with it
        self._reductions = queue.Queue()
        self._broadcasts = queue.Queue()
        for target, name in ((self._reduce_loop, "blockps-host-reduce"), (self._broadcast_loop, "blockps-host-bcast")):
            threading.Thread(target=target, name=name, daemon=True).start()

    @property
    def combines_in_shared_memory(self):
        return self._shared is not None

    def exchange_async(self, first, count, grads, pulled, on_done=None):
        op = _Operation(on_done)
        self._reductions.put(("exchange", first, count, grads, pulled, op))
        return op

    def share_async(self, tensor, fetch=None):
        """The leader's `tensor` (filled first by `fetch()` on the leader, when given) copied into every local
        rank's: in order with the exchanges before it."""
        op = _Operation()
        self._reductions.put(("share", fetch, tensor, op))
        return op

    # ---- the two threads --------------------------------------------------------------------------------------
    def _reduce_loop(self):
        while True:
            job = self._reductions.get()
            if job[0] == "share":
                self._broadcasts.put(job + (None,))
                continue
            _, first, count, grads, pulled, op = job
            lo, n = first * self._block_elements, grads.numel()
            shard_op = leader_error = None
            if self._broken is None:
                try:
                    self._combine(lo, n, grads)
                except RuntimeError as e:
                    self._broken = self.host.failure(f"the reduction of blocks {first}..{first + count - 1}", e)
            if self._broken is None and self.host.is_leader:
                try:
                    summed = self._sum[lo:lo + n]
                    summed.mul_(self.host.push_scale)
                    push = self._push[lo:lo + n]
                    push.copy_(summed)  # rounded once to the wire dtype
                    target = pulled if self._shared is None else self._shared.result[lo:lo + n]
                    shard_op = self._exchange(first, count, push, target)
                except Exception as e:  # blockps.Error (a shard known dead): the other local ranks get the message
                    leader_error = e
            self._broadcasts.put(("exchange", first, count, pulled, op, shard_op, leader_error))

    def _combine(self, lo, n, grads):
        """The host's sum of elements lo..lo+n-1 into the leader's self._sum (f32, in local rank order)."""
        if self.host.size == 1:
            self._sum[lo:lo + n].copy_(grads)
        elif self._shared is not None:
            self._shared.slots[self.host.local_rank, lo:lo + n].copy_(grads)
            dist.reduce(self._ready, self.host.leader, group=self.host.reduce_group)  # every slot is written
            if self.host.is_leader:
                torch.sum(self._shared.slots[:, lo:lo + n], dim=0, out=self._sum[lo:lo + n])
        else:
            summed = self._sum[lo:lo + n]
            summed.copy_(grads)
            dist.reduce(summed, self.host.leader, group=self.host.reduce_group)

    def _broadcast_loop(self):
        header = torch.zeros(_HEADER_BYTES, dtype=torch.uint8)
        while True:
            job = self._broadcasts.get()
            if job[0] == "share":
                _, fetch, tensor, op, _ = job
                error = None
                if self.host.is_leader and fetch is not None:
                    try:
                        fetch()
                    except Exception as e:
                        error = e
                op._finish(self._broadcast(header, tensor, error, "sharing the leader's buffers", over_gloo=True))
                continue
            _, first, count, pulled, op, shard_op, error = job
            if shard_op is not None:
                try:
                    shard_op.wait()
                except Exception as e:  # blockps.Error names the shard
                    error = e
            what = f"the broadcast of blocks {first}..{first + count - 1}"
            failure = self._broadcast(header, pulled, error, what, over_gloo=self._shared is None)
            if failure is None and self._shared is not None:
                lo = first * self._block_elements
                pulled.copy_(self._shared.result[lo:lo + pulled.numel()])
            op._finish(failure)

    def _broadcast(self, header, tensor, leader_error, what, over_gloo):
        """Broadcast the leader's verdict, then (when ok and over_gloo) `tensor`; returns the error this rank's
        operation ends with, or None."""
        if self._broken is not None:
            return self._broken
        if self.host.size == 1:
            return leader_error
        try:
            if self.host.is_leader:
                message = b"" if leader_error is None else str(leader_error).encode()[:_HEADER_BYTES - 1]
                header.zero_()
                header[0] = 0 if leader_error is None else 1
                if message:
                    header[1:1 + len(message)] = torch.frombuffer(bytearray(message), dtype=torch.uint8)
            dist.broadcast(header, self.host.leader, group=self.host.broadcast_group)
            if header[0] == 0 and over_gloo:
                dist.broadcast(integer_view(tensor), self.host.leader, group=self.host.broadcast_group)
        except RuntimeError as e:
            self._broken = self.host.failure(what, e)
            return self._broken
        if header[0] == 0:
            return None
        if self.host.is_leader:
            return leader_error
        text = bytes(header[1:].numpy()).rstrip(b"\0").decode(errors="replace")
        return RuntimeError(f"blockps host aggregation: the leader of host {self.host.key!r} "
                            f"({self.host.describe(self.host.leader)}) failed {what}: {text}")


class ClusterShape:
    """What a non-leader rank knows of the cluster: its leader's figures (it opens no session of its own)."""

    def __init__(self, dtype, block_bytes, elements, shard_count, job):
        self.dtype, self.block_bytes, self.elements, self.shard_count, self.job = (dtype, block_bytes, elements,
                                                                                   shard_count, job)


def _whoami():
    """What a rank tells the others of itself: (host key, hostname, pid)."""
    return (host_key(), socket.gethostname(), os.getpid())


def host_of_this_rank(host_aggregation=True):
    """This rank's Host when host aggregation is on and some host of the job runs several ranks; else None (each
    rank a worker of its own). A collective: every rank calls it at the same point, also with aggregation off, so
    that ranks which disagree on it are refused (ValueError on every rank) instead of one side waiting for the
    other's collectives."""
    wanted = aggregation_requested(host_aggregation)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (_whoami(), wanted))
    off = [r for r, (_, w) in enumerate(everyone) if not w]
    if off and len(off) < len(everyone):
        raise ValueError(f"blockps: host aggregation is off on ranks {off} and on on the others: every rank must "
                         f"agree (the same host_aggregation= and {_ENV_SWITCH} everywhere)")
    if not wanted:
        return None
    host = Host([who for who, _ in everyone])
    return host if host.in_use else None


def leader_opens(host, open_cluster):
    """(cluster, shape): on the leader `open_cluster()`'s Cluster twice; on the other local ranks None and the
    leader's ClusterShape. An error of the leader's (a refused claim, shards of the wrong kind) is raised on every
    local rank, so none waits for a leader that gave up."""
    cluster, error, payload = None, None, None
    if host.is_leader:
        try:
            cluster = open_cluster()
            check_rounds_count_hosts(cluster, host)
            payload = ("ok", (cluster.dtype, cluster.block_bytes, cluster.elements, cluster.shard_count, cluster.job))
        except Exception as e:
            error, payload = e, ("error", type(e).__name__, str(e))
    if host.size > 1:
        box = [payload]
        dist.broadcast_object_list(box, src=host.leader, group=host.broadcast_group)
        payload = box[0]
    if host.is_leader:
        if error is not None:
            raise error
        return cluster, cluster
    if payload[0] == "error":
        kind = ValueError if payload[1] == "ValueError" else RuntimeError
        raise kind(f"{payload[2]} (from the leader of host {host.key!r}, {host.describe(host.leader)}, which "
                   "opens the shards for this host's ranks)")
    return None, ClusterShape(*payload[1])


def check_rounds_count_hosts(cluster, host):
    """ValueError naming the first sync shard whose workers= exceeds the job's hosts: one push per host reaches it,
    so each of its rounds would wait straggler_ms for pushes that never come."""
    for shard, opts in shard_options(cluster):
        if opts.get("mode") != "sync" or "workers" not in opts or int(opts["workers"]) <= host.hosts:
            continue
        raise ValueError(
            f"blockps: shard {shard} runs mode=sync with workers={opts['workers']}, but this job pushes from "
            f"{host.hosts} host(s): the ranks of a host combine their gradients and push once for the host (host "
            f"aggregation; {host.world_size} ranks, {host.size} on host {host.key!r}), so every round would wait "
            f"straggler_ms for pushes that never come. Set workers={host.hosts} in the shards' bsopts (min_workers at "
            "most that), or BLOCKPS_HOST_AGGREGATION=0 to push from every rank (docs/OPTIONS.md, \"Hosts with "
            "several ranks\")")
