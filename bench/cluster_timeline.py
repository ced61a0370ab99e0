#!/usr/bin/env python3
"""Where the time of a bench/cluster step goes: link samples and per-command timelines.

  cluster_timeline.py sample --ports w0,w1,s0 --out FILE [--interval-ms 10]
      Run inside the switch namespace of bench/cluster: every interval, the bytes each host sent and received on
      its link (its switch port's rx/tx counters), with the monotonic clock (the clock of the workers' traces),
      until SIGTERM. One line per sample: `t_s host:sent:received ...` (t: the middle of the sample's reads; a
      sample whose reads took over 2 ms, the sampler descheduled on a busy machine, is left out).

  cluster_timeline.py report --dir DIR --measurements LABEL:OP:MODE,... --rate-bps B --block-bytes N
                             --warmup K [--plot FILE]
      Reads DIR/LABEL-wI.*.json (each worker's BLOCKPS_TRACE: every READ and WRITE from issue to completion) and
      DIR/LABEL-links.tsv for each measurement and prints, over its timed steps (after the K warm-up steps):
        step          a worker's first command issued -> its last command completed (ms, median over the workers
                      and steps);
        push phase    step start -> the worker's last WRITE's completion; pull tail: that -> step end;
        push spread   per shard and shard block: the last worker's WRITE completion - the first's (the wait a
                      sync round adds before its READs may go);
        flow lag      per shard, at each block's last WRITE completion: how many of that shard's blocks the
                      furthest worker had pushed beyond it (how uneven the W flows into one shard are);
        READ wait     READ issue -> completion; READs in flight per worker and shard (parked ones among them);
        link use      each direction of the shard hosts' and worker hosts' links, of the rate, per 10 ms sample;
        quiet links   the share of 10 ms samples in which a shard host's uplink carried under half its rate.
      With --plot, a figure of the median step of each measurement: the links' use over time, one shard's flows
      (each worker's WRITE completions and READ completions of that shard's blocks) and the rounds' closes.

The figures are measured, not modelled: every number comes from the traces and the link counters.
"""
import argparse
import bisect
import glob
import json
import os
import signal
import statistics
import sys
import time


MAX_SAMPLE_SPREAD_S = 0.002


def sample(args):
    ports = [p for p in args.ports.split(",") if p]
    if not ports:
        sys.exit("cluster_timeline.py sample: --ports is empty")
    files = []
    for p in ports:
        base = f"/sys/class/net/{p}/statistics/"
        try:
            # The switch's port: what it received (rx) is what the host sent.
            files.append((p, open(base + "rx_bytes", "rb", buffering=0), open(base + "tx_bytes", "rb", buffering=0)))
        except OSError as e:
            sys.exit(f"cluster_timeline.py sample: port {p}: {e}")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    interval = args.interval_ms / 1000.0
    with open(args.out, "w") as out:
        next_t = time.monotonic()
        while not stop:
            before = time.monotonic()
            fields = []
            for p, rx, tx in files:
                rx.seek(0)
                tx.seek(0)
                fields.append(f"{p}:{int(rx.read())}:{int(tx.read())}")
            after = time.monotonic()
            # A sample whose reads were interrupted (the sampler descheduled: the machine is busy) has no one time:
            # leave it out rather than give its bytes to the wrong interval.
            if after - before <= MAX_SAMPLE_SPREAD_S:
                out.write(f"{(before + after) / 2:.6f} {' '.join(fields)}\n")
            next_t += interval
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.monotonic()


def load_trace(path):
    with open(path) as f:
        text = f.read().rstrip()
    if not text.endswith("]"):  # a run that died leaves the array open
        text = text.rstrip(",") + "]"
    return json.loads(text)


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


class Measurement:
    """One bench/cluster measurement: every worker's commands, split into steps, and the link samples."""

    def __init__(self, directory, label, op, mode, block_bytes, warmup):
        self.label, self.op, self.mode = label, op, mode
        self.commands = []  # (worker, shard, step, kind, block, t_issue, t_done), seconds
        self.step_windows = {}  # step -> [start, end]
        workers = 0
        for w in range(10000):
            paths = glob.glob(os.path.join(directory, f"{label}-w{w}.*.json"))
            if not paths:
                break
            workers += 1
            events = [e for p in paths for e in load_trace(p) if e.get("ph") == "X"]
            # The exchange (or push, pull) span of each shard lane, in order, numbers the steps of this worker.
            spans = {}
            for e in events:
                if e.get("cat") == "blockps" and 0 < e["tid"] < 1000:
                    spans.setdefault(e["tid"] - 1, []).append((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6))
            for shard in spans:
                spans[shard].sort()
            for e in events:
                if e.get("cat") != "command":
                    continue
                shard = e["tid"] - 1000
                t0, t1 = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
                step = next((i for i, (a, b) in enumerate(spans.get(shard, [])) if a - 1e-4 <= t0 <= b + 1e-4), None)
                if step is None or step < warmup:
                    continue
                block = e["args"]["lu_offset"] // block_bytes
                self.commands.append((w, shard, step, e["name"], block, t0, t1))
                window = self.step_windows.setdefault(step, [t0, t1])
                window[0], window[1] = min(window[0], t0), max(window[1], t1)
        if workers == 0:
            raise SystemExit(f"cluster_timeline.py: no trace {directory}/{label}-w0.*.json")
        self.workers = workers
        self.links = []  # (t, {host: (sent, received)})
        with open(os.path.join(directory, f"{label}-links.tsv")) as f:
            for line in f:
                t, *fields = line.split()
                self.links.append((float(t), {h: (int(s), int(r)) for h, s, r in (x.split(":") for x in fields)}))

    def steps(self):
        return sorted(self.step_windows)

    def step_ms(self, step):
        a, b = self.step_windows[step]
        return (b - a) * 1000

    def median_step(self):
        by_time = sorted(self.steps(), key=self.step_ms)
        return by_time[len(by_time) // 2]

    def of_step(self, step):
        return [c for c in self.commands if c[2] == step]

    def link_use(self, t0, t1, rate_bps):
        """Per 10 ms sample inside [t0, t1]: host -> [(t, sent share, received share)]."""
        out = {}
        for (ta, a), (tb, b) in zip(self.links, self.links[1:]):
            if tb < t0 or ta > t1 or tb <= ta:
                continue
            cap = rate_bps / 8 * (tb - ta)
            for h in b:
                out.setdefault(h, []).append((tb, (b[h][0] - a[h][0]) / cap, (b[h][1] - a[h][1]) / cap))
        return out


def analyse(m, rate_bps):
    figures = {"step": [], "push_phase": [], "tail": [], "spread": [], "lag": [], "read_wait": [], "quiet": [],
               "shard_up": [], "shard_down": [], "worker_up": [], "worker_down": [], "reads_in_flight": []}
    for step in m.steps():
        cmds = m.of_step(step)
        start, end = m.step_windows[step]
        # Each worker's own step (as `blockps bench` times it): its first command's issue to its last completion.
        for w in range(m.workers):
            mine = [c for c in cmds if c[0] == w]
            if not mine:
                continue
            first, last = min(c[5] for c in mine), max(c[6] for c in mine)
            last_write = max(c[6] for c in mine if c[3] == "WRITE")
            figures["step"].append((last - first) * 1000)
            figures["push_phase"].append((last_write - first) * 1000)
            figures["tail"].append((last - last_write) * 1000)
        writes = {}
        for w, s, _, kind, block, t0, t1 in cmds:
            if kind == "WRITE":
                writes.setdefault((s, block), []).append(t1)
            else:
                figures["read_wait"].append((t1 - t0) * 1000)
        for done in writes.values():
            figures["spread"].append((max(done) - min(done)) * 1000)
        # Flow lag: when shard s's block b was last pushed, how far beyond b the furthest worker had got.
        by_shard = {}
        for (s, block), done in writes.items():
            by_shard.setdefault(s, []).append((block, max(done)))
        for s, blocks in by_shard.items():
            pushed = sorted((t1, w) for w, sh, _, kind, _, _, t1 in cmds if sh == s and kind == "WRITE")
            for block, closed in blocks:
                ahead = {}
                for t1, w in pushed:
                    if t1 > closed:
                        break
                    ahead[w] = ahead.get(w, 0) + 1
                figures["lag"].append(max(ahead.values()) - (block + 1) if ahead else 0)
        # READs in flight at each READ's issue, per worker and shard.
        reads = sorted((t0, t1, w, s) for w, s, _, kind, _, t0, t1 in cmds if kind == "READ")
        for t0, _, w, s in reads:
            figures["reads_in_flight"].append(sum(1 for a, b, ww, ss in reads if ww == w and ss == s and a <= t0 < b))
        for host, samples in m.link_use(start, end, rate_bps).items():
            kind = "shard" if host.startswith("s") else "worker"
            figures[kind + "_up"] += [x[1] for x in samples]
            figures[kind + "_down"] += [x[2] for x in samples]
            if kind == "shard":
                figures["quiet"] += [1.0 if x[1] < 0.5 else 0.0 for x in samples]
    return figures


def report(args):
    measurements = []
    for spec in args.measurements.split(","):
        label, op, mode = spec.split(":")
        measurements.append(Measurement(args.dir, label, op, mode, args.block_bytes, args.warmup))
    lines = []
    say = lines.append
    say(f"timeline: {args.dir}; medians over the timed steps (p90 in brackets); link use of the nominal rate")
    for m in measurements:
        f = analyse(m, args.rate_bps)
        med = statistics.median
        say(f"timeline: {m.label} ({m.mode}, {m.workers} workers, {len(m.steps())} timed steps):")
        say(f"timeline:   a worker's step {med(f['step']):.1f} ms = push phase {med(f['push_phase']):.1f} + pull tail "
            f"{med(f['tail']):.1f} ms (medians over workers and steps)")
        say(f"timeline:   push spread per shard block {med(f['spread']):.1f} ms [{percentile(f['spread'], 0.9):.1f}]; "
            f"flow lag {med(f['lag']):.0f} blocks [{percentile(f['lag'], 0.9):.0f}, max {max(f['lag'])}]")
        say(f"timeline:   READ issue -> completion {med(f['read_wait']):.1f} ms [{percentile(f['read_wait'], 0.9):.1f}]; "
            f"READs in flight per worker and shard {med(f['reads_in_flight']):.0f} "
            f"[{percentile(f['reads_in_flight'], 0.9):.0f}]")
        say(f"timeline:   link use, shard hosts up {100 * statistics.mean(f['shard_up']):.0f}% down "
            f"{100 * statistics.mean(f['shard_down']):.0f}%, worker hosts up {100 * statistics.mean(f['worker_up']):.0f}% "
            f"down {100 * statistics.mean(f['worker_down']):.0f}%; shard uplinks under half the rate in "
            f"{100 * statistics.mean(f['quiet']):.0f}% of the 10 ms samples")
    text = "\n".join(lines)
    print(text)
    if args.plot:
        plot(measurements, args)


def binned_use(m, t0, t1, rate_bps, bin_s=0.05):
    """Each host's link use over fixed bins of bin_s seconds in [t0, t1]: the byte counters interpolated at the
    bins' edges (the samples' times jitter under load; the counters do not)."""
    out = {}
    if len(m.links) < 2:
        return out
    times = [t for t, _ in m.links]
    edges = []
    t = max(t0, times[0])
    while t + bin_s <= min(t1, times[-1]):
        edges.append(t)
        t += bin_s
    edges.append(t)

    def counter_at(host, t, which):
        i = bisect.bisect_right(times, t)
        i = min(max(i, 1), len(times) - 1)
        (ta, a), (tb, b) = m.links[i - 1], m.links[i]
        va, vb = a[host][which], b[host][which]
        return va + (vb - va) * (t - ta) / (tb - ta) if tb > ta else vb

    cap = rate_bps / 8 * bin_s
    for host in m.links[0][1]:
        out[host] = [(b, (counter_at(host, b, 0) - counter_at(host, a, 0)) / cap,
                      (counter_at(host, b, 1) - counter_at(host, a, 1)) / cap) for a, b in zip(edges, edges[1:])]
    return out


def plot(measurements, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = len(measurements)
    fig, axes = plt.subplots(3, cols, figsize=(6.5 * cols, 11), squeeze=False, sharex="col")
    for col, m in enumerate(measurements):
        step = m.median_step()
        start, end = m.step_windows[step]
        cmds = m.of_step(step)
        use = binned_use(m, start - 0.02, end + 0.02, args.rate_bps)
        ax = axes[0][col]
        for host, samples in sorted(use.items()):
            if not host.startswith("s"):
                continue
            ts = [(t - start) * 1000 for t, _, _ in samples]
            ax.plot(ts, [100 * u for _, u, _ in samples], color="tab:red", alpha=0.35, lw=0.8)
            ax.plot(ts, [100 * d for _, _, d in samples], color="tab:blue", alpha=0.35, lw=0.8)
        ax.plot([], [], color="tab:red", label="shard hosts sending (pulls)")
        ax.plot([], [], color="tab:blue", label="shard hosts receiving (pushes)")
        ax.set_ylim(0, 110)
        ax.set_ylabel("link use per 50 ms, % of rate")
        ax.set_title(f"{m.label}: step {step}, all workers' commands, {m.step_ms(step):.0f} ms", fontsize=10)
        ax.legend(loc="lower center", fontsize=8)
        # Shard 0's flows: each worker's pushed and pulled blocks over time.
        ax = axes[1][col]
        for w in range(m.workers):
            done_w = sorted(c[6] for c in cmds if c[0] == w and c[1] == 0 and c[3] == "WRITE")
            done_r = sorted(c[6] for c in cmds if c[0] == w and c[1] == 0 and c[3] == "READ")
            color = plt.cm.tab10(w % 10)
            ax.step([(t - start) * 1000 for t in done_w], range(1, len(done_w) + 1), where="post", color=color, lw=1)
            ax.step([(t - start) * 1000 for t in done_r], range(1, len(done_r) + 1), where="post", color=color, lw=1,
                    ls="--")
        ax.plot([], [], color="k", lw=1, label="WRITEs completed (one line per worker)")
        ax.plot([], [], color="k", lw=1, ls="--", label="READs completed")
        ax.set_ylabel("shard s0: blocks per worker")
        ax.legend(loc="upper left", fontsize=8)
        # Every shard's rounds: when the last worker's WRITE of each block completed, and that block's READs.
        ax = axes[2][col]
        shards = sorted({c[1] for c in cmds})
        for s in shards:
            closes = {}
            for c in cmds:
                if c[1] == s and c[3] == "WRITE":
                    closes[c[4]] = max(closes.get(c[4], 0), c[6])
            ax.scatter([(t - start) * 1000 for t in closes.values()], [s + 0.15] * len(closes), s=4, color="tab:blue")
            reads = [c[6] for c in cmds if c[1] == s and c[3] == "READ"]
            ax.scatter([(t - start) * 1000 for t in reads], [s - 0.15] * len(reads), s=2, color="tab:red")
        ax.scatter([], [], color="tab:blue", label="a block's last WRITE completed (its round can close)")
        ax.scatter([], [], color="tab:red", label="a READ completed")
        ax.set_ylabel("shard")
        ax.set_xlabel("ms since the step's first command")
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(args.title or "bench/cluster: where a step's time goes")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=80)
    print(f"timeline: figure {args.plot}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--ports", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--interval-ms", type=float, default=10.0)
    r = sub.add_parser("report")
    r.add_argument("--dir", required=True)
    r.add_argument("--measurements", required=True)
    r.add_argument("--rate-bps", type=float, required=True)
    r.add_argument("--block-bytes", type=int, required=True)
    r.add_argument("--warmup", type=int, default=0)
    r.add_argument("--plot")
    r.add_argument("--title")
    args = parser.parse_args()
    if args.command == "sample":
        if args.interval_ms <= 0:
            parser.error("--interval-ms must be > 0")
        sample(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
