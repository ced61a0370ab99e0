#!/usr/bin/python3
"""DDP + torch's powerSGD_hook over gloo, a few steps, to show where it runs and where it stops (issue 50).

    torchrun --redirects 1 --tee 1 --nproc_per_node 2 bench/ddp_powersgd_gloo.py --model resnet18 --start 2
    ... --buckets one      the same model in one DDP bucket (what train.py --ddp-hook powersgd does)

Random inputs, SGD, rank 0 prints each step's time. Each rank logs every all-reduce it starts (its size and
whether the main thread or a gloo worker thread started it) to DIR/calls.RANK.txt, and dumps every thread's Python
stack to DIR/stack.RANK.txt when --dump-s seconds pass (a hang), so the ranks' orders and waits can be compared.
Run it under `timeout`: a hang does not end by itself.
"""
import argparse
import datetime
import faulthandler
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client", "examples"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["mlp", "resnet18"], default="mlp",
                   help="mlp: 784-1024x4-10 in 1 MiB buckets (4 buckets); resnet18: DDP's default buckets (3)")
    p.add_argument("--buckets", choices=["default", "one"], default="default")
    p.add_argument("--rank", type=int, default=2, help="PowerSGD's matrix_approximation_rank")
    p.add_argument("--start", type=int, default=10, help="start_powerSGD_iter (>= 2)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--dump-s", type=int, default=20)
    p.add_argument("--dir", default="/tmp")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    me = dist.get_rank()
    faulthandler.dump_traceback_later(a.dump_s, file=open(f"{a.dir}/stack.{me}.txt", "w"))
    calls, started = open(f"{a.dir}/calls.{me}.txt", "w", buffering=1), dist.all_reduce

    def logged_all_reduce(tensor, *args, **kw):  # the hook calls dist.all_reduce: log who starts what
        who = "main" if threading.current_thread() is threading.main_thread() else f"thread {threading.get_native_id()}"
        calls.write(f"numel={tensor.numel()} {who}\n")
        return started(tensor, *args, **kw)
    dist.all_reduce = logged_all_reduce
    torch.manual_seed(0)
    if a.model == "resnet18":
        import fashion_mnist
        model, x = fashion_mnist.MODELS["resnet18"].build(), torch.randn(8, 1, 28, 28)
        bucket_mb = 25
    else:
        layers = [torch.nn.Linear(784, 1024), torch.nn.ReLU()]
        for _ in range(3):
            layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
        model, x = torch.nn.Sequential(*layers, torch.nn.Linear(1024, 10)), torch.randn(64, 784)
        bucket_mb = 1
    if a.buckets == "one":
        bucket_mb = sum(t.numel() * t.element_size() for t in model.parameters()) / 2**20 + 1
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(bucket_mb * 2**20)  # the cap of the first bucket after the rebuild
    net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    net.register_comm_hook(powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=a.rank,
                                                       start_powerSGD_iter=a.start), powerSGD_hook.powerSGD_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    y = torch.randint(0, 10, (len(x),))
    for step in range(a.steps):
        t0 = time.monotonic()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        if me == 0:
            print(f"step {step} loss {loss.item():.4f} {1000 * (time.monotonic() - t0):.0f} ms", flush=True)
    faulthandler.cancel_dump_traceback_later()
    dist.barrier()
    if me == 0:
        buckets = net._get_ddp_logging_data().get("rebuilt_bucket_sizes")
        print(f"done: {a.steps} steps, PowerSGD from step {a.start}, bucket bytes {buckets}", flush=True)
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's gloo group can deadlock in its destructor (train.py says more)


if __name__ == "__main__":
    main()
