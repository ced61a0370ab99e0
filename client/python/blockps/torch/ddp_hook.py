"""blockps.torch.averaging_hook: DistributedDataParallel's gradients averaged by blockps averaging shards.

    model = torch.nn.parallel.DistributedDataParallel(model)
    model.register_comm_hook(blockps.torch.AveragingState(model, "cluster.toml"), blockps.torch.averaging_hook)

The ranks of one job claim the shards (blockps/jobs.py names the job): a second job pointed at the same shards is
refused at AveragingState with the holder named, instead of having its gradients averaged into the first's.

The shards run `opt=average;mode=sync` (docs/OPTIONS.md, "Averaging shards"): per block and round they sum
every rank's gradient in a fixed order and divide by the round's contributors, and a rank's READ after its push
returns that average. The script's own optimizer then steps on every rank, as with DDP over gloo or NCCL: any
optimizer, param groups, clip_grad_norm_, GradScaler.

- Hosts: the ranks of a host combine their gradients and its leader alone exchanges with the shards
  (blockps/torch/host.py; host_aggregation=False or BLOCKPS_HOST_AGGREGATION=0: every rank a worker), so the
  shards' workers= counts hosts; a rank of the host that dies fails the host's buckets naming it.
- Layout: the trainable parameters end to end in reverse registration order (blockps.torch.ModelLayout,
  blockps/torch/layout.py; the cluster file's [model] size must be at least averaging_model_bytes(model, block,
  dtype, shards)). Each bucket is mapped by parameter, not by bucket index: DDP rebuilds its buckets after the
  first iteration.
- The wire is the cluster's dtype: f32, or bf16 (as DDP's bf16_compress_hook: gradients rounded to bf16, summed
  in f32 by the shards, the average rounded to bf16). CUDA gradients go through pinned staging buffers.
- A bucket's gradients are copied into the step's staging buffer; every run of blocks whose parameters are then
  all staged goes out as one pipelined exchange (each block's READ follows its WRITE). A block shared with a
  later bucket waits for that bucket: DDP starts every bucket's hook before it waits for any future.
- A bucket's future completes with its averaged gradients when every block under its parameters came back;
  errors fail it with the library's message (it names the shard) and the parameters of the failed blocks.
  Each exchange's completion callback lands its blocks and completes those futures, on the library's I/O thread
  (the host's broadcast thread with host aggregation): no thread waits per exchange.
"""
import threading

import torch

from .compression import shards_compression
from .layout import ModelLayout
from .wire import WIRE_DTYPES, wire_buffer, wire_element_bytes
from .worker import exchanger, open_for_job, open_worker, torchrun_identity


def averaging_model_bytes(model, block_bytes=256 << 10, dtype="f32", shards=1):
    """The cluster file's [model] size (bytes) that averaging `model`'s trainable parameters needs: whole blocks
    of `block_bytes`, a multiple of `shards` blocks (scripts/ps-up.sh and bench/cluster give every shard M/S)."""
    element_bytes = wire_element_bytes(dtype)
    if block_bytes <= 0 or block_bytes % element_bytes or shards < 1:
        raise ValueError(f"blockps: block_bytes={block_bytes} must be a positive multiple of {dtype}'s "
                         f"{element_bytes} bytes, shards={shards} >= 1")
    blocks = ModelLayout(model, block_bytes // element_bytes).parameter_blocks
    return -(-blocks // shards) * shards * block_bytes


class AveragingState:
    """What averaging_hook keeps between buckets and steps. model: the DDP module (or the module it wraps).
    cluster: a blockps.Cluster, or a cluster file path (each torchrun rank logs in as worker "rank<RANK>").
    job: the job's name (blockps/jobs.py: default the cluster file's [client] job, BLOCKPS_JOB, or torchrun's run);
    the shards serve one job at a time and refuse another's. takeover: claim the shards even though another job
    holds them (that job's next command is refused). The shards must average (opt=average): checked here, before
    any push. host_aggregation: combine the gradients of a host's ranks before the host's leader pushes (see the
    module's doc). compression: None (default) follows the shards' compress= (blockps/torch/compression.py: after
    their compress_after full-precision rounds each block goes compressed both ways, with this worker's error
    feedback); 'none', 'sign1' or 'int8' must be what they run (ValueError otherwise)."""

    def __init__(self, model, cluster, *, job=None, takeover=False, host_aggregation=True, compression=None):
        rank, _, _ = torchrun_identity()

        def open_checked():
            opened = open_for_job(cluster, f"rank{rank}", job, takeover, user="blockps.torch.averaging_hook",
                                  averaging=True)
            # DDP's bucket order: DDP waits for every bucket before the optimizer step, in that order.
            opened.prefer_send_order("queue")
            return opened
        self.host, self.cluster, shape = open_worker(host_aggregation, open_checked)
        model = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
        wire = WIRE_DTYPES[shape.dtype]
        self.layout = layout = ModelLayout(model, shape.block_bytes // wire_element_bytes(shape.dtype))
        if layout.parameter_blocks * layout.block_elements > shape.elements:
            need = averaging_model_bytes(model, shape.block_bytes, shape.dtype, shape.shard_count)
            raise ValueError(f"blockps: the model's trainable parameters ({layout.parameter_elements} elements) need "
                             f"{layout.parameter_blocks} blocks; the cluster's model has {shape.elements} "
                             f"elements: set its [model] size to {need} bytes or more "
                             "(blockps.torch.averaging_model_bytes(model, block_bytes, dtype, shards))")
        self.slot_of = {id(s.tensor): s for s in layout.parameters}
        elements = layout.parameter_blocks * layout.block_elements
        # CUDA gradients cross through pinned staging; a future that carries CUDA tensors must name their devices.
        self.devices = sorted({s.tensor.device for s in layout.parameters if s.tensor.is_cuda}, key=str)
        self.grads = wire_buffer(elements, wire, bool(self.devices))
        self.averages = wire_buffer(elements, wire, bool(self.devices))
        # Per block, how many parameters it holds: what a step waits to stage before sending the block.
        self.parameters_per_block = [0] * layout.parameter_blocks
        for s in layout.parameters:
            for b in layout.blocks_of(s):
                self.parameters_per_block[b] += 1
        self.lock = threading.Lock()
        compressed = None
        if self.cluster is not None:  # this rank exchanges with the shards: it compresses as they say
            fmt, after, _ = shards_compression(self.cluster, compression, user="blockps.torch.averaging_hook")
            if fmt is not None and shape.dtype != "f32":
                raise ValueError(f"blockps: blockps.torch.averaging_hook: the shards run compress={fmt} over dtype="
                                 f"{shape.dtype}; the hook compresses f32 gradients: give the shards dtype=f32")
            if fmt is not None:
                # Rank 0's reset-rounds (below) starts every block's rounds at 0.
                compressed = (fmt, after, "average", f"averaging hook, rank {rank}", 0)
        self.exchange = exchanger(self.cluster, self.host, elements, layout.block_elements, wire, compressed)
        self._new_step()
        self._start_rounds(rank)

    def _start_rounds(self, rank):
        """Rank 0 resets the shards' rounds, then every rank waits for it: no push before. The reset drops what a
        previous run left open and re-forms the membership now. A shard re-forms by itself once every earlier
        worker was dropped, but after a torchrun restart the killed ranks' sessions may not be dropped yet (a
        killed process's TCP session ends when tgtd notices, a silent one after worker_timeout_ms): the new
        ranks would join a formation that still counts the dead ones, whose rounds do not wait as a new
        formation's do (seen in DdpHookTest.KilledRanksNextTorchrunAttemptTrainsExactly before the reset: a stall
        until worker_timeout_ms dropped both ranks)."""
        if rank == 0:
            try:
                self.cluster.control("reset-rounds")
            except Exception as e:  # blockps.Error: e.g. a shard whose admins= leaves rank 0 out
                raise ValueError(f"blockps: rank 0 could not reset the averaging shards' rounds ({e}); a run's first "
                                 "step would average what a previous run left. Let rank 0's initiator send control "
                                 "lines (the shard's admins=)") from e
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()

    def _new_step(self):
        self.missing = list(self.parameters_per_block)  # per block: parameters not staged yet this step
        self.done = [None] * self.layout.parameter_blocks  # per block: None (not back), True, or the exception
        self.waiting = []  # (future, bucket, slots) not completed yet
        # The step's exchanges, kept until they finished: dropping an unfinished one waits for it, which DDP's hook
        # must not. One that finished before it was kept here stays until the next step's end, harmlessly.
        self.exchanges = []

    def stage(self, bucket):
        """Copy the bucket's gradients in, send the blocks now complete, and return the bucket's future."""
        future = torch.futures.Future(devices=self.devices) if self.devices else torch.futures.Future()
        result = future.then(_raise_failure)
        slots = []
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            slot = self.slot_of.get(id(p))
            if slot is None:
                raise ValueError("blockps: a DDP bucket holds a parameter that AveragingState did not lay out (was it "
                                 "built from another model, or were parameters added or frozen after it?)")
            self.grads[slot.offset:slot.end].copy_(g.detach().reshape(-1))
            slots.append(slot)
        with self.lock:
            ready = []
            for slot in slots:
                for b in self.layout.blocks_of(slot):
                    self.missing[b] -= 1
                    if self.missing[b] == 0:
                        ready.append(b)
            self.waiting.append((future, bucket, slots))
        # Sent without the lock: a request refused before any I/O lands at once, on this thread, and takes it.
        for first, end in _runs(sorted(ready)):
            self._send(first, end)
        with self.lock:
            self._complete_locked()  # a bucket whose parameters have no elements waits for no block
        return result

    def _send(self, first, end):
        """Start the exchange of blocks first..end-1; its completion lands them, on whichever thread it comes."""
        def landed(error):
            outcome = True if error is None else self._failure(first, end, error)  # blockps.Error names the shard
            with self.lock:
                self._land(first, end, outcome)
                self._complete_locked()
        try:
            span = self.layout.block_span
            op = self.exchange.exchange_async(first, end - first, span(self.grads, first, end),
                                              span(self.averages, first, end), on_done=landed)
        except Exception as e:  # a buffer refused before any request: landed() was not called
            landed(e)
            return
        with self.lock:
            self.exchanges.append(op)

    def _failure(self, first, end, error):
        names = ", ".join(self.layout.names_in(first, end))
        return RuntimeError(f"blockps averaging hook: blocks {first}..{end - 1} (parameters {names}): {error}")

    def _land(self, first, end, outcome):
        for b in range(first, end):
            self.done[b] = outcome

    def _complete_locked(self):
        """Complete every waiting bucket whose blocks all came back; start a new step once all did."""
        still = []
        for future, bucket, slots in self.waiting:
            outcomes = [self.done[b] for s in slots for b in self.layout.blocks_of(s)]
            if any(o is None for o in outcomes):
                still.append((future, bucket, slots))
                continue
            failure = next((o for o in outcomes if o is not True), None)
            if failure is not None:
                future.set_result(failure)
                continue
            with torch.no_grad():
                for s, g in zip(slots, bucket.gradients()):
                    g.copy_(self.averages[s.offset:s.end].view_as(g))
            future.set_result(bucket.buffer())
        self.waiting = still
        if not still and all(d is not None for d in self.done):
            self._new_step()


def _raise_failure(future):
    value = future.value()
    if isinstance(value, Exception):
        raise value
    return value


def _runs(blocks):
    """Sorted block numbers as [first, end) runs of consecutive blocks."""
    runs = []
    for b in blocks:
        if runs and runs[-1][1] == b:
            runs[-1][1] = b + 1
        else:
            runs.append([b, b + 1])
    return [(a, e) for a, e in runs]


def averaging_hook(state, bucket):
    """DDP communication hook: the bucket's gradients averaged over every rank by the blockps shards."""
    return state.stage(bucket)
