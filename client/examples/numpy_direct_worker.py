#!/usr/bin/python3
"""A Fashion-MNIST worker that trains through blockps with nothing but file I/O: no blockps code at all.

It opens each shard's grad and weights LUs (the /dev/sdX devices open-iscsi gives) with O_DIRECT, pulls the
weights with os.preadv into page-aligned buffers, computes an MLP's gradient with numpy, and pushes it with
os.pwrite (a WRITE to a grad LU is a push: the shard runs its optimizer). Through the page cache a read after a
write would return this worker's own gradient, hence O_DIRECT.

    numpy_direct_worker.py --shard /dev/sdb,/dev/sdc --shard /dev/sde,/dev/sdf \\
        --model-bytes 1M --block-bytes 128K --epochs 3 --init --min-accuracy 0.85

--shard GRAD,WEIGHTS   one per shard, in cluster order: its grad LU and its weights LU (LUN 1 and LUN 2)
--model-bytes, --block-bytes   the cluster's [model] size and block (f32); blocks are striped: block i lives on
                       shard i mod S at shard offset (i div S) x block (the default layout of blockps)
--init                 first write this worker's initial weights to the weights LUs (one worker does this)
--rank R --workers W   this worker's share of each epoch (sample j of the epoch's permutation if j mod W == R)
--steps N              stop after N pushes (a fixed amount of work, whatever the machine's speed; 0: whole epochs)
--min-accuracy A       exit 0 only if the final test accuracy (of weights pulled from the PS) is >= A
--self-check           no devices: train the same model locally (numpy Adam) to check the math; exit as above
--log-every N          a progress line every N steps (steps done, seconds per step, loss; 0: per epoch only)
--stall-report S       when no step finished for S seconds, say what the worker is in (the device, offset and
                       bytes of the I/O, or the compute) and dump its Python stack; again every S s (0: never)
--time-limit S         the time the workload has (a test's limit; 0: none): every progress line projects the
                       whole run from the seconds per step so far, and when the projection passes S the worker
                       stops at once (exit 3) and says how fast it ran, instead of being killed at the limit
The shards should run opt=adam;lr=0.001 (what scripts/demo.sh configures). Exit 1: accuracy below the bound;
2: a wrong argument or an I/O error (the message names the device); 3: too slow for --time-limit.
"""
import argparse
import faulthandler
import gzip
import mmap
import os
import sys
import threading
import time

import numpy as np

DATA_DIR = os.environ.get("BLOCKPS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
HIDDEN = 128
SEED = 2026


def fail(message):
    print(f"numpy_direct_worker: {message}", file=sys.stderr)
    sys.exit(2)


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)
    except (ValueError, IndexError):
        fail(f"'{text}' is not a byte count (e.g. 1048576, 128K, 1M)")


def load(prefix):
    def idx(name):
        path = os.path.join(DATA_DIR, name)
        try:
            raw = gzip.open(path, "rb").read()
        except OSError as e:
            fail(f"cannot read {path}: {e} (Debian's dataset-fashion-mnist)")
        dims = raw[3]
        shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
        return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)
    x = (idx(f"{prefix}-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0 - 0.2860) / 0.3530
    return x, idx(f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)


class Mlp:
    """784 -> HIDDEN -> 10, ReLU, softmax cross-entropy; parameters as views into one flat f32 vector."""
    shapes = [(784, HIDDEN), (HIDDEN,), (HIDDEN, 10), (10,)]
    count = sum(int(np.prod(s)) for s in shapes)

    @staticmethod
    def views(flat):
        out, offset = [], 0
        for s in Mlp.shapes:
            n = int(np.prod(s))
            out.append(flat[offset:offset + n].reshape(s))
            offset += n
        return out

    @staticmethod
    def init(flat):
        rng = np.random.default_rng(SEED)
        w1, b1, w2, b2 = Mlp.views(flat)
        w1[:] = rng.uniform(-1, 1, w1.shape) / np.sqrt(784)
        w2[:] = rng.uniform(-1, 1, w2.shape) / np.sqrt(HIDDEN)
        b1[:] = 0
        b2[:] = 0

    @staticmethod
    def logits(flat, x):
        w1, b1, w2, b2 = Mlp.views(flat)
        h = np.maximum(x @ w1 + b1, 0)
        return h, h @ w2 + b2

    @staticmethod
    def gradient(flat, grad, x, y):
        """Writes the mean cross-entropy gradient of the batch into `grad`; returns the loss."""
        w1, b1, w2, b2 = Mlp.views(flat)
        h, z = Mlp.logits(flat, x)
        z = z - z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
        dz = p
        dz[np.arange(len(y)), y] -= 1
        dz /= len(y)
        g1, gb1, g2, gb2 = Mlp.views(grad)
        g2[:] = h.T @ dz
        gb2[:] = dz.sum(0)
        dh = (dz @ w2.T) * (h > 0)
        g1[:] = x.T @ dh
        gb1[:] = dh.sum(0)
        return float(loss)

    @staticmethod
    def accuracy(flat, x, y):
        return float((Mlp.logits(flat, x)[1].argmax(1) == y).mean())


class Progress:
    """What the worker is doing now, for a watchdog thread that reports a stall: where it waits (the I/O or the
    compute it is in, and for how long) and the Python stack, so that a time limit that kills it says where it
    stuck. The I/O calls release the GIL, so the watchdog runs while one blocks."""

    def __init__(self, stall_report_s):
        self.doing, self.since, self.steps, self.last_step = "starting", time.monotonic(), 0, time.monotonic()
        if stall_report_s > 0:
            threading.Thread(target=self._watch, args=(stall_report_s,), daemon=True).start()

    def now(self, doing):
        self.doing, self.since = doing, time.monotonic()

    def step_done(self):
        self.steps += 1
        self.last_step = time.monotonic()

    def _watch(self, every):
        while True:
            time.sleep(every)
            quiet = time.monotonic() - self.last_step
            if quiet < every:
                continue
            print(f"numpy_direct_worker: no step finished for {quiet:.0f} s ({self.steps} done); in: {self.doing} "
                  f"for {time.monotonic() - self.since:.0f} s; stack:", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


def aligned(nbytes):
    """A page-aligned, zeroed buffer (O_DIRECT needs aligned memory) and an f32 view of it."""
    buf = mmap.mmap(-1, max(nbytes, mmap.PAGESIZE))
    return buf, np.frombuffer(buf, np.float32, nbytes // 4)


class StripedDevices:
    """The model striped over the shards' LUs: block i on shard i mod S at shard offset (i div S) x block."""

    def __init__(self, shards, model_bytes, block_bytes, progress):
        self.progress = progress  # told of every I/O before it starts
        self.places = []  # (shard, shard offset, model offset, bytes)
        shard_bytes = [0] * len(shards)
        for b, model_off in enumerate(range(0, model_bytes, block_bytes)):
            s = b % len(shards)
            n = min(block_bytes, model_bytes - model_off)
            self.places.append((s, shard_bytes[s], model_off, n))
            shard_bytes[s] += n
        self.fds, self.buffers = [], []
        for s, (grad, weights) in enumerate(shards):
            fds = {}
            for role, path in (("grad", grad), ("weights", weights)):
                try:
                    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
                except OSError as e:
                    fail(f"shard {s} {role} LU {path}: cannot open with O_DIRECT: {e}")
                size = os.lseek(fd, 0, os.SEEK_END)
                if size != shard_bytes[s]:
                    fail(f"shard {s} {role} LU {path}: {size} bytes, the geometry gives this shard {shard_bytes[s]} "
                         f"(--model-bytes / --block-bytes / the number of --shard must match the cluster)")
                fds[role] = (fd, path)
            self.fds.append(fds)
            self.buffers.append(aligned(shard_bytes[s]))
        self.shard_bytes = shard_bytes

    def _scatter(self, flat):
        raw = flat.view(np.uint8)
        for s, shard_off, model_off, n in self.places:
            np.frombuffer(self.buffers[s][0], np.uint8, n, shard_off)[:] = raw[model_off:model_off + n]

    def _gather(self, flat):
        raw = flat.view(np.uint8)
        for s, shard_off, model_off, n in self.places:
            raw[model_off:model_off + n] = np.frombuffer(self.buffers[s][0], np.uint8, n, shard_off)

    def write(self, role, flat):
        self._scatter(flat)
        for s, fds in enumerate(self.fds):
            fd, path = fds[role]
            self.progress.now(f"pwrite of {self.shard_bytes[s]} bytes at 0 to shard {s} {role} LU {path}")
            try:
                done = os.pwrite(fd, memoryview(self.buffers[s][0])[:self.shard_bytes[s]], 0)
            except OSError as e:
                fail(f"shard {s} {role} LU {path}: write of {self.shard_bytes[s]} bytes failed: {e}")
            if done != self.shard_bytes[s]:
                fail(f"shard {s} {role} LU {path}: short write ({done} of {self.shard_bytes[s]} bytes)")

    def read(self, role, flat):
        for s, fds in enumerate(self.fds):
            fd, path = fds[role]
            self.progress.now(f"preadv of {self.shard_bytes[s]} bytes at 0 from shard {s} {role} LU {path}")
            try:
                done = os.preadv(fd, [memoryview(self.buffers[s][0])[:self.shard_bytes[s]]], 0)
            except OSError as e:
                fail(f"shard {s} {role} LU {path}: read of {self.shard_bytes[s]} bytes failed: {e}")
            if done != self.shard_bytes[s]:
                fail(f"shard {s} {role} LU {path}: short read ({done} of {self.shard_bytes[s]} bytes)")
        self._gather(flat)

    def push(self, grads):   # a WRITE to the grad LUs: the shards apply their optimizer
        self.write("grad", grads)

    def pull(self, weights):  # a READ of the grad LUs: the current weights
        self.read("grad", weights)


class LocalAdam:
    """--self-check: what the shards do on a push (PyTorch's Adam, lr 1e-3), in the process."""

    def __init__(self, weights):
        self.w, self.m, self.v, self.t = weights.copy(), np.zeros_like(weights), np.zeros_like(weights), 0

    def push(self, g, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        self.t += 1
        self.m = b1 * self.m + (1 - b1) * g
        self.v = b2 * self.v + (1 - b2) * g * g
        self.w -= lr * (self.m / (1 - b1 ** self.t)) / (np.sqrt(self.v / (1 - b2 ** self.t)) + eps)

    def pull(self, weights):
        weights[:] = self.w


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shard", action="append", default=[], metavar="GRAD,WEIGHTS")
    p.add_argument("--model-bytes", default="1M")
    p.add_argument("--block-bytes", default="128K")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--init", action="store_true")
    p.add_argument("--min-accuracy", type=float, default=0.85)
    p.add_argument("--self-check", action="store_true")
    p.add_argument("--log-every", type=int, default=0)
    p.add_argument("--stall-report", type=float, default=60)
    p.add_argument("--time-limit", type=float, default=0)
    a = p.parse_args()
    model_bytes, block_bytes = parse_bytes(a.model_bytes), parse_bytes(a.block_bytes)
    if a.epochs < 1 or a.batch < 1 or a.steps < 0 or not 0 <= a.rank < a.workers or a.log_every < 0 \
            or a.stall_report < 0 or a.time_limit < 0:
        fail("--epochs and --batch must be >= 1, --steps, --log-every, --stall-report and --time-limit >= 0 and "
             "--rank in 0..--workers-1")
    if model_bytes < 4 * Mlp.count or model_bytes % 512 or block_bytes % 512 or block_bytes <= 0:
        fail(f"--model-bytes must be >= {4 * Mlp.count} (the MLP's f32 parameters) and, like --block-bytes, a "
             f"multiple of 512; got {model_bytes} and {block_bytes}")
    progress = Progress(a.stall_report)
    _, weights = aligned(model_bytes)
    _, grads = aligned(model_bytes)
    if a.self_check:
        if a.shard:
            fail("--self-check uses no devices: leave out --shard")
        Mlp.init(weights)
        ps = LocalAdam(weights)
    else:
        if not a.shard:
            fail("give each shard's LUs: --shard GRAD_DEVICE,WEIGHTS_DEVICE (once per shard, in cluster order)")
        shards = []
        for spec in a.shard:
            parts = spec.split(",")
            if len(parts) != 2 or not all(parts):
                fail(f"--shard '{spec}' must be GRAD_DEVICE,WEIGHTS_DEVICE")
            shards.append(parts)
        ps = StripedDevices(shards, model_bytes, block_bytes, progress)
        if a.init:
            Mlp.init(weights)
            ps.write("weights", weights)
            print(f"initial weights ({Mlp.count} parameters) written to {len(shards)} weights LUs", flush=True)
    progress.now(f"loading Fashion-MNIST from {DATA_DIR}")
    loading = time.monotonic()
    train_x, train_y = load("train")
    test_x, test_y = load("t10k")
    print(f"Fashion-MNIST loaded ({len(train_y)} training, {len(test_y)} test images) in "
          f"{time.monotonic() - loading:.1f} s", flush=True)
    per_epoch = -(-len(range(a.rank, len(train_y), a.workers)) // a.batch)
    total_steps = min(a.steps, per_epoch * a.epochs) if a.steps else per_epoch * a.epochs
    # A test-set evaluation is a forward pass over the test images: about a third of a training step's compute
    # per batch (forward; backward twice that), counted in steps for the projection. Evaluated once per epoch.
    eval_steps = -(-len(test_y) // a.batch) / 3 * (1 if a.steps else a.epochs)
    start, steps = time.monotonic(), 0
    progress.step_done()  # the watchdog counts from here, not from the start
    for epoch in range(a.epochs):
        order = np.random.default_rng(SEED + epoch).permutation(len(train_y))[a.rank::a.workers]
        loss_sum, seen, t0 = 0.0, 0, time.monotonic()
        for i in range(0, len(order), a.batch):
            if a.steps and steps == a.steps:
                break
            idx = order[i:i + a.batch]
            ps.pull(weights)
            progress.now(f"the gradient of step {steps + 1}")
            loss = Mlp.gradient(weights, grads, train_x[idx], train_y[idx])
            loss_sum += loss * len(idx)
            seen += len(idx)
            ps.push(grads)
            steps += 1
            progress.step_done()
            if a.log_every and steps % a.log_every == 0:
                elapsed = time.monotonic() - start
                projected = elapsed / steps * (total_steps + eval_steps)
                budget = f"  projected {projected:.0f} s of the {a.time_limit:g} s limit" if a.time_limit else ""
                print(f"step {steps}  loss {loss:.4f}  {elapsed / steps:.3f} s/step  t {elapsed:.1f}s{budget}",
                      flush=True)
                if a.time_limit and projected > a.time_limit:
                    print(f"numpy_direct_worker: too slow for --time-limit {a.time_limit:g} s: {elapsed / steps:.3f}"
                          f" s a step over {steps} steps projects {projected:.0f} s for {total_steps} steps and the "
                          f"evaluation; stopping now rather than at the limit", file=sys.stderr, flush=True)
                    sys.exit(3)
        if not seen:
            break
        ps.pull(weights)
        progress.now("the test accuracy")
        acc = Mlp.accuracy(weights, test_x, test_y)
        print(f"epoch {epoch + 1}  steps {steps}  loss {loss_sum / seen:.4f}  test acc {acc * 100:.2f}%  "
              f"{seen / (time.monotonic() - t0):.0f} img/s  t {time.monotonic() - start:.1f}s", flush=True)
    ok = acc >= a.min_accuracy
    print(f"final test accuracy {acc * 100:.2f}% ({'>=' if ok else 'BELOW'} the bound {a.min_accuracy * 100:.2f}%)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
