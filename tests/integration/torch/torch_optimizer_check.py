#!/usr/bin/python3
"""blockps.torch.DistributedOptimizer against real shards; run by test_torch_optimizer.cpp. Each mode prints
"every check passed" and exits 0, or prints the first failed check and exits 1.

    torch_optimizer_check.py exact CLUSTER [--staging] [--wire bf16]   opt=sum shards: the pushed gradients
    torch_optimizer_check.py match CLUSTER sgd|momentum|adam            one worker = torch.optim, step for step
    torch_optimizer_check.py early-forward CLUSTER                      sgd shards: early_forward trains the same
    torch_optimizer_check.py worker CLUSTER OUT STEPS [--die-after K] [--early-forward]   a rank of a job (torchrun)
    torch_optimizer_check.py compare OUT WORKERS [--same-as OTHER]      the ranks' final parameters and buffers agree
    torch_optimizer_check.py shard-down CLUSTER TGTD_PID [--early-forward forward|wait]   a dead shard: an error
                                                                        naming it and the parameters
    torch_optimizer_check.py checkpoint-export CLUSTER OUT CKPT...      adam shards: train, export, plain torch goes on
    torch_optimizer_check.py checkpoint-import CLUSTER OUT CKPT...      OUT.next.pt -> shard checkpoint files
    torch_optimizer_check.py checkpoint-resume CLUSTER OUT              shards started from them = torch, step for step
    torch_optimizer_check.py bad-input CLUSTER OUT CKPT...              wrong inputs: a clear ValueError, shards intact
    torch_optimizer_check.py cannot CLUSTER [--staging]                 what it cannot do is refused, pointing to the hook

Device: the model and its batches live on the CPU (default) or, as CUDA workers do, on CUDA: `--device cuda`
before the mode, or BLOCKPS_CHECK_DEVICE=cuda (tests/gpu/run.sh, part cuda_workers, runs the tests that call this
script so). On CUDA, cuDNN runs its deterministic algorithms (the checks compare gradients bit for bit), and
`cannot` also refuses GradScaler.step (its unscale_ changes the pushed gradients in place). Every check is the
same on both devices.
"""
import argparse
import copy
import os
import signal
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import blockps
import blockps.shard_settings
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
        print(f"FAILED: {message}", flush=True)
        sys.exit(1)


def small_cnn():
    """Conv + BatchNorm (running statistics: buffers) + linear: 13,618 parameters, 16 float buffers; the convolution has no bias, as
    before any BatchNorm (its gradient would be rounding noise, which Adam magnifies to full steps)."""
    torch.manual_seed(7)
    return nn.Sequential(nn.Conv2d(1, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 13 * 13, 10)).to(DEVICE)


def batch(step, rank=0):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 1, 28, 28, generator=g).to(DEVICE), torch.randint(0, 10, (16,), generator=g).to(DEVICE)


def train_step(model, optimizer, step, rank=0):
    x, y = batch(step, rank)
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()


def exact(args):
    """opt=sum shards apply w += g in f32: after one step the weights must be exactly w0 + g (f32 wire: the
    gradient of a plain backward, bit for bit; bf16 wire: w0 and g rounded to bf16, the sum rounded back)."""
    model = small_cnn()
    reference = copy.deepcopy(model)
    opt = blockps.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), model, args.cluster,
                                             bucket_bytes=1, staging=args.staging, check_optimizer=False)
    bf16 = args.wire == "bf16"
    if bf16:  # the model starts from its weights as the bf16 wire carried them
        with torch.no_grad():
            for r in reference.parameters():
                r.copy_(r.bfloat16().float())
    layout = opt.layout
    check(layout.parameter_blocks >= 3, f"the test needs several blocks, the layout has {layout.parameter_blocks}")
    check(layout.parameters[0].name == "5.bias", f"reverse order: the first slot is {layout.parameters[0].name}")
    train_step(reference, torch.optim.SGD(reference.parameters(), lr=1.0), 0)
    x, y = batch(0)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    sent = len(opt._ops)
    check(sent >= layout.parameter_blocks - 1,
          f"only {sent} of {layout.parameter_blocks} blocks were sent during backward (bucket of one block)")
    opt.step()
    for (name, p), (_, r) in zip(model.named_parameters(), reference.named_parameters()):
        if bf16:
            want = (r.detach().bfloat16().float() + r.grad.bfloat16().float()).bfloat16().float()
        else:
            want = r.detach() + r.grad
            check(torch.equal(p.grad, r.grad), f"{name}: the gradient in the pushed memory differs from backward's")
        check(torch.equal(p.detach(), want), f"{name}: weights after one step are not w0 + g exactly "
                                             f"(max diff {(p.detach() - want).abs().max().item()})")
    print(f"exact ({'staging' if args.staging else 'direct'}, {args.wire}): {sent} blocks sent during backward")


def compressed(args):
    """opt=sum shards in mode=sync (one worker) with compress=sign1;compress_after=1: the warm-up step adds the
    gradient exactly; each later step adds what the shards decode from this worker's compressed push: its gradient
    plus its residual (error feedback), compressed block by block in the flat layout, recomputed here."""
    model = small_cnn()
    opt = blockps.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), model, args.cluster,
                                             bucket_bytes=1, staging=args.staging, check_optimizer=False)
    layout = opt.layout
    n = layout.parameter_blocks * layout.block_elements
    residual = np.zeros(n, np.float32)
    for step in range(3):
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        train_step(model, opt, step)
        flat = np.zeros(n, np.float32)
        for slot in layout.parameters:
            flat[slot.offset:slot.end] = slot.tensor.grad.detach().reshape(-1).cpu().numpy()
        if step == 0:
            sent = flat
        else:
            packed = np.zeros(blockps.compressed_block_bytes("sign1", layout.block_elements) * layout.parameter_blocks,
                              np.uint8)
            blockps.compress_blocks("sign1", flat, residual, packed, layout.block_elements)
            sent = np.zeros(n, np.float32)
            blockps.decompress_blocks("sign1", packed, sent, layout.block_elements)
        opt.step()
        for slot in layout.parameters:
            want = before[slot.name] + torch.from_numpy(sent[slot.offset:slot.end]).view_as(before[slot.name]).to(DEVICE)
            have = slot.tensor.detach()
            check(torch.equal(have, want), f"step {step}: {slot.name} is not w + the {'decoded' if step else 'f32'} "
                  f"push (max diff {(have - want).abs().max().item():.3g})")
    check(np.any(residual), "the compressed steps left no residual")
    print(f"compressed ({'staging' if args.staging else 'direct'}): a warm-up step and 2 sign1 steps exact")


def parameters_and_buffers(model):
    """A copy of every parameter and buffer of the model as its tensors hold them now, by name."""
    return {n: t.detach().clone() for n, t in list(model.named_parameters()) + list(model.named_buffers())}


def check_same(what, got, want):
    for name, value in want.items():
        check(torch.equal(got[name], value), f"{what}: {name} differs from the run without early_forward by "
                                             f"{(got[name].float() - value.float()).abs().max().item()}")


def early_forward(args):
    """sgd shards (no optimizer state: runs from the same start meet the same math). The same 8 steps with
    early_forward=False, then True, on the direct path and on the staging (CUDA's) path: every forward gives the
    same loss and sees the same parameters and buffers, bit for bit (each module took its weights, and on rank 1
    rank 0's buffers, before its forward ran); wait_for_weights() and model.state_dict() hold the step's weights;
    and with early_forward, step() returned while exchanges still ran. Rank 0 alone, then rank 1 beside a plain
    rank 0 (this process plays both: WORLD_SIZE 1, no process group), which takes a step between rank 1's forward
    and backward: rank 1's exchanges have completed by then (every module's forward waited for its part), so the
    shards see the same pushes in the same order in both runs, and rank 1 takes rank 0's buffers of the step
    before. One process for all: a second one would wait for this one's claim on the shards to lapse."""
    steps = 8

    def optimizer(model, rank, **options):
        os.environ["RANK"] = str(rank)
        try:
            return blockps.torch.DistributedOptimizer(OPTIMIZERS["sgd"](model.parameters()), model, args.cluster,
                                                      bucket_bytes=1, **options)
        finally:
            del os.environ["RANK"]

    def train(staging, early, rank):
        rank0 = small_cnn() if rank == 1 else None
        rank0_opt = optimizer(rank0, 0, staging=staging) if rank == 1 else None  # first: it writes the start
        model = small_cnn()
        opt = optimizer(model, rank, staging=staging, early_forward=early)
        seen, returned_early = [], 0
        for step in range(steps):
            x, y = batch(step, rank)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            seen.append((f"step {step}'s forward", loss.detach().clone(), parameters_and_buffers(model)))
            if rank0 is not None:
                train_step(rank0, rank0_opt, step)
                rank0_opt.step()
            loss.backward()
            opt.step()
            pull = opt._pull
            returned_early += pull is not None and any(not op.ready() for _, _, op in pull.ops)
            if step == steps - 2:
                opt.wait_for_weights()
                seen.append((f"wait_for_weights() after step {step}", None, parameters_and_buffers(model)))
        state = {n: t.clone() for n, t in model.state_dict().items()}  # early_forward: its hook ends the pull
        seen.append(("model.state_dict() at the end", None, state))
        seen.append(("the model after model.state_dict()", None, parameters_and_buffers(model)))
        if rank0 is not None:
            for name, b in rank0.named_buffers():
                check(not b.is_floating_point() or torch.equal(state[name], b),
                      f"rank 1's {name} is not rank 0's after the last step")
        return seen, returned_early

    for staging, rank in ((False, 0), (True, 0), (False, 1), (True, 1)):
        case = f"rank {rank}, {'staging' if staging else 'direct'}"
        plain, _ = train(staging, False, rank)
        early, returned_early = train(staging, True, rank)
        for (what, loss, state), (_, want_loss, want_state) in zip(early, plain):
            if loss is not None:
                check(torch.equal(loss, want_loss), f"{case}, {what}: loss {loss.item()!r}, without early_forward "
                                                    f"{want_loss.item()!r}")
            check_same(f"{case}, {what}", state, want_state)
        check(returned_early > 0, f"{case}: early_forward's step() waited for every exchange of all {steps} steps")
        moved = max((early[-1][2][n] - w).abs().max().item() for n, w in early[0][2].items())
        check(moved > 1e-3, f"{case}: the parameters did not train (largest change {moved})")
        print(f"early-forward ({case}): {steps} steps the same bit for bit; step() returned with exchanges "
              f"running in {returned_early} of them")


OPTIMIZERS = {  # what the shards of each case run (test_torch_optimizer.cpp gives them these bsopts)
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=0.01),
    "momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}


def match(args):
    model = small_cnn()
    reference = copy.deepcopy(model)
    ref_opt = OPTIMIZERS[args.optimizer](reference.parameters())
    opt = blockps.torch.DistributedOptimizer(OPTIMIZERS[args.optimizer](model.parameters()), model, args.cluster)
    worst = 0.0
    for step in range(6):
        train_step(reference, ref_opt, step)
        ref_opt.step()
        train_step(model, opt, step)
        opt.step()
        for (name, p), (_, r) in zip(model.named_parameters(), reference.named_parameters()):
            diff = (p.detach() - r.detach()).abs().max().item()
            worst = max(worst, diff)
            # The same math in another expression order (aggregator/optimizer_inl.h): f32 rounding apart.
            check(torch.allclose(p.detach(), r.detach(), rtol=1e-5, atol=1e-6),
                  f"{args.optimizer} step {step}: {name} differs from torch.optim by {diff}")
    # A shard that runs another optimizer than the script's is refused, naming the setting.
    other = torch.optim.SGD(model.parameters(), lr=0.123)
    try:
        blockps.torch.DistributedOptimizer(other, model, args.cluster)
        check(False, "an optimizer the shards do not run was accepted")
    except ValueError as e:
        check("shard shard0 runs" in str(e), f"mismatch message: {e}")
    print(f"match {args.optimizer}: 6 steps, largest difference {worst:.3g}")


def worker(args):
    rank = int(os.environ["RANK"])
    model = small_cnn()
    opt = blockps.torch.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), model, args.cluster,
                                             early_forward=args.early_forward)
    for step in range(args.steps):
        if args.die_after is not None and rank == 1 and step == args.die_after:
            print(f"rank 1 dies before step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        train_step(model, opt, step, rank)
        opt.step()
    final = model.state_dict()  # early_forward: its hook ends the last step's pull
    state = {"parameters": {n: final[n].clone() for n, _ in model.named_parameters()},
             "buffers": {n: final[n].clone() for n, _ in model.named_buffers()}}
    torch.save(state, f"{args.out}.rank{rank}.pt")
    print(f"rank {rank}: {args.steps} steps done", flush=True)


def compare(args):
    states = [torch.load(f"{args.out}.rank{r}.pt") for r in range(args.workers)]
    fresh = dict(small_cnn().named_parameters())
    for kind in ("parameters", "buffers"):
        for name, value in states[0][kind].items():
            for r in range(1, args.workers):
                check(torch.equal(states[r][kind][name], value), f"{kind} {name}: rank {r} differs from rank 0")
    moved = max((states[0]["parameters"][n] - p.detach()).abs().max().item() for n, p in fresh.items())
    check(moved > 1e-3, f"the parameters did not train (largest change {moved})")
    bn_mean = states[0]["buffers"]["1.running_mean"]
    check(bn_mean.abs().max().item() > 0, "BatchNorm's running mean never left zero")
    if args.same_as is not None:
        for r in range(args.workers):
            other = torch.load(f"{args.same_as}.rank{r}.pt")
            for kind in ("parameters", "buffers"):
                for name, value in states[r][kind].items():
                    check(torch.equal(other[kind][name], value), f"{kind} {name}: rank {r} of {args.out} differs "
                                                                 f"from rank {r} of {args.same_as}")
        print(f"compare: the same, bit for bit, as {args.same_as}")
    print(f"compare: {args.workers} ranks hold the same parameters and buffers (largest change {moved:.3g})")


def shard_down(args):
    torch.manual_seed(7)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10)).to(DEVICE)  # no buffers: the first to fail is a push
    opt = blockps.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), model, args.cluster,
                                             check_optimizer=False, early_forward=args.early_forward is not None)
    train_step(model, opt, 0)
    opt.step()
    opt.wait_for_weights()  # early_forward: step 0 ends before the shard dies
    os.kill(args.tgtd_pid, signal.SIGKILL)
    raiser = "step()"
    try:
        train_step(model, opt, 1)
        opt.step()
        if args.early_forward == "forward":  # step() returned before the pulls ended: the next forward finds out
            raiser = "the next forward"
            model(batch(2)[0])
        elif args.early_forward == "wait":
            raiser = "wait_for_weights()"
            opt.wait_for_weights()
        check(False, "a step with a dead shard succeeded")
    except blockps.Error as e:
        check("shard 'shard1'" in str(e) and "parameters" in str(e) and "1.weight" in str(e),
              f"the error does not name the shard and the parameters: {e}")
        check(args.early_forward is None or raiser != "step()",
              f"early_forward={args.early_forward}: step() waited for the dead shard: {e}")
        print(f"shard-down: raised by {raiser}: {e}")
    if args.early_forward is not None:
        model(batch(3)[0])  # the failed pull ended with its error: the model runs on, from the step's start


def same_next_step(ps_model, ps_opt, model, opt, step, what):
    """One more step on the PS and one in plain torch from the same state give the same parameters."""
    train_step(ps_model, ps_opt, step)
    ps_opt.step()
    train_step(model, opt, step)
    opt.step()
    for (name, p), (_, r) in zip(ps_model.named_parameters(), model.named_parameters()):
        check(torch.allclose(p.detach(), r.detach(), rtol=1e-5, atol=1e-6),
              f"{what}: {name} after the next step differs by {(p.detach() - r.detach()).abs().max().item()}")


def checkpoint_export(args):
    model = small_cnn()
    opt = blockps.torch.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), model, args.cluster)
    for step in range(3):
        train_step(model, opt, step)
        opt.step()
    opt.checkpoint()
    fresh = small_cnn()
    blockps.torch.save_torch_checkpoint(f"{args.out}.run.pt", fresh, torch.optim.Adam(fresh.parameters(), lr=0.01),
                                        args.cluster, args.checkpoints)
    # Plain PyTorch: torch.load, load_state_dict into a new model and a new Adam.
    ck = torch.load(f"{args.out}.run.pt")
    local = small_cnn()
    local_opt = torch.optim.Adam(local.parameters(), lr=0.01)
    local.load_state_dict(ck["model"])
    local_opt.load_state_dict(ck["optimizer"])
    for (name, p), (_, r) in zip(model.named_parameters(), local.named_parameters()):
        check(torch.equal(p.detach(), r.detach()), f"exported {name} differs from the PS's weights")
    check(torch.equal(model[1].running_var, local[1].running_var), "exported BatchNorm running_var differs")
    states = list(local_opt.state.values())
    check(len(states) == 5 and all(float(s["step"]) == 3 for s in states),
          f"Adam state: {len(states)} entries, steps {[float(s['step']) for s in states]}")
    same_next_step(model, opt, local, local_opt, 3, "exported")
    # The next state to import: one more local step, which the shards have not seen.
    train_step(local, local_opt, 4)
    local_opt.step()
    torch.save({"model": local.state_dict(), "optimizer": local_opt.state_dict()}, f"{args.out}.next.pt")
    # An LR scheduler's change reaches every shard (lr= control line) at the next step.
    opt.param_groups[0]["lr"] = 0.02
    train_step(model, opt, 5)
    opt.step()
    lrs = [o["lr"] for _, o in blockps.shard_settings.shard_options(opt.cluster)]
    check(all(float(lr) == 0.02 for lr in lrs), f"after the lr change the shards run lr {lrs}")
    print("checkpoint-export: the exported file continues as the PS does")


def torch_state(path):
    ck = torch.load(path)
    model = small_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    return model, opt


def checkpoint_import(args):
    model, opt = torch_state(f"{args.out}.next.pt")
    blockps.torch.write_shard_checkpoints(model, opt, args.cluster, args.checkpoints)
    print(f"checkpoint-import: wrote {len(args.checkpoints)} shard checkpoints")


def checkpoint_resume(args):
    local, local_opt = torch_state(f"{args.out}.next.pt")
    model = small_cnn()
    opt = blockps.torch.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), model, args.cluster,
                                             init="ps")
    for (name, p), (_, r) in zip(model.named_parameters(), local.named_parameters()):
        check(torch.equal(p.detach(), r.detach()), f"{name}: the shards did not start from the torch checkpoint")
    same_next_step(model, opt, local, local_opt, 6, "imported")
    print("checkpoint-resume: shards started from a torch checkpoint continue as torch does")


def expect_value_error(what, expected, call):
    try:
        call()
    except ValueError as e:
        check(expected in str(e), f"{what}: the error does not say '{expected}': {e}")
        print(f"bad-input: {what}: {e}")
        return
    check(False, f"{what}: accepted")


def bad_input(args):
    """adam lr=0.01 shards of 32768 elements. Every wrong input is refused with a ValueError that says what is
    wrong, before anything reaches the shards or the files: the live checkpoint files stay as they were."""
    adam = lambda m: torch.optim.Adam(m.parameters(), lr=0.01)  # noqa: E731
    trained = small_cnn()
    trained_opt = blockps.torch.DistributedOptimizer(adam(trained), trained, args.cluster)
    train_step(trained, trained_opt, 0)
    trained_opt.step()
    trained_opt.checkpoint()  # the shards' files exist from here on
    big = nn.Linear(784, 100).to(DEVICE)  # 78,500 parameters
    # block_bytes_for: a small model gets small blocks (16 a shard or more, from 16K), a large one 256K.
    check(blockps.torch.block_bytes_for(big, 4) == 16 << 10,
          f"block_bytes_for(78,500 parameters, 4 shards) = {blockps.torch.block_bytes_for(big, 4)}, not 16K")
    check(blockps.torch.block_bytes_for(big, 1) == 16 << 10, "block_bytes_for(78,500 parameters, 1 shard): not 16K")
    large = nn.Linear(4096, 1024, bias=False)  # 16 MiB of f32: 256K gives 4 shards 16 blocks each
    check(blockps.torch.block_bytes_for(large, 4) == 256 << 10, "block_bytes_for(16 MiB, 4 shards): not 256K")
    check(blockps.torch.block_bytes_for(large, 8) == 128 << 10, "block_bytes_for(16 MiB, 8 shards): not 128K")
    expect_value_error("block_bytes_for of no shards", "need shards >= 1",
                       lambda: blockps.torch.block_bytes_for(big, 0))
    expect_value_error("a model larger than the cluster's", "the model needs 78500 elements",
                       lambda: blockps.torch.DistributedOptimizer(adam(big), big, args.cluster))
    model = small_cnn()
    expect_value_error("init='resume'", "init='resume': must be 'model' or 'ps'",
                       lambda: blockps.torch.DistributedOptimizer(adam(model), model, args.cluster, init="resume"))
    expect_value_error("backward_passes_per_step=0", "backward_passes_per_step=0: must be >= 1",
                       lambda: blockps.torch.DistributedOptimizer(adam(model), model, args.cluster,
                                                                  backward_passes_per_step=0))
    expect_value_error("another lr than the shards'", "runs lr=0.01",
                       lambda: blockps.torch.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.1),
                                                                  model, args.cluster))
    before = [open(path, "rb").read() for path in args.checkpoints]
    expect_value_error("one checkpoint file for 2 shards", "1 checkpoint files for the cluster's 2 shards",
                       lambda: blockps.torch.save_torch_checkpoint(f"{args.out}.bad.pt", model, adam(model),
                                                                   args.cluster, args.checkpoints[:1]))
    expect_value_error("3 checkpoint files for 2 shards", "3 checkpoint files for the cluster's 2 shards",
                       lambda: blockps.torch.write_shard_checkpoints(model, adam(model), args.cluster,
                                                                     args.checkpoints + [f"{args.out}.third"]))
    targets = [f"{args.out}.new{i}" for i in range(2)]
    # shard_options are recorded as given: the shard that opens the file checks them (the worker's package builds
    # no shard code; tests/unit/ps_backend/checkpoint, AFileWhoseOptionsDoNotParseOrDoNotGiveItsGeometryIsRefused).
    expect_value_error("an optimizer the shards cannot run", "is not run by the shards",
                       lambda: blockps.torch.write_shard_checkpoints(model, torch.optim.RMSprop(model.parameters()),
                                                                     args.cluster, targets))
    expect_value_error("a model larger than the cluster's, into files", "the model needs 78500 elements",
                       lambda: blockps.torch.write_shard_checkpoints(big, adam(big), args.cluster, targets))
    check(not any(os.path.exists(t) for t in targets), "a refused write left a checkpoint file behind")
    check(not os.path.exists(f"{args.out}.bad.pt"), "a refused export left a torch file behind")
    check([open(path, "rb").read() for path in args.checkpoints] == before, "a refused call changed a shard's file")
    # The shards are unharmed: the correct wrapper still trains.
    train_step(trained, trained_opt, 1)
    trained_opt.step()
    print("bad-input: every wrong input refused with its reason; the shards still train")


def expect_refusal(what, error_type, call):
    """`call` must raise `error_type` whose text points to the DDP hook."""
    try:
        call()
    except error_type as e:
        check("averaging_hook" in str(e), f"{what}: the error does not point to blockps.torch.averaging_hook: {e}")
        print(f"cannot: {what}: {e}")
        return
    check(False, f"{what}: accepted")


def cannot(args):
    """adam lr=0.01 shards. What DistributedOptimizer cannot do is refused with advice to use the DDP hook:
    param groups with other hyper-parameters, an optimizer the shards do not run, synchronize() (Horovod's), and
    gradients changed between backward() and step() (clip_grad_norm_ in place, an assigned .grad), detected at
    step() on the direct path and (--staging) the copy path. Plain steps, with 2 backward passes per step too,
    are not refused (no false alarm), before and after a refusal."""
    model = small_cnn()
    head = list(model[5].parameters())
    body = [p for p in model.parameters() if all(p is not h for h in head)]
    groups = torch.optim.Adam([{"params": body}, {"params": head, "lr": 0.001}], lr=0.01)
    expect_refusal("param groups with their own lr", ValueError,
                   lambda: blockps.torch.DistributedOptimizer(groups, model, args.cluster))
    expect_refusal("RMSprop", ValueError, lambda: blockps.torch.DistributedOptimizer(
        torch.optim.RMSprop(model.parameters(), lr=0.01), model, args.cluster))
    opt = blockps.torch.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), model, args.cluster,
                                             staging=args.staging)
    expect_refusal("synchronize()", RuntimeError, opt.synchronize)
    expect_refusal("skip_synchronize()", RuntimeError, opt.skip_synchronize)
    train_step(model, opt, 0)
    opt.step()  # a plain step: no alarm

    def clipped():
        train_step(model, opt, 1)
        nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        opt.step()
    expect_refusal("clip_grad_norm_ between backward and step", RuntimeError, clipped)

    def assigned():
        train_step(model, opt, 2)
        model[5].bias.grad = model[5].bias.grad * 0.5
        opt.step()
    expect_refusal("a .grad assigned between backward and step", RuntimeError, assigned)
    # GradScaler.step(opt) on an optimizer that handles the loss scale itself (as DistributedOptimizer says it does:
    # its unscale_ cannot reach gradients pushed during backward) hands the scaler to step() instead of unscaling:
    # torch 1.13 as a grad_scaler= argument, torch 2 as the grad_scale and found_inf attributes for that call. Both
    # refused on every device; the real GradScaler below on CUDA (torch 1.13's CPU has none).
    check(getattr(type(opt), "_step_supports_amp_scaling", False),
          "DistributedOptimizer does not say it handles GradScaler's scale (GradScaler would unscale the pushed "
          "gradients in place, unseen)")

    def handed_a_scaler():
        train_step(model, opt, 4)
        opt.step(grad_scaler=object())
    expect_refusal("GradScaler.step as torch 1.13 calls it (grad_scaler=)", RuntimeError, handed_a_scaler)

    def scale_attributes():
        train_step(model, opt, 5)
        opt.grad_scale, opt.found_inf = torch.ones(()), torch.zeros(())
        opt.step()
    expect_refusal("GradScaler.step as torch 2 calls it (grad_scale, found_inf)", RuntimeError, scale_attributes)
    check(not hasattr(opt, "grad_scale") and not hasattr(opt, "found_inf"),
          "the refused GradScaler's attributes stayed on the optimizer (every later step would be refused)")
    if DEVICE.type == "cuda":
        scaler = torch.amp.GradScaler("cuda")

        def scaled():
            x, y = batch(4)
            opt.zero_grad()
            scaler.scale(F.cross_entropy(model(x), y)).backward()
            scaler.step(opt)  # unscale_ divides the pushed gradients in place
        expect_refusal("GradScaler.step (its unscale_) between backward and step", RuntimeError, scaled)
    train_step(model, opt, 3)
    opt.step()  # plain again: the wrapper still trains
    twice = small_cnn()
    opt2 = blockps.torch.DistributedOptimizer(torch.optim.Adam(twice.parameters(), lr=0.01), twice, args.cluster,
                                              staging=args.staging, backward_passes_per_step=2, init="ps")
    for step in range(2):
        opt2.zero_grad()
        for k in range(2):
            x, y = batch(10 + 2 * step + k)
            F.cross_entropy(twice(x), y).backward()
        opt2.step()  # accumulation across passes is not a change
    print("cannot: every refusal points to the hook; plain steps (1 and 2 backward passes) pass")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default=os.environ.get("BLOCKPS_CHECK_DEVICE", "cpu"),
                   help="where the model and batches live: cpu (default) or cuda[:N] (env BLOCKPS_CHECK_DEVICE)")
    sub = p.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("exact")
    e.add_argument("cluster")
    e.add_argument("--staging", action="store_true")
    e.add_argument("--wire", default="f32")
    m = sub.add_parser("match")
    m.add_argument("cluster")
    m.add_argument("optimizer", choices=sorted(OPTIMIZERS))
    w = sub.add_parser("worker")
    w.add_argument("cluster")
    w.add_argument("out")
    w.add_argument("steps", type=int)
    w.add_argument("--die-after", type=int)
    w.add_argument("--early-forward", action="store_true")
    f = sub.add_parser("early-forward")
    f.add_argument("cluster")
    c = sub.add_parser("compare")
    c.add_argument("out")
    c.add_argument("workers", type=int)
    c.add_argument("--same-as", help="OUT of another run whose ranks' states must be the same, bit for bit")
    d = sub.add_parser("shard-down")
    d.add_argument("cluster")
    d.add_argument("tgtd_pid", type=int)
    d.add_argument("--early-forward", choices=("forward", "wait"),
                   help="with early_forward: the error raised by the next forward, or by wait_for_weights()")
    for mode in ("checkpoint-export", "checkpoint-import"):
        x = sub.add_parser(mode)
        x.add_argument("cluster")
        x.add_argument("out")
        x.add_argument("checkpoints", nargs="+")
    b = sub.add_parser("bad-input")
    b.add_argument("cluster")
    b.add_argument("out")
    b.add_argument("checkpoints", nargs="+")
    r = sub.add_parser("checkpoint-resume")
    r.add_argument("cluster")
    r.add_argument("out")
    z = sub.add_parser("compressed")
    z.add_argument("cluster")
    z.add_argument("--staging", action="store_true")
    n = sub.add_parser("cannot")
    n.add_argument("cluster")
    n.add_argument("--staging", action="store_true")
    args = p.parse_args()
    use_device(args.device)
    {"exact": exact, "match": match, "early-forward": early_forward, "worker": worker, "compare": compare,
     "shard-down": shard_down, "checkpoint-export": checkpoint_export, "checkpoint-import": checkpoint_import,
     "checkpoint-resume": checkpoint_resume, "bad-input": bad_input, "cannot": cannot, "compressed": compressed}[args.mode](args)
    print("every check passed", flush=True)


if __name__ == "__main__":
    main()
