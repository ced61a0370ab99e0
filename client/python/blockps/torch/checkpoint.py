"""Torch-format checkpoints of a blockps PS, and shards started from one.

    # export: the shards' checkpoint files -> a file plain PyTorch loads
    optimizer.checkpoint()                                    # DistributedOptimizer: every shard writes its file
    blockps.torch.save_torch_checkpoint("run.pt", model, torch.optim.Adam(model.parameters(), lr=1e-3),
                                        "cluster.toml", ["/var/lib/blockps/shard0.ckpt", ...])
    ck = torch.load("run.pt"); model.load_state_dict(ck["model"]); adam.load_state_dict(ck["optimizer"])

    # import: a torch checkpoint -> the shards' checkpoint files (then start the shards on them)
    model.load_state_dict(ck["model"]); adam.load_state_dict(ck["optimizer"])
    blockps.torch.write_shard_checkpoints(model, adam, "cluster.toml", ["shard0.ckpt", "shard1.ckpt"])

The flat model is the package's one layout (ModelLayout, blockps/torch/layout.py: parameters in reverse order,
then floating-point buffers from a block boundary) over the cluster file's layout of blocks on shards. The shards
keep f32 master weights and the optimizer state per element and a step count per block; in torch's format they
become each parameter's tensor and its optimizer state: Adam/AdamW `step` (the step count of the parameter's blocks),
`exp_avg`, `exp_avg_sq`; SGD with momentum `momentum_buffer`; plain SGD none. Integer buffers (BatchNorm's
num_batches_tracked) are not on the shards: the export keeps the given model's. These functions read and write
files only (blockps._shard_checkpoint, the checkpoint format's one definition: contract/checkpoint_file.h): run them
where the files are, and import only into files no running shard has open. The files record their options as given
(shard_options included); a shard checks them when it opens the file, and refuses one it cannot parse.
"""
import numpy as np
import torch

from .. import _shard_checkpoint
from .._blockps import cluster_layout
from ..shard_settings import options_of
from .layout import ModelLayout
from .optimizer import shard_optimizer_for
from .wire import wire_element_bytes

_STATE_NAMES = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"),
                "momentum": ("momentum_buffer",), "sgd": ()}


class _Placement:
    """The cluster file's blocks on shards, in elements of the wire dtype."""

    def __init__(self, cluster_file, checkpoint_files):
        info = cluster_layout(str(cluster_file))
        self.dtype = info["dtype"]
        ws = wire_element_bytes(self.dtype)
        self.block_bytes = info["block_bytes"]
        self.block_elements = self.block_bytes // ws
        self.elements = info["model_bytes"] // ws
        self.shard_bytes = info["shard_bytes"]
        self.shard_elements = [b // ws for b in self.shard_bytes]
        self.names = info["shards"]
        # Per global block: shard, first shard element, first model element, elements, shard block index.
        p = info["places"]
        self.blocks = [(int(s), int(so) // ws, int(mo) // ws, int(n) // ws, int(so) // self.block_bytes)
                       for s, so, mo, n in p]
        if len(checkpoint_files) != len(self.names):
            raise ValueError(f"blockps: {len(checkpoint_files)} checkpoint files for the cluster's "
                             f"{len(self.names)} shards ({', '.join(self.names)}), in cluster-file order")

    def gather(self, per_shard):
        """Model-ordered f32 array from per-shard arrays."""
        out = np.zeros(self.elements, np.float32)
        for shard, so, mo, n, _ in self.blocks:
            out[mo:mo + n] = per_shard[shard][so:so + n]
        return out

    def scatter(self, model_array):
        """Per-shard f32 arrays from a model-ordered one."""
        out = [np.zeros(n, np.float32) for n in self.shard_elements]
        for shard, so, mo, n, _ in self.blocks:
            out[shard][so:so + n] = model_array[mo:mo + n]
        return out


def _model_layout(model, placement):
    layout = ModelLayout(model, placement.block_elements)
    if layout.elements > placement.elements:
        raise ValueError(f"blockps: the model needs {layout.elements} elements, the cluster's model has "
                         f"{placement.elements}")
    return layout


def read_shard_checkpoints(model, optimizer, cluster_file, checkpoint_files):
    """Set the model's parameters and floating-point buffers, and the optimizer's state, from the shards'
    checkpoint files (in cluster-file order). ValueError when the shards ran another optimizer."""
    placement = _Placement(cluster_file, checkpoint_files)
    kind = shard_optimizer_for(optimizer)["opt"]
    for name, path in zip(placement.names, checkpoint_files):
        ran = options_of(_shard_checkpoint.read_header(str(path))["options"]).get("opt")
        if ran != kind:
            raise ValueError(f"blockps: shard {name} ({path}) ran opt={ran}, the optimizer given is {kind}")
    # The geometry the cluster file and the optimizer give: what a file that does not record its own is read with,
    # and what one that does must record.
    shards = [_shard_checkpoint.read(str(path), elements=elements, block_elements=placement.block_elements,
                                     state_slots=len(_STATE_NAMES[kind]))
              for path, elements in zip(checkpoint_files, placement.shard_elements)]
    weights = placement.gather([ck["weights"] for ck in shards])
    state = [placement.gather([ck["state"][k] for ck in shards]) for k in range(len(_STATE_NAMES[kind]))]
    steps = np.zeros(len(placement.blocks), np.uint64)
    for b, (shard, _, _, _, shard_block) in enumerate(placement.blocks):
        steps[b] = shards[shard]["steps"][shard_block]
    layout = _model_layout(model, placement)
    with torch.no_grad():
        for slot in layout.parameters + layout.buffers:
            slot.tensor.copy_(torch.from_numpy(weights[slot.offset:slot.end]).view_as(slot.tensor))
    for slot in layout.parameters:
        p = slot.tensor
        step = int(max(steps[b] for b in layout.blocks_of(slot))) if slot.numel else 0
        optimizer.state.pop(p, None)
        if step == 0:
            continue  # never pushed: torch creates the state on the first step too
        entry = {name: torch.from_numpy(state[k][slot.offset:slot.end].copy()).view_as(p).to(p.device)
                 for k, name in enumerate(_STATE_NAMES[kind])}
        if kind in ("adam", "adamw"):
            entry["step"] = torch.tensor(float(step))
        optimizer.state[p] = entry


def save_torch_checkpoint(path, model, optimizer, cluster_file, checkpoint_files):
    """read_shard_checkpoints, then torch.save({"model": model.state_dict(), "optimizer":
    optimizer.state_dict()}, path): what plain torch.load + load_state_dict take."""
    read_shard_checkpoints(model, optimizer, cluster_file, checkpoint_files)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def write_shard_checkpoints(model, optimizer, cluster_file, checkpoint_files, shard_options=""):
    """Write each shard's checkpoint file (cluster-file order) from the model's parameters and buffers and the
    optimizer's state, for shards that run `optimizer` (its hyper-parameters go into the files; a targets.conf
    may still override them). shard_options: more bsopts for the files (e.g. "mode=sync;workers=2")."""
    placement = _Placement(cluster_file, checkpoint_files)
    want = shard_optimizer_for(optimizer)
    kind = want["opt"]
    layout = _model_layout(model, placement)
    weights = np.zeros(placement.elements, np.float32)
    state = [np.zeros(placement.elements, np.float32) for _ in _STATE_NAMES[kind]]
    block_steps = np.zeros(len(placement.blocks), np.uint64)
    for slot in layout.parameters + layout.buffers:
        weights[slot.offset:slot.end] = slot.tensor.detach().float().reshape(-1).cpu().numpy()
    for slot in layout.parameters:
        entry = optimizer.state.get(slot.tensor, {})
        for k, name in enumerate(_STATE_NAMES[kind]):
            if name in entry and entry[name] is not None:
                state[k][slot.offset:slot.end] = entry[name].detach().float().reshape(-1).cpu().numpy()
        step = entry.get("step", 1 if entry else 0)
        step = int(step.item() if torch.is_tensor(step) else step)
        for b in layout.blocks_of(slot):
            block_steps[b] = max(block_steps[b], step)
    per_shard_weights = placement.scatter(weights)
    per_shard_state = [placement.scatter(s) for s in state]
    options = ";".join(f"{k}={v}" for k, v in want.items())
    for i, path in enumerate(checkpoint_files):
        blocks = -(-placement.shard_bytes[i] // placement.block_bytes)
        steps = np.zeros(blocks, np.uint64)
        for b, (shard, _, _, _, shard_block) in enumerate(placement.blocks):
            if shard == i:
                steps[shard_block] = block_steps[b]
        bsopts = (f"size={placement.shard_bytes[i]};dtype={placement.dtype};block={placement.block_bytes};{options}"
                  + (f";{shard_options}" if shard_options else ""))
        _shard_checkpoint.write(str(path), bsopts, placement.block_elements, steps, per_shard_weights[i],
                                [s[i] for s in per_shard_state])
