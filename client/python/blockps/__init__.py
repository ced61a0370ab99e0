"""blockps: train through a blockps parameter server (Python binding of libblockps).

    import blockps
    cluster = blockps.Cluster("cluster.toml")
    db = blockps.DoubleBuffer(cluster)            # pulls the weights into both buffers
    while training:
        compute(db.weights, db.grads)               # numpy views of the library's buffers (no copy)
        metrics = db.step()                         # push grads, pull fresh weights, swap (dict of times)

push/pull/write_weights/read_weights take any C-contiguous buffer of model_bytes (numpy arrays; torch tensors
through .numpy()). Errors raise blockps.Error with the library's message; blockps.ShardUnreachableError (a
blockps.Error) when a shard's session stayed lost for longer than the cluster file's [client] reconnect_s;
blockps.MismatchError (a blockps.Error and a ValueError) when the shards are not what the cluster file or the
caller's expect= says (sizes, place, kind), found before anything was written to them; blockps.InvalidArgumentError
(a blockps.Error and a ValueError) for an argument refused before anything was sent (a job name, no job where one
is needed).

compress_blocks / decompress_blocks / compressed_block_bytes: the compressed formats ('sign1', 'int8') of shards with
compress= (docs/OPTIONS.md, "Compressed blocks"), for Cluster.exchange_compressed_blocks_async.

blockps.torch (the subpackage blockps/torch/) trains a PyTorch model through the shards: DistributedOptimizer,
the DDP hook, torch-format checkpoints. blockps/jobs.py names a worker's job for any framework.
"""
from ._blockps import (  # noqa: F401
    Cluster,
    DoubleBuffer,
    Error,
    InvalidArgumentError,
    MismatchError,
    ShardUnreachableError,
    cluster_layout,
    compress_blocks,
    compressed_block_bytes,
    decompress_blocks,
    worker_initiator,
)

__all__ = [
    "Cluster",
    "DoubleBuffer",
    "Error",
    "InvalidArgumentError",
    "MismatchError",
    "ShardUnreachableError",
    "cluster_layout",
    "compress_blocks",
    "compressed_block_bytes",
    "decompress_blocks",
    "worker_initiator",
]
