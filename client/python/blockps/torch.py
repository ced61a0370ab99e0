"""PyTorch through a blockps parameter server.

For torchrun scripts: blockps.torch.DistributedOptimizer (blockps/distributed.py): one wrapper line, pushes
during backward, any number of ranks, BatchNorm buffers kept consistent, torch-format checkpoints.

Below, the older single-process helper: flat parameter/gradient views and a double-buffered step.

    import blockps, blockps.torch
    cluster = blockps.Cluster("cluster.toml")
    ps = blockps.torch.ParameterServerStep(model, cluster)      # params now live in the PS buffers
    for x, y in batches:
        loss_fn(model(x), y).backward()                         # gradients land in the PS buffer (no copy)
        metrics = ps.step()                                     # push, pull, swap; grads zeroed

The model's trainable parameters, in model.parameters() order, are laid end to end as f32 at the start of the
model (the cluster's dtype must be f32 and its model at least as large; the rest is padding, pushed as zero).
After each step() every parameter's .data and .grad are views of the new compute buffer; no bytes are copied
unless autograd replaced a .grad instead of accumulating into it (then it is copied once and counted in
`grad_copies`). The shards run the optimizer: the worker does not call an optimizer's step().
"""
import numpy as np
import torch

from ._blockps import DoubleBuffer
from .distributed import DistributedOptimizer, ModelLayout, shard_optimizer_for, torchrun_identity  # noqa: F401
from .ddp import AveragingState, averaging_hook, averaging_model_bytes  # noqa: F401
from .torch_checkpoint import read_shard_checkpoints, save_torch_checkpoint, write_shard_checkpoints  # noqa: F401


def trainable_parameters(model):
    return [p for p in model.parameters() if p.requires_grad]


def parameter_count(model):
    return sum(p.numel() for p in trainable_parameters(model))


def _check_fits(model, cluster):
    if cluster.dtype != "f32":
        raise ValueError(f"blockps.torch needs a cluster of dtype f32 (torch views without copies); it is {cluster.dtype}")
    n = parameter_count(model)
    if n > cluster.elements:
        raise ValueError(f"the model has {n} parameters, the cluster's model only {cluster.elements} elements")
    for p in trainable_parameters(model):
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise ValueError(f"parameters must be float32 on the CPU, found {p.dtype} on {p.device}")


def flat_parameters(model, cluster):
    """The model's parameters as one numpy array of the cluster's model size (padding zero): what
    cluster.write_weights() takes to initialise the PS."""
    _check_fits(model, cluster)
    flat = np.zeros(cluster.elements, dtype=np.float32)
    offset = 0
    for p in trainable_parameters(model):
        k = p.numel()
        flat[offset:offset + k] = p.detach().reshape(-1).numpy()
        offset += k
    return flat


def upload_parameters(model, cluster):
    """Assign the model's current parameters to the PS (weights LUs; no optimizer runs)."""
    cluster.write_weights(flat_parameters(model, cluster))


class ParameterServerStep:
    """Binds a model's parameters and gradients to a blockps DoubleBuffer (see the module's doc).

    mode: "double" (double buffering: compute on one buffer while the other is pushed and pulled) or
    "sequential" (one pipelined push+pull exchange inside step(), no overlap with compute). adaptive_pull,
    smoothing, safety, warmup_steps: as blockps.DoubleBuffer (docs/OPTIONS.md, "Double buffering").
    """

    def __init__(self, model, cluster, mode="double", **options):
        _check_fits(model, cluster)
        self.params = trainable_parameters(model)
        self.db = DoubleBuffer(cluster, mode=mode, **options)
        self.grad_copies = 0
        self._views = {}  # data address of a buffer's weights -> (weight views, grad views, flat grads)
        self._bind()

    def _bind(self):
        weights, grads = self.db.weights, self.db.grads
        key = weights.ctypes.data
        if key not in self._views:
            w, g = torch.from_numpy(weights), torch.from_numpy(grads)
            wv, gv, offset = [], [], 0
            for p in self.params:
                k = p.numel()
                wv.append(w[offset:offset + k].view_as(p))
                gv.append(g[offset:offset + k].view_as(p))
                offset += k
            self._views[key] = (wv, gv, g)
        wv, gv, g = self._views[key]
        g.zero_()
        for p, w_view, g_view in zip(self.params, wv, gv):
            p.data = w_view
            p.grad = g_view
        self._current = gv

    def flat_weights(self):
        """The compute buffer's weights (a torch view, model elements long)."""
        return torch.from_numpy(self.db.weights)

    def flat_grads(self):
        """The compute buffer's gradients (a torch view, model elements long)."""
        return torch.from_numpy(self.db.grads)

    def step(self):
        """Push this step's gradients, make fresh weights current. Returns the step's metrics (dict, seconds)."""
        for p, g_view in zip(self.params, self._current):
            if p.grad is not None and p.grad.data_ptr() != g_view.data_ptr():
                g_view.copy_(p.grad)
                self.grad_copies += 1
        metrics = self.db.step()
        self._bind()
        return metrics
