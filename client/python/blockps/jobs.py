"""The job name a torchrun (or another launcher) gives a worker, for the library's choice of job (docs/OPTIONS.md,
"Jobs and places"; the order is decided in one place, libblockps's client/tenancy.h: the caller's job=, else the
cluster file's [client] job, else BLOCKPS_JOB, else this default).

A shard serves one job at a time: the first job whose workers claim it holds it, and every other job's commands
are refused until the holder is gone (or released, or taken over). So every rank of one job must name the same
job, every restart of that job must name it again, and two jobs must never share a name. The default, in order:

1. torchrun's run id (`--rdzv_id`, TORCHELASTIC_RUN_ID), unless it is torchrun's default "none";
2. one torchrun on one host: that torchrun's agent (the ranks' parent process), which outlives its restarts and
   which no other torchrun shares;
3. a torchrun with a static rendezvous (`--master_addr`/`--master_port`, no `--rdzv_backend`), or a process group
   without torchrun (MASTER_ADDR/MASTER_PORT, as mp.spawn scripts set): its rendezvous address, the same on every
   host and every restart;
4. a single process: this process.
A multi-host torchrun with a c10d rendezvous and no run id has no name every host agrees on and that survives its
restarts (c10d picks a new MASTER_PORT per attempt): no default, and the reason the library refuses with.
torchrun spells its flags with underscores in torch 1.13 (Debian's); later ones accept them too.
"""
import os
import socket

_TORCHRUN_DEFAULT_RUN_ID = "none"

NO_SHARED_NAME = ("a torchrun over several hosts needs a job name every host shares: give torchrun --rdzv_id NAME "
                  "(torch 1.13 spells it so; later ones also --rdzv-id)")


def launcher_job_name():
    """(name, None) of the default above, or (None, why) where there is none: pass them to blockps.Cluster and
    Cluster.claim as default_job= and no_default_job_because=."""
    env = os.environ
    host = socket.gethostname()
    if "TORCHELASTIC_RUN_ID" in env:
        run_id = env["TORCHELASTIC_RUN_ID"]
        if run_id and run_id != _TORCHRUN_DEFAULT_RUN_ID:
            return f"torchrun:{run_id}", None
        if int(env.get("GROUP_WORLD_SIZE", "1")) == 1:
            return f"torchrun:{host}:{os.getppid()}", None
        # A static rendezvous: its MASTER_ADDR and MASTER_PORT are the flags', on every host and every restart.
        if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
            return f"dist:{env['MASTER_ADDR']}:{env['MASTER_PORT']}", None
        return None, NO_SHARED_NAME
    if int(env.get("WORLD_SIZE", "1")) > 1 and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"dist:{env['MASTER_ADDR']}:{env['MASTER_PORT']}", None
    return f"process:{host}:{os.getpid()}", None
