#!/usr/bin/python3
"""Fashion-MNIST for the examples: the data, the models with their training recipes, and the report.

    fashion_mnist.py report --run NAME=RUN.json ... [--plot out.png] [--min-accuracy A] [--target-accuracy T]
    fashion_mnist.py shard-setup --model M --block BYTES --shards S     the model bytes and optimizer bsopts
    fashion_mnist.py block-for --model M --shards S                    a block size that lets M pipeline

train.py (the torchrun script) imports it, so every run trains the same model with the same recipe; the report
compares runs (final accuracy, time to --target-accuracy, images/s) and plots test accuracy against training
time. Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, IDX files).
"""
import argparse
import collections
import gzip
import json
import os
import sys

import numpy as np
import torch

DATA_DIR = os.environ.get("BLOCKPS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
SEED = 2026


def make_mlp():
    torch.manual_seed(SEED)
    sizes = (784, 256, 128, 10)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def make_resnet18():
    """torchvision's ResNet-18 (11.2M parameters) for 1x28x28: a 3x3 stride-2 stem on one channel, then its
    max-pool, so layer1 sees 7x7 (a CPU worker trains it at hundreds of images/s instead of tens; the blocks
    the PS moves are the same 44.7 MB)."""
    try:
        import torchvision
    except ImportError as e:
        sys.exit(f"fashion_mnist: --model resnet18 needs torchvision ({e}): install Debian's python3-torchvision")
    torch.manual_seed(SEED)
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=2, padding=1, bias=False)
    return model


# A model and how it is trained: the shards run `optimizer`'s class and hyper-parameters (the PS runs check);
# the learning rate is multiplied by lr_decay after every epoch (torch's StepLR; a PS run forwards it to the
# shards). ResNet-18 under a constant Adam lr stalls at 88-89% with a noisy test accuracy (measured, 3 epochs).
Recipe = collections.namedtuple("Recipe", "build optimizer lr_decay image_shape")
MODELS = {
    "mlp": Recipe(make_mlp, lambda params: torch.optim.Adam(params, lr=1e-3), 1.0, (784,)),
    "resnet18": Recipe(make_resnet18, lambda params: torch.optim.Adam(params, lr=1e-3), 0.3, (1, 28, 28)),
}


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


def load_split(train, image_shape=(784,)):
    prefix = "train" if train else "t10k"
    images = load_idx(f"{prefix}-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32)
    labels = load_idx(f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    images = (images / 255.0 - 0.2860) / 0.3530  # Fashion-MNIST's mean and std
    return torch.from_numpy(images).view(-1, *image_shape), torch.from_numpy(labels)


def epoch_batches(epoch, rank, workers, n, batch, stream=None):
    """Worker `rank` of `workers` trains on samples rank, rank+workers, ... of the epoch's permutation. `stream`: a host
    of an elastic job draws from a permutation of its own (a number), since no host knows which others train."""
    rng = np.random.default_rng(SEED + epoch if stream is None else [SEED + epoch, stream])
    order = torch.from_numpy(rng.permutation(n))[rank::workers]
    return [order[i:i + batch] for i in range(0, len(order), batch)]


def model_bytes(model_name, block_bytes, shards):
    """Bytes of f32 model a cluster needs for the model (blockps.torch.ModelLayout: parameters, then buffers
    from a block boundary), rounded up to whole blocks on every shard (the stripe layout's rule)."""
    import blockps.torch
    layout = blockps.torch.ModelLayout(MODELS[model_name].build(), block_bytes // 4)
    stripe = block_bytes * shards
    return -(-layout.elements * 4 // stripe) * stripe


def time_to(records, target):
    """Training seconds until the first evaluation at or above `target`, or None."""
    return next((r["wall_s"] for r in records if r["test_acc"] >= target), None)


def cmd_report(a):
    runs = []
    for item in a.run:
        name, _, path = item.partition("=")
        try:
            with open(path) as f:
                runs.append((name, json.load(f)))
        except (OSError, ValueError) as e:
            sys.exit(f"fashion_mnist report: run {name}: cannot read {path}: {e}")
    target = a.target_accuracy
    print(f"\n{'run':<12} {'model':<9} {'workers':>7} {'epochs':>6} {'final acc':>9} {'best acc':>8} "
          f"{'train s':>8} {'img/s':>7} {'to ' + format(target * 100, '.0f') + '% s':>9}")
    failed, plot_lines = [], []
    for name, run in runs:
        recs = run["records"]
        last = recs[-1]
        reached = time_to(recs, target)
        print(f"{name:<12} {run['model']:<9} {run['workers']:7d} {last['epoch']:6.2f} {last['test_acc'] * 100:8.2f}% "
              f"{max(r['test_acc'] for r in recs) * 100:7.2f}% {last['wall_s']:8.1f} {last['images_per_s']:7.0f} "
              f"{'-' if reached is None else format(reached, '.1f'):>9}")
        plot_lines.append((name, [r["wall_s"] for r in recs], [r["test_acc"] for r in recs]))
        if last["test_acc"] < a.min_accuracy:
            failed.append(f"{name}: {last['test_acc'] * 100:.2f}% < {a.min_accuracy * 100:.2f}%")
    if a.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for name, xs, ys in plot_lines:
                ax.plot(xs, [y * 100 for y in ys], marker="o", label=name)
            if a.min_accuracy > 0:
                ax.axhline(a.min_accuracy * 100, color="grey", linestyle=":",
                           label=f"bound {a.min_accuracy * 100:.0f}%")
            if target != a.min_accuracy:
                ax.axhline(target * 100, color="black", linestyle="--", linewidth=0.8,
                           label=f"target {target * 100:.0f}%")
            ax.set_xlabel("training time (s, evaluations left out)")
            ax.set_ylabel("test accuracy (%)")
            lowest = min(min(ys) for _, _, ys in plot_lines)
            highest = max(max(ys) for _, _, ys in plot_lines)
            ax.set_ylim(min(70.0, lowest * 100 - 2), max(92.0, highest * 100 + 1))
            models = sorted({run["model"] for _, run in runs})
            ax.set_title(a.title or f"Fashion-MNIST, {', '.join(models)}: local, DDP-gloo and blockps")
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
    s = sub.add_parser("report")
    s.add_argument("--run", action="append", required=True, help="NAME=RUN.json (train.py --out)")
    s.add_argument("--plot", help="PNG of test accuracy against training time")
    s.add_argument("--title")
    s.add_argument("--min-accuracy", type=float, default=0.85, help="exit 1 when a run ends below it")
    s.add_argument("--target-accuracy", type=float, default=0.90, help="the table's time-to-accuracy column")
    s = sub.add_parser("block-for", help="print a block size (bytes) for the model over the shards "
                       "(blockps.torch.block_bytes_for: 16 blocks a shard or more, 16K..256K)")
    s.add_argument("--model", choices=sorted(MODELS), required=True)
    s.add_argument("--shards", type=int, required=True)
    s = sub.add_parser("shard-setup", help="print the cluster's model bytes and the shards' optimizer bsopts")
    s.add_argument("--model", choices=sorted(MODELS), required=True)
    s.add_argument("--block", type=int, required=True, help="block bytes")
    s.add_argument("--shards", type=int, required=True)
    a = p.parse_args()
    if a.command == "report":
        cmd_report(a)
    elif a.command == "block-for":
        if a.shards < 1:
            p.error("--shards must be >= 1")
        import blockps.torch
        print(blockps.torch.block_bytes_for(MODELS[a.model].build(), a.shards))
    else:
        if a.block < 4 or a.block % 4 or a.shards < 1:
            p.error("--block must be a positive multiple of 4 and --shards >= 1")
        import blockps.torch
        recipe = MODELS[a.model]
        options = blockps.torch.shard_optimizer_for(recipe.optimizer(recipe.build().parameters()))
        print(model_bytes(a.model, a.block, a.shards), ";".join(f"{k}={v}" for k, v in options.items()))


if __name__ == "__main__":
    main()
