"""Compressed exchanges for the torch paths (shards with compress=: docs/OPTIONS.md, "Compressed blocks"; issue 50).

The shards say the format and the warm-up (compress=, compress_after=): a block's rounds before compress_after go in
full precision, the later ones as one compressed block each way. This worker counts each block's rounds from the
start of its run (rank 0's reset-rounds started every shard's count at 0 too) and compresses its pushes with error
feedback: its residual (what compressing a block left out, per element, in f32) is added to the block's next
gradient. A worker that starts (or restarts) starts its residual at zero, and says so. With host aggregation the
host's leader compresses once, after the host's sum (it alone keeps a residual).
"""
import json
import sys
import threading

import numpy as np

from .._blockps import compress_blocks, compressed_block_bytes, decompress_blocks

FORMATS = ("sign1", "int8")


def shards_compression(cluster, asked=None, user="blockps.torch"):
    """(format, compress_after, rounds) every shard of `cluster` runs (format None: no compress=), and the fewest
    rounds any block has had on them (each block's round count starts there: the warm-up is counted from the shards'
    rounds, which a job's start or reset-rounds sets to 0, and a shard started from a checkpoint to its steps).
    `asked` (None: follow the shards; "none", "sign1" or "int8") must be what they run: ValueError otherwise, naming
    the shard."""
    runs, rounds = [], None
    for shard, page in cluster.status_pages():
        parsed = json.loads(page)
        opts = parsed["shard"]["settings"]
        runs.append((shard, opts.get("compress", "none"), int(opts.get("compress_after", "0"))))
        shard_rounds = parsed.get("rounds", {}).get("rounds_min", 0)
        rounds = shard_rounds if rounds is None else min(rounds, shard_rounds)
    if asked is not None and asked not in FORMATS + ("none",):
        raise ValueError(f"blockps: {user}: compression={asked!r}: must be None (as the shards run), 'none', "
                         f"'sign1' or 'int8'")
    first_shard, fmt, after = runs[0]
    for shard, f, a in runs[1:]:
        if (f, a) != (fmt, after):
            raise ValueError(f"blockps: {user}: shard {shard} runs compress={f};compress_after={a}, shard "
                             f"{first_shard} compress={fmt};compress_after={after}: every shard of a job must run the "
                             "same (set them alike in the shards' bsopts)")
    if asked is not None and asked != fmt:
        raise ValueError(f"blockps: {user}: compression={asked!r}, but shard {first_shard} runs compress={fmt}: the "
                         f"shards decide what their rounds take (set compress= in their bsopts, or pass "
                         f"compression=None to follow them)")
    return (None if fmt == "none" else fmt), after, rounds or 0


class _Exchanges:
    """The operations of one compressed exchange call (a run may split where its blocks' rounds differ in form):
    wait() and ready() as an Operation's; on_done once, after the pulled blocks are decoded."""

    def __init__(self, parts, on_done):
        self._left = parts
        self._error = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._on_done = on_done
        self.operations = []
        if parts == 0:
            self._finish()

    def part_done(self, error):
        with self._lock:
            if error is not None and self._error is None:
                self._error = error
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def _finish(self):
        self._done.set()
        if self._on_done is not None:
            self._on_done(self._error)

    def wait(self):
        self._done.wait()
        if self._error is not None:
            raise self._error

    def ready(self):
        return self._done.is_set()


class CompressedExchange:
    """exchange_async(first, count, grads, pulled, on_done=None) as Cluster.exchange_blocks_async, over f32 tensors
    of a flat model of `elements` elements in blocks of `block_elements`, for shards with compress=`fmt` after
    `after` rounds: a block's rounds before `after` go as the plain exchange; the later ones compressed with this
    worker's error feedback, and what comes back is decoded into `pulled` (pull="average": an averaging shard's
    compressed average; "weights": an optimizer shard's weights, read as they are)."""

    def __init__(self, cluster, fmt, after, elements, block_elements, pull="average", worker="this worker",
                 first_round=0):
        self.cluster, self.format, self.after, self.pull = cluster, fmt, after, pull
        self.block_elements = block_elements
        blocks = -(-elements // block_elements)
        self.rounds = [first_round] * blocks  # per block: the round its next exchange joins
        self.residual = np.zeros(elements, np.float32)
        self.block_bytes = compressed_block_bytes(fmt, block_elements)
        packed = cluster.packed_bytes(fmt, 0, blocks)
        self.packed_push = np.zeros(packed, np.uint8)
        self.packed_pull = np.zeros(packed, np.uint8)
        print(f"blockps: {worker}: compress={fmt} after {after} full-precision rounds of each block (from round "
              f"{first_round}); this worker's residual (its error feedback) starts at zero", file=sys.stderr, flush=True)

    def exchange_async(self, first, count, grads, pulled, on_done=None):
        runs = []  # (first, end, compressed) of consecutive blocks in the same form
        for b in range(first, first + count):
            compressed = self.rounds[b] >= self.after
            self.rounds[b] += 1
            if runs and runs[-1][2] == compressed:
                runs[-1][1] = b + 1
            else:
                runs.append([b, b + 1, compressed])
        exchanges = _Exchanges(len(runs), on_done)
        for lo, hi, compressed in runs:
            g = grads[(lo - first) * self.block_elements:(hi - first) * self.block_elements]
            p = pulled[(lo - first) * self.block_elements:(hi - first) * self.block_elements]
            try:
                op = (self._compressed if compressed else self._plain)(lo, hi, g, p, exchanges.part_done)
            except Exception as e:  # refused before any I/O (on_done was not called)
                exchanges.part_done(e)
                continue
            exchanges.operations.append(op)
        return exchanges

    def _plain(self, lo, hi, grads, pulled, done):
        return self.cluster.exchange_blocks_async(lo, hi - lo, grads.numpy(), pulled.numpy(), done)

    def _compressed(self, lo, hi, grads, pulled, done):
        e0, e1 = lo * self.block_elements, lo * self.block_elements + grads.numel()
        p0 = lo * self.block_bytes
        p1 = p0 + self.cluster.packed_bytes(self.format, lo, hi - lo)
        push, back = self.packed_push[p0:p1], self.packed_pull[p0:p1]
        compress_blocks(self.format, grads.numpy(), self.residual[e0:e1], push, self.block_elements)

        def landed(error):
            if error is None and self.pull == "average":
                try:
                    decompress_blocks(self.format, back, pulled.numpy(), self.block_elements)
                except Exception as e:  # a shard's average that does not decode: this exchange fails
                    error = e
            done(error)
        target = back if self.pull == "average" else pulled.numpy()
        return self.cluster.exchange_compressed_blocks_async(lo, hi - lo, self.format, self.pull, push, target, landed)
