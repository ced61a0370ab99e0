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

  cluster_timeline.py train-report --dir DIR --runs RUN,... --rate-bps B [--ranks-per-host L] [--warmup 3]
                                   [--plot FILE]
      For bench/cluster --workload train: reads DIR/RUN-rG.loop.json (client/examples/train.py --timeline: each
      step's forward, backward and optimizer step), DIR/RUN-rG.*.json (BLOCKPS_TRACE, where the run used blockps)
      and DIR/RUN-links.tsv, and prints per run, over the steps after the warm-up with no evaluation before the
      next: the step period and the phases' medians, how far apart the ranks' backward passes end, per phase of
      each worker host's first rank its share of the step and its host link's use and idle time each way, the shard
      links' use, and when blockps's WRITEs and READs ran against the phases. With --plot, a figure of two steps.

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
COMMAND_LANES = 1000  # client/trace.h: shard i's commands are on lane kCommandLanes + i


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
    if not text.endswith("]"):  # a run that died (or ended with os._exit) leaves the array open, its last line cut
        text = text[:text.rfind("\n")].rstrip().rstrip(",") + "]"
    return json.loads(text)


def load_links(path):
    """The link sampler's file: [(t, {host: (bytes sent, bytes received)})], in time order."""
    links = []
    with open(path) as f:
        for line in f:
            t, *fields = line.split()
            links.append((float(t), {h: (int(s), int(r)) for h, s, r in (x.split(":") for x in fields)}))
    return links


def counter_at(links, times, host, t, which):
    """A host's byte counter (which: 0 sent, 1 received) at time t, interpolated between the samples around t
    (the samples' times jitter under load; the counters do not)."""
    i = bisect.bisect_right(times, t)
    i = min(max(i, 1), len(times) - 1)
    (ta, a), (tb, b) = links[i - 1], links[i]
    va, vb = a[host][which], b[host][which]
    return va + (vb - va) * (t - ta) / (tb - ta) if tb > ta else vb


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
            # The exchange (or push, pull) span of each shard lane, in order, numbers the steps of this worker. A shard's
            # stream that took the next step's exchange into a batch still running (READs parked at a sync shard)
            # traces one span for both: the two count as one step here (the report's "N timed steps" says so).
            spans = {}
            for e in events:
                if e.get("cat") == "blockps" and 0 < e["tid"] < COMMAND_LANES:
                    spans.setdefault(e["tid"] - 1, []).append((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6))
            for shard in spans:
                spans[shard].sort()
            for e in events:
                if e.get("cat") != "command":
                    continue
                shard = e["tid"] - COMMAND_LANES
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
        self.links = load_links(os.path.join(directory, f"{label}-links.tsv"))

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


def binned_use(links, t0, t1, rate_bps, bin_s=0.05):
    """Each host's link use over fixed bins of bin_s seconds in [t0, t1]: host -> [(bin end, sent share, received
    share)], the byte counters interpolated at the bins' edges."""
    out = {}
    if len(links) < 2:
        return out
    times = [t for t, _ in links]
    edges = []
    t = max(t0, times[0])
    while t + bin_s <= min(t1, times[-1]):
        edges.append(t)
        t += bin_s
    edges.append(t)
    cap = rate_bps / 8 * bin_s
    for host in links[0][1]:
        def at(t, which):
            return counter_at(links, times, host, t, which)
        out[host] = [(b, (at(b, 0) - at(a, 0)) / cap, (at(b, 1) - at(a, 1)) / cap) for a, b in zip(edges, edges[1:])]
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
        use = binned_use(m.links, start - 0.02, end + 0.02, args.rate_bps)
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


# ---- training runs (bench/cluster --workload train --timeline) -------------------------------------------------
PHASES = ("forward", "backward", "step")
PHASE_COLORS = {"forward": "tab:green", "backward": "tab:orange", "step": "tab:purple", "other": "tab:gray"}


class TrainRun:
    """One bench/cluster training run: every rank's loop phases (train.py --timeline: RUN-rG.loop.json), its
    blockps commands (BLOCKPS_TRACE: RUN-rG.PID.N.json; none for DDP over gloo, nor on the ranks of a host that are
    not its leader) and the link samples (RUN-links.tsv)."""

    def __init__(self, directory, run, ranks_per_host, warmup):
        self.run, self.ranks_per_host = run, ranks_per_host
        self.phases = {}  # rank -> {step: {phase: (t0, t1)}}
        self.commands = {}  # rank -> [(shard, READ or WRITE, t_issue, t_done)], by issue
        self.batches = {}  # rank -> [(shard, t_start, t_end)]: the library's batches of exchanges on each shard
        evaluated = set()  # steps that an evaluation preceded
        for path in glob.glob(os.path.join(directory, f"{run}-r*.loop.json")):
            rank = int(os.path.basename(path)[len(run) + 2:].split(".")[0])
            steps = self.phases.setdefault(rank, {})
            for e in load_trace(path):
                if e.get("ph") != "X":
                    continue
                span = (e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6)
                if e["name"] in PHASES:
                    steps.setdefault(e["args"]["step"], {})[e["name"]] = span
                elif e["name"] == "evaluation":
                    evaluated.add(e["args"]["step"])
            commands, batches = [], []
            for trace in glob.glob(os.path.join(directory, f"{run}-r{rank}.[0-9]*.json")):
                for e in load_trace(trace):
                    if e.get("ph") != "X":
                        continue
                    span = (e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6)
                    if e.get("cat") == "command":
                        commands.append((e["tid"] - COMMAND_LANES, e["name"]) + span)
                    elif e.get("cat") == "blockps" and e["name"] == "exchange":
                        batches.append((e["tid"] - 1,) + span)
            self.commands[rank] = sorted(commands, key=lambda c: c[2])
            self.batches[rank] = sorted(batches, key=lambda b: b[1])
        if not self.phases:
            raise SystemExit(f"cluster_timeline.py: no loop timeline {directory}/{run}-r0.loop.json")
        self.ranks = sorted(self.phases)
        whole = [{s for s, p in self.phases[r].items() if len(p) == len(PHASES)} for r in self.ranks]
        common = sorted(set.intersection(*whole))
        # A step counts when every rank timed it and the next one (its end is the next forward's start), after the
        # warm-up, with no evaluation before the next.
        self.steps = [s for s in common[warmup:] if s + 1 in common and s + 1 not in evaluated]
        if not self.steps:
            raise SystemExit(f"cluster_timeline.py: {run}: no step to report after {warmup} warm-up steps")
        self.links = load_links(os.path.join(directory, f"{run}-links.tsv"))
        self.times = [t for t, _ in self.links]

    def window(self, step):
        """The cluster's step: the first rank's forward start to the first rank's next forward start."""
        start = min(self.phases[r][step]["forward"][0] for r in self.ranks)
        return start, min(self.phases[r][step + 1]["forward"][0] for r in self.ranks)

    def leaders(self):
        """Each worker host's first rank: its phases stand for the host's link (with host aggregation it is the
        rank that pushes)."""
        return [r for r in self.ranks if r % self.ranks_per_host == 0]

    def host_of(self, rank):
        return f"w{rank // self.ranks_per_host}"

    def phase_at(self, rank, step, t):
        p = self.phases[rank][step]
        for name in PHASES:
            if p[name][0] <= t < p[name][1]:
                return name
        return "other"

    def bytes_between(self, host, t0, t1):
        """(sent, received) bytes of a host's link in [t0, t1]."""
        return tuple(counter_at(self.links, self.times, host, t1, k) - counter_at(self.links, self.times, host, t0, k)
                     for k in (0, 1))


def analyse_train(r, rate_bps, bin_s=0.01):
    """Per phase of the hosts' leaders: time, link use each way, and the time their link idled (under half the
    rate) in it; the shard hosts' use; the blockps commands' timing against the loop's phases."""
    per_phase = {p: {"s": 0.0, "sent": 0.0, "received": 0.0, "idle_up": 0.0, "idle_down": 0.0}
                 for p in PHASES + ("other",)}
    periods, durations, backward_end_spread = [], {p: [] for p in PHASES}, []
    shard_use, shard_quiet = {"sent": [], "received": []}, []
    cap = rate_bps / 8 * bin_s
    for step in r.steps:
        start, end = r.window(step)
        periods.append(end - start)
        for p in PHASES:
            durations[p] += [r.phases[k][step][p][1] - r.phases[k][step][p][0] for k in r.ranks]
        backward_ends = [r.phases[k][step]["backward"][1] for k in r.ranks]
        backward_end_spread.append(max(backward_ends) - min(backward_ends))
        for rank in r.leaders():
            host = r.host_of(rank)
            t = start
            while t + bin_s <= end:
                sent, received = r.bytes_between(host, t, t + bin_s)
                f = per_phase[r.phase_at(rank, step, t + bin_s / 2)]
                f["s"] += bin_s
                f["sent"] += sent
                f["received"] += received
                f["idle_up"] += bin_s if sent < cap / 2 else 0.0
                f["idle_down"] += bin_s if received < cap / 2 else 0.0
                t += bin_s
        for host in r.links[0][1] if r.links else ():
            if host.startswith("s"):
                sent, received = r.bytes_between(host, start, end)
                shard_use["sent"].append(sent / (rate_bps / 8 * (end - start)))
                shard_use["received"].append(received / (rate_bps / 8 * (end - start)))
                for _, up, _ in binned_use(r.links, start, end, rate_bps, bin_s).get(host, []):
                    shard_quiet.append(1.0 if up < 0.5 else 0.0)
    # The blockps commands of each step: issued from its backward's start to the next backward's start.
    push_start, push_end, pull_tail, read_wait, batch_tail = [], [], [], [], []
    for rank in r.ranks:
        commands = r.commands.get(rank) or []
        if not commands:
            continue
        issues = [c[2] for c in commands]
        for step in r.steps:
            p, q = r.phases[rank][step], r.phases[rank][step + 1]
            lo, hi = bisect.bisect_left(issues, p["backward"][0]), bisect.bisect_left(issues, q["backward"][0])
            mine = commands[lo:hi]
            writes = [c for c in mine if c[1] == "WRITE"]
            reads = [c for c in mine if c[1] == "READ"]
            if not writes:
                continue
            push_start.append(min(c[2] for c in writes) - p["backward"][0])
            push_end.append(max(c[3] for c in writes) - p["backward"][1])
            if reads:
                pull_tail.append(max(c[3] for c in reads) - max(c[3] for c in writes))
                read_wait += [c[3] - c[2] for c in reads]
            # Each batch of exchanges on a shard ends with its last READ; exchanges queued meanwhile wait for that:
            # the time from its last WRITE's completion to its end, per shard, summed over the step's batches.
            tails, shards = 0.0, set()
            for shard, a, b in r.batches.get(rank) or []:
                if not p["backward"][0] <= a < q["backward"][0]:
                    continue
                done = [c[3] for c in writes if c[0] == shard and a <= c[2] <= b]
                if done:
                    tails += b - max(done)
                    shards.add(shard)
            if shards:
                batch_tail.append(tails / len(shards))
    return {"per_phase": per_phase, "periods": periods, "durations": durations,
            "backward_end_spread": backward_end_spread, "shard_use": shard_use, "shard_quiet": shard_quiet,
            "push_start": push_start, "push_end": push_end, "pull_tail": pull_tail, "read_wait": read_wait,
            "batch_tail": batch_tail}


def train_report(args):
    runs = [TrainRun(args.dir, run, args.ranks_per_host, args.warmup) for run in args.runs.split(",") if run]
    lines = []
    say = lines.append
    ms = 1000.0
    med = statistics.median
    say(f"timeline: {args.dir}; each run's timed steps after {args.warmup} warm-up steps (no evaluation between two "
        "steps); link use as a share of the rate; a link idles in a 10 ms sample carrying under half the rate")
    for r in runs:
        f = analyse_train(r, args.rate_bps)
        period = med(f["periods"])
        say(f"timeline: {r.run}: {len(r.ranks)} ranks, {len(r.steps)} timed steps, a step every {period * ms:.0f} ms "
            f"(median; first rank's forward to its next); per rank (medians): " +
            ", ".join(f"{p} {med(f['durations'][p]) * ms:.0f} ms" for p in PHASES) +
            f"; the ranks' backward ends {med(f['backward_end_spread']) * ms:.0f} ms apart")
        total = sum(v["s"] for v in f["per_phase"].values()) or 1.0
        say(f"timeline:   {'phase (host leaders)':<22}{'of the step':>12}{'uplink use':>12}{'downlink use':>14}"
            f"{'uplink idle':>13}{'downlink idle':>15}")
        for name, v in f["per_phase"].items():
            if v["s"] == 0:
                continue
            full = args.rate_bps / 8 * v["s"]
            label = {"step": "step()", "other": "other (between them)"}.get(name, name)
            say(f"timeline:   {label:<22}{100 * v['s'] / total:>11.0f}%{100 * v['sent'] / full:>11.0f}%"
                f"{100 * v['received'] / full:>13.0f}%{v['idle_up'] * ms / len(r.steps) / len(r.leaders()):>10.0f} ms"
                f"{v['idle_down'] * ms / len(r.steps) / len(r.leaders()):>12.0f} ms")
        up = sum(v["sent"] for v in f["per_phase"].values()) / (args.rate_bps / 8 * total)
        down = sum(v["received"] for v in f["per_phase"].values()) / (args.rate_bps / 8 * total)
        say(f"timeline:   worker links over the step: up {100 * up:.0f}%, down {100 * down:.0f}% of the rate")
        if f["shard_use"]["sent"]:
            say(f"timeline:   shard links over the step: up {100 * statistics.mean(f['shard_use']['sent']):.0f}%, down "
                f"{100 * statistics.mean(f['shard_use']['received']):.0f}%; shard uplinks idle in "
                f"{100 * statistics.mean(f['shard_quiet']):.0f}% of the 10 ms samples")
        if f["push_start"]:
            say(f"timeline:   blockps (medians over ranks and steps): first WRITE issued "
                f"{med(f['push_start']) * ms:.0f} ms after backward began; last WRITE completed "
                f"{med(f['push_end']) * ms:+.0f} ms after backward() returned" +
                (f"; last READ {med(f['pull_tail']) * ms:.0f} ms after the last WRITE; READ issue to completion "
                 f"{med(f['read_wait']) * ms:.0f} ms [p90 {percentile(f['read_wait'], 0.9) * ms:.0f}]"
                 if f["pull_tail"] else ""))
            if f["batch_tail"]:
                say(f"timeline:   blockps streams: per shard and step, {med(f['batch_tail']) * ms:.0f} ms from a "
                    "stream's last WRITE to its last READ (no WRITE of this shard in flight; since issue 48 an "
                    "exchange queued meanwhile joins the stream, so this is time with nothing left to push; before, "
                    "the exchanges queued meanwhile waited for it)")
    text = "\n".join(lines)
    print(text)
    if args.plot:
        plot_train(runs, args)


def plot_train(runs, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, len(runs), figsize=(6.5 * len(runs), 10), squeeze=False)
    for col, r in enumerate(runs):
        # Two consecutive steps from the median one (by length), so that one step's end meets the next's start.
        by_length = sorted(r.steps, key=lambda s: r.window(s)[1] - r.window(s)[0])
        step = by_length[len(by_length) // 2]
        start = r.window(step)[0]
        end = max(r.phases[k][step + 1]["step"][1] for k in r.ranks)
        ax = axes[0][col]
        for k in r.ranks:
            for s in (step, step + 1):
                for name in PHASES:
                    a, b = r.phases[k][s][name]
                    ax.broken_barh([((a - start) * 1000, (b - a) * 1000)], (k - 0.4, 0.8), color=PHASE_COLORS[name])
            for shard, kind, a, b in r.commands.get(k) or []:
                if start <= a <= end:
                    y = k + (0.25 if kind == "WRITE" else -0.25)
                    ax.plot([(a - start) * 1000, (b - start) * 1000], [y, y], lw=1.2, zorder=3,
                            color="tab:blue" if kind == "WRITE" else "tab:red", alpha=0.5)
        for name in PHASES:
            ax.bar(0, 0, color=PHASE_COLORS[name], label=name if name != "step" else "step()")
        ax.plot([], [], color="tab:blue", lw=1, label="blockps WRITEs (issue to completion)")
        ax.plot([], [], color="tab:red", lw=1, label="blockps READs")
        ax.set_ylabel("rank")
        ax.set_title(f"{r.run}: steps {step} and {step + 1}", fontsize=10)
        if col == 0:
            ax.legend(loc="upper right", fontsize=7)
        use = binned_use(r.links, start, end, args.rate_bps, bin_s=0.02)
        for row, prefix, what in ((1, "w", "worker"), (2, "s", "shard")):
            ax = axes[row][col]
            for host, samples in sorted(use.items()):
                if not host.startswith(prefix):
                    continue
                ts = [(t - start) * 1000 for t, _, _ in samples]
                ax.plot(ts, [100 * u for _, u, _ in samples], color="tab:red", alpha=0.4, lw=0.8)
                ax.plot(ts, [100 * d for _, _, d in samples], color="tab:blue", alpha=0.4, lw=0.8)
            ax.plot([], [], color="tab:red", label=f"{what} hosts sending")
            ax.plot([], [], color="tab:blue", label=f"{what} hosts receiving")
            ax.set_ylim(0, 110)
            ax.set_ylabel(f"{what} links, % of rate per 20 ms")
            if col == 0:
                ax.legend(loc="upper right", fontsize=7)
        axes[2][col].set_xlabel("ms since the first rank's forward of the first step")
        for row in range(3):
            axes[row][col].set_xlim(0, (end - start) * 1000)
    fig.suptitle(args.title or "bench/cluster --workload train: where a step's time goes")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=60)
    try:  # a 64-colour palette: a tenth of the bytes, for figures kept in the repository (bench/results)
        from PIL import Image
        Image.open(args.plot).convert("RGB").quantize(colors=64).save(args.plot, optimize=True)
    except ImportError:
        pass
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
    t = sub.add_parser("train-report")
    t.add_argument("--dir", required=True)
    t.add_argument("--runs", required=True)
    t.add_argument("--ranks-per-host", type=int, default=1)
    t.add_argument("--rate-bps", type=float, required=True)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--plot")
    t.add_argument("--title")
    args = parser.parse_args()
    if args.command == "train-report":
        if args.ranks_per_host < 1 or args.warmup < 0:
            parser.error("--ranks-per-host must be >= 1 and --warmup >= 0")
        train_report(args)
    elif args.command == "sample":
        if args.interval_ms <= 0:
            parser.error("--interval-ms must be > 0")
        sample(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
