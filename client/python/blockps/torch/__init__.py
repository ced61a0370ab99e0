"""blockps.torch: PyTorch through a blockps parameter server (the framework binding, kept apart from the core
binding blockps._blockps as BytePS keeps byteps/torch/).

    optimizer = blockps.torch.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-3), model,
                                                   cluster="cluster.toml")         # torchrun; the shards step
    model.register_comm_hook(blockps.torch.AveragingState(model, "cluster.toml"),
                             blockps.torch.averaging_hook)                          # DDP; the script steps

Import the names from here; the modules are the package's parts:
- layout.py: ModelLayout, the one flat model every path and checkpoint uses (why its order is what it is), and
  block_bytes_for, a block size that lets a small model pipeline;
- optimizer.py: DistributedOptimizer (pushes during backward; the shards run the optimizer), shard_optimizer_for;
- ddp_hook.py: AveragingState and averaging_hook (DDP's gradients averaged by the shards);
- host.py: host aggregation (the ranks of a host combine their gradients; its leader talks to the shards);
- checkpoint.py: the shards' checkpoint files to and from torch's format;
- double_buffer.py: ParameterServerStep, a single process on a blockps.DoubleBuffer;
- worker.py, wire.py: what both torchrun paths share (a rank's identity, job claim and exchange; wire tensors).
"""
from .checkpoint import read_shard_checkpoints, save_torch_checkpoint, write_shard_checkpoints
from .ddp_hook import AveragingState, averaging_hook, averaging_model_bytes
from .double_buffer import ParameterServerStep, flat_parameters, upload_parameters
from .layout import ModelLayout, block_bytes_for
from .optimizer import DistributedOptimizer, shard_optimizer_for

__all__ = [
    "AveragingState",
    "DistributedOptimizer",
    "ModelLayout",
    "ParameterServerStep",
    "averaging_hook",
    "averaging_model_bytes",
    "block_bytes_for",
    "flat_parameters",
    "read_shard_checkpoints",
    "save_torch_checkpoint",
    "shard_optimizer_for",
    "upload_parameters",
    "write_shard_checkpoints",
]
