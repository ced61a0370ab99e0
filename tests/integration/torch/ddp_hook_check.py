#!/usr/bin/python3
"""blockps.torch.averaging_hook (DDP's communication hook) against DDP over gloo; run by test_ddp_hook.cpp. Each
mode prints "every check passed" (per rank) and exits 0, or prints the first failed check and exits 1.

    ddp_hook_check.py compare CLUSTER [--steps N] [--die-in-attempt-0 RANK]  a torchrun rank: for each optimizer,
        the same training with DDP over gloo and with DDP + the hook; parameters and BatchNorm buffers compared
    ddp_hook_check.py bf16 CLUSTER      a torchrun rank, bf16 cluster: the hook's gradients are the f32 average of
        the ranks' bf16-rounded gradients, rounded to bf16, bit for bit
    ddp_hook_check.py compressed CLUSTER  2 torchrun ranks, shards with compress=sign1;compress_after=1: the warm-up
        step's gradients are the exact f32 average, the next step's are the shards' compressed average of the ranks'
        compressed gradients, bit for bit (recomputed here from the gathered local gradients); a format the shards
        do not run is refused
    ddp_hook_check.py shard-down CLUSTER TGTD_PID   1 rank: a dead shard fails the step, naming it and parameters
    ddp_hook_check.py bad-input CLUSTER             a model larger than the cluster's: a ValueError that sizes it

Device: the model and its batches live on the CPU (default) or, as CUDA workers do, on CUDA: `--device cuda`
before the mode, or BLOCKPS_CHECK_DEVICE=cuda (tests/gpu/run.sh, part cuda_workers, runs the tests that call this
script so); DDP over gloo either way. On CUDA, cuDNN runs its deterministic algorithms (the checks compare bit for
bit); compare also trains adamw-groups+scaler (GradScaler: scaled loss, unscale_ before clipping, a scale that
grows every 3 steps), and bf16 checks a second, scaled backward too. Every other check is the same on both.
"""
import argparse
import datetime
import os
import signal
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import blockps
import blockps.torch


DEVICE = torch.device("cpu")  # where the model and batches live: use_device()


def use_device(name):
    global DEVICE
    DEVICE = torch.device(name)
    if DEVICE.type == "cuda":
        check(torch.cuda.is_available(), f"--device {name}: this torch ({torch.__version__}) sees no CUDA GPU")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def check(cond, message):
    if not cond:
        print(f"FAILED (rank {dist.get_rank() if dist.is_initialized() else 0}): {message}", flush=True)
        sys.exit(1)


def model_with_batchnorm():
    """Conv + BatchNorm2d + linear + BatchNorm1d + linear (no bias before a BatchNorm: its gradient is rounding
    noise, which Adam-like optimizers magnify to full steps). 4,437 parameters over several 4 KiB blocks, and the
    BatchNorm running statistics that DDP broadcasts from rank 0 every forward."""
    torch.manual_seed(7)
    return nn.Sequential(nn.Conv2d(1, 6, 3, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(6 * 5 * 5, 24, bias=False), nn.BatchNorm1d(24), nn.ReLU(),
                         nn.Linear(24, 10)).to(DEVICE)


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 1, 12, 12, generator=g).to(DEVICE), torch.randint(0, 10, (16,), generator=g).to(DEVICE)


# The optimizers a DDP script brings; the shards know none of these settings (they only average).
def momentum(model, steps):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4), None, None


def adamw_groups(model, steps):
    """AdamW, no weight decay on biases and norms, clip_grad_norm_ between backward and step, OneCycle (which
    cycles the betas too)."""
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-2)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=steps)
    return opt, schedule, 1.0


def rmsprop(model, steps):
    return torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.5), None, None


def adagrad(model, steps):
    return torch.optim.Adagrad(model.parameters(), lr=0.05), None, None


OPTIMIZERS = {"momentum": momentum, "adamw-groups": adamw_groups, "rmsprop": rmsprop, "adagrad": adagrad}
SCALED = "+scaler"  # an optimizer's name with this suffix trains through a GradScaler (CUDA only)


def train(make_optimizer, steps, state=None, die_at=None, scaled=False):
    """`steps` steps of DDP (small buckets: several per step, in flight at once) over gloo, or with the blockps
    hook when `state` (its cluster) is given; `scaled`: through a GradScaler, as mixed-precision scripts do.
    Returns the parameters and buffers."""
    model = model_with_batchnorm()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
    if state is not None:
        ddp.register_comm_hook(blockps.torch.AveragingState(ddp, state), blockps.torch.averaging_hook)
    opt, schedule, clip = make_optimizer(model, steps)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 10, growth_interval=3) if scaled else None
    rank = dist.get_rank()
    for step in range(steps):
        if die_at is not None and step == die_at:
            print(f"rank {rank} dies before step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch(step, rank)
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(F.cross_entropy(ddp(x), y)).backward()
            scaler.unscale_(opt)  # before clipping, as the AMP recipe does
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
        else:
            F.cross_entropy(ddp(x), y).backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
        if schedule is not None:
            schedule.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def compare(args):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    cluster = blockps.Cluster(args.cluster, worker=f"rank{rank}")
    if args.die_in_attempt_0 is not None and attempt == 0:
        # Both ranks start the hook's training; one is killed with SIGKILL mid-run; torchrun stops the other and
        # starts attempt 1, whose training must be exact again: nothing of attempt 0 is left in the shards' rounds.
        train(OPTIMIZERS["momentum"], args.steps, cluster, die_at=3 if rank == args.die_in_attempt_0 else None)
        check(False, "attempt 0 finished although a rank was killed")
    names = args.optimizers
    if names is None:
        names = ",".join(OPTIMIZERS) + (",adamw-groups" + SCALED if DEVICE.type == "cuda" else "")
    for name in names.split(","):
        base, scaled = (name[:-len(SCALED)], True) if name.endswith(SCALED) else (name, False)
        check(base in OPTIMIZERS and (not scaled or DEVICE.type == "cuda"),
              f"--optimizers: {name} (known: {', '.join(OPTIMIZERS)}; {SCALED} after one: CUDA only)")
        reference = train(OPTIMIZERS[base], args.steps, scaled=scaled)
        got = train(OPTIMIZERS[base], args.steps, cluster, scaled=scaled)
        # Both sums are f32. Over 2 ranks they are the same operation ((a + b) / 2 = a / 2 + b / 2: halving is
        # exact), so the results must be bit for bit. Over 3 ranks DDP adds a/3 + b/3 + c/3 in its ring's order and
        # the shards compute (a + b + c) / 3: the averages differ by an ulp or two (~1e-7 relative). SGD carries
        # that through unchanged; Adam-like optimizers divide by a running RMS, which magnifies it only where a
        # gradient is near zero, and this model has no such parameter (no bias before a BatchNorm). The bound:
        # rtol 1e-5 plus atol 5e-5, 7x the largest difference measured (6.7e-6, Adagrad, 20 steps); a broken
        # average (a missing or stale rank, a wrong scale) moves parameters by 1e-2 and more.
        exact = world == 2
        for key, want in reference.items():
            have = got[key]
            if not want.is_floating_point():
                check(torch.equal(have, want), f"{name}: {key} differs: {have} vs {want}")
                continue
            if exact:
                check(torch.equal(have, want), f"{name}: {key} is not bit for bit DDP-gloo's: worst difference "
                      f"{(have - want).abs().max().item():.3g}")
            else:
                check(torch.allclose(have, want, rtol=1e-5, atol=5e-5),
                      f"{name}: {key} differs from DDP-gloo's beyond the bound: worst "
                      f"{(have - want).abs().max().item():.3g}")
        worst = max((got[k] - v).abs().max().item() for k, v in reference.items() if v.is_floating_point())
        print(f"rank {rank} attempt {attempt}: {name}: {args.steps} steps, {world} ranks, worst difference from "
              f"DDP-gloo {worst:.3g}", flush=True)
    finish(f"rank {rank} attempt {attempt}")


def expect_bf16_average(model, local, world, when):
    """The hook's gradients in `model` are the bf16 average of the ranks' gradients in `local`."""
    for (name, p), q in zip(model.named_parameters(), local.parameters()):
        mine = q.grad.bfloat16().float()
        parts = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(parts, mine)
        want = ((parts[0] + parts[1]) / 2).bfloat16().float()
        check(torch.equal(p.grad, want), f"{name}: {when}the hook's gradient is not the bf16 average: worst "
              f"difference {(p.grad - want).abs().max().item():.3g}")


def bf16(args):
    """One step from the same weights: every rank's local gradient is gathered over gloo; the hook's result must
    be their bf16 roundings summed in f32 (the shards' fixed order: ranks 0, 1, ... log in in that order), divided
    by the ranks, rounded to bf16."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    check(world == 2, "bf16 runs on 2 ranks (their f32 sum is order-free)")
    cluster = blockps.Cluster(args.cluster, worker=f"rank{rank}")
    check(cluster.dtype == "bf16", f"the cluster's dtype is {cluster.dtype}, not bf16")
    local = model_with_batchnorm()
    x, y = batch(0, rank)
    F.cross_entropy(local(x), y).backward()
    model = model_with_batchnorm()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
    ddp.register_comm_hook(blockps.torch.AveragingState(ddp, cluster), blockps.torch.averaging_hook)
    F.cross_entropy(ddp(x), y).backward()
    expect_bf16_average(model, local, world, "")
    if DEVICE.type == "cuda":
        # The next round through a GradScaler's scaled loss: scaling by a power of two commutes with the rounding,
        # so the same formula holds for the scaled gradients.
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 12)
        local.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        scaler.scale(F.cross_entropy(local(x), y)).backward()
        scaler.scale(F.cross_entropy(ddp(x), y)).backward()
        expect_bf16_average(model, local, world, "with GradScaler, ")
    finish(f"rank {rank} attempt 0")


def flat_gradient(layout, model):
    """The model's gradients as the shards' flat model lays them out (blockps.torch.ModelLayout), f32 on the CPU."""
    flat = torch.zeros(layout.parameter_blocks * layout.block_elements, dtype=torch.float32)
    for slot in layout.parameters:
        flat[slot.offset:slot.end] = slot.tensor.grad.detach().reshape(-1).float().cpu()
    return flat


def sign1_round_trip(flat, block_elements):
    """decompress(compress(flat)) block by block, with no residual (the first compressed round's)."""
    packed = torch.zeros(blockps.compressed_block_bytes("sign1", block_elements) * (flat.numel() // block_elements),
                         dtype=torch.uint8)
    blockps.compress_blocks("sign1", flat.numpy(), torch.zeros_like(flat).numpy(), packed.numpy(), block_elements)
    out = torch.zeros_like(flat)
    blockps.decompress_blocks("sign1", packed.numpy(), out.numpy(), block_elements)
    return out


def compressed(args):
    """Two backward passes from the same weights (no optimizer step). The first is the shards' warm-up round: the
    hook's gradients are the f32 average. The second is compressed: each rank compresses its gradient (its residual
    zero: the warm-up left none), the shards average the decoded pushes (ranks 0, 1: their IQN order) and compress the
    average (their residual zero too); every rank's gradients must be that, decoded, bit for bit."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    check(world == 2, "compressed runs on 2 ranks")
    cluster = blockps.Cluster(args.cluster, worker=f"rank{rank}")
    try:
        blockps.torch.AveragingState(nn.Linear(2, 2), cluster, compression="int8")
        check(False, "compression='int8' was accepted by shards that run sign1")
    except ValueError as e:
        check("runs compress=sign1" in str(e), f"the refusal does not name what the shards run: {e}")
    local = model_with_batchnorm()
    model = model_with_batchnorm()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
    state = blockps.torch.AveragingState(ddp, cluster)
    ddp.register_comm_hook(state, blockps.torch.averaging_hook)
    layout = blockps.torch.ModelLayout(local, state.layout.block_elements)
    for step in range(2):
        x, y = batch(step, rank)
        local.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(local(x), y).backward()
        F.cross_entropy(ddp(x), y).backward()
        mine = flat_gradient(layout, local)
        parts = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(parts, mine)
        if step == 0:
            want = (parts[0] + parts[1]) * 0.5
        else:
            decoded = [sign1_round_trip(p, layout.block_elements) for p in parts]
            want = sign1_round_trip((decoded[0] + decoded[1]) * 0.5, layout.block_elements)
        # The parameters' elements (the last block's rest is padding: zeros pushed, +-scale decoded, never used).
        n = layout.parameter_elements
        have, want = flat_gradient(state.layout, model)[:n], want[:n]
        be = layout.block_elements
        what = "the warm-up round's f32 average" if step == 0 else "the shards' compressed average"
        check(torch.equal(have, want), f"step {step}: the hook's gradients are not {what}: worst difference "
              f"{(have - want).abs().max().item():.3g}")
    finish(f"rank {rank} attempt 0")


def single_rank():
    """A process group of one, rendezvous through a file: no fixed port for tests running side by side."""
    store = tempfile.NamedTemporaryFile(prefix="ddp_hook_check.", delete=False).name
    os.unlink(store)  # FileStore creates it
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))


def shard_down(args):
    """Two steps, then shard1's tgtd is killed: the next backward raises an error that names shard1 and the
    parameters of its blocks, well within the test's timeout (no hang)."""
    single_rank()
    model = model_with_batchnorm()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
    ddp.register_comm_hook(blockps.torch.AveragingState(ddp, args.cluster), blockps.torch.averaging_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        if step == 2:
            os.kill(args.tgtd_pid, signal.SIGKILL)
        x, y = batch(step, 0)
        opt.zero_grad()
        try:
            F.cross_entropy(ddp(x), y).backward()
        except RuntimeError as e:
            check(step == 2, f"step {step} failed with every shard up: {e}")
            text = str(e)
            check("shard1" in text and "parameters" in text and "weight" in text,
                  f"the error does not name the shard and the parameters: {text}")
            print(f"shard-down: {text}", flush=True)
            finish("rank 0")
            return
        opt.step()
    check(False, "a step with a dead shard succeeded")


def bad_input(args):
    """A model whose parameters outgrow the cluster's model: refused at AveragingState, with the size to set."""
    single_rank()
    big = nn.Linear(1024, 1024).to(DEVICE)
    try:
        blockps.torch.AveragingState(nn.parallel.DistributedDataParallel(big), args.cluster)
        check(False, "a model larger than the cluster's was accepted")
    except ValueError as e:
        c = blockps.Cluster(args.cluster, worker="sizer")
        need = blockps.torch.averaging_model_bytes(big, c.block_bytes, c.dtype, c.shard_count)
        check("averaging_model_bytes" in str(e) and str(need) in str(e),
              f"the error does not say how large the cluster's model must be ({need} elements): {e}")
        print(f"bad-input: {e}", flush=True)
    finish("rank 0")


def finish(who):
    print(f"{who}: every check passed", flush=True)
    dist.barrier()
    # torch 1.13's gloo process group can deadlock in its destructor when DDP's reducer releases it
    # (client/examples/train.py): every rank is past the barrier, end without destructors.
    sys.stdout.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default=os.environ.get("BLOCKPS_CHECK_DEVICE", "cpu"),
                   help="where the model and batches live: cpu (default) or cuda[:N] (env BLOCKPS_CHECK_DEVICE)")
    sub = p.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("compare")
    c.add_argument("cluster")
    c.add_argument("--steps", type=int, default=20)
    c.add_argument("--optimizers", help="comma-separated (default: every one; on CUDA also adamw-groups" + SCALED + ")")
    c.add_argument("--die-in-attempt-0", type=int)
    sub.add_parser("bf16").add_argument("cluster")
    sub.add_parser("compressed").add_argument("cluster")
    s = sub.add_parser("shard-down")
    s.add_argument("cluster")
    s.add_argument("tgtd_pid", type=int)
    sub.add_parser("bad-input").add_argument("cluster")
    args = p.parse_args()
    use_device(args.device)
    {"compare": compare, "bf16": bf16, "compressed": compressed, "shard-down": shard_down, "bad-input": bad_input}[args.mode](args)


if __name__ == "__main__":
    main()
