#!/usr/bin/python3
"""host_exchange: seconds per exchange of the whole model through a host's ranks (client/python/blockps/torch/host.py):
the L ranks of each host reduce their gradients onto the host's leader, the leader pushes and pulls every block
through the shards (the library's pipelined exchange), and broadcasts what it pulled; every rank waits for its
copy. bench/cluster runs it as one rank per process, L per network-namespace host, for --ranks-per-host L.

    RANK=R WORLD_SIZE=N MASTER_ADDR=A MASTER_PORT=P BLOCKPS_HOST=wI GLOO_SOCKET_IFNAME=eth0 \\
        /usr/bin/python3 bench/host_exchange.py --cluster wI.toml [--iterations 7] [--warmup 2] [--chunk-blocks 16]

The model is the cluster file's (f32). The exchange goes out in chunks of --chunk-blocks blocks (default 4: 1 MiB
of 256 KiB blocks, DistributedOptimizer's default bucket) so that the reduction of one chunk overlaps the shards'
exchange of the one before and the broadcast of the one before that. Each iteration starts at a barrier of all
ranks and is timed on its own. Each host's leader reads its link's counters (--link, default eth0: the bytes it
sent and received) at the barriers around the timed iterations: what the host's link carried per step, without
the start (logins, status pages). Rank 0 prints one JSON line (as `blockps bench --json` and gloo_allreduce.py do):

  {"ranks": 8, "hosts": 4, "ranks_per_host": 2, "bytes": 67108864, "iterations": 7, "seconds": [...],
   "median_s": 0.61, "link_bytes_per_step": {"w0": [sent, received], ...}}
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import blockps
from blockps.torch.host import Host, leader_opens
from blockps.torch.worker import exchanger


def link_counters(link):
    """(bytes sent, bytes received) of the network interface `link` so far."""
    counts = []
    for name in ("tx_bytes", "rx_bytes"):
        with open(f"/sys/class/net/{link}/statistics/{name}") as f:
            counts.append(int(f.read()))
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", required=True, help="the host's cluster file (its leader opens it)")
    ap.add_argument("--iterations", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--chunk-blocks", type=int, default=4)
    ap.add_argument("--link", default="eth0", help="the host's network interface whose counters are read")
    args = ap.parse_args()
    if args.iterations < 1 or args.warmup < 0 or args.chunk_blocks < 1:
        ap.error("--iterations >= 1, --warmup >= 0, --chunk-blocks >= 1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    host = Host()
    cluster, shape = leader_opens(host, lambda: blockps.Cluster(args.cluster, worker=f"rank{dist.get_rank()}"))
    if shape.dtype != "f32":
        sys.exit(f"host_exchange: the cluster's dtype is {shape.dtype}; this bench moves f32")
    block_elements = shape.block_bytes // 4
    blocks = shape.elements // block_elements
    exchange = exchanger(cluster, host, shape.elements, block_elements, torch.float32)  # as the torch paths
    grads = torch.full((shape.elements,), 1e-3 * (dist.get_rank() + 1), dtype=torch.float32)
    pulled = torch.zeros(shape.elements, dtype=torch.float32)
    laps = []
    for iteration in range(args.warmup + args.iterations):
        dist.barrier()
        if iteration == args.warmup:
            counted_from = link_counters(args.link)
        start = time.perf_counter()
        ops = []
        for first in range(0, blocks, args.chunk_blocks):
            count = min(args.chunk_blocks, blocks - first)
            lo, hi = first * block_elements, (first + count) * block_elements
            ops.append(exchange.exchange_async(first, count, grads[lo:hi], pulled[lo:hi]))
        for op in ops:
            op.wait()
        if iteration >= args.warmup:
            laps.append(time.perf_counter() - start)
    dist.barrier()
    per_step = [(after - before) / args.iterations for before, after in zip(counted_from, link_counters(args.link))]
    links = [None] * dist.get_world_size()
    dist.all_gather_object(links, (host.key, per_step) if host.is_leader else None)
    if dist.get_rank() == 0:
        print(json.dumps({"ranks": dist.get_world_size(), "hosts": host.hosts, "ranks_per_host": host.size,
                          "bytes": shape.elements * 4, "iterations": args.iterations, "seconds": laps,
                          "median_s": statistics.median(laps),
                          "link_bytes_per_step": {key: counts for key, counts in filter(None, links)}}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's gloo groups can deadlock in their destructors


if __name__ == "__main__":
    main()
