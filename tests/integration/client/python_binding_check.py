#!/usr/bin/python3
"""The Python package blockps against a running cluster (opt=sum shards, so every value is exact); run by
test_double_buffer.cpp as: python_binding_check.py CLUSTER_FILE. Exit 0 when every check passed; otherwise the
first failed check's message and exit 1."""
import faulthandler
import sys
import threading
import time
import weakref

import numpy as np
import torch

import blockps
import blockps.torch


def check(cond, message):
    if not cond:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def raises(exc, fn, text):
    try:
        fn()
    except exc as e:
        check(text in str(e), f"{exc.__name__} says '{e}', expected it to contain '{text}'")
        return
    check(False, f"expected {exc.__name__} ('{text}')")


c = blockps.Cluster(sys.argv[1])
n = c.elements
check(c.dtype == "f32" and c.model_bytes == 4 * n, f"model {c.model_bytes} bytes, {n} elements, {c.dtype}")

# push/pull with numpy and torch buffers, no copies: pull writes into the caller's array in place.
w = np.empty(n, np.float32)
address = w.ctypes.data
c.pull(w)
base = w.copy()
ones = np.ones(n, np.float32)
ones.setflags(write=False)  # a push only reads its buffer
c.push(ones)
c.pull(w)
check(w.ctypes.data == address and np.array_equal(w, base + 1), "push of ones then pull gives base + 1")
t = torch.full((n,), 2.0)
c.push(t.numpy())
t2 = torch.empty(n)
c.pull(t2.numpy())
check(torch.equal(t2, torch.from_numpy(base + 3)), "torch tensors through .numpy(): base + 3")
# The pipelined exchange: push and pull in one call, into another array or in place.
g = np.full(n, 0.5, np.float32)
c.exchange(g, w)
check(np.array_equal(w, base + 3.5), "exchange of 0.5 gives base + 3.5")
c.exchange(g, g)
check(np.array_equal(g, base + 4), "exchange in place gives base + 4")
raises(ValueError, lambda: c.exchange(np.ones(n, np.float32), np.empty(n + 1, np.float32)), "exchange (weights)")
c.push(np.full(n, -1.0, np.float32))  # back to base + 3 for what follows
raises(ValueError, lambda: c.push(np.ones(n + 1, np.float32)), "the model has")
raises(ValueError, lambda: c.pull(np.empty((n, 2), np.float32)[:, 0]), "C-contiguous")
raises(blockps.Error, lambda: blockps.Cluster("/nonexistent.toml"), "/nonexistent.toml")
# What docs/OPTIONS.md ("Python") promises at the package's top level, without connecting.
layout = blockps.cluster_layout(sys.argv[1])
check(layout["model_bytes"] == c.model_bytes and sum(layout["shard_bytes"]) == c.model_bytes
      and len(layout["shards"]) == len(layout["shard_bytes"]), f"blockps.cluster_layout: {layout}")
check(blockps.worker_initiator("rank3").endswith("-rank3"), "blockps.worker_initiator('rank3')")
check(set(blockps.__all__) >= {"Cluster", "DoubleBuffer", "Error", "ShardUnreachableError", "cluster_layout",
                               "worker_initiator"}, f"blockps.__all__: {blockps.__all__}")
# What the sessions did and recovered from, per shard: commands sent, no recovery on a healthy run.
counters = c.recovery_counters()
check(len(counters) >= 1 and all(k["commands"] > 0 and k["reconnects"] == 0 and k["unanswered_pushes_dropped"] == 0
                                 and k["unit_attentions_resent"] == 0 and k["shard"] for k in counters),
      f"recovery_counters() per shard: {counters}")

# exchange_blocks_async's on_done: called once with None or the error, on one of the cluster's I/O threads, or at
# once on the calling thread for a request refused before any I/O.
faulthandler.dump_traceback_later(60, exit=True)  # a deadlock fails the check (tracebacks on stderr), not hangs it
main_thread = threading.get_ident()
blocks, block_elements = c.block_count, c.block_bytes // 4


def recorder():
    """(calls, called, on_done): on_done appends (its argument, the calling thread) to calls and sets called."""
    calls, called = [], threading.Event()

    def on_done(error):
        calls.append((error, threading.get_ident()))
        called.set()
    return calls, called, on_done


def called_once(calls, called, what):
    check(called.wait(30), f"{what}: on_done was not called")
    time.sleep(0.1)  # room for a second call, which must not come
    check(len(calls) == 1, f"{what}: on_done called {len(calls)} times: {calls}")
    return calls[0]


c.pull(w)
quarter = np.full(n, 0.25, np.float32)
pulled = np.empty(n, np.float32)
calls, called, on_done = recorder()
op = c.exchange_blocks_async(0, blocks, quarter, pulled, on_done=on_done)
op.wait()
error, thread = called_once(calls, called, "a successful exchange")
check(error is None and thread != main_thread, f"a successful exchange: on_done({error!r}) on the calling thread")
check(np.array_equal(pulled, w + 0.25), "exchange_blocks_async with on_done pulls base + 3.25")

calls, called, on_done = recorder()
op = c.exchange_blocks_async(blocks, 1, quarter[:block_elements], pulled[:block_elements], on_done=on_done)
error, thread = called_once(calls, called, "a refused exchange")
check(type(error) is blockps.InvalidArgumentError and "outside the model" in str(error) and thread == main_thread,
      f"a refused exchange: on_done({error!r}) on {'this' if thread == main_thread else 'another'} thread")
raises(blockps.Error, op.wait, "outside the model")

# What on_done raises goes to sys.unraisablehook; the cluster goes on.
unraisable, hook = [], sys.unraisablehook
sys.unraisablehook = unraisable.append


def raising(error):
    raise RuntimeError(f"on_done raised on purpose ({error})")


c.exchange_blocks_async(0, blocks, quarter, pulled, on_done=raising).wait()
c.exchange_blocks_async(blocks, 1, quarter[:block_elements], pulled[:block_elements], on_done=raising)
deadline = time.monotonic() + 30
while len(unraisable) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
sys.unraisablehook = hook
check(len(unraisable) == 2 and all(isinstance(u.exc_value, RuntimeError) and u.object is raising for u in unraisable)
      and sorted("outside the model" in str(u.exc_value) for u in unraisable) == [False, True],
      f"what on_done raised: {unraisable}")
c.exchange(quarter, pulled)
check(np.array_equal(pulled, w + 0.75), "after on_done raised, the cluster exchanges on: base + 3.75")
c.push(np.full(n, -0.75, np.float32))  # back to base + 3 for what follows

# Dropping the Cluster waits for its exchanges in flight, whose callbacks take the GIL meanwhile: none deadlocks.
second = blockps.Cluster(sys.argv[1])
zeros = np.zeros(n, np.float32)
pulls = [np.empty(n, np.float32) for _ in range(32)]
calls, called, on_done = recorder()
ops = [second.exchange_blocks_async(0, blocks, zeros, p, on_done=on_done) for p in pulls]
del second
check(len(calls) == len(ops) and all(e is None for e, _ in calls), f"callbacks when the Cluster was dropped: {calls}")
check(all(op.ready() for op in ops) and all(np.array_equal(p, base + 3) for p in pulls),
      "the exchanges of a dropped Cluster finished and pulled base + 3")


# A callback may hold its Cluster's last reference, and drop it on that cluster's I/O thread (which ~Cluster waits
# for): the Cluster goes away all the same.
def holding(cluster, go):
    """An on_done that returns once `go` is set, and keeps `cluster` alive until it is dropped."""
    def on_done(error):
        go.wait(30)
        return cluster
    return on_done


third, go, gone = blockps.Cluster(sys.argv[1]), threading.Event(), threading.Event()
weakref.finalize(third, gone.set)
op = third.exchange_blocks_async(0, blocks, zeros, pulled, on_done=holding(third, go))
del third
go.set()
check(gone.wait(30), "a Cluster whose last reference its own callback held was never dropped")
op.wait()
faulthandler.cancel_dump_traceback_later()

# DoubleBuffer: numpy views of its two buffers; step swaps them (two addresses, alternating) with no copy, and
# hands back exactly the weights its pull read (one-step staleness: step k gives base + 3 + (k - 1)).
db = blockps.DoubleBuffer(c, adaptive_pull=True, warmup_steps=1)
addresses = []
for k in range(1, 7):
    db.grads[:] = 1
    db.weights[:] = np.nan
    m = db.step()
    check(set(m) >= {"compute_s", "stall_s", "bubble_s", "push_s", "pull_s", "weight_age_s", "pipelined"},
          f"metrics keys {sorted(m)}")
    check(np.all(db.weights == base + 3 + max(0, k - 1)), f"step {k}: weights {db.weights[:4]}")
    addresses.append(db.weights.ctypes.data)
check(len(set(addresses)) == 2 and addresses[0] != addresses[1] and addresses[0] == addresses[2],
      f"the compute buffer alternates between two buffers: {addresses}")
del db
raises(ValueError, lambda: blockps.DoubleBuffer(c, mode="triple"), "must be 'double' or 'sequential'")
raises(blockps.Error, lambda: blockps.DoubleBuffer(c, smoothing=0), "smoothing")

# blockps.torch: parameters and gradients are views of the PS buffers; the gradient autograd computes is what
# reaches the shards (sequential mode: weights after step = before + grad, as opt=sum does).
model = torch.nn.Linear(4, 2, bias=False)
ps = blockps.torch.ParameterServerStep(model, c, mode="sequential")
before = model.weight.detach().clone()
lo = ps.db.weights.ctypes.data
check(lo <= model.weight.data_ptr() < lo + c.model_bytes, "the parameter lives in the PS buffer")
x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
model(x).sum().backward()
check(ps.flat_grads()[:8].tolist() == [1, 2, 3, 4, 1, 2, 3, 4], f"grads in the buffer: {ps.flat_grads()[:8]}")
ps.step()
check(torch.equal(model.weight.detach(), before + torch.tensor([[1.0, 2, 3, 4], [1, 2, 3, 4]])),
      f"weights after the step: {model.weight}")
check(ps.grad_copies == 0, f"autograd accumulated in place (grad_copies {ps.grad_copies})")
check(float(ps.flat_grads().abs().sum()) == 0, "the next step starts with zero gradients")
raises(ValueError, lambda: blockps.torch.ParameterServerStep(torch.nn.Linear(n, 2), c), "parameters")

# One layout: the single-process helper places the parameters where ModelLayout does (DistributedOptimizer, the
# hook and the checkpoints): reverse registration order, so a Linear's bias comes first.
two = torch.nn.Linear(3, 2)
layout = blockps.torch.ModelLayout(two, c.block_bytes // 4)
flat = blockps.torch.flat_parameters(two, c)
check([(s.name, s.offset) for s in layout.parameters] == [("bias", 0), ("weight", 2)],
      f"ModelLayout: {[(s.name, s.offset) for s in layout.parameters]}")
check(np.array_equal(flat[:8], np.concatenate([two.bias.detach().numpy(), two.weight.detach().reshape(-1).numpy()]))
      and not flat[8:].any(), f"flat_parameters: {flat[:10]}")
print("python binding: every check passed")
