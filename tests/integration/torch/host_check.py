#!/usr/bin/python3
"""Host-level aggregation (client/python/blockps/torch/host.py) through real shards; run by test_torch_hosts.cpp.
Each rank prints "rank R: every check passed" and exits 0, or prints the first failed check and exits 1.

    host_check.py spawn --hosts H --ranks-per-host L [--env K=V]... -- MODE ARGS...
        starts H x L ranks of MODE as processes of this machine (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
        MASTER_ADDR/PORT as torchrun gives them; BLOCKPS_HOST=hostI names host I), prefixes their output with the
        rank, and exits 0 when every rank did (a rank that ends by a signal counts as failed unless it was told to
        die with --die)
    host_check.py hook AVERAGING_CLUSTER [--steps N] [--die RANK --die-at STEP] [--die-in-attempt-0 RANK]    a rank
        DDP with the hook (host aggregation on) against DDP over gloo: parameters and BatchNorm buffers; each shard
        saw one worker per host (its leader); with --die, RANK kills itself before step STEP: its host's other
        ranks fail naming it, the other hosts' ranks end without a hang (DDP's own buffer broadcast needs every rank);
        --die-in-attempt-0 under torchrun: RANK dies in attempt 0, attempt 1 must compare as without --die
    host_check.py optimizer AGGREGATING_CLUSTER [FLAT_CLUSTER] [--steps N] [--die RANK --die-at STEP [--stop]]    a rank
        DistributedOptimizer with host aggregation (shards of workers=H) against without (shards of workers=N):
        parameters and buffers, an LR change on the way, one worker per host on each shard; with --die (and no
        FLAT_CLUSTER), RANK kills itself: its host's other ranks fail naming it, the other hosts train on; with
        --stop it stops itself instead (SIGSTOP): its host's ranks fail after BLOCKPS_HOST_TIMEOUT_S, saying so
    host_check.py too-many-workers FLAT_CLUSTER    a rank: shards of workers=N refused while the host aggregates
    host_check.py wrong-settings CLUSTER    a rank: ranks that disagree on aggregation, bad BLOCKPS_HOST_* values
        refused on every rank
    host_check.py bf16 AVERAGING_BF16_CLUSTER    a rank: the hook's averages on the bf16 wire, bit for bit as rounded
"""
import argparse
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import blockps
import blockps.torch
import ddp_hook_check  # beside this script

RANK = int(os.environ.get("RANK", "0"))
# The model and batches are ddp_hook_check.py's, where they live too: the CPU, or CUDA as CUDA workers have them
# (BLOCKPS_CHECK_DEVICE=cuda; on a GPU host tests/gpu/run.sh's part cuda_workers sets it). The host's ranks combine
# the staged host copies either way.
ddp_hook_check.use_device(os.environ.get("BLOCKPS_CHECK_DEVICE", "cpu"))
model_with_batchnorm, batch = ddp_hook_check.model_with_batchnorm, ddp_hook_check.batch
# Under torchrun, which attempt this is (its restarts); the lines "rank R attempt A: ..." say it.
ATTEMPT = os.environ.get("TORCHELASTIC_RESTART_COUNT")
WHO = f"rank {RANK}" + (f" attempt {ATTEMPT}" if ATTEMPT is not None else "")


def check(cond, message):
    if not cond:
        print(f"FAILED (rank {RANK}): {message}", flush=True)
        os._exit(1)


def finish():
    print(f"{WHO}: every check passed", flush=True)
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's gloo groups can deadlock in their destructors (ddp_hook_check.py's finish)


# The bound. Both sums are f32 and every scale is a power of two (1/4, 1/2: exact), so hook and DDP-gloo differ
# only in the order of the 4 additions: DDP's ring adds g0/4 + g1/4 + g2/4 + g3/4 in its own order per chunk, the
# hosts add (g0 + g1) and (g2 + g3) and the shards add the two in their fixed order. An ulp or two of the average
# (~1e-7 relative), which SGD carries through and Adam magnifies only near zero gradients (this model has none):
# the flat hook's bound over 3 ranks (ddp_hook_check.py: rtol 1e-5 + atol 5e-5, 7x the largest difference
# measured). A broken aggregation (a rank left out, counted twice, a wrong scale) moves parameters by 1e-2 and more.
RTOL, ATOL = 1e-5, 5e-5


def compare_states(got, want, what):
    worst = 0.0
    for key, w in want.items():
        h = got[key]
        if not w.is_floating_point():
            check(torch.equal(h, w), f"{what}: {key} differs: {h} vs {w}")
            continue
        worst = max(worst, (h - w).abs().max().item())
        check(torch.allclose(h, w, rtol=RTOL, atol=ATOL),
              f"{what}: {key} differs beyond the bound: worst {(h - w).abs().max().item():.3g}")
    return worst


def live_workers(cluster):
    """Per shard, the initiator names of its live workers (from its status page)."""
    return {shard: sorted(w["iqn"] for w in json.loads(page)["rounds"]["live_workers"])
            for shard, page in cluster.status_pages()}


def expect_one_worker_per_host(cluster, host, world):
    """Every shard's live workers are the hosts' leaders, one per host (rank 0 reads the pages while every rank is
    still there: a rank that ended would have closed its sessions)."""
    dist.barrier()
    if RANK == 0:
        hosts = world // host.size
        seen = live_workers(cluster)
        for shard, iqns in seen.items():
            check(len(iqns) == hosts, f"shard {shard} saw {len(iqns)} workers ({iqns}), not one per host ({hosts})")
        print(f"rank 0: every shard's live workers: {seen}", flush=True)
    dist.barrier()


def hook(args):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    world = dist.get_world_size()

    def train(use_hook, die_at=None):
        model = model_with_batchnorm()
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
        state = None
        if use_hook:
            state = blockps.torch.AveragingState(ddp, args.cluster)
            ddp.register_comm_hook(state, blockps.torch.averaging_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
        for step in range(args.steps):
            if die_at is not None and step == die_at and RANK == args.die:
                print(f"rank {RANK} dies before step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = batch(step, RANK)
            opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}, state

    if args.die_in_attempt_0 is not None and ATTEMPT == "0":
        # torchrun's first attempt: a rank is killed mid-run, every rank ends, torchrun starts attempt 1.
        args.die = args.die_in_attempt_0
        train(True, die_at=args.die_at)
        check(False, "attempt 0 finished although a rank was killed")
    if args.die is None or args.die_in_attempt_0 is not None:
        want, _ = train(False)
        got, state = train(True)
        worst = compare_states(got, want, "the hook with host aggregation vs DDP-gloo")
        check(state.host is not None and state.host.size == int(os.environ["LOCAL_WORLD_SIZE"]),
              f"no host aggregation: {state.host}")
        expect_one_worker_per_host(state.cluster, state.host, world)
        print(f"rank {RANK}: {args.steps} steps, {world} ranks, worst difference from DDP-gloo {worst:.3g}",
              flush=True)
        finish()

    # A local rank dies: its host's others fail, naming it. The other hosts' ranks end too, without a hang: DDP
    # itself broadcasts rank 0's buffers over the whole process group every forward, which a dead rank breaks.
    expect_failure_naming_the_dead(args, lambda: train(True, die_at=args.die_at), others_go_on=False)


def expect_failure_naming_the_dead(args, run, others_go_on):
    """run() with args.die killing itself: its host's ranks must raise naming it (rank and host); with
    others_go_on, every other host's rank must finish its steps."""
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    host_of_dead, mine = args.die // local_world, RANK // local_world
    began = time.monotonic()
    try:
        run()
    except RuntimeError as e:
        took = time.monotonic() - began
        text = str(e)
        check(mine == host_of_dead or not others_go_on, f"a rank of another host than the dead one's failed: {text}")
        if mine == host_of_dead and getattr(args, "stop", False):  # stopped, not gone: the host's ranks and the limit
            check(f"host{host_of_dead}" in text and "BLOCKPS_HOST_TIMEOUT_S" in text and str(args.die) in text,
                  f"the error does not name host{host_of_dead}, its ranks and BLOCKPS_HOST_TIMEOUT_S: {text}")
        elif mine == host_of_dead:
            check(f"rank {args.die}" in text and f"host{host_of_dead}" in text,
                  f"the error does not name rank {args.die} and its host host{host_of_dead}: {text}")
        print(f"rank {RANK}: failed after {took:.1f} s: {text}", flush=True)
        finish()
    check(mine != host_of_dead, f"rank {RANK} trained on although rank {args.die} of its host died")
    print(f"rank {RANK}: trained {args.steps} steps without host{host_of_dead}", flush=True)
    finish()


def optimizer(args):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    world = dist.get_world_size()

    def train(cluster, aggregate, die_at=None):
        model = model_with_batchnorm()
        opt = blockps.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                                 model, cluster, host_aggregation=aggregate,
                                                 early_forward=aggregate and args.early_forward)
        check((opt.host is not None) == aggregate, f"host_aggregation={aggregate} but the host is {opt.host}")
        check(opt._early_forward == (aggregate and args.early_forward), "early_forward did not reach the optimizer")
        for step in range(args.steps):
            if die_at is not None and step == die_at and RANK == args.die:
                print(f"rank {RANK} {'stops' if args.stop else 'dies'} before step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP if args.stop else signal.SIGKILL)
            if step == args.steps // 2:
                for g in opt.param_groups:
                    g["lr"] = 0.02  # sent to the shards at the next step()
            x, y = batch(step, RANK)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}, opt

    if args.die is not None:  # the ranks meet only at start: the other hosts train on as with a dead worker
        expect_failure_naming_the_dead(args, lambda: train(args.cluster, True, die_at=args.die_at), others_go_on=True)
    want, flat = train(args.flat_cluster, False)
    got, aggregated = train(args.cluster, True)
    # Parameters against what the shards should compute, worked out here (every rank's gradient averaged, the
    # lr change in its step); buffers (rank 0's of the last step, DistributedOptimizer's rule) between the paths.
    reference = local_reference(args.steps, world)
    for key, want_here in reference.items():
        if "running" in key or not want_here.is_floating_point():
            continue
        for path, have in (("without host aggregation", want), ("with host aggregation", got)):
            check(torch.allclose(have[key], want_here, rtol=RTOL, atol=ATOL),
                  f"DistributedOptimizer {path}: {key} is not the average of every rank's gradient stepped here: "
                  f"worst {(have[key] - want_here).abs().max().item():.3g}")
    # Buffers: every rank holds rank 0's of the last step (DistributedOptimizer's rule), with or without hosts.
    worst = compare_states(got, want, "DistributedOptimizer with host aggregation vs without")
    expect_one_worker_per_host(aggregated.cluster, aggregated.host, world)
    print(f"rank {RANK}: {args.steps} steps, {world} ranks, worst difference from the flat path {worst:.3g}",
          flush=True)
    finish()


def local_reference(steps, world):
    """What the shards should compute, in this process: every rank's gradient at the same weights, averaged,
    SGD with momentum (PyTorch's), the lr change at step steps // 2. (Its BatchNorm statistics are not any rank's.)"""
    model = model_with_batchnorm()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        if step == steps // 2:
            for g in opt.param_groups:
                g["lr"] = 0.02
        grads = None
        for rank in range(world):
            model.zero_grad()
            x, y = batch(step, rank)
            F.cross_entropy(model(x), y).backward()
            mine = [p.grad.clone() for p in model.parameters()]
            grads = mine if grads is None else [a + b for a, b in zip(grads, mine)]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / world
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def bf16(args):
    """One backward through the hook on a bf16 cluster, from the same weights: the averaged gradient must be, bit
    for bit, what the path computes: each rank's gradient rounded to bf16 (the wire), summed in f32 on its host
    (local rank order), times H/N (exact: a power of two here), rounded to bf16 for the push; the shards sum the
    hosts' pushes in f32 (leader order) and divide by the hosts, rounded to bf16."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    world = dist.get_world_size()
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    hosts = world // local_world
    local = model_with_batchnorm()
    x, y = batch(0, RANK)
    F.cross_entropy(local(x), y).backward()
    model = model_with_batchnorm()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
    state = blockps.torch.AveragingState(ddp, args.cluster)
    check(state.cluster is None or state.cluster.dtype == "bf16", "the cluster's dtype is not bf16")
    ddp.register_comm_hook(state, blockps.torch.averaging_hook)
    F.cross_entropy(ddp(x), y).backward()
    for (name, p), q in zip(model.named_parameters(), local.parameters()):
        mine = q.grad.bfloat16().float()
        parts = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(parts, mine)
        pushes = []
        for h in range(hosts):
            host_sum = parts[h * local_world]
            for r in range(h * local_world + 1, (h + 1) * local_world):
                host_sum = host_sum + parts[r]
            pushes.append((host_sum * (hosts / world)).bfloat16().float())
        total = pushes[0]
        for push in pushes[1:]:
            total = total + push
        want = (total / hosts).bfloat16().float()
        check(torch.equal(p.grad, want), f"{name}: the hook's gradient is not the bf16 average of the hosts' "
              f"bf16 pushes: worst difference {(p.grad - want).abs().max().item():.3g}")
    print(f"rank {RANK}: bf16 averages as the path rounds, bit for bit", flush=True)
    finish()


def too_many_workers(args):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    model = model_with_batchnorm()
    try:
        blockps.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model,
                                           args.cluster)
    except ValueError as e:
        text = str(e)
        check("workers=" in text and "BLOCKPS_HOST_AGGREGATION=0" in text, f"the refusal does not say what to set: {text}")
        print(f"rank {RANK}: refused: {text}", flush=True)
        finish()
    check(False, "shards whose rounds wait for every rank were accepted while the ranks push once per host")


def wrong_settings(args):
    """Each wrong setting refused on every rank with what to change, before any push: ranks that disagree on host
    aggregation, BLOCKPS_HOST_AGGREGATION not 0/1, BLOCKPS_HOST_TIMEOUT_S not a number of seconds."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    cases = [("ranks that disagree", {}, RANK != 1, "host aggregation is off on ranks [1] and on on the others"),
             ("BLOCKPS_HOST_AGGREGATION=2", {"BLOCKPS_HOST_AGGREGATION": "2"}, True, "must be 0"),
             ("BLOCKPS_HOST_TIMEOUT_S=soon", {"BLOCKPS_HOST_TIMEOUT_S": "soon"}, True, "1..86400")]
    for what, env, aggregate, expected in cases:
        os.environ.update(env)
        model = model_with_batchnorm()
        try:
            blockps.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model,
                                               args.cluster, host_aggregation=aggregate)
            check(False, f"{what}: accepted")
        except ValueError as e:
            check(expected in str(e), f"{what}: the refusal does not say '{expected}': {e}")
            print(f"rank {RANK}: {what}: refused: {e}", flush=True)
        for key in env:
            del os.environ[key]
    finish()


def spawn(args, command):
    """H x L ranks of `command` (this script's mode and arguments) as local processes."""
    world = args.hosts * args.ranks_per_host
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % args.ranks_per_host),
                   LOCAL_WORLD_SIZE=str(args.ranks_per_host), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   BLOCKPS_HOST=f"host{rank // args.ranks_per_host}", OMP_NUM_THREADS="1")
        for kv in args.env:
            key, value = kv.split("=", 1)
            env[key] = value
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + command, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))

    def relay(rank, proc):
        for line in proc.stdout:
            print(f"[{rank}] {line}", end="", flush=True)
    relays = [threading.Thread(target=relay, args=(r, p)) for r, p in enumerate(procs)]
    for t in relays:
        t.start()
    failed = False
    told = int(command[command.index("--die") + 1]) if "--die" in command else None
    # A rank told to stop never ends by itself: it is killed once every other rank ended.
    for rank, proc in sorted(enumerate(procs), key=lambda rp: rp[0] == told and "--stop" in command):
        if rank == told and "--stop" in command:
            proc.kill()
        code = proc.wait()
        if code != 0 and not (rank == told and code == -signal.SIGKILL):
            print(f"spawn: rank {rank} exited with {code}", flush=True)
            failed = True
    for t in relays:
        t.join()
    sys.exit(1 if failed else 0)


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == "spawn":
        split = argv.index("--")
        p = argparse.ArgumentParser(prog="host_check.py spawn")
        p.add_argument("--hosts", type=int, required=True)
        p.add_argument("--ranks-per-host", type=int, required=True)
        p.add_argument("--env", action="append", default=[])
        spawn(p.parse_args(argv[1:split]), argv[split + 1:])
        return
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    h = sub.add_parser("hook")
    h.add_argument("cluster")
    h.add_argument("--steps", type=int, default=12)
    h.add_argument("--die", type=int)
    h.add_argument("--die-at", type=int, default=3)
    h.add_argument("--die-in-attempt-0", type=int)
    o = sub.add_parser("optimizer")
    o.add_argument("cluster")
    o.add_argument("flat_cluster", nargs="?")
    o.add_argument("--steps", type=int, default=12)
    o.add_argument("--die", type=int)
    o.add_argument("--die-at", type=int, default=3)
    o.add_argument("--stop", action="store_true", help="--die RANK stops (SIGSTOP) instead of dying")
    o.add_argument("--early-forward", action="store_true", help="the host-aggregated run with early_forward=True")
    sub.add_parser("too-many-workers").add_argument("cluster")
    sub.add_parser("bf16").add_argument("cluster")
    sub.add_parser("wrong-settings").add_argument("cluster")
    args = p.parse_args(argv)
    {"hook": hook, "optimizer": optimizer, "too-many-workers": too_many_workers, "bf16": bf16,
     "wrong-settings": wrong_settings}[args.mode](args)


if __name__ == "__main__":
    main()
