"""ParameterServerStep: a single-process PyTorch model on a blockps DoubleBuffer (blockps.DoubleBuffer: double
buffering and adaptive pull), with flat parameter/gradient views. For torchrun scripts use DistributedOptimizer
(blockps/torch/optimizer.py) or the DDP hook (blockps/torch/ddp_hook.py) instead.

    import blockps, blockps.torch
    cluster = blockps.Cluster("cluster.toml")
    blockps.torch.upload_parameters(model, cluster)             # the model's weights to the PS (once)
    ps = blockps.torch.ParameterServerStep(model, cluster)      # params now live in the PS buffers
    for x, y in batches:
        loss_fn(model(x), y).backward()                         # gradients land in the PS buffer (no copy)
        metrics = ps.step()                                     # push, pull, swap; grads zeroed

The model's trainable parameters are laid end to end as f32 at the start of the model, as the package's one
layout places them (blockps.torch.ModelLayout's parameters: reverse registration order; the model's buffers stay
local); the cluster's dtype must be f32 and its model at least as large; the rest is padding, pushed as zero.
After each step() every parameter's .data and .grad are views of the new compute buffer; no bytes are copied
unless autograd replaced a .grad instead of accumulating into it (then it is copied once and counted in
`grad_copies`). The shards run the optimizer: the worker does not call an optimizer's step().
"""
import numpy as np
import torch

from .._blockps import DoubleBuffer
from .layout import ModelLayout
from .wire import wire_element_bytes


def _parameter_slots(model, cluster):
    """The model's trainable parameters where ModelLayout places them in the cluster's model, checked to fit as
    f32 CPU views without copies (ValueError naming what does not)."""
    if cluster.dtype != "f32":
        raise ValueError("blockps.torch needs a cluster of dtype f32 (torch views without copies); it is "
                         f"{cluster.dtype}")
    layout = ModelLayout(model, cluster.block_bytes // wire_element_bytes(cluster.dtype))
    if layout.parameter_elements > cluster.elements:
        raise ValueError(f"the model has {layout.parameter_elements} parameters, the cluster's model only "
                         f"{cluster.elements} elements")
    for s in layout.parameters:
        if s.tensor.dtype != torch.float32 or s.tensor.device.type != "cpu":
            raise ValueError(f"parameters must be float32 on the CPU, found {s.tensor.dtype} on {s.tensor.device}")
    return layout.parameters


def flat_parameters(model, cluster):
    """The model's parameters as one numpy array of the cluster's model size (padding zero): what
    cluster.write_weights() takes to initialise the PS."""
    flat = np.zeros(cluster.elements, dtype=np.float32)
    for s in _parameter_slots(model, cluster):
        flat[s.offset:s.end] = s.tensor.detach().reshape(-1).numpy()
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
        self.slots = _parameter_slots(model, cluster)
        self.db = DoubleBuffer(cluster, mode=mode, **options)
        self.grad_copies = 0
        self._views = {}  # data address of a buffer's weights -> (weight views, grad views, flat grads)
        self._bind()

    def _bind(self):
        weights, grads = self.db.weights, self.db.grads
        key = weights.ctypes.data
        if key not in self._views:
            w, g = torch.from_numpy(weights), torch.from_numpy(grads)
            wv = [w[s.offset:s.end].view_as(s.tensor) for s in self.slots]
            gv = [g[s.offset:s.end].view_as(s.tensor) for s in self.slots]
            self._views[key] = (wv, gv, g)
        wv, gv, g = self._views[key]
        g.zero_()
        for s, w_view, g_view in zip(self.slots, wv, gv):
            s.tensor.data = w_view
            s.tensor.grad = g_view
        self._current = gv

    def flat_weights(self):
        """The compute buffer's weights (a torch view, model elements long)."""
        return torch.from_numpy(self.db.weights)

    def flat_grads(self):
        """The compute buffer's gradients (a torch view, model elements long)."""
        return torch.from_numpy(self.db.grads)

    def step(self):
        """Push this step's gradients, make fresh weights current. Returns the step's metrics (dict, seconds)."""
        for s, g_view in zip(self.slots, self._current):
            grad = s.tensor.grad
            if grad is not None and grad.data_ptr() != g_view.data_ptr():
                g_view.copy_(grad)
                self.grad_copies += 1
        metrics = self.db.step()
        self._bind()
        return metrics
