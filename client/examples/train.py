#!/usr/bin/python3
"""Fashion-MNIST with PyTorch: a plain training script that torchrun launches, through a blockps PS or not.

    python3 train.py                                  1 worker, torch.optim in the process (the reference)
    torchrun --nproc_per_node 2 train.py --ddp        2 workers, DistributedDataParallel over gloo
    torchrun --nproc_per_node 2 train.py --ps C.toml  2 workers through the shards of cluster file C.toml
    torchrun --nproc_per_node 2 train.py --ddp-blockps C.toml   DDP, its gradients averaged by the shards of C.toml
    torchrun --nproc_per_node 2 train.py --ddp --ddp-hook fp16   DDP with one of its own communication hooks
    BLOCKPS_JOB=J python3 train.py --ps C.toml --elastic 4   one host of an elastic job of 4 hosts (each its own launcher)
    common: [--model mlp|resnet18] [--epochs N] [--batch B] [--evals-per-epoch K] [--out RUN.json] [--name NAME]

(Debian bookworm's torchrun needs `--redirects 1 --tee 1`: its default crashes on Python 3.11; docs/OPTIONS.md.)
The training loop is the same for all: the PS run differs by one line, the blockps.torch.
DistributedOptimizer wrapped around the optimizer (the shards then run that optimizer), as DDP's differs by
its wrapper; DDP through blockps adds one line to DDP's, the blockps communication hook (the shards run
opt=average and the optimizer stays in the script). Worker r of W trains on samples r, r+W, ... of every epoch's permutation with --batch per worker
(a local reference for W workers: --batch W x B --threads W, the same global batch and threads).
K times per epoch every rank stops the clock and evaluates its share of the test set (ranks meet in one gloo
all-reduce of the counts); rank 0 prints loss, test accuracy, images/s (all workers) and training time, and
writes the records as JSON (--out) for fashion_mnist.py report (table and plot of accuracy against time).
Run with /usr/bin/python3 (Debian's python3-torch; resnet18 needs python3-torchvision) and
PYTHONPATH=<build>/python for --ps.
"""
import argparse
import datetime
import json
import os
import signal
import socket
import sys
import time
import warnings
import zlib

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402  (the data, the models and their recipes: one definition for every run)


class DdpHook:
    """--ddp-hook: which of DDP's own communication hooks, and PowerSGD's matrix rank and first compressed step."""

    def __init__(self, name, rank=None, start=None):
        self.name, self.rank, self.start = name, rank, start

    def run_name(self):
        return "ddp" if self.name == "none" else f"ddp-{self.name}{self.rank or ''}"


def ddp_hook_spec(text):
    """--ddp-hook's parser: none, fp16, bf16 or powersgd:RANK[:START]; refuses what torch 1.13 cannot run."""
    allowed = "none, fp16, bf16 or powersgd:RANK[:START]"
    name, _, rest = text.partition(":")
    if name == "bf16" and not rest and (torch.version.cuda is None or not torch.distributed.is_nccl_available()):
        # DDP's register_comm_hook refuses bf16_compress_hook itself unless torch has CUDA 11+ and NCCL 2.10+.
        raise argparse.ArgumentTypeError(f"'bf16': DDP runs bf16_compress_hook only on a torch with CUDA 11+ and "
                                         f"NCCL 2.10+; this torch {torch.__version__} has "
                                         f"{'no CUDA' if torch.version.cuda is None else 'no NCCL'}: use fp16")
    if name in ("none", "fp16", "bf16") and not rest:
        return DdpHook(name)
    if name == "batched-powersgd":
        # Measured (bench/RESULTS.md, issue 50): torch 1.13's batched_powerSGD_hook keeps P and Q as 2-D matrices
        # and hands them to _orthogonalize, which asserts 3-D: every run fails at its first compressed step.
        raise argparse.ArgumentTypeError(f"'{text}': torch {torch.__version__}'s batched_powerSGD_hook fails its "
                                         f"first compressed step (AssertionError in _orthogonalize); use {allowed}")
    if name != "powersgd" or not rest:
        raise argparse.ArgumentTypeError(f"'{text}': must be {allowed}")
    fields = rest.split(":")
    if len(fields) > 2 or not all(f.isdigit() for f in fields):
        raise argparse.ArgumentTypeError(f"'{text}': RANK and START must be whole numbers (powersgd:RANK[:START])")
    rank, start = int(fields[0]), int(fields[1]) if len(fields) == 2 else None
    if rank < 1:
        raise argparse.ArgumentTypeError(f"'{text}': RANK {rank}: must be >= 1")
    if start is not None and start < 2:
        # PowerSGDState's own rule: error feedback and warm start need DDP's first two steps uncompressed.
        raise argparse.ArgumentTypeError(f"'{text}': START {start}: must be >= 2 (PowerSGD's error feedback and "
                                         "warm start need DDP's first two steps uncompressed)")
    return DdpHook(name, rank, start)


def ddp_with_hook(model, hook, total_steps, rank):
    """The model in DistributedDataParallel with --ddp-hook's communication hook (or none)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if hook.name != "powersgd":
        net = torch.nn.parallel.DistributedDataParallel(model)
        if hook.name != "none":
            try:
                net.register_comm_hook(None, {"fp16": default_hooks.fp16_compress_hook,
                                              "bf16": default_hooks.bf16_compress_hook}[hook.name])
            except TypeError as e:  # DDP's own refusal (bf16: a CUDA or NCCL older than it needs)
                sys.exit(f"train.py rank {rank}: --ddp-hook {hook.name}: {e}")
        return net
    # powerSGD_hook starts its second and third all-reduce (the Ps, the Qs) inside the previous one's then()
    # callback, which gloo runs on its own worker thread (or in place, when that all-reduce has finished), while
    # DDP's autograd thread starts the next bucket's all-reduce: with two buckets or more the ranks start their
    # collectives in different orders and gloo pairs unlike messages (torch 1.13: "op.preamble.length <=
    # op.nbytes" abort at the first compressed step; bench/RESULTS.md, issue 50). One bucket keeps one order:
    # DDP waits for the bucket's future before anything else reaches the process group. Its price: no overlap of
    # the all-reduce with the backward pass.
    one_bucket = sum(p.numel() * p.element_size() for p in model.parameters()) + (1 << 20)
    dist._DEFAULT_FIRST_BUCKET_BYTES = one_bucket  # the first bucket's own cap, that DDP's bucket rebuild applies
    net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=one_bucket / 2**20)
    start = hook.start if hook.start is not None else max(2, total_steps // 10)  # its docs: 10% of the steps
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=hook.rank,
                                        start_powerSGD_iter=start)
    net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    if rank == 0:
        print(f"powerSGD_hook: matrix rank {hook.rank}, compressed from step {start} (all-reduce before), the model "
              f"in one bucket of {one_bucket / 2**20:.1f} MiB", flush=True)
    return net


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how = p.add_mutually_exclusive_group()
    how.add_argument("--ps", metavar="CLUSTER", help="train through the blockps shards of this cluster file")
    how.add_argument("--ddp", action="store_true", help="DistributedDataParallel over gloo")
    how.add_argument("--ddp-blockps", metavar="CLUSTER",
                     help="DistributedDataParallel, gradients averaged by the opt=average shards of this cluster file")
    p.add_argument("--ddp-hook", type=ddp_hook_spec, default=DdpHook("none"), metavar="HOOK",
                   help="with --ddp: DDP's own communication hook: none (default), fp16, bf16 or powersgd:RANK[:START] "
                        "(powerSGD_hook of matrix rank RANK, PowerSGD from step START, default 10%% of the steps, "
                        "at least 2; the model in one DDP bucket, docs/OPTIONS.md says why)")
    p.add_argument("--model", choices=sorted(fashion_mnist.MODELS), default="mlp")
    p.add_argument("--epochs", type=float, default=4, help="epochs (a fraction allowed), > 0")
    p.add_argument("--batch", type=int, default=128, help="samples per worker per step")
    p.add_argument("--evals-per-epoch", type=int, default=1, help="test-set evaluations per epoch")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's; torchrun sets 1 per rank)")
    p.add_argument("--name", help="the run's name in the report (default: local, ddp or ps)")
    p.add_argument("--out", help="rank 0 writes the run's records here (JSON)")
    p.add_argument("--early-forward", action="store_true",
                   help="with --ps: DistributedOptimizer(early_forward=True): step() returns once the pushes are out, "
                        "each module's forward waits for its own weights")
    p.add_argument("--timeline", metavar="PREFIX",
                   help="every rank writes PREFIX.loop.json: each step's forward, backward and optimizer step, and "
                        "each evaluation, as Chrome trace events on the monotonic clock (that of BLOCKPS_TRACE); "
                        "{rank}, {restart} and {pid} in PREFIX become the rank, torchrun's restart count and the process id "
                        "(a restart after another host's failure keeps the count: only {pid} tells lives apart)")
    p.add_argument("--resume", metavar="FILE",
                   help="rank 0 saves where training stands at every evaluation (step; without --ps also the model, "
                        "the optimizer and the scheduler: with --ps the shards hold them) into FILE, atomically; "
                        "every rank that starts while FILE exists (a torchrun restart) goes on from there. FILE must "
                        "be on storage every rank reads")
    p.add_argument("--stop-file", metavar="PATH",
                   help="end the run at the first evaluation at which PATH exists on any rank (all ranks agree)")
    p.add_argument("--elastic", type=int, metavar="HOSTS",
                   help="with --ps: this process (or torchrun) is one host of an elastic job of nominally HOSTS hosts "
                        "(an epoch is HOSTS hosts' batches), each started on its own: DistributedOptimizer(elastic=True), "
                        "the job named by BLOCKPS_JOB or the cluster file. The job's step is the shards' round count "
                        "(a host that joins goes on from there, with the schedule's learning rate), the host draws its "
                        "own batches, evaluates alone (--out: its records), ends when the job's rounds reach --epochs, "
                        "and on SIGTERM (a preemption notice) finishes its step, leaves the shards and exits 0")
    p.add_argument("--check-args", action="store_true",
                   help="check the options (refusing as a run would) and exit 0 without training (bench/cluster's check)")
    a = p.parse_args()
    if not a.epochs > 0:
        p.error(f"--epochs {a.epochs}: must be > 0")
    if a.batch < 1 or a.evals_per_epoch < 1 or (a.threads is not None and a.threads < 1):
        p.error("--batch, --evals-per-epoch and --threads must be >= 1")
    if a.ddp_hook.name != "none" and not a.ddp:
        p.error(f"--ddp-hook {a.ddp_hook.name}: needs --ddp (--ddp-blockps has the blockps hook, --ps no DDP)")
    if a.early_forward and not a.ps:
        p.error("--early-forward is DistributedOptimizer's: it needs --ps CLUSTER")
    if a.elastic is not None:
        if not a.ps:
            p.error("--elastic: needs --ps CLUSTER (the shards are where an elastic job's hosts meet)")
        if a.elastic < 1:
            p.error(f"--elastic {a.elastic}: HOSTS must be >= 1")
        if a.resume:
            p.error("--elastic with --resume: an elastic job's position is the shards' round count, not a file")
    if a.check_args:
        sys.exit(0)
    return a


class LoopTimeline:
    """The training loop's phases as Chrome trace-event spans ("ts"/"dur": microseconds of CLOCK_MONOTONIC, the
    clock of the library's BLOCKPS_TRACE and of bench/cluster_timeline.py's link samples), one line per span
    written as it ends, so that a run that dies still leaves a readable file (the array may stay open)."""

    def __init__(self, prefix, rank, restart):
        if prefix:
            prefix = prefix.replace("{rank}", str(rank)).replace("{restart}", str(restart)).replace("{pid}", str(os.getpid()))
        try:
            self.file = open(f"{prefix}.loop.json", "w", buffering=1) if prefix else None
        except OSError as e:
            sys.exit(f"train.py rank {rank}: --timeline {prefix}: cannot write {prefix}.loop.json: {e.strerror}")
        self.rank = rank
        self.separator = "[\n"

    def now(self):
        return time.monotonic_ns() // 1000

    def span(self, name, begin_us, step):
        if self.file:
            event = {"name": name, "cat": "loop", "ph": "X", "pid": self.rank, "tid": 0, "ts": begin_us,
                     "dur": self.now() - begin_us, "args": {"step": step}}
            self.file.write(self.separator + json.dumps(event))
            self.separator = ",\n"

    def close(self):
        if self.file:
            self.file.write("]\n" if self.separator != "[\n" else "[]\n")
            self.file.close()


class PreemptionNotice:
    """--elastic: SIGTERM (a spot host's notice, torchrun passing on its own) asks this host to go after the step it is
    in; the host's ranks agree on it after every step (one tiny all-reduce in their own group), so all leave at the
    same step."""

    def __init__(self, distributed):
        self.distributed = distributed
        self.noticed = False
        signal.signal(signal.SIGTERM, self._notice)

    def _notice(self, signum, frame):
        self.noticed = True

    def due(self):
        flag = torch.tensor([1.0 if self.noticed else 0.0])
        if self.distributed:
            import torch.distributed as dist
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return flag.item() > 0


def elastic_host_name():
    """The host an elastic job's process runs on, for its own stream of batches: BLOCKPS_HOST (bench/cluster and the
    chaos run name their emulated hosts so), else the hostname and the launcher (torchrun's agent, or this process)."""
    launcher = os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else os.getpid()
    return os.environ.get("BLOCKPS_HOST") or f"{socket.gethostname()}:{launcher}"


class ResumePoint:
    """Where a run stands, saved by rank 0 at every evaluation (--resume) so that ranks torchrun restarts go on from
    the last evaluation instead of the first step. With --ps the shards hold the weights and the optimizer's state
    (DistributedOptimizer takes them from the shards after a restart), so only the loop's position is saved; the
    learning rate follows from the epoch."""

    def __init__(self, path, rank):
        self.path, self.rank = path, rank

    def load(self):
        if not self.path or not os.path.exists(self.path):
            return None
        try:
            return torch.load(self.path)
        except Exception as e:  # a file we did not write, or torch's own error: say which file
            sys.exit(f"train.py rank {self.rank}: --resume {self.path}: cannot read it: {e}")

    def save(self, state):
        if not self.path or self.rank != 0:
            return
        temporary = f"{self.path}.tmp"
        torch.save(state, temporary)
        os.replace(temporary, self.path)  # a rank that starts meanwhile reads the old point or the new one


def main():
    a = parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    ddp = a.ddp or a.ddp_blockps is not None
    if world > 1 and not (a.ps or ddp):
        sys.exit(f"train.py: WORLD_SIZE={world} without --ps, --ddp or --ddp-blockps: the workers would train apart")
    if a.threads:
        torch.set_num_threads(a.threads)
    name = a.name or ("ps" if a.ps else "ddp-blockps" if a.ddp_blockps else a.ddp_hook.run_name() if a.ddp else "local")
    recipe = fashion_mnist.MODELS[a.model]
    train_x, train_y = fashion_mnist.load_split(True, recipe.image_shape)
    test_x, test_y = fashion_mnist.load_split(False, recipe.image_shape)
    test_x, test_y = test_x[rank::world], test_y[rank::world]
    elastic = a.elastic is not None
    # An elastic host counts an epoch as HOSTS hosts' batches, and draws its own from a stream no other host uses.
    hosts, stream = (a.elastic, zlib.crc32(elastic_host_name().encode())) if elastic else (1, None)
    model = recipe.build()
    distributed = world > 1
    if distributed:
        import torch.distributed as dist
        # The evaluations meet here; a rank that died makes the others fail after this, not hang.
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
    batch = a.batch
    steps_per_epoch = len(fashion_mnist.epoch_batches(0, rank, world * hosts, len(train_y), batch))
    total_steps = max(1, round(a.epochs * steps_per_epoch))
    net = ddp_with_hook(model, a.ddp_hook, total_steps, rank) if ddp else model
    if a.ddp_blockps:
        import blockps
        import blockps.torch
        try:
            net.register_comm_hook(blockps.torch.AveragingState(net, a.ddp_blockps), blockps.torch.averaging_hook)
        except (blockps.Error, ValueError) as e:
            sys.exit(f"train.py rank {rank}: {e}")
    optimizer = recipe.optimizer(model.parameters())
    if a.ps:
        import blockps
        import blockps.torch
        try:
            optimizer = blockps.torch.DistributedOptimizer(optimizer, model, cluster=a.ps,  # the one line
                                                           early_forward=a.early_forward, elastic=elastic)
        except (blockps.Error, ValueError) as e:
            sys.exit(f"train.py rank {rank}: {e}")
    # After the wrapper: the scheduler's lr changes reach the shards through it.
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=recipe.lr_decay)
    eval_every = max(1, steps_per_epoch // a.evals_per_epoch)

    def evaluate(images):
        """Test accuracy (every rank's share) and images trained by all workers so far."""
        model.eval()
        with torch.no_grad():
            correct = sum((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
                          for i in range(0, len(test_y), 1000))
        model.train()
        stop = a.stop_file is not None and os.path.exists(a.stop_file)
        counts = torch.tensor([correct, len(test_y), images, stop], dtype=torch.float64)
        if distributed:
            dist.all_reduce(counts)
        return (counts[0] / counts[1]).item(), counts[2].item(), counts[3].item() > 0

    if rank == 0:
        print(f"{name}: {a.model} ({sum(p.numel() for p in model.parameters())} parameters), {world} worker(s), "
              f"batch {batch} each, {total_steps} steps ({a.epochs:g} epochs), {torch.get_num_threads()} threads "
              f"per worker", flush=True)
    records, train_s, images, loss_sum, loss_n, step = [], 0.0, 0, 0.0, 0, 0
    timeline = LoopTimeline(a.timeline, rank, restart)
    resume_point = ResumePoint(a.resume, rank)
    resumed = resume_point.load()

    def schedule_from(step):
        """The learning rate of the epoch `step` is in (with --ps it reaches the shards through the wrapper)."""
        for group, base_lr in zip(optimizer.param_groups, scheduler.base_lrs):
            group["lr"] = base_lr
        with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": replaying, on purpose
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(step // steps_per_epoch):
                scheduler.step()
    if resumed:
        step, train_s, images, records = resumed["step"], resumed["train_s"], resumed["images"], resumed["records"]
        if not a.ps:
            model.load_state_dict(resumed["model"])
            optimizer.load_state_dict(resumed["optimizer"])
        schedule_from(step)
        if rank == 0:
            print(f"{name}: resumed at step {step} ({a.resume})", flush=True)
    preemption = None
    if elastic:
        preemption = PreemptionNotice(distributed)
        step = optimizer.shard_rounds()  # where the job stands: a host joining a running job goes on from there
        schedule_from(step)
        if rank == 0:
            print(f"{name}: elastic host {elastic_host_name()} at the job's step {step} (it "
                  f"{'set' if optimizer.set_the_weights else 'took'} the weights)", flush=True)
    local_steps = 0
    epoch = step // steps_per_epoch
    stopped = False
    while step < total_steps and not stopped:
        batches = fashion_mnist.epoch_batches(epoch, rank, world * hosts, len(train_y), batch, stream)
        for idx in batches[step % steps_per_epoch:]:
            t0 = time.monotonic()
            phase = timeline.now()
            optimizer.zero_grad()
            loss = F.cross_entropy(net(train_x[idx]), train_y[idx])
            timeline.span("forward", phase, step)
            try:
                phase = timeline.now()
                loss.backward()  # DDP with the blockps hook: the averages come back before it returns
                timeline.span("backward", phase, step)
                phase = timeline.now()
                optimizer.step()
                timeline.span("step", phase, step)
            except Exception as e:  # blockps.Error (or the hook's RuntimeError) names the shard and the parameters
                sys.exit(f"train.py rank {rank}: step {step} failed: {e}")
            train_s += time.monotonic() - t0
            step += 1
            local_steps += 1
            images += len(idx)
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            if preemption is not None and preemption.due():
                optimizer.leave()  # the shards drop this host at once; the others go on
                timeline.close()
                if rank == 0:
                    print(f"{name}: preempted: host {elastic_host_name()} left after the job's step {step}", flush=True)
                    if a.out:
                        with open(a.out, "w") as f:
                            json.dump({"run": name, "model": a.model, "workers": world, "batch": batch, "threads":
                                       torch.get_num_threads(), "records": records, "left": step}, f, indent=1)
                sys.stdout.flush()
                os._exit(0)  # the host's ranks all leave at this step; nothing waits for another
            if elastic and local_steps % eval_every == 0:
                step = max(step, optimizer.shard_rounds())  # other hosts' rounds count too
            if (step % eval_every == 0 if not elastic else local_steps % eval_every == 0) or step >= total_steps:
                phase = timeline.now()
                acc, all_images, stopped = evaluate(images)
                timeline.span("evaluation", phase, step)
                rec = {"epoch": step / steps_per_epoch, "step": step, "wall_s": train_s, "test_acc": acc,
                       "loss": loss_sum / loss_n, "images_per_s": all_images / train_s}
                loss_sum, loss_n = 0.0, 0
                records.append(rec)
                if rank == 0:
                    print(f"{name:>8} epoch {rec['epoch']:5.2f}  loss {rec['loss']:.4f}  test acc "
                          f"{acc * 100:5.2f}%  {rec['images_per_s']:7.0f} img/s  t {train_s:7.1f}s", flush=True)
                point = {"step": step, "train_s": train_s, "images": images, "records": records}
                if not a.ps:
                    point.update(model=model.state_dict(), optimizer=optimizer.state_dict())
                resume_point.save(point)
            if step >= total_steps or stopped or step // steps_per_epoch > epoch:
                break
        epoch += 1
        scheduler.step()
    timeline.close()
    if rank == 0 and a.out:
        with open(a.out, "w") as f:
            json.dump({"run": name, "model": a.model, "workers": world, "batch": batch, "threads":
                       torch.get_num_threads(), "records": records}, f, indent=1)
    if distributed:
        dist.barrier()
        if ddp:
            # torch 1.13's gloo process group can deadlock in its destructor when DDP's reducer releases it (seen
            # at the end of a CI run: ~Reducer -> ~ProcessGroupGloo blocked on the mutex of its own worker thread).
            # Every rank is past the barrier and the results are written: end without running destructors.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
