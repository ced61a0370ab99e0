"""Which job a worker belongs to, and which kind of shard it needs (docs/OPTIONS.md, "Jobs and places").

A shard serves one job at a time: the first job whose workers claim it holds it, and every other job's commands
are refused until the holder is gone (or released, or taken over). So every rank of one job must name the same
job, every restart of that job must name it again, and two jobs must never share a name. In order:

1. the `job=` argument of DistributedOptimizer / AveragingState;
2. the cluster file's `[client] job`;
3. the environment variable BLOCKPS_JOB;
4. torchrun's run id (`--rdzv_id`, TORCHELASTIC_RUN_ID), unless it is torchrun's default "none";
5. one torchrun on one host: that torchrun's agent (the ranks' parent process), which outlives its restarts and
   which no other torchrun shares;
6. a torchrun with a static rendezvous (`--master_addr`/`--master_port`, no `--rdzv_backend`), or a process group
   without torchrun (MASTER_ADDR/MASTER_PORT, as mp.spawn scripts set): its rendezvous address, the same on every
   host and every restart;
7. a single process: this process.
A multi-host torchrun with a c10d rendezvous and no run id has no name every host agrees on and that survives its
restarts (c10d picks a new MASTER_PORT per attempt): refused, asking for --rdzv_id or BLOCKPS_JOB.
torchrun spells its flags with underscores in torch 1.13 (Debian's); later ones accept them too.
"""
import json
import os
import socket

from ._blockps import MismatchError

_TORCHRUN_DEFAULT_RUN_ID = "none"


def derived_job_name():
    """The job name of steps 3-7 above (steps 1-2 are the caller's and the cluster file's), or None where there is
    none (a multi-host torchrun without a run id)."""
    env = os.environ
    if env.get("BLOCKPS_JOB"):
        return env["BLOCKPS_JOB"]
    host = socket.gethostname()
    if "TORCHELASTIC_RUN_ID" in env:
        run_id = env["TORCHELASTIC_RUN_ID"]
        if run_id and run_id != _TORCHRUN_DEFAULT_RUN_ID:
            return f"torchrun:{run_id}"
        if int(env.get("GROUP_WORLD_SIZE", "1")) == 1:
            return f"torchrun:{host}:{os.getppid()}"
        # A static rendezvous: its MASTER_ADDR and MASTER_PORT are the flags', on every host and every restart.
        if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
            return f"dist:{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
        return None  # several hosts, c10d, no run id: no name they share (require_job says so)
    if int(env.get("WORLD_SIZE", "1")) > 1 and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"dist:{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    return f"process:{host}:{os.getpid()}"


def check_shard_kind(cluster, averaging, user):
    """blockps.MismatchError (a ValueError) naming the first shard that is not of the kind `user` needs: averaging
    shards (opt=average) for the DDP hook, optimizer shards for DistributedOptimizer. For a Cluster the script opened
    (the torch paths open a cluster file with expect=, which the library checks at open): before its claim."""
    for shard, page in cluster.status_pages():
        opt = json.loads(page)["shard"]["opt"]
        if (opt == "average") == averaging:
            continue
        if averaging:
            raise MismatchError(
                f"blockps: {user} needs averaging shards (opt=average;mode=sync), but shard {shard} runs opt={opt}: it "
                "would step its optimizer on the pushed gradients and the hook would install the returned weights as "
                "gradients. Point the cluster file at averaging shards, or keep these shards and use "
                "blockps.torch.DistributedOptimizer")
        raise MismatchError(
            f"blockps: {user} needs shards that run the optimizer, but shard {shard} runs opt=average (it only "
            "averages gradients): with these shards use DistributedDataParallel with blockps.torch.averaging_hook, or "
            "point the cluster file at optimizer shards")


def shard_options(cluster):
    """Each shard's bsopts as {key: value} (its status page's shard.options), in cluster-file order."""
    out = []
    for shard, page in cluster.status_pages():
        options = json.loads(page)["shard"]["options"]
        out.append((shard, dict(kv.split("=", 1) for kv in options.split(";") if "=" in kv)))
    return out


def require_job(cluster):
    """ValueError when `cluster` claimed no job because none could be named (a multi-host torchrun without a run id
    and without a name in the cluster file or BLOCKPS_JOB)."""
    if not cluster.job:
        raise ValueError("blockps: a torchrun over several hosts needs a job name every host shares: give torchrun "
                         "--rdzv_id NAME (or set BLOCKPS_JOB, or the cluster file's [client] job); the shards serve "
                         "one job at a time (docs/OPTIONS.md, \"Jobs and places\")")
