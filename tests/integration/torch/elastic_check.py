#!/usr/bin/python3
"""Hosts that come and go (issue 51); run by test_torch_elastic.cpp. Each worker host is a process of its own
(elastic=True: no process group across hosts, the shards are the only meeting point), started, stopped and killed
by the test while the first host trains on.

    elastic_check.py host CLUSTER DIR --name NAME --seed S   one host: DistributedOptimizer(elastic=True) over the
        sync shards of CLUSTER (its model initialised from seed S, so that hosts start from different weights unless
        they take the shards'); one line per step in DIR/NAME.steps ("<end, monotonic s> <step>"); it trains until
        DIR/stop exists, or until SIGTERM (a preemption notice), when it finishes its step, leave()s and exits 0.
        With --init ps it waits for another host to set them (started first, it must not keep the first host
        from setting them). It checks that exactly the first host set the weights (--expect set|took) and that a host that took them
        holds the shards' weights, not its own; the one that stops at DIR/stop saves its final weights. The test
        sets BLOCKPS_HOST=NAME, so its workers log in as ...worker-<hostname>-NAME-rank0.
    elastic_check.py verify CLUSTER DIR --survivor NAME --left NAME... --gone NAME...   after the run: the survivor
        never waited for a host that left or died (its longest gap between two steps at most 2 s beyond its median
        step), the shards dropped each of them (their recent drops name them), every round applied once with the
        survivor in it (the shards' round count equals the survivor's steps), and the survivor's final weights are the
        shards'.
Each mode prints "<who>: every check passed" and exits 0, or the first failed check and exits 1.
"""
import argparse
import json
import os
import signal
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import blockps
import blockps.torch
from blockps.torch.wire import bytes_of


def check(cond, who, message):
    if not cond:
        print(f"FAILED ({who}): {message}", flush=True)
        sys.exit(1)


def model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 10))


def flat(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def in_model_order(m, layout, weights):
    """The parameters of `m` out of the flat `weights` (ModelLayout's order is the reverse of flat()'s)."""
    slot = {id(s.tensor): s for s in layout.parameters}
    return torch.cat([weights[slot[id(p)].offset:slot[id(p)].end] for p in m.parameters()])


def shards_weights(optimizer, m):
    """The model's parameters as the shards hold them (read through this host's own sessions)."""
    layout = optimizer.layout
    out = torch.zeros(optimizer.elements, dtype=torch.float32)
    blocks = layout.parameter_blocks
    optimizer.cluster.read_weights_blocks(0, blocks, bytes_of(out[:blocks * layout.block_elements]))
    return in_model_order(m, layout, out)


def host(a):
    who = f"host {a.name}"
    notice = []
    signal.signal(signal.SIGTERM, lambda *_: notice.append(True))
    m = model(a.seed)
    own = flat(m).clone()
    optimizer = blockps.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.05), m, cluster=a.cluster,
                                                   elastic=True, elastic_patience_s=60, init=a.init)
    check(optimizer.set_the_weights == (a.expect == "set"), who,
          f"set_the_weights is {optimizer.set_the_weights}, expected this host to {a.expect} the weights")
    start = flat(m).clone()
    if a.expect == "set":
        check(torch.equal(start, own), who, "the host that set the weights does not hold its own model")
    else:
        # The first host trains on meanwhile, and a block's rounds advance on their own: the weights taken are those
        # of the rounds each block was in, close to the shards' now and far from this host's own.
        held = shards_weights(optimizer, m)
        to_shards, own_to_shards = (start - held).norm().item(), (own - held).norm().item()
        check(to_shards < 0.1 * own_to_shards, who, f"a joining host does not hold the shards' weights (distance "
              f"{to_shards:.4f} to them, its own initial weights {own_to_shards:.4f})")
    print(f"{who}: {'set' if optimizer.set_the_weights else 'took'} the weights at the job's step "
          f"{optimizer.shard_rounds()}", flush=True)
    g = torch.Generator().manual_seed(a.seed)
    stop = os.path.join(a.dir, "stop")
    with open(os.path.join(a.dir, f"{a.name}.steps"), "w", buffering=1) as steps:
        step = 0
        while not os.path.exists(stop):
            x, y = torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
            optimizer.zero_grad()
            F.cross_entropy(m(x), y).backward()
            optimizer.step()
            step += 1
            steps.write(f"{time.monotonic():.6f} {step}\n")
            if notice:
                optimizer.leave()
                print(f"{who}: preempted: left after {step} steps", flush=True)
                print(f"{who}: every check passed", flush=True)
                return
            time.sleep(0.01)
    torch.save(flat(m), os.path.join(a.dir, f"{a.name}.final.pt"))
    print(f"{who}: stopped after {step} steps", flush=True)
    print(f"{who}: every check passed", flush=True)


def verify(a):
    who = "verify"
    with open(os.path.join(a.dir, f"{a.survivor}.steps")) as f:
        ends = [float(line.split()[0]) for line in f if line.strip()]
    check(len(ends) >= 20, who, f"the survivor made only {len(ends)} steps")
    gaps = [b - e for e, b in zip(ends, ends[1:])]
    median, longest = statistics.median(gaps), max(gaps)
    print(f"{who}: survivor {a.survivor}: {len(ends)} steps, median step {median * 1000:.1f} ms, longest gap "
          f"{longest * 1000:.1f} ms", flush=True)
    check(longest <= median + 2.0, who, f"the survivor waited {longest:.2f} s between two steps (median "
          f"{median:.3f} s): it waited for a host that left or died")
    cluster = blockps.Cluster(a.cluster, job="")  # no job: it reads, and joins no round
    m = model(0)
    layout = blockps.torch.ModelLayout(m, cluster.block_bytes // 4)
    shards = cluster.shard_count
    rounds = []
    for index, (shard, text) in enumerate(cluster.status_pages()):
        page = json.loads(text)
        drops = " | ".join(page["rounds"]["recent_drops"])
        for name in a.left + a.gone:
            check(f"-{name}-rank0" in drops, who, f"shard {shard} did not drop host {name}: {drops}")
        check(page["rounds"]["live_workers"] == [], who, f"shard {shard} still counts live workers: "
              f"{page['rounds']['live_workers']}")
        # The stripe layout: block i on shard i mod S. Every parameter block there took one round per survivor step.
        blocks = len(range(index, layout.parameter_blocks, shards))
        rounds.append((page["rounds"]["rounds_max"], page["model"]["block_steps"], blocks))
        check(page["init"]["state"] == "set", who, f"shard {shard}: /init/state is {page['init']['state']}")
    check(all(most == len(ends) and steps == len(ends) * blocks for most, steps, blocks in rounds), who,
          f"the shards' (most rounds of a block, block steps, parameter blocks) are {rounds}; the survivor made "
          f"{len(ends)} steps: every parameter block takes one round per step, each applied once, the survivor in each")
    final = torch.load(os.path.join(a.dir, f"{a.survivor}.final.pt"))
    weights = torch.zeros(cluster.model_bytes // 4, dtype=torch.float32)
    cluster.read_weights(bytes_of(weights))
    held = in_model_order(m, layout, weights)
    check(torch.equal(final, held), who, "the survivor's final weights are not the shards'")
    print(f"{who}: every check passed", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["host", "verify"])
    p.add_argument("cluster")
    p.add_argument("dir")
    p.add_argument("--name")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--expect", choices=["set", "took"], default="took")
    p.add_argument("--init", choices=["ps"], default=None, help="init='ps': wait for another host to set the weights")
    p.add_argument("--survivor")
    p.add_argument("--left", nargs="*", default=[])
    p.add_argument("--gone", nargs="*", default=[])
    a = p.parse_args()
    host(a) if a.mode == "host" else verify(a)


if __name__ == "__main__":
    main()
