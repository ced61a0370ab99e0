#!/usr/bin/python3
"""A plain DistributedDataParallel training script, as Lightning, Accelerate or a hand-written loop would have it,
that trains through blockps by adding one line: the communication hook (marked "blockps" below). Without
BLOCKPS_CLUSTER in the environment it is plain DDP over gloo.

    torchrun --nproc_per_node 2 --redirects 1 --tee 1 ddp_finetune.py                      plain DDP over gloo
    BLOCKPS_CLUSTER=cluster.toml torchrun --nproc_per_node 2 --redirects 1 --tee 1 ddp_finetune.py
    common: [--steps N] [--batch B]

What it does that DistributedOptimizer (the shards run the optimizer) cannot: AdamW with two param groups (no
weight decay on biases and norms), gradient clipping between backward() and step(), a OneCycle schedule (which
cycles the betas too), and on a GPU, mixed precision with GradScaler (unscale_ before clipping). The optimizer
stays in the script; the shards only average the gradients (opt=average;mode=sync;workers=W: docs/OPTIONS.md,
"DDP through blockps"). Data: Fashion-MNIST (client/examples/fashion_mnist.py), worker r of W takes samples
r, r+W, ... of each epoch. Rank 0 prints the loss and, at the end, the test accuracy and a digest of the
parameters (two ranks: the same digest with and without blockps, bit for bit).
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps (>= 1)")
    p.add_argument("--batch", type=int, default=64, help="samples per worker per step (>= 1)")
    a = p.parse_args()
    if a.steps < 1 or a.batch < 1:
        p.error("--steps and --batch must be >= 1")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    train_x, train_y = fashion_mnist.load_split(True)
    test_x, test_y = fashion_mnist.load_split(False)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256, bias=False), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    model = nn.parallel.DistributedDataParallel(model)
    if os.environ.get("BLOCKPS_CLUSTER"):  # blockps: what a plain DDP script adds, the hook line and its import
        import blockps.torch
        model.register_comm_hook(blockps.torch.AveragingState(model, os.environ["BLOCKPS_CLUSTER"]),
                                 blockps.torch.averaging_hook)

    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=a.steps)
    scaler = torch.cuda.amp.GradScaler(enabled=cuda)
    step, epoch = 0, 0
    while step < a.steps:
        for idx in fashion_mnist.epoch_batches(epoch, rank, world, len(train_y), a.batch):
            x, y = train_x[idx].to(device), train_y[idx].to(device)
            optimizer.zero_grad()
            with torch.autocast(device_type="cuda", enabled=cuda):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            schedule.step()
            step += 1
            if rank == 0 and (step % 50 == 0 or step == a.steps):
                print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
            if step == a.steps:
                break
        epoch += 1

    model.eval()
    with torch.no_grad():
        correct = (model.module(test_x.to(device)).argmax(1).cpu() == test_y).sum().item()
    digest = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())).hexdigest()
    if rank == 0:
        print(f"test accuracy {correct / len(test_y) * 100:.2f}%, parameters sha256 {digest[:16]}", flush=True)
    dist.barrier()
    # torch 1.13's gloo process group can deadlock in its destructor when DDP's reducer releases it (train.py).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
