#!/usr/bin/python3
"""gloo_allreduce: seconds per torch.distributed allreduce (backend gloo) of a float32 tensor of --bytes bytes
among --world-size processes on this host (spawned with torch.multiprocessing, rendezvous through a file in a
private temporary directory). A warm-up allreduce, a barrier, then --iterations timed allreduces; rank 0 prints
one JSON line:

  {"backend": "gloo", "world_size": 2, "bytes": 67108864, "iterations": 10, "seconds_per_allreduce": 0.123,
   "torch": "1.13.1", "threads": 1}

Run with Debian's python3-torch: /usr/bin/python3 bench/gloo_allreduce.py --bytes 64M (bench/client_pushpull runs it).

Across hosts (bench/cluster runs it so, one process per worker host, GLOO_SOCKET_IFNAME set to the host's link):
--rank R --master ADDR:PORT runs this process as rank R of --world-size, rendezvous over TCP at ADDR:PORT (rank 0
listens there). Each timed allreduce is timed on its own and rank 0 prints the same JSON line with three more keys:
"seconds": [one per iteration], "median_s" and "cpu_s" (the CPU-seconds, user + system, this process used from the
process group's start to its end, torch's import left out); every other rank prints {"rank": R, "cpu_s": S}.
"""
import argparse
import json
import os
import resource
import sys
import statistics
import tempfile
import time


def parse_bytes(text):
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if text[-1:] in "KMG" else text) * mult


def process_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(rank, args, init_method, results):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=args.world_size)
    t = torch.full((args.bytes // 4,), float(rank + 1), dtype=torch.float32)
    dist.all_reduce(t)  # warm-up (connections, buffers)
    expected = sum(range(1, args.world_size + 1))
    if t[0].item() != expected:
        raise RuntimeError(f"allreduce gave {t[0].item()}, expected {expected}")
    dist.barrier()
    laps = []
    start = time.perf_counter()
    for _ in range(args.iterations):
        lap_start = time.perf_counter()
        dist.all_reduce(t)
        laps.append(time.perf_counter() - lap_start)
    elapsed = time.perf_counter() - start
    dist.barrier()
    results.put((rank, elapsed, laps))
    dist.destroy_process_group()


def one_rank_of_many(args):
    """This process is rank --rank of a job spread over hosts: returns its exit status."""
    import torch

    class Collected:
        def put(self, item):
            self.item = item

    import torch.distributed  # noqa: F401  (imported before the CPU count starts: not the all-reduce's cost)

    collected = Collected()
    cpu_start = process_cpu_seconds()
    worker(args.rank, args, "tcp://" + args.master, collected)
    cpu_s = process_cpu_seconds() - cpu_start  # bench/cluster's CPU per byte: the process group and every all-reduce
    if args.rank != 0:
        print(json.dumps({"rank": args.rank, "cpu_s": cpu_s}))
        return 0
    _, elapsed, laps = collected.item
    print(json.dumps({"backend": "gloo", "world_size": args.world_size, "bytes": args.bytes,
                      "iterations": args.iterations, "seconds_per_allreduce": elapsed / args.iterations,
                      "seconds": laps, "median_s": statistics.median(laps), "cpu_s": cpu_s,
                      "torch": torch.__version__, "threads": args.threads}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=parse_bytes, default=64 << 20, help="tensor bytes (K/M/G), multiple of 4")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    ap.add_argument("--rank", type=int, help="run only this rank (0..world-size-1), rendezvous at --master")
    ap.add_argument("--master", metavar="ADDR:PORT", help="rank 0's address and a free port (with --rank)")
    args = ap.parse_args()
    if args.bytes <= 0 or args.bytes % 4 != 0:
        ap.error("--bytes must be a positive multiple of 4")
    if args.world_size < 1 or args.iterations < 1:
        ap.error("--world-size and --iterations must be at least 1")
    if (args.rank is None) != (args.master is None):
        ap.error("--rank and --master go together")
    if args.rank is not None:
        if not 0 <= args.rank < args.world_size:
            ap.error(f"--rank {args.rank} is not in 0..{args.world_size - 1}")
        return one_rank_of_many(args)

    import torch
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="gloo-allreduce-") as tmp:
        init_method = "file://" + os.path.join(tmp, "rendezvous")
        mp.spawn(worker, args=(args, init_method, results), nprocs=args.world_size, join=True)
    times = {}
    while not results.empty():
        rank, elapsed, _ = results.get()
        times[rank] = elapsed
    if len(times) != args.world_size:
        print(f"gloo_allreduce: only {len(times)} of {args.world_size} ranks reported", file=sys.stderr)
        return 1
    per = max(times.values()) / args.iterations  # the slowest rank's view
    print(json.dumps({"backend": "gloo", "world_size": args.world_size, "bytes": args.bytes,
                      "iterations": args.iterations, "seconds_per_allreduce": per,
                      "torch": torch.__version__, "threads": args.threads}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
