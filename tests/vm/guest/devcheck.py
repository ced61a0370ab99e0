#!/usr/bin/env python3
"""Checks of the /dev path inside the VM with plain POSIX I/O (os.pwrite/os.preadv, O_DIRECT, page-aligned
buffers): what a worker of any framework does. Exit 0 when the check holds, 1 with the reason otherwise.

  devcheck.py grad PUSH_DEV PULL_DEV --lr LR --momentum MU [--offset BYTES] [--bytes BYTES]
      A gradient push through PUSH_DEV (a grad LU) must update the weights the way the shard's momentum SGD
      does, as read through PULL_DEV (the grad LU of the same shard over the same or another transport). The
      velocity left by earlier pushes is unknown, so: pull w0, push g1, pull w1 (every element must move;
      v1 = (w0 - w1) / lr), push g2, pull w2, and w2 must equal w1 - lr * (mu * v1 + g2).
  devcheck.py weights WRITE_DEV READ_DEV... [--offset BYTES] [--bytes BYTES]
      Weights written to WRITE_DEV (a weights LU: plain disk semantics) read back bit for bit from every
      READ_DEV (the weights and grad LUs of that shard, over any transport).
  devcheck.py fsync GRAD_DEV CHECKPOINT_FILE
      fsync() of a grad device (SYNCHRONIZE CACHE) after a push writes the shard's checkpoint file.
  devcheck.py compressed GRAD_DEV WEIGHTS_DEV [--block BYTES]
      An averaging shard with compress=sign1;compress_after=1 and one worker (this check's session), block 0
      (docs/OPTIONS.md, "Compressed blocks"): round 0, the warm-up, is a pwrite of the f32 block and its pread is
      the average, the block itself; in round 1 a pwrite of the f32 block is refused (an I/O error: ILLEGAL
      REQUEST), the block's sign1 image (made here with numpy from the documented layout) written at the block's
      first byte is served, and the pread of the same bytes gives the shard's compressed average, which decodes to
      what was pushed (one worker's average); the rest of the block reads as zeros, and the weights LU holds the
      decoded average.
  devcheck.py fence STATUS_DEV MEMBER_GRAD_DEV OTHER_GRAD_DEV [--offset BYTES]
      A job claimed through STATUS_DEV (the control line job=NAME: it binds the kernel's session of that device)
      fences the shard: a push through MEMBER_GRAD_DEV (the same session) is served, one through OTHER_GRAD_DEV
      (another session: the other transport's) fails with the SCSI status RESERVATION CONFLICT (an I/O error to
      the program) and is not counted by the shard; after the control line `release` the other session's
      push is served again.
"""
import argparse
import errno
import json
import mmap
import os
import sys
import time

import numpy as np


def fail(msg):
    print(f"devcheck: FAIL: {msg}", flush=True)
    sys.exit(1)


class Dev:
    def __init__(self, path, write):
        self.path = path
        # O_DIRECT: through the page cache a read after a push would return our own gradient.
        self.fd = os.open(path, (os.O_RDWR if write else os.O_RDONLY) | os.O_DIRECT)

    def read(self, off, n):
        buf = mmap.mmap(-1, n)  # page-aligned, as O_DIRECT needs
        got = os.preadv(self.fd, [buf], off)
        if got != n:
            fail(f"short read from {self.path} at {off}: {got} of {n} bytes")
        return np.frombuffer(buf, dtype=np.float32).copy()

    def write(self, off, arr):
        data = arr.astype(np.float32).tobytes()
        buf = mmap.mmap(-1, len(data))
        buf.write(data)
        got = os.pwritev(self.fd, [buf], off)
        if got != len(data):
            fail(f"short write to {self.path} at {off}: {got} of {len(data)} bytes")

    def close(self):
        os.close(self.fd)


def check_grad(a):
    push, pull = Dev(a.push, True), Dev(a.pull, False)
    n = a.bytes // 4
    rng = np.random.default_rng(7)
    lr, mu = np.float32(a.lr), np.float32(a.momentum)
    w0 = pull.read(a.offset, a.bytes)
    g1 = rng.uniform(0.5e-2, 1e-2, n).astype(np.float32) * rng.choice([-1, 1], n).astype(np.float32)
    push.write(a.offset, g1)
    w1 = pull.read(a.offset, a.bytes)
    moved = np.count_nonzero(w1 != w0)
    if moved != n:
        fail(f"push of g1 via {a.push}: only {moved} of {n} weights changed as read via {a.pull}")
    v1 = (w0.astype(np.float64) - w1.astype(np.float64)) / float(lr)
    g2 = rng.uniform(0.5e-2, 1e-2, n).astype(np.float32)
    push.write(a.offset, g2)
    w2 = pull.read(a.offset, a.bytes)
    want = w1.astype(np.float64) - float(lr) * (float(mu) * v1 + g2.astype(np.float64))
    err = np.abs(w2 - want)
    # The update moves each weight by lr*|...| >= 2.5e-4; float rounding of w (~1e-2) and of the derived
    # velocity stays below 1e-6.
    bad = np.count_nonzero(err > 1e-6)
    if bad:
        i = int(np.argmax(err))
        fail(f"push of g2 via {a.push}: {bad} of {n} weights off the momentum update (worst element {i}: got "
             f"{w2[i]!r}, want {want[i]!r}; w1 {w1[i]!r}, v1 {v1[i]!r}, g2 {g2[i]!r})")
    print(f"devcheck: grad ok: {n} elements at byte {a.offset}, push {a.push}, pull {a.pull}; "
          f"max error {err.max():.2e}, mean step {np.abs(w2 - w1).mean():.2e}")


def check_weights(a):
    w = Dev(a.write, True)
    n = a.bytes // 4
    vals = np.random.default_rng(11).normal(0, 0.02, n).astype(np.float32)
    w.write(a.offset, vals)
    for path in a.read:
        got = Dev(path, False).read(a.offset, a.bytes)
        if not np.array_equal(got.view(np.uint32), vals.view(np.uint32)):
            bad = np.count_nonzero(got.view(np.uint32) != vals.view(np.uint32))
            fail(f"weights written to {a.write} read back from {path}: {bad} of {n} elements differ")
        print(f"devcheck: weights ok: {n} elements at byte {a.offset} written via {a.write}, read via {path}")


def check_fsync(a):
    before = os.stat(a.checkpoint)
    time.sleep(1.1)  # mtime granularity of the checkpoint file's filesystem
    dev = Dev(a.grad, True)
    dev.write(0, np.full(1024, 1e-3, dtype=np.float32))
    t0 = time.monotonic()
    os.fsync(dev.fd)
    took = time.monotonic() - t0
    after = os.stat(a.checkpoint)
    # The module writes a temp file and renames it over the checkpoint: a new inode (or at least a new mtime).
    if after.st_ino == before.st_ino and after.st_mtime_ns <= before.st_mtime_ns:
        fail(f"fsync of {a.grad} did not rewrite {a.checkpoint} (size {before.st_size} -> {after.st_size}, "
             f"mtime unchanged)")
    if after.st_size == 0:
        fail(f"{a.checkpoint} is empty after the fsync of {a.grad}")
    print(f"devcheck: fsync ok: {a.checkpoint} rewritten ({before.st_size} -> {after.st_size} bytes, "
          f"inode {before.st_ino} -> {after.st_ino}) in {took:.2f}s")


CHUNK = 256  # elements per sign1 scale (contract/compressed_wire.h)


def sign1_image(x):
    """x (float32) as a sign1 block: a float32 scale per chunk (mean |v|), then the sign bits LSB first (1 =
    negative), zero-padded to 512 bytes."""
    chunks = -(-len(x) // CHUNK)
    scales = np.array([np.abs(x[c * CHUNK:(c + 1) * CHUNK]).mean(dtype=np.float32) for c in range(chunks)],
                      dtype=np.float32)
    body = scales.tobytes() + np.packbits((x < 0).astype(np.uint8), bitorder="little").tobytes()
    return body + bytes(-len(body) % 512)


def sign1_values(image, n):
    chunks = -(-n // CHUNK)
    scales = np.frombuffer(image[:4 * chunks], dtype=np.float32)
    bits = np.unpackbits(np.frombuffer(image[4 * chunks:4 * chunks + -(-n // 8)], dtype=np.uint8),
                         bitorder="little")[:n]
    magnitude = np.repeat(scales, CHUNK)[:n]
    return np.where(bits == 1, -magnitude, magnitude).astype(np.float32)


def raw_write(dev, off, data):
    buf = mmap.mmap(-1, len(data))
    buf.write(data)
    got = os.pwritev(dev.fd, [buf], off)
    if got != len(data):
        fail(f"short write to {dev.path} at {off}: {got} of {len(data)} bytes")


def raw_read(dev, off, n):
    buf = mmap.mmap(-1, n)
    if os.preadv(dev.fd, [buf], off) != n:
        fail(f"short read from {dev.path} at {off}")
    return bytes(buf)


def check_compressed(a):
    grad, weights = Dev(a.grad, True), Dev(a.weights, False)
    n = a.block // 4
    rng = np.random.default_rng(5)
    g0 = rng.normal(0, 1e-2, n).astype(np.float32)
    grad.write(0, g0)  # round 0, the warm-up: f32
    got = grad.read(0, a.block)
    if not np.array_equal(got, g0):
        fail(f"warm-up round: the average read from {a.grad} is not the one worker's f32 block")
    g1 = rng.normal(0, 1e-2, n).astype(np.float32)
    try:  # round 1 is compressed: the f32 form is refused, nothing applied
        grad.write(0, g1)
        fail(f"a full-precision push in a compressed round was served by {a.grad}")
    except OSError as e:
        if e.errno not in (errno.EIO, errno.EREMOTEIO, errno.EINVAL):
            fail(f"the refused push failed with {e!r}, not EIO/EREMOTEIO/EINVAL")
        print(f"devcheck: compressed ok: an f32 push in a compressed round was refused ({e.strerror})")
    image = sign1_image(g1)
    raw_write(grad, 0, image)
    pulled = raw_read(grad, 0, len(image))
    average = sign1_values(pulled, n)
    pushed = sign1_values(image, n)
    # One worker: the average is its decoded push, compressed again by the shard (the same signs; a scale may differ
    # by the rounding of its mean).
    if not np.allclose(average, pushed, rtol=1e-6, atol=0):
        fail(f"the compressed average read from {a.grad} does not decode to the pushed block "
             f"(worst {np.abs(average - pushed).max():.3g})")
    rest = raw_read(grad, 0, a.block)[len(image):]
    if any(rest):
        fail(f"the block's bytes after its compressed image are not zeros on {a.grad}")
    held = weights.read(0, a.block)
    if not np.array_equal(held, average):
        fail(f"the weights LU {a.weights} does not hold the decoded average")
    print(f"devcheck: compressed ok: a {len(image)}-byte sign1 block ({a.block // len(image)}x fewer bytes) pushed "
          f"and its compressed average pulled through {a.grad}; the weights LU holds it decoded")


def control(path, lines):
    """Control lines to a status device: one O_DIRECT WRITE of whole 512-byte sectors, NUL-padded."""
    data = ("\n".join(lines) + "\n").encode()
    buf = mmap.mmap(-1, -(-len(data) // 4096) * 4096)
    buf.write(data)
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    try:
        os.pwritev(fd, [buf], 0)
    finally:
        os.close(fd)


def pushes(status):
    """The shard's push counter from its status page (JSON on the status device, NUL-padded)."""
    fd = os.open(status, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 64 << 10)
        os.preadv(fd, [buf], 0)
    finally:
        os.close(fd)
    return json.loads(bytes(buf).split(b"\0", 1)[0])["counters"]["pushes"]


def check_fence(a):
    n = 1024
    member, other = Dev(a.member, True), Dev(a.other, True)
    zeros = np.zeros(n, dtype=np.float32)
    control(a.status, ["job=vm-fence-check"])
    try:
        before = pushes(a.status)
        member.write(a.offset, zeros)
        try:
            other.write(a.offset, zeros)
            fail(f"a push through {a.other} (another session) was served while job vm-fence-check holds the shard")
        except OSError as e:
            # Linux maps RESERVATION CONFLICT to BLK_STS_NEXUS: EBADE from an O_DIRECT write (EIO on older kernels).
            if e.errno not in (errno.EBADE, errno.EIO):
                fail(f"the refused push through {a.other} failed with {e!r}, not EBADE/EIO")
            print(f"devcheck: fence ok: the other session's push was refused ({e.strerror}, errno {e.errno})")
        after = pushes(a.status)
        if after != before + 1:
            fail(f"the shard counted {after - before} pushes for the member's one and the refused one")
    finally:
        control(a.status, ["release"])
    other.write(a.offset, zeros)
    print(f"devcheck: fence ok: after release the push through {a.other} is served again")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grad")
    g.add_argument("push")
    g.add_argument("pull")
    g.add_argument("--lr", type=float, required=True)
    g.add_argument("--momentum", type=float, required=True)
    g.add_argument("--offset", type=int, default=0)
    g.add_argument("--bytes", type=int, default=256 * 1024)
    w = sub.add_parser("weights")
    w.add_argument("write")
    w.add_argument("read", nargs="+")
    w.add_argument("--offset", type=int, default=0)
    w.add_argument("--bytes", type=int, default=512 * 1024)
    f = sub.add_parser("fsync")
    f.add_argument("grad")
    f.add_argument("checkpoint")
    z = sub.add_parser("compressed")
    z.add_argument("grad")
    z.add_argument("weights")
    z.add_argument("--block", type=int, default=64 * 1024)
    c = sub.add_parser("fence")
    c.add_argument("status")
    c.add_argument("member")
    c.add_argument("other")
    c.add_argument("--offset", type=int, default=12 << 20)
    a = p.parse_args()
    {"grad": check_grad, "weights": check_weights, "fsync": check_fsync, "fence": check_fence,
     "compressed": check_compressed}[a.cmd](a)


if __name__ == "__main__":
    main()
