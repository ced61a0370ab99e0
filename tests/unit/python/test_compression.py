"""blockps/torch/compression.py: which format and warm-up a job's shards agree on (and the refusals), and how one
exchange call is cut where its blocks' rounds change form: the warm-up's plain exchange, then compressed exchanges
whose pushes carry this worker's error feedback. The shards are stood in for by a recorder of the calls (the real
exchange against tgtd: tests/integration/sync/test_compressed_rounds.cpp, tests/integration/torch DdpHookTest)."""
import json

import numpy as np
import pytest
import torch

import blockps
from blockps.torch.compression import CompressedExchange, shards_compression


class Shards:
    """What CompressedExchange and shards_compression ask of a blockps.Cluster: status pages, packed sizes, and the two
    exchanges (recorded, completed at once)."""

    def __init__(self, settings, block_elements=1024):
        self.settings, self.block_elements, self.calls = settings, block_elements, []

    def status_pages(self):
        return [(f"shard{i}", json.dumps({"shard": {"settings": s}, "rounds": {"rounds_min": 3 + i}}))
                for i, s in enumerate(self.settings)]

    def packed_bytes(self, fmt, first, count):
        return count * blockps.compressed_block_bytes(fmt, self.block_elements)

    def exchange_blocks_async(self, first, count, grads, pulled, on_done):
        self.calls.append(("plain", first, count))
        pulled[:] = grads
        on_done(None)

    def exchange_compressed_blocks_async(self, first, count, fmt, pull, packed, target, on_done):
        self.calls.append(("compressed", first, count, bytes(packed)))
        target[:] = packed  # an averaging shard of one worker: the average is the push
        on_done(None)


def sign1(after=0):
    return {"compress": "sign1", "compress_after": str(after)}


def test_the_shards_say_the_format_and_the_warm_up_and_a_worker_that_asks_for_another_is_refused():
    # The rounds: the fewest any shard's blocks had (shard0 3, shard1 4): where each block's count starts.
    assert shards_compression(Shards([sign1(5), sign1(5)])) == ("sign1", 5, 3)
    assert shards_compression(Shards([{"compress": "none", "compress_after": "0"}])) == (None, 0, 3)
    assert shards_compression(Shards([sign1(5)]), asked="sign1") == ("sign1", 5, 3)
    with pytest.raises(ValueError, match="shard shard1 runs compress=sign1;compress_after=6, shard shard0"):
        shards_compression(Shards([sign1(5), sign1(6)]))
    with pytest.raises(ValueError, match="compression='int8', but shard shard0 runs compress=sign1"):
        shards_compression(Shards([sign1()]), asked="int8")
    with pytest.raises(ValueError, match="compression='zip': must be None"):
        shards_compression(Shards([sign1()]), asked="zip")


def test_blocks_go_plain_through_the_warm_up_then_compressed_with_the_workers_error_feedback(capsys):
    shards = Shards([sign1(1)])
    exchange = CompressedExchange(shards, "sign1", 1, 3 * 1024, 1024, "average", "test worker")
    assert "test worker: compress=sign1 after 1 full-precision rounds of each block (from round 0)" in \
        capsys.readouterr().err
    x = torch.tensor(np.random.default_rng(1).standard_normal(3 * 1024), dtype=torch.float32)
    out = torch.zeros_like(x)
    done = []
    exchange.exchange_async(0, 2, x[:2048], out[:2048], on_done=done.append).wait()
    assert shards.calls == [("plain", 0, 2)] and done == [None]
    assert torch.equal(out[:2048], x[:2048])
    # Blocks 0 and 1 are past their warm-up, block 2 is not: one call, cut into a compressed run and a plain one.
    ops = exchange.exchange_async(0, 3, x, out)
    ops.wait()
    assert [c[:3] for c in shards.calls[1:]] == [("compressed", 0, 2), ("plain", 2, 1)]
    decoded = np.zeros(2048, np.float32)
    blockps.decompress_blocks("sign1", np.frombuffer(shards.calls[1][3], np.uint8), decoded, 1024)
    assert torch.equal(out[:2048], torch.from_numpy(decoded)), "the pulled average is decoded into `pulled`"
    # The error-feedback identity: what went out plus the residual is what came in.
    assert np.allclose(decoded + exchange.residual[:2048], x[:2048].numpy(), atol=1e-6)
    assert exchange.residual[:2048].any(), "the compressed blocks left a residual"
    assert not exchange.residual[2048:].any(), "block 2 went plain: no residual"


def test_a_refusal_before_any_io_fails_the_call_and_still_ends_it():
    class Refusing(Shards):
        def exchange_compressed_blocks_async(self, *args):
            raise blockps.InvalidArgumentError("exchange_compressed: the compressed gradient buffer holds 0 bytes")
    exchange = CompressedExchange(Refusing([sign1()]), "sign1", 0, 1024, 1024, "average", "w")
    done = []
    op = exchange.exchange_async(0, 1, torch.zeros(1024), torch.zeros(1024), on_done=done.append)
    with pytest.raises(blockps.InvalidArgumentError):
        op.wait()
    assert op.ready() and isinstance(done[0], blockps.InvalidArgumentError)
