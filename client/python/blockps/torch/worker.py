"""What a rank is and how it reaches the shards, for both torch paths (DistributedOptimizer and the DDP hook): its
torchrun identity, the cluster claimed for its job, and its exchange path (sessions of its own, or through its
host's leader: blockps/torch/host.py)."""
import os

from .._blockps import Cluster, MismatchError
from ..jobs import launcher_job_name
from .compression import CompressedExchange
from .host import HostExchange, host_of_this_rank, leader_opens
from .wire import bytes_of


def torchrun_identity():
    """(rank, world size, restart count) from torchrun's environment; (0, 1, 0) outside torchrun."""
    env = os.environ
    try:
        return int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1")), int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError as e:
        raise ValueError(f"blockps: RANK, WORLD_SIZE and TORCHELASTIC_RESTART_COUNT must be integers: {e}") from None


ELASTIC_NEEDS_A_JOB = ("an elastic job's hosts each run a launcher of their own, which names no job they share: give "
                       "job=, the cluster file's [client] job or BLOCKPS_JOB")


def elastic_worker_name(rank):
    """The worker name of `rank` of an elastic job's host (its IQN: iqn...:worker-<hostname>-<this>): every host runs
    ranks 0..L-1 of a launcher of its own, so the name adds the host (BLOCKPS_HOST, else the launcher: torchrun's agent
    process, else this process), lower case letters, digits, '-' and '.' as IQNs allow."""
    env = os.environ
    host = env.get("BLOCKPS_HOST") or (f"agent{os.getppid()}" if "TORCHELASTIC_RUN_ID" in env else f"p{os.getpid()}")
    host = "".join(c if c.isalnum() or c in "-." else "-" for c in host.lower())
    return f"{host}-rank{rank}"


def open_for_job(cluster, worker, job, takeover, user, averaging, elastic=False):
    """The cluster (a blockps.Cluster or a cluster file path; each rank logs in as `worker`), claimed for the job
    the library chooses (`job`, else the cluster file's [client] job, else BLOCKPS_JOB, else the launcher's name:
    blockps/jobs.py) once its shards were found to be of the kind `user` needs (`averaging`: opt=average; else
    optimizer shards): nothing is written to a shard of the wrong kind (blockps.MismatchError), and nothing before
    a job is named (blockps.InvalidArgumentError). A Cluster the script opened is claimed here (unless it holds the
    job already). A shard held by another job refuses with the holder named (blockps.Error). `elastic`: no
    launcher's name is a default (each host's launcher has its own)."""
    default_job, why_none = (None, ELASTIC_NEEDS_A_JOB) if elastic else launcher_job_name()
    chosen = dict(job=job, takeover=takeover, expect="averaging" if averaging else "optimizer",
                  default_job=default_job, no_default_job_because=why_none or "")
    try:
        if isinstance(cluster, Cluster):
            cluster.claim(**chosen)
            return cluster
        return Cluster(str(cluster), worker=worker, **chosen)
    except MismatchError as e:
        raise MismatchError(f"blockps: {user}: {e}") from None


def open_worker(host_aggregation, open_cluster):
    """(host, cluster, shape) of this rank: its Host (None: a worker of its own; blockps/torch/host.py), the
    cluster `open_cluster()` opened here or on its host's leader (None on the host's other ranks), and the
    cluster's shape (dtype, block_bytes, elements, shard_count, job) every rank knows."""
    host = host_of_this_rank(host_aggregation)
    if host is None:
        cluster = open_cluster()
        return None, cluster, cluster
    cluster, shape = leader_opens(host, open_cluster)
    return host, cluster, shape


class ClusterExchange:
    """exchange_async(first, count, grads, pulled, on_done=None) over wire-dtype tensors: the cluster's own
    pipelined exchange (each rank a worker of its own; on_done as Cluster.exchange_blocks_async's); HostExchange
    (blockps/torch/host.py) answers the same call for a host's ranks."""

    def __init__(self, cluster):
        self.cluster = cluster

    def exchange_async(self, first, count, grads, pulled, on_done=None):
        return self.cluster.exchange_blocks_async(first, count, bytes_of(grads), bytes_of(pulled), on_done)


def exchanger(cluster, host, elements, block_elements, wire_dtype, compressed=None):
    """The exchange of a worker path: the cluster's own (host None), or through the ranks of `host`, where the
    cluster is the leader's (None on the other local ranks). `compressed`: (format, compress_after, pull, worker,
    first round) of shards with compress= (blockps/torch/compression.py): the cluster's part compresses (on a host:
    the leader's, after the host's sum)."""
    def shards_part():
        if compressed is None:
            return ClusterExchange(cluster)
        fmt, after, pull, worker, first_round = compressed
        return CompressedExchange(cluster, fmt, after, elements, block_elements, pull, worker, first_round)
    if host is None:
        return shards_part()
    leader_part = shards_part().exchange_async if host.is_leader else None
    return HostExchange(host, elements, block_elements, wire_dtype, leader_part)
