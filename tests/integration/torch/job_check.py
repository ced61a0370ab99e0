#!/usr/bin/python3
"""A shard serves one job at a time, in the place it holds (issue 36); run by test_torch_jobs.cpp. Each mode
prints "<who>: every check passed" and exits 0, or prints the first failed check and exits 1. Two jobs that run
at the same time meet through marker files in DIR: the holder pauses at a step until the other job is done.

    job_check.py hook-holder CLUSTER DIR --job A [--expect-taken-over B]   a torchrun rank of job A: DDP over gloo,
        then DDP + the averaging hook, pausing at step 5 for the other job; the two must be bit for bit equal (or,
        with --expect-taken-over, the step after the pause fails naming job B)
    job_check.py hook-intruder CLUSTER DIR --job B [--takeover]   a torchrun rank of job B, once A paused: refused
        at AveragingState with A named (or, with --takeover, claims the shards and runs a step)
    job_check.py opt-holder CLUSTER DIR --job A    job A with DistributedOptimizer: the weights the shards hold
        are the same before and after the other job's attempt, and training goes on
    job_check.py opt-intruder CLUSTER DIR --job B  job B's DistributedOptimizer (init="model"): refused, A named
    job_check.py order CLUSTER --kind averaging|optimizer   the cluster file with its shards in the other order:
        refused by the torch path of that kind, naming both places
    job_check.py kind CLUSTER --kind averaging|optimizer    the other torch path on these shards: refused at
        construction, before any push
"""
import argparse
import datetime
import json
import os
import re
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import blockps
import blockps.torch

STEPS = 12
PAUSE_AT = 5


def check(cond, message):
    if not cond:
        print(f"FAILED (rank {dist.get_rank() if dist.is_initialized() else 0}): {message}", flush=True)
        sys.exit(1)


def model():
    torch.manual_seed(11)
    return nn.Sequential(nn.Linear(32, 48), nn.LayerNorm(48), nn.ReLU(), nn.Linear(48, 10))


def batch(step, rank):
    g = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(8, 32, generator=g), torch.randint(0, 10, (8,), generator=g)


def wait_for(path, seconds=150):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        check(time.monotonic() < deadline, f"{path} did not appear within {seconds} s")
        time.sleep(0.1)


def touch(path):
    with open(path, "w"):
        pass


def pause(args):
    """Rank 0 says it paused and waits for the other job; every rank waits with it."""
    if dist.get_rank() == 0:
        touch(os.path.join(args.dir, "holder-paused"))
        wait_for(os.path.join(args.dir, "intruder-done"))
    dist.barrier()


def ddp_train(state_of=None, args=None):
    """STEPS steps of DDP with AdamW over gloo, or with the hook when `state_of` makes its state; pauses at
    PAUSE_AT when `args` is given. Returns the parameters, or the exception of the first failed step."""
    net = model()
    ddp = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.004)
    if state_of is not None:
        ddp.register_comm_hook(state_of(ddp), blockps.torch.averaging_hook)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    for step in range(STEPS):
        if args is not None and step == PAUSE_AT:
            pause(args)
        x, y = batch(step, dist.get_rank())
        opt.zero_grad()
        try:
            F.cross_entropy(ddp(x), y).backward()
        except Exception as e:  # the hook's future failed: DDP raises it from backward
            return e
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def init_group():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=200))
    return dist.get_rank()


def hook_holder(args):
    rank = init_group()
    reference = ddp_train()
    got = ddp_train(lambda ddp: blockps.torch.AveragingState(ddp, args.cluster, job=args.job), args)
    if args.expect_taken_over:
        check(isinstance(got, Exception), "job A's step after job B took the shards over succeeded")
        text = str(got)
        check(args.expect_taken_over in text and "job" in text,
              f"job A's failure does not name job {args.expect_taken_over}, which holds the shards now: {text}")
        print(f"job {args.job} rank {rank}: refused after the takeover: {text}", flush=True)
    else:
        check(not isinstance(got, Exception), f"job A failed: {got}")
        for key, want in reference.items():
            check(torch.equal(got[key], want), f"{key} is not bit for bit DDP-gloo's: worst difference "
                  f"{(got[key] - want).abs().max().item():.3g}")
        print(f"job {args.job} rank {rank}: {STEPS} steps bit for bit equal to DDP over gloo", flush=True)
    finish(f"job {args.job} rank {rank}")


def refused(attempt, holder):
    """The error of `attempt()`, which must be refused with the holding job named."""
    try:
        attempt()
    except Exception as e:  # blockps.Error from the library
        text = str(e)
        check(f"'{holder}'" in text or f"job {holder}" in text, f"the refusal does not name job {holder}: {text}")
        return text
    check(False, f"a second job was let in while job {holder} holds the shards")


def hook_intruder(args):
    rank = init_group()
    wait_for(os.path.join(args.dir, "holder-paused"))
    if args.takeover:
        got = ddp_train(lambda ddp: blockps.torch.AveragingState(ddp, args.cluster, job=args.job, takeover=True))
        check(not isinstance(got, Exception), f"job {args.job} failed after taking the shards over: {got}")
        print(f"job {args.job} rank {rank}: took the shards over and trained", flush=True)
    else:
        net = nn.parallel.DistributedDataParallel(model())
        text = refused(lambda: blockps.torch.AveragingState(net, args.cluster, job=args.job), args.holder)
        print(f"job {args.job} rank {rank}: refused as it must be: {text}", flush=True)
    dist.barrier()
    if rank == 0:
        touch(os.path.join(args.dir, "intruder-done"))
    finish(f"job {args.job} rank {rank}")


def optimizer_of(net, cluster, **kw):
    return blockps.torch.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=1e-3), net, cluster, **kw)


def opt_holder(args):
    rank = init_group()
    net = model()
    opt = optimizer_of(net, args.cluster, job=args.job)
    for step in range(STEPS):
        if step == PAUSE_AT:
            before = torch.zeros(opt.cluster.elements)
            opt.cluster.read_weights(before.numpy())
            pause(args)
            after = torch.zeros(opt.cluster.elements)
            opt.cluster.read_weights(after.numpy())
            check(torch.equal(before, after), "the other job changed the weights the shards hold: worst difference "
                  f"{(before - after).abs().max().item():.3g}")
        x, y = batch(step, rank)
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    print(f"job {args.job} rank {rank}: the shards' weights untouched by the other job; {STEPS} steps", flush=True)
    finish(f"job {args.job} rank {rank}")


def opt_intruder(args):
    rank = init_group()
    wait_for(os.path.join(args.dir, "holder-paused"))
    text = refused(lambda: optimizer_of(model(), args.cluster, job=args.job, init="model"), args.holder)
    print(f"job {args.job} rank {rank}: refused as it must be: {text}", flush=True)
    dist.barrier()
    if rank == 0:
        touch(os.path.join(args.dir, "intruder-done"))
    finish(f"job {args.job} rank {rank}")


def reversed_cluster_file(path):
    """The cluster file with its [[shard]] tables in the other order (everything else as it is)."""
    text = open(path).read()
    head, *shards = re.split(r"(?m)^(?=\[\[shard\]\])", text)
    check(len(shards) >= 2, f"{path} lists fewer than 2 shards")
    out = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    out.write(head + "".join(s if s.endswith("\n") else s + "\n" for s in reversed(shards)))
    out.close()
    return out.name


def torch_path(kind):
    """Builds the torch path of `kind` on a cluster: what a script's one blockps line does."""
    if kind == "averaging":
        return lambda cluster, **kw: blockps.torch.AveragingState(model(), cluster, **kw)
    return lambda cluster, **kw: optimizer_of(model(), cluster, **kw)


def order(args):
    build = torch_path(args.kind)
    build(args.cluster, job="order-check")  # the shards learn their place (if they did not hold one yet)
    flipped = reversed_cluster_file(args.cluster)
    try:
        build(flipped, job="order-check")
    except Exception as e:
        text = str(e)
        check("place" in text and "shard 0 of 2" in text and "shard 1 of 2" in text,
              f"the refusal of a cluster file in another order does not name both places: {text}")
        print(f"order ({args.kind}): refused as it must be: {text}", flush=True)
        print("order: every check passed", flush=True)
        return
    finally:
        os.unlink(flipped)
    check(False, f"a cluster file listing the {args.kind} shards in another order was accepted")


def kind(args):
    wrong = "optimizer" if args.kind == "averaging" else "averaging"
    try:
        torch_path(wrong)(args.cluster, job="kind-check")
    except ValueError as e:
        text = str(e)
        check(("opt=average" in text) and ("shard" in text), f"the refusal does not name the shard's opt: {text}")
        check(isinstance(e, blockps.MismatchError), f"the refusal is a {type(e).__name__}, not blockps.MismatchError")
        pages = [json.loads(page) for _, page in blockps.Cluster(args.cluster, job="").status_pages()]
        pushes = [p["counters"]["pushes"] for p in pages]
        check(pushes == [0] * len(pushes), f"a refused {wrong} path pushed before the refusal: pushes {pushes}")
        holders = [p["job"]["holder"] for p in pages]
        check("kind-check" not in holders, f"a refused {wrong} path claimed shards before the refusal: {holders}")
        print(f"kind: the {wrong} path on {args.kind} shards refused: {text}", flush=True)
        print("kind: every check passed", flush=True)
        return
    check(False, f"the {wrong} torch path was accepted on {args.kind} shards")


def finish(who):
    print(f"{who}: every check passed", flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's gloo group can deadlock in its destructor (ddp_hook_check.py says why)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    for name in ("hook-holder", "hook-intruder", "opt-holder", "opt-intruder"):
        s = sub.add_parser(name)
        s.add_argument("cluster")
        s.add_argument("dir")
        s.add_argument("--job", required=True)
        s.add_argument("--holder", default="A", help="the job that holds the shards (intruders)")
        s.add_argument("--takeover", action="store_true")
        s.add_argument("--expect-taken-over")
    for name in ("order", "kind"):
        s = sub.add_parser(name)
        s.add_argument("cluster")
        s.add_argument("--kind", choices=("averaging", "optimizer"), required=True)
    args = p.parse_args()
    {"hook-holder": hook_holder, "hook-intruder": hook_intruder, "opt-holder": opt_holder,
     "opt-intruder": opt_intruder, "order": order, "kind": kind}[args.mode](args)


if __name__ == "__main__":
    main()
