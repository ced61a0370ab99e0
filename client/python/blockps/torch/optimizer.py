"""blockps.torch.DistributedOptimizer: a PyTorch training script, launched by torchrun, through a blockps PS.

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer = blockps.torch.DistributedOptimizer(optimizer, model, cluster="cluster.toml")   # the one line
    for x, y in loader:                        # the loop is unchanged
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()        # each parameter's blocks are pushed as soon as its gradient is ready
        optimizer.step()                       # waits for the pulls; the model now holds the shards' new weights
                                               # (early_forward=True: returns at once; each module's forward waits)

The shards run the optimizer: the wrapped torch optimizer only names it (its class and hyper-parameters are
checked against every shard's, so a script cannot silently train with other settings than it says) and is
never stepped locally. What happens, and the rules a user can rely on:

- Identity: RANK, WORLD_SIZE and TORCHELASTIC_RESTART_COUNT come from torchrun's environment (absent: rank 0 of
  1). Each rank that talks to the shards logs in as iqn.2026-11.io.blockps:worker-<host>-rank<RANK> (unless the
  cluster file names an initiator), one session per shard. With several ranks on a host (blockps/torch/host.py),
  only the host's leader does: the host's ranks combine their gradients and the host is one worker of a sync shard;
  host_aggregation=False (or BLOCKPS_HOST_AGGREGATION=0) makes every rank a worker of its own.
- Job: the ranks claim the shards for their job (blockps/jobs.py names it: job=, the cluster file's [client] job,
  BLOCKPS_JOB, or torchrun's run): a second job pointed at the same shards is refused at construction with the
  holder named, before rank 0 writes anything; averaging shards (opt=average) are refused too.
- Start: rank 0 assigns its model's parameters and buffers to the shards (as DDP broadcasts rank 0's), then
  every rank reads them back, so all ranks start from the same weights. init="ps" keeps the weights the shards
  hold instead (resume); it is the default after a torchrun restart. Ranks meet once, at start, in a
  torch.distributed barrier (gloo; initialised here when the script has not): never again, so a rank that dies
  later cannot hang the others through it.
- Elastic (elastic=True; docs/DEPLOY.md, "Elastic jobs"): every worker host runs a launcher of its own (torchrun
  for its local ranks, or one process) and the shards are the only meeting point: hosts come and go while the others
  train on. The ranks of a host still meet in their own process group (host aggregation, buffers, evaluations); no
  host waits for another. The job must be named (job=, [client] job or BLOCKPS_JOB), each host's workers log in as
  ...worker-<hostname>-<BLOCKPS_HOST or launcher>-rank<R>, and at start the first host to ask the first shard sets the
  weights (init-weights, then init-done) while the others wait for them and take them (set_or_take_weights): a host
  that joins a running job takes the trained weights. On sync shards with max_workers= above workers=, a joining host
  is in the rounds it enters. leave() (on a preemption notice) ends this rank's part after its last step, and the
  shards drop it at once; shard_rounds() is the job's step count (its sync rounds), for a script's schedule and end.
- Layout (ModelLayout, blockps/torch/layout.py): the trainable parameters end to end in reverse registration order
  (backward produces the last layers' gradients first, so the first blocks fill first), then, from the next block
  boundary, the floating-point buffers. The cluster's model must hold ModelLayout.elements elements.
- Push during backward: a hook on each parameter's gradient accumulator (torch 1.13 has no post-accumulate
  hook: the AccumulateGrad node's hook, as Horovod does) marks the parameter ready; once every parameter
  overlapping a block is ready, the blocks from the first unsent one are sent in buckets of bucket_bytes as
  pipelined exchanges (each block's READ follows its WRITE), overlapping the rest of backward. step() sends
  what is left (parameters that got no gradient push zeros), waits for every pull and installs the weights.
- Early forward (early_forward=True, P3's idea): step() returns once its sends are out, and the weights arrive as
  the next forward needs them: each module's forward first waits for the exchanges that pull its parameters and
  its submodules' (nn.MultiheadAttention reads its out_proj's weight without calling out_proj) and installs them.
  The whole pull is waited for (wait_for_weights()) by the next backward's first gradient, step(), checkpoint()
  and the model's state_dict(): code that reads the parameters otherwise (an EMA or SWA copy, a weight norm) must
  call wait_for_weights() first. zero_grad() does not wait: the pushes may still read the gradients, so on the
  f32 CPU path they turn to a second gradient buffer. The values trained are the same, bit for bit.
- Learning rate: when the optimizer's lr changes (an LR scheduler), rank 0 sends lr= to every shard's status
  LU before its first push of the next step, so on sync shards that step's rounds run it (the shards must accept
  its control lines: admins=).
- Buffers (BatchNorm running mean/var): after every step() each rank's floating-point buffers equal rank 0's
  of that step or a later one. Rank 0 writes them to the weights LUs when its backward starts (they are final
  after forward), before any of its pushes of that step; the others read them in step() after their pulls (early
  forward: on a thread of their own once the step's first exchange completed, and each module's forward waits for
  that read). On sync shards a pull waits for rank 0's push of that round, which came after its buffers (a round
  that closed without rank 0, by the straggler rule, carries no such order). Integer buffers
  (BatchNorm's num_batches_tracked) stay local: every rank counts the same steps.
- Wire: the cluster's dtype. f32 on CPU parameters: the parameters, gradients and pulled weights are views of
  the pushed and pulled memory (no copy; two weight buffers alternate). bf16/f16 (the shards keep f32 master
  weights) and CUDA parameters go through staging buffers (pinned for CUDA; a CUDA gradient's copy is waited
  for on a submitter thread, not in backward).
- Errors name the shard (blockps.Error / blockps.ShardUnreachableError from the library) and the parameters
  in the failed blocks; a sync shard's parked pull has a deadline, so nothing hangs the loop.
- What it cannot do, refused loudly: gradients changed between backward() and step() (clip_grad_norm_,
  GradScaler.unscale_, an assigned .grad: the pushes left during backward, so the shards would run on the
  unchanged ones) raise at step(), detected by the gradients' version counters; Horovod's synchronize() /
  skip_synchronize() raise; param groups with different hyper-parameters and optimizers the shards do not run
  are refused at construction. Each error points to DDP with blockps.torch.averaging_hook, where the optimizer
  stays in the script and any of these work.
"""
import gc
import json
import math
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from ..shard_settings import shard_options
from .layout import ModelLayout
from .wire import WIRE_DTYPES, bytes_of, wire_buffer, wire_element_bytes
from .compression import shards_compression
from .worker import elastic_worker_name, exchanger, open_for_job, open_worker, torchrun_identity

_USE_THE_HOOK = ("use DistributedDataParallel with blockps.torch.averaging_hook over opt=average shards instead: the "
                 "optimizer then stays in the script (docs/OPTIONS.md, \"DDP through blockps\")")


def shard_optimizer_for(optimizer):
    """The shard bsopts (opt and its hyper-parameters) that run what `optimizer` would, or ValueError."""
    groups = optimizer.param_groups
    keys = ("lr", "momentum", "dampening", "nesterov", "betas", "eps", "weight_decay", "amsgrad", "maximize")
    for g in groups[1:]:
        for k in keys:
            if g.get(k) != groups[0].get(k):
                raise ValueError(f"blockps: param group hyper-parameters differ ({k}: {groups[0].get(k)} vs "
                                 f"{g.get(k)}); a shard runs one optimizer for all its elements: {_USE_THE_HOOK}")
    g = groups[0]
    if g.get("maximize") or g.get("amsgrad"):
        raise ValueError(f"blockps: the shards do not run maximize=True or amsgrad=True: {_USE_THE_HOOK}")
    if isinstance(optimizer, torch.optim.SGD):
        if g["momentum"] == 0:
            return {"opt": "sgd", "lr": g["lr"], "weight_decay": g["weight_decay"]}
        if g["dampening"] != 0:
            raise ValueError(f"blockps: SGD dampening={g['dampening']}: the shards' momentum has none (0): "
                             f"{_USE_THE_HOOK}")
        return {"opt": "momentum", "lr": g["lr"], "momentum": g["momentum"], "nesterov": int(bool(g["nesterov"])),
                "weight_decay": g["weight_decay"]}
    kinds = {torch.optim.AdamW: "adamw", torch.optim.Adam: "adam"}  # AdamW first: it is not an Adam subclass
    for cls, name in kinds.items():
        if type(optimizer) is cls:
            return {"opt": name, "lr": g["lr"], "beta1": g["betas"][0], "beta2": g["betas"][1], "eps": g["eps"],
                    "weight_decay": g["weight_decay"]}
    raise ValueError(f"blockps: {type(optimizer).__name__} is not run by the shards (SGD, SGD with momentum, "
                     f"Adam, AdamW are): {_USE_THE_HOOK}")


def check_shards_run(optimizer, cluster):
    """ValueError naming the shard and the setting where a shard would not run what `optimizer` says."""
    want = shard_optimizer_for(optimizer)
    for shard, opts in shard_options(cluster):
        for key, value in want.items():
            have = opts.get(key)
            same = have == value if isinstance(value, str) else (
                have is not None and math.isclose(float(have), float(value), rel_tol=1e-6, abs_tol=1e-12))
            if not same:
                raise ValueError(f"blockps: shard {shard} runs {key}={have}, the script's "
                                 f"{type(optimizer).__name__} wants {key}={value} (set it in the shard's bsopts)")


class _StepPull:
    """The pulls of one step, from step() until every weight is installed (with early_forward, past step())."""

    def __init__(self, ops, flat, grads):
        self.ops = ops  # (first block, end block, blockps Operation, or the Exception its submission raised)
        self.flat = flat  # the wire buffer they pull into
        self.grads = grads  # the wire buffer their pushes read: zero_grad() must leave it alone until they end
        self.outcomes = {}  # index in ops -> None or its failure (naming the blocks), once waited for
        self.installed = set()  # the slots whose tensors already hold flat's values
        self.buffers = None  # early_forward: the Future of rank 0's buffers read into flat (ranks that take them)
        self.copies = []  # CUDA: events after the forward pre-hooks' copies out of flat (pinned)


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer so that training goes through a blockps PS (see the module's doc).

    optimizer: the torch optimizer the shards run (checked; never stepped here). model: the module whose
    parameters and buffers are trained. cluster: a blockps.Cluster, a cluster file path, or None for
    $BLOCKPS_CLUSTER. init: "model" (rank 0 assigns the model's weights), "ps" (keep the shards' weights), or None
    ("ps" after a torchrun restart, else "model"). bucket_bytes: how many ready bytes are sent together (at least
    one block). backward_passes_per_step: backward passes accumulated before a step (gradient accumulation).
    staging: force copies through staging buffers even for f32 CPU parameters (the CUDA path's code, testable
    on a CPU). check_optimizer: compare the optimizer with the shards' bsopts. job, takeover: the job that claims
    the shards, and whether it takes them from another job (blockps/jobs.py; as AveragingState). host_aggregation:
    combine the gradients of a host's ranks before its leader pushes (blockps/torch/host.py). compression: None
    (default) follows the shards' compress= (blockps/torch/compression.py: after their compress_after full-precision
    rounds, each block's push goes compressed with this rank's error feedback; the pulled weights stay in the wire
    dtype); 'none', 'sign1' or 'int8' must be what they run (ValueError otherwise). elastic: this host needs no other
    (see the module's doc); init must then be None (the shards decide) or "ps" (wait for the weights another host
    sets), and elastic_patience_s bounds that wait.

    early_forward: step() returns once the step's sends are out, without waiting for the pulls, so the next
    forward can start while the last exchanges run. A forward pre-hook on each module that itself holds parameters
    (or, on ranks that take rank 0's buffers, floating-point buffers) waits for the exchanges that pull those of the
    module and its submodules, and for rank 0's buffers, and installs them. wait_for_weights() ends the whole pull;
    the next backward's first gradient, step(), checkpoint() and the model's state_dict() call it (zero_grad()
    does not wait: it leaves alone the gradients that pushes may still read). Off by default because until then
    the model does not hold the new weights outside its modules' forwards: code that reads the parameters
    elsewhere (an EMA or SWA copy, a weight norm, a second optimizer) reads old or half-installed ones unless it
    calls wait_for_weights() first, and so does a forward that reads a parameter without calling a module that
    holds it (a parent holding no parameter itself that uses a child's weight). A failed exchange is raised by the
    forward pre-hook or wait_for_weights() that finds it, once every operation of the step ended; the parameters
    are then those of the step's start (the copy path: except those of modules whose forward already ran).
    """

    def __init__(self, optimizer, model, cluster=None, *, init=None, bucket_bytes=1 << 20,
                 backward_passes_per_step=1, staging=False, check_optimizer=True, job=None, takeover=False,
                 host_aggregation=True, early_forward=False, compression=None, elastic=False,
                 elastic_patience_s=300.0):
        self.rank, self.world_size, restarts = torchrun_identity()
        self.elastic = bool(elastic)
        if cluster is None:
            cluster = os.environ.get("BLOCKPS_CLUSTER")
            if not cluster:
                raise ValueError("blockps: no cluster: pass cluster= (a file or blockps.Cluster) or set BLOCKPS_CLUSTER")
        if elastic:
            if init == "model":
                raise ValueError("blockps: init='model' with elastic=True: a host joining a running job would write "
                                 "its model over the trained weights; the shards decide who sets them (init=None)")
            if not 0 < elastic_patience_s <= 86400:
                raise ValueError(f"blockps: elastic_patience_s={elastic_patience_s}: must be seconds in (0, 86400]")
            init = init or "elastic"
        if init is None:
            init = "ps" if restarts > 0 else "model"
        if init not in ("model", "ps", "elastic"):
            raise ValueError(f"blockps: init={init!r}: must be 'model' or 'ps'")
        self._elastic_patience_s = elastic_patience_s
        self.set_the_weights = False  # elastic: whether this host set the job's weights (the first to ask)
        if backward_passes_per_step < 1:
            raise ValueError(f"blockps: backward_passes_per_step={backward_passes_per_step}: must be >= 1")

        def open_checked():
            worker = elastic_worker_name(self.rank) if elastic else f"rank{self.rank}"
            opened = open_for_job(cluster, worker, job, takeover, user="blockps.torch.DistributedOptimizer",
                                  averaging=False, elastic=elastic)
            # The layout puts the first layers at the highest offsets: send them first, as the next forward needs.
            opened.prefer_send_order("descending")
            if check_optimizer:
                check_shards_run(optimizer, opened)
            return opened
        self._join_process_group()
        self.host, self.cluster, shape = open_worker(host_aggregation, open_checked)
        self.shape = shape
        # The torch.optim.Optimizer surface (param_groups, state, defaults) is the wrapped optimizer's, so
        # schedulers and state_dict() see it; its base __init__ is not run (it would regroup the parameters).
        self.optimizer = optimizer
        self.defaults, self.param_groups, self.state = optimizer.defaults, optimizer.param_groups, optimizer.state
        self._sent_lr = optimizer.param_groups[0]["lr"]

        wire = WIRE_DTYPES[shape.dtype]
        block_elements = shape.block_bytes // wire_element_bytes(shape.dtype)
        self.layout = layout = ModelLayout(model, block_elements)
        self.elements = shape.elements
        if layout.elements > self.elements:
            raise ValueError(f"blockps: the model needs {layout.elements} elements (parameters, then buffers from a "
                             f"block boundary: blockps.torch.ModelLayout), the cluster's model has {self.elements}")
        tensors = [s.tensor for s in layout.parameters + layout.buffers]
        cuda = any(t.is_cuda for t in tensors)
        self._direct = not staging and not cuda and wire == torch.float32 and all(
            t.dtype == torch.float32 for t in tensors)
        self._cuda = cuda
        self._grads = wire_buffer(self.elements, wire, cuda)
        # Direct: the parameters are views of _weights[_current]; exchanges pull into the other one.
        self._weights = [wire_buffer(self.elements, wire, cuda) for _ in range(2 if self._direct else 1)]
        self._current = 0
        self._bucket_blocks = max(1, bucket_bytes // shape.block_bytes)
        self._passes_per_step = backward_passes_per_step
        self._lock = threading.Lock()
        self._ops = []  # (first block, end block, blockps Operation) of this step
        compressed = None
        if self.cluster is not None:  # this rank exchanges with the shards: it compresses its pushes as they say
            fmt, after, first_round = shards_compression(self.cluster, compression,
                                                         user="blockps.torch.DistributedOptimizer")
            if fmt is not None and wire != torch.float32:
                raise ValueError(f"blockps: blockps.torch.DistributedOptimizer: the shards run compress={fmt} over "
                                 f"dtype={shape.dtype}; compressed pushes are made from f32 gradients: give the shards "
                                 "dtype=f32")
            if fmt is not None:
                compressed = (fmt, after, "weights", f"DistributedOptimizer, rank {self.rank}", first_round)
        self._exchange_path = exchanger(self.cluster, self.host, self.elements, block_elements, wire, compressed)
        self._submitter = None
        if cuda:
            self._queue = queue.Queue()
            self._submitter = threading.Thread(target=self._submit_loop, name="blockps-submit", daemon=True)
            self._submitter.start()
        # Rank 0's buffers go to every other rank after each step (and to rank 0's host's ranks).
        self._buffer_transfer = bool(layout.buffers) and (self.rank != 0 or self.host is not None)
        self._early_forward = early_forward
        self._pull = None  # the last step's _StepPull while weights of it are not installed (early_forward)
        self._left = False  # leave() was called
        self._pull_lock = threading.Lock()
        # Direct early_forward: zero_grad() turns to the other gradient buffer while the pushes read this one.
        self._spare_grads = wire_buffer(self.elements, wire, cuda) if early_forward and self._direct else None
        self._buffer_reader = None
        if early_forward and self._buffer_transfer:
            self._buffer_reader = ThreadPoolExecutor(1, thread_name_prefix="blockps-buffers")
        self._start(init)
        self._reset_step()
        self._accumulators = []  # the AccumulateGrad nodes: their hooks live as long as they do
        with torch.enable_grad():
            for i, slot in enumerate(layout.parameters):
                node = slot.tensor.expand_as(slot.tensor).grad_fn.next_functions[0][0]
                node.register_hook(self._hook(i))
                self._accumulators.append(node)
        if early_forward:
            self._hook_forwards(model)

    # ---- start -------------------------------------------------------------------------------------------
    def _join_process_group(self):
        """Several ranks meet in torch.distributed's process group (gloo, unless the script made one): at start, to
        find the hosts and to wait for rank 0's weights."""
        if self.world_size > 1 and not torch.distributed.is_initialized():
            if "MASTER_ADDR" not in os.environ:
                raise ValueError("blockps: WORLD_SIZE > 1 without MASTER_ADDR/MASTER_PORT: launch with torchrun")
            torch.distributed.init_process_group("gloo")

    def _from_shards(self, first, count, flat, fill=None):
        """Blocks first..first+count-1 of `flat` as the shards hold them (fill(), on a host's leader, instead of
        reading them): read by this rank, or by its host's leader and shared with the host's ranks."""
        target = self.layout.block_span(flat, first, first + count)
        if fill is None:
            def fill():
                self.cluster.read_weights_blocks(first, count, bytes_of(target))
        if self.host is None:
            fill()
        else:
            self._exchange_path.share_async(target, fill).wait()

    def _start(self, init):
        layout, w = self.layout, self._weights[0]
        used_blocks = layout.buffer_offset // layout.block_elements + layout.buffer_blocks
        if self.rank == 0 and init in ("model", "elastic"):
            self._gather(w, layout.parameters + layout.buffers)

            def set_weights():
                self.cluster.write_weights_blocks(0, used_blocks, bytes_of(self.layout.block_span(w, 0, used_blocks)))
            if init == "model":
                set_weights()
            else:  # the first host to ask sets them, the others wait until they are set
                self.set_the_weights = self.cluster.set_or_take_weights(set_weights, self._elastic_patience_s)
        elif self.rank == 0 and self.elastic:  # init="ps": wait for another host to set them, never asked to
            self._wait_for_weights_set()
        if self.world_size > 1:
            torch.distributed.barrier()
        self._from_shards(0, used_blocks, w)
        if self._direct:
            self._weights[1].copy_(w)
        self._install(w, layout.parameters + layout.buffers)
        if self._direct:
            g = self._grads
            for s in layout.parameters:
                s.tensor.grad = g[s.offset:s.end].view_as(s.tensor)

    def _install(self, flat, slots, wait=True):
        """Make the slots' tensors hold `flat`'s values: views (direct) or copies. wait: on CUDA, return once the
        copies are done (a forward pre-hook records an event instead, waited for when the pull ends)."""
        with torch.no_grad():
            for s in slots:
                view = flat[s.offset:s.end].view_as(s.tensor)
                if self._direct and s.is_parameter:
                    s.tensor.data = view
                else:
                    s.tensor.data.copy_(view, non_blocking=self._cuda)
        if self._cuda and wait:  # the next exchange may overwrite `flat` (pinned) once this returns
            torch.cuda.current_stream().synchronize()

    def _gather(self, flat, slots):
        """Copy the slots' tensors into `flat` (the reverse of _install)."""
        with torch.no_grad():
            for s in slots:
                flat[s.offset:s.end].copy_(s.tensor.detach().reshape(-1))

    # ---- backward -----------------------------------------------------------------------------------------
    def _reset_step(self):
        self._passes = [0] * len(self.layout.parameters)
        self._missing = [0] * self.layout.parameter_blocks
        for s in self.layout.parameters:
            for b in self.layout.blocks_of(s):
                self._missing[b] += 1
        self._frontier = 0
        self._buffers_sent = False
        self._lr_checked = False
        self._hook_failure = None
        # What each gradient was when it was staged for its push: (the .grad tensor, its version counter). An
        # in-place change afterwards bumps the counter (views and detach() share it); an assignment swaps the
        # tensor. step() compares (_check_gradients_unchanged).
        self._staged = {}

    def _hook(self, index):
        def on_gradient_accumulated(*_):
            # Nothing is raised inside backward: an exception out of an autograd hook leaves graph nodes in the
            # engine's thread-local state, whose destruction at exit waits for the GIL forever (torch 1.13).
            # step() raises it instead.
            try:
                self.wait_for_weights()  # early_forward: this step's exchanges reuse the last step's buffers
                self._gradient_ready(index)
            except Exception as e:
                if self._hook_failure is None:
                    self._hook_failure = e
        return on_gradient_accumulated

    def _gradient_ready(self, index, flushing=False):
        slot = self.layout.parameters[index]
        with self._lock:
            if not flushing:
                self._passes[index] += 1
                if self._passes[index] > self._passes_per_step:
                    raise RuntimeError(f"blockps: {slot.name} got a gradient after its push of this step (more than "
                                       f"backward_passes_per_step={self._passes_per_step} backward passes before "
                                       "step()); call step() after each step's backward passes")
                if self._passes[index] < self._passes_per_step:
                    return
            if not self._lr_checked:
                self._send_lr_if_changed()
            if self.rank == 0 and not self._buffers_sent:
                self._send_buffers()
            self._stage_gradient(slot)
            for b in self.layout.blocks_of(slot):
                self._missing[b] -= 1
            self._advance(flushing=False)

    def _send_lr_if_changed(self):
        """Once per step, before this rank's first push: an lr the script changed since the last step (an LR
        scheduler after step()) goes to every shard first, from rank 0. On sync shards the step's rounds wait for
        rank 0's pushes, which follow the control line, so they run the new lr (sent at step() instead, the step's
        pushes were already out: the change landed a step late or not, by timing)."""
        self._lr_checked = True
        lr = self.param_groups[0]["lr"]
        if lr != self._sent_lr:
            self._sent_lr = lr
            if self.rank == 0:
                self.cluster.control(f"lr={lr!r}")

    def _stage_gradient(self, slot):
        target = self._grads[slot.offset:slot.end]
        g = slot.tensor.grad
        with torch.no_grad():
            if g is None:
                target.zero_()
            elif not (self._direct and g.data_ptr() == target.data_ptr()):
                target.copy_(g.detach().reshape(-1), non_blocking=self._cuda)
        if g is not None:
            self._staged[slot.name] = (g, g._version)

    def _refuse_grad_scaler(self, scaler_arguments):
        """RuntimeError when GradScaler.step() called step() (see _step_supports_amp_scaling); TypeError for any other
        keyword argument."""
        scaler = scaler_arguments.pop("grad_scaler", None)
        unknown = sorted(scaler_arguments)
        if unknown:
            raise TypeError(f"DistributedOptimizer.step() got unexpected keyword arguments: {', '.join(unknown)}")
        scaled = scaler is not None
        for attribute in ("grad_scale", "found_inf"):  # set for this call only; GradScaler deletes them after it
            if attribute in self.__dict__:
                del self.__dict__[attribute]
                scaled = True
        if scaled:
            raise RuntimeError(
                "blockps: GradScaler.step() with DistributedOptimizer: the pushes left during backward with the "
                "loss scale in them, so the shards stepped on scaled gradients and GradScaler cannot unscale them "
                "or skip a step with inf/NaN; " + _USE_THE_HOOK)

    def _check_gradients_unchanged(self):
        """RuntimeError when a gradient pushed during backward was changed or replaced before step()."""
        def swapped_or_bumped(slot):
            grad, version = self._staged[slot.name]
            # Direct: the views share one version counter, which later accumulations bump (checked below).
            return slot.tensor.grad is not grad or (not self._direct and grad._version != version)
        changed = [s.name for s in self.layout.parameters if s.name in self._staged and swapped_or_bumped(s)]
        if self._direct and not changed:
            # Direct: every .grad is a view of one buffer, so they share one version counter; each staging
            # recorded it after that gradient's accumulation, the last one after backward's last accumulation.
            latest = max((v for _, v in self._staged.values()), default=None)
            if latest is not None and self._grads._version != latest:
                changed = ["(in place; which one: the gradients share one buffer)"]
        if changed:
            raise RuntimeError(
                "blockps: gradients changed between backward() and step() (" + ", ".join(changed[:8]) +
                (", ..." if len(changed) > 8 else "") + "): DistributedOptimizer pushed them during backward, so "
                "the shards ran on the unchanged ones. clip_grad_norm_, GradScaler.unscale_ and other changes "
                "between backward and step cannot work here; " + _USE_THE_HOOK)

    def _advance(self, flushing):
        """Send the ready blocks from the first unsent one, a bucket at a time (the rest too when flushing)."""
        end_all = self.layout.parameter_blocks
        while self._frontier < end_all:
            end = self._frontier
            while end < end_all and self._missing[end] == 0 and end - self._frontier < self._bucket_blocks:
                end += 1
            if end == self._frontier or (end - self._frontier < self._bucket_blocks and end < end_all and not flushing):
                return
            self._send(self._frontier, end)
            self._frontier = end

    def _send(self, first, end):
        if self._cuda:
            event = torch.cuda.Event()
            event.record()
            self._queue.put((first, end, event))
        else:
            self._exchange(first, end)

    @property
    def _pulled_into(self):
        """The wire buffer this step's exchanges pull into (direct: the one the parameters do not view)."""
        return self._weights[1 - self._current] if self._direct else self._weights[0]

    def _exchange(self, first, end):
        span = self.layout.block_span
        op = self._exchange_path.exchange_async(first, end - first, span(self._grads, first, end),
                                                span(self._pulled_into, first, end))
        self._ops.append((first, end, op))

    def _submit_loop(self):
        while True:
            first, end, event = self._queue.get()
            try:
                event.synchronize()  # the gradient's copy to the pinned buffer is done
                self._exchange(first, end)
            except Exception as e:  # reported by step(), which waits for the queue
                self._ops.append((first, end, e))
            finally:
                self._queue.task_done()

    def _send_buffers(self):
        layout = self.layout
        if not layout.buffers:
            self._buffers_sent = True
            return
        first = layout.buffer_offset // layout.block_elements
        flat = self._weights[self._current]
        self._gather(flat, layout.buffers)
        stage = self.layout.block_span(flat, first, first + layout.buffer_blocks)
        self._buffers_sent = True
        try:
            self.cluster.write_weights_blocks(first, layout.buffer_blocks, bytes_of(stage))
        except Exception as e:
            raise type(e)(f"{e} (buffers: {', '.join(s.name for s in layout.buffers)})") from e

    # ---- the torch.optim.Optimizer surface ----------------------------------------------------------------
    # GradScaler.step(optimizer) hands an optimizer that says so the scaler itself instead of unscaling the
    # gradients in place (torch 1.13: a grad_scaler= argument; 2.x: grad_scale and found_inf attributes), so step()
    # sees every GradScaler: its unscale_ cannot reach gradients pushed during backward (and on CUDA it changes them
    # without bumping their version counters, which _check_gradients_unchanged relies on).
    _step_supports_amp_scaling = True

    @torch.no_grad()
    def step(self, closure=None, **scaler_arguments):
        """Send what backward left, wait for every pull, install the new weights (and rank 0's buffers). With
        early_forward, return once the sends are out (see the class's doc)."""
        if self._left:
            raise RuntimeError("blockps: step() after leave(): this rank left the job")
        self.wait_for_weights()  # a pull no backward ended (step() twice): this step's exchanges reuse its buffers
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        try:
            self._refuse_grad_scaler(scaler_arguments)
            self._check_gradients_unchanged()
        except (RuntimeError, TypeError) as e:  # finish the step's exchanges first: shards and rank stay in step
            if self._hook_failure is None:
                self._hook_failure = e
        for i, passes in enumerate(self._passes):
            if passes < self._passes_per_step:
                self._gradient_ready(i, flushing=True)
        with self._lock:
            self._advance(flushing=True)
        if self._submitter is not None:
            self._queue.join()
        pull = _StepPull(self._ops, self._pulled_into, self._grads)
        self._ops = []
        failure = self._hook_failure
        self._reset_step()
        if self.rank == 0 and self._buffer_transfer:  # its host's ranks take these; the next forward changes them
            self._gather(pull.flat, self.layout.buffers)
        if failure is not None or not self._early_forward:
            self._finish_pull(pull, failure)
            return loss
        if self._buffer_transfer:
            pull.buffers = self._buffer_reader.submit(self._receive_after_first_exchange, pull)
        self._pull = pull
        return loss

    def wait_for_weights(self):
        """Finish the pull that step() left running (early_forward): wait for every exchange of the step, install
        the weights and rank 0's buffers that no forward installed yet. Raises the step's first failure as step()
        would (blockps.Error naming the shard, the blocks and their parameters). Returns at once when the model
        holds the last step's weights already."""
        if self._pull is None:
            return
        with self._pull_lock:
            if self._pull is not None:
                self._finish_pull(self._pull)

    def _finish_pull(self, pull, failure=None):
        """Wait for every exchange of the step and for the buffers' transfer; then install what no forward pre-hook
        did, flip the double buffer and take rank 0's buffers. A failure (`failure`, else the first failed
        exchange's in the order sent, else the buffers') is raised after all that waiting, the parameters left as
        the step found them (direct path; on the copy path those a forward pre-hook installed keep their values)."""
        self._pull = None
        for i in range(len(pull.ops)):  # every operation is waited for before a failure is raised
            found = self._outcome(pull, i)
            if failure is None:
                failure = found
        if pull.buffers is not None:
            found = pull.buffers.exception()
            if failure is None:
                failure = found
        for copied in pull.copies:
            copied.synchronize()
        if failure is not None:
            if self._direct:
                self._install(self._weights[self._current], [s for s in pull.installed if s.is_parameter])
            raise failure
        if self._direct:
            self._current = 1 - self._current
        self._install(pull.flat, [s for s in self.layout.parameters if s not in pull.installed])
        if self._buffer_transfer:
            if pull.buffers is None:
                self._receive_buffers(pull.flat)
            if self.rank != 0:
                self._install(pull.flat, [s for s in self.layout.buffers if s not in pull.installed])

    def _outcome(self, pull, index):
        """None once the step's exchange `index` completed, or its failure; each exchange is waited for once."""
        if index not in pull.outcomes:
            pull.outcomes[index] = self._exchange_failure(*pull.ops[index])
        return pull.outcomes[index]

    def _exchange_failure(self, first, end, op):
        """Wait for the exchange of blocks first..end-1: None, or its failure naming the blocks and parameters."""
        try:
            if isinstance(op, Exception):  # the CUDA path's submitter could not start it
                raise op
            op.wait()
        except Exception as e:
            names = ", ".join(self.layout.names_in(first, end))
            return type(e)(f"{e} (blocks {first}..{end - 1}: parameters {names})")
        return None

    def _receive_buffers(self, flat):
        """Rank 0's buffers into `flat`: read from the shards by every rank but 0 (a host's ranks: by its leader,
        shared with the others; rank 0's host shares what rank 0 put there in step())."""
        layout = self.layout
        first = layout.buffer_offset // layout.block_elements
        already_there = (lambda: None) if self.rank == 0 else None
        self._from_shards(first, layout.buffer_blocks, flat, already_there)

    def _receive_after_first_exchange(self, pull):
        """early_forward, on the buffers' thread: rank 0's buffers into pull.flat once the step's first exchange
        completed. On sync shards that pull, as any of the step's, waited for rank 0's push of its round, which
        followed rank 0's buffers of the step (_send_buffers): rank 0's of the step or a later one, as without."""
        if pull.ops:
            failure = self._exchange_failure(*pull.ops[0])
            if failure is not None:
                raise failure
        self._receive_buffers(pull.flat)

    # ---- early_forward: each module's forward takes its part of the pull ------------------------------------
    def _hook_forwards(self, model):
        """A forward pre-hook on each module that holds parameters or floating-point buffers that this rank
        installs, for those of the module and of its submodules; a state-dict hook on the model."""
        installs = self.layout.parameters + (self.layout.buffers if self.rank != 0 else [])
        slot_of = {id(s.tensor): s for s in installs}
        for module in model.modules():
            own = list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))
            if any(id(t) in slot_of for t in own):
                held = list(module.parameters()) + list(module.buffers())
                module.register_forward_pre_hook(self._weights_before_forward([slot_of[id(t)] for t in held
                                                                               if id(t) in slot_of]))
        # The names state_dict() gives each parameter (a shared one has several).
        self._state_dict_names = [(f"{path}.{name}" if path else name, slot_of[id(p)])
                                  for path, module in model.named_modules(remove_duplicate=False)
                                  for name, p in module.named_parameters(recurse=False) if id(p) in slot_of]
        model._register_state_dict_hook(self._state_dict_with_new_weights)

    def _weights_before_forward(self, slots):
        """The forward pre-hook of a module holding `slots`: wait for the exchanges that pull the parameters'
        blocks (and, for buffers, for rank 0's), install them; a failure ends the pull (_finish_pull) and is raised."""
        blocks = [self.layout.blocks_of(s) for s in slots if s.is_parameter]
        takes_buffers = any(not s.is_parameter for s in slots)

        def before_forward(module, inputs):
            if self._pull is None:
                return
            with self._pull_lock:
                pull = self._pull
                if pull is None:
                    return
                for i, (first, end, _) in enumerate(pull.ops):
                    if any(first < b.stop and end > b.start for b in blocks) and self._outcome(pull, i) is not None:
                        self._finish_pull(pull)  # raises the step's first failure
                if takes_buffers and pull.buffers.exception() is not None:
                    self._finish_pull(pull)
                missing = [s for s in slots if s not in pull.installed]
                self._install(pull.flat, missing, wait=False)
                pull.installed.update(missing)
                if self._cuda and missing:  # pull.flat (pinned) is reused once these copies are done
                    pull.copies.append(torch.cuda.Event())
                    pull.copies[-1].record()
        return before_forward

    def _state_dict_with_new_weights(self, model, state_dict, prefix, local_metadata):
        """The model's state-dict hook: the last step's pull ends first. Its direct-path entries were detached from
        the memory that installing moves the parameters away from (.data), so they are taken again."""
        if self._pull is None:
            return
        self.wait_for_weights()
        if self._direct:
            for name, slot in self._state_dict_names:
                key = prefix + name
                if key in state_dict and state_dict[key] is not slot.tensor:  # keep_vars=True: the parameter
                    state_dict[key] = slot.tensor.detach()

    def synchronize(self):
        """Horovod's synchronize() (gradients reduced before step(), to change them in between) cannot work here:
        the shards run the optimizer on the gradients pushed during backward. Raises with what to use instead."""
        raise RuntimeError("blockps: DistributedOptimizer has no synchronize(): the shards step on the gradients "
                           "pushed during backward, so they cannot be changed before step(); " + _USE_THE_HOOK)

    def skip_synchronize(self):
        """See synchronize(): raises."""
        self.synchronize()

    def checkpoint(self):
        """Rank 0 asks every shard to write its checkpoint file now (weights, optimizer state, step counts, and
        the buffers rank 0 last sent); blockps.torch.save_torch_checkpoint turns those files into torch's format.
        Other ranks do nothing. Raises blockps.Error naming a shard that refused (see its admins=)."""
        self.wait_for_weights()  # early_forward: the files then hold the last step's rounds, as after step()
        if self.rank == 0:
            self.cluster.control("checkpoint")

    def _wait_for_weights_set(self):
        """elastic with init="ps": polls the first shard's /init (where set_or_take_weights asks) until the weights are
        set, without asking for the grant (a host that must not set them never holds the others up), for at most
        elastic_patience_s; RuntimeError naming where it stands then."""
        deadline = time.monotonic() + self._elastic_patience_s
        while True:
            shard, text = self.cluster.status_pages()[0]
            init = json.loads(text).get("init", {})
            if init.get("state") == "set":
                return
            if time.monotonic() >= deadline:
                holder = f" (granted to {init['by']})" if init.get("by") else ""
                raise RuntimeError(
                    f"blockps: init='ps' with elastic=True: shard {shard}'s weights are still {init.get('state')!r}"
                    f"{holder} after elastic_patience_s={self._elastic_patience_s}: no host of the job set them "
                    "(start the first with init=None)")
            time.sleep(0.05)

    def shard_rounds(self):
        """The job's step count as the shards keep it: the most rounds applied to a block, over every shard (sync and
        ssp shards; the fewest would count the blocks past the model's end, which no round reaches). A host joining an
        elastic job starts its schedule there. Read from the status pages, so call it once in a while (at
        evaluations), not every step. On a host's non-leader ranks: from the leader, shared."""
        def most_rounds():
            most = 0
            for shard, text in self.cluster.status_pages():
                rounds = json.loads(text).get("rounds", {})
                if "rounds_max" not in rounds:
                    raise ValueError(f"blockps: shard_rounds(): shard {shard} is mode=async: it has no rounds")
                most = max(most, rounds["rounds_max"])
            return most
        if self.host is None:
            return most_rounds()
        value = torch.zeros(1, dtype=torch.float64)

        def fill():
            value[0] = most_rounds()
        self._exchange_path.share_async(value, fill).wait()
        return int(value[0])

    def leave(self):
        """This rank's part ends (a preemption notice: the host will go): the last step's pull ends, then its sessions
        close, so that sync shards drop this host at once (a host's leader closes the host's) instead of after
        worker_timeout_ms, and nothing of its is half-pushed. Call it between steps; the optimizer cannot step
        afterwards."""
        self.wait_for_weights()
        self._left = True
        self._exchange_path = None
        self.cluster = None  # the last reference: the library logs out of every shard as it goes
        gc.collect()

    def zero_grad(self, set_to_none=False):
        """Zero the gradients in place (set_to_none is ignored) without waiting for the last step's pull. Direct
        path: they stay views of the pushed memory, of the other gradient buffer while the last step's pushes may
        still read this one (early_forward). Copy path: the parameters' .grad (each push stages its own copy)."""
        with torch.no_grad():
            if not self._direct:
                for s in self.layout.parameters:
                    if s.tensor.grad is not None:
                        s.tensor.grad.zero_()
                return
            if self._pull is not None and self._grads is self._pull.grads:
                self._grads, self._spare_grads = self._spare_grads, self._grads
            self._grads.zero_()
            for s in self.layout.parameters:
                s.tensor.grad = self._grads[s.offset:s.end].view_as(s.tensor)

    def __repr__(self):
        return (f"blockps.torch.DistributedOptimizer({type(self.optimizer).__name__}, rank {self.rank} of "
                f"{self.world_size}, {self.shape.shard_count} shards, {self.layout.elements} elements)")
