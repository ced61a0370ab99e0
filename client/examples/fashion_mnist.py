#!/usr/bin/python3
"""Fashion-MNIST with PyTorch, locally or through a blockps parameter server (scripts/demo.sh drives it).

    fashion_mnist.py local   --epochs N --out run.json                   one worker, torch.optim.Adam, no PS
    fashion_mnist.py init    --cluster C.toml                            the model's initial weights -> the PS
    fashion_mnist.py worker  --cluster C.toml --rank R --workers W --epochs N --out rank.json [--pipeline P]
    fashion_mnist.py evaluate --cluster C.toml                           test accuracy of the PS's weights
    fashion_mnist.py report  --run NAME=JSON,... --plot out.png --min-accuracy A

A worker trains on its share of every epoch (sample i goes to worker i mod W of the epoch's permutation),
pushes each batch's gradients and pulls weights through blockps.torch (the shards run Adam); rank 0 prints one
line per epoch (loss, test accuracy, images/s, stall %) and every worker writes its per-epoch record as JSON.
Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, IDX files). Run with /usr/bin/python3
(Debian's python3-torch) and PYTHONPATH=<build>/python (the blockps package).
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

DATA_DIR = os.environ.get("BLOCKPS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
# One definition of the model and the training recipe for every run, so the runs compare.
HIDDEN = (256, 128)
LEARNING_RATE = 1e-3  # Adam, locally and on the shards (scripts/demo.sh writes it into the bsopts)
SEED = 2026


def load_idx(name):
    path = os.path.join(DATA_DIR, name)
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        sys.exit(f"fashion_mnist: cannot read {path}: {e} (install Debian's dataset-fashion-mnist)")
    magic = int.from_bytes(raw[:4], "big")
    dims = magic & 0xFF
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_split(train):
    prefix = "train" if train else "t10k"
    images = load_idx(f"{prefix}-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32)
    labels = load_idx(f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    images = (images / 255.0 - 0.2860) / 0.3530  # Fashion-MNIST's mean and std
    return torch.from_numpy(images), torch.from_numpy(labels)


def make_model():
    torch.manual_seed(SEED)
    sizes = (784,) + HIDDEN + (10,)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def accuracy(model, images, labels):
    with torch.no_grad():
        return (model(images).argmax(1) == labels).float().mean().item()


def epoch_batches(epoch, rank, workers, n, batch):
    order = torch.from_numpy(np.random.default_rng(SEED + epoch).permutation(n))[rank::workers]
    return [order[i:i + batch] for i in range(0, len(order), batch)]


def print_epoch(tag, rec):
    stall = f"{rec['stall_pct']:6.1f}%" if "stall_pct" in rec else "     - "
    print(f"{tag:>8} epoch {rec['epoch']:2d}  loss {rec['loss']:.4f}  test acc {rec['test_acc'] * 100:5.2f}%  "
          f"{rec['images_per_s']:7.0f} img/s  stall {stall}  t {rec['wall_s']:6.1f}s", flush=True)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def cmd_local(a):
    torch.set_num_threads(a.threads)
    train_x, train_y = load_split(True)
    test_x, test_y = load_split(False)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    records, start = [], time.monotonic()
    for epoch in range(a.epochs):
        t0, loss_sum, seen = time.monotonic(), 0.0, 0
        for idx in epoch_batches(epoch, 0, 1, len(train_y), a.batch):
            opt.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            seen += len(idx)
        rec = {"epoch": epoch + 1, "loss": loss_sum / seen, "images_per_s": seen / (time.monotonic() - t0),
               "test_acc": accuracy(model, test_x, test_y), "wall_s": time.monotonic() - start}
        records.append(rec)
        print_epoch("local", rec)
    write_json(a.out, {"run": "local", "workers": 1, "epochs": records, "final_acc": records[-1]["test_acc"]})


def open_cluster(path):
    import blockps
    try:
        return blockps.Cluster(path)
    except blockps.Error as e:
        sys.exit(f"fashion_mnist: cannot open the cluster {path}: {e}")


def cmd_init(a):
    import blockps.torch
    cluster = open_cluster(a.cluster)
    blockps.torch.upload_parameters(make_model(), cluster)
    print(f"initial weights of the model ({blockps.torch.parameter_count(make_model())} parameters) written "
          f"to the PS ({cluster.shard_count} shards, {cluster.model_bytes} bytes)", flush=True)


def cmd_worker(a):
    import blockps
    import blockps.torch
    torch.set_num_threads(a.threads)
    train_x, train_y = load_split(True)
    test_x, test_y = load_split(False) if a.rank == 0 else (None, None)
    model = make_model()
    cluster = open_cluster(a.cluster)
    options = {}
    if a.pipeline == "double":
        options = {"adaptive_pull": True}
    ps = blockps.torch.ParameterServerStep(model, cluster, mode=a.pipeline, **options)
    tag = f"{a.name}/{a.rank}"
    records, start = [], time.monotonic()
    for epoch in range(a.epochs):
        t0, loss_sum, seen = time.monotonic(), 0.0, 0
        sums = {"compute_s": 0.0, "stall_s": 0.0, "bubble_s": 0.0, "weight_age_s": 0.0, "push_s": 0.0, "pull_s": 0.0}
        steps = 0
        for idx in epoch_batches(epoch, a.rank, a.workers, len(train_y), a.batch):
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            try:
                m = ps.step()
            except blockps.Error as e:
                sys.exit(f"fashion_mnist worker {a.rank}: step failed: {e}")
            for k in sums:
                sums[k] += m[k]
            steps += 1
            loss_sum += loss.item() * len(idx)
            seen += len(idx)
        elapsed = time.monotonic() - t0
        rec = {"epoch": epoch + 1, "loss": loss_sum / seen, "images_per_s": seen / elapsed, "steps": steps,
               "stall_pct": 100.0 * sums["stall_s"] / max(sums["compute_s"] + sums["stall_s"], 1e-9),
               "mean_ms": {k: 1e3 * v / steps for k, v in sums.items()}, "wall_s": time.monotonic() - start}
        if a.rank == 0:
            rec["test_acc"] = accuracy(model, test_x, test_y)
            rec["wall_s"] = time.monotonic() - start
            print_epoch(tag, rec)
        records.append(rec)
    write_json(a.out, {"run": a.name, "rank": a.rank, "workers": a.workers, "pipeline": a.pipeline,
                       "grad_copies": ps.grad_copies, "epochs": records})


def cmd_evaluate(a):
    import blockps.torch
    cluster = open_cluster(a.cluster)
    weights = np.empty(cluster.elements, dtype=np.float32)
    cluster.read_weights(weights)
    model = make_model()
    offset = 0
    with torch.no_grad():
        for p in blockps.torch.trainable_parameters(model):
            p.copy_(torch.from_numpy(weights[offset:offset + p.numel()]).view_as(p))
            offset += p.numel()
    test_x, test_y = load_split(False)
    acc = accuracy(model, test_x, test_y)
    print(f"test accuracy of the weights held by the PS: {acc * 100:.2f}%", flush=True)
    if a.out:
        write_json(a.out, {"final_acc": acc})


def cmd_report(a):
    runs = []
    for item in a.run:
        name, _, spec = item.partition("=")
        files = spec.split(",")
        ranks = [json.load(open(f)) for f in files]
        final = json.load(open(a.final[name])) if name in (a.final or {}) else None
        runs.append((name, ranks, final))
    print(f"\n{'run':<22} {'workers':>7} {'epochs':>6} {'final acc':>9} {'time s':>7} {'img/s':>7} {'stall %':>7} "
          f"{'age ms':>7} {'bubble ms':>9}")
    failed = []
    plot_lines = []
    for name, ranks, final in runs:
        r0 = ranks[0]["epochs"]
        final_acc = final["final_acc"] if final else r0[-1]["test_acc"]
        wall = max(r["epochs"][-1]["wall_s"] for r in ranks)
        img_s = sum(r["epochs"][-1]["images_per_s"] for r in ranks)
        if "stall_pct" in r0[-1]:
            stall = sum(e["stall_pct"] for r in ranks for e in r["epochs"]) / sum(len(r["epochs"]) for r in ranks)
            age = sum(e["mean_ms"]["weight_age_s"] for r in ranks for e in r["epochs"]) / sum(
                len(r["epochs"]) for r in ranks)
            bubble = sum(e["mean_ms"]["bubble_s"] for r in ranks for e in r["epochs"]) / sum(
                len(r["epochs"]) for r in ranks)
            extra = f"{stall:7.1f} {age:7.2f} {bubble:9.2f}"
        else:
            extra = f"{'-':>7} {'-':>7} {'-':>9}"
        print(f"{name:<22} {len(ranks):7d} {len(r0):6d} {final_acc * 100:8.2f}% {wall:7.1f} {img_s:7.0f} {extra}")
        plot_lines.append((name, [e["wall_s"] for e in r0], [e["test_acc"] for e in r0]))
        if final_acc < a.min_accuracy:
            failed.append(f"{name}: {final_acc * 100:.2f}% < {a.min_accuracy * 100:.2f}%")
    if a.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for name, xs, ys in plot_lines:
                ax.plot(xs, [y * 100 for y in ys], marker="o", label=name)
            ax.axhline(a.min_accuracy * 100, color="grey", linestyle=":", label=f"bound {a.min_accuracy * 100:.0f}%")
            ax.set_xlabel("wall time (s)")
            ax.set_ylabel("test accuracy (%)")
            lowest = min(min(ys) for _, _, ys in plot_lines)
            ax.set_ylim(min(70.0, lowest * 100 - 2), 92)
            ax.set_title("Fashion-MNIST, MLP: local vs through blockps")
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right")
            fig.tight_layout()
            fig.savefig(a.plot, dpi=110)
            print(f"\nplot: {a.plot}")
        except ImportError as e:
            print(f"\nNO PLOT: matplotlib is missing ({e}); install Debian's python3-matplotlib", flush=True)
    if failed:
        print("\nFAILED: accuracy below the bound: " + "; ".join(failed))
        sys.exit(1)
    print(f"\nevery run reached at least {a.min_accuracy * 100:.0f}% test accuracy")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def common(s):
        s.add_argument("--epochs", type=int, default=5)
        s.add_argument("--batch", type=int, default=128)
        s.add_argument("--threads", type=int, default=1, help="torch threads per process")

    s = sub.add_parser("local")
    common(s)
    s.add_argument("--out", required=True)
    s = sub.add_parser("init")
    s.add_argument("--cluster", required=True)
    s = sub.add_parser("worker")
    common(s)
    s.add_argument("--cluster", required=True)
    s.add_argument("--rank", type=int, required=True)
    s.add_argument("--workers", type=int, required=True)
    s.add_argument("--name", default="ps")
    s.add_argument("--pipeline", choices=["double", "sequential"], default="double")
    s.add_argument("--out", required=True)
    s = sub.add_parser("evaluate")
    s.add_argument("--cluster", required=True)
    s.add_argument("--out")
    s = sub.add_parser("report")
    s.add_argument("--run", action="append", required=True, help="NAME=RANK0.json[,RANK1.json...]")
    s.add_argument("--final", action="append", default=[], help="NAME=EVALUATE.json")
    s.add_argument("--plot")
    s.add_argument("--min-accuracy", type=float, default=0.85)
    a = p.parse_args()
    if getattr(a, "epochs", 1) < 1 or getattr(a, "batch", 1) < 1:
        p.error("--epochs and --batch must be >= 1")
    if a.command == "worker" and not 0 <= a.rank < a.workers:
        p.error(f"--rank {a.rank} must be in 0..{a.workers - 1}")
    if a.command == "report":
        a.final = dict(item.split("=", 1) for item in a.final)
    {"local": cmd_local, "init": cmd_init, "worker": cmd_worker, "evaluate": cmd_evaluate,
     "report": cmd_report}[a.command](a)


if __name__ == "__main__":
    main()
