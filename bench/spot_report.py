#!/usr/bin/python3
"""bench/spot's report: per run, images trained, live host-seconds, images/s, the fraction of the live-host-weighted
ideal (against the still run), the longest wait of a host that stayed around each preemption and join, and the
final test accuracy. Reads what bench/spot wrote into --out:

  RUN-events.tsv           wall-clock seconds, event (join, preempt, gone, end), host, namespace
  RUN-NAME.PID.loop.json   each host's loop (train.py --timeline); clock-offset: wall minus monotonic seconds
  RUN-NAME.json            each host's evaluations (train.py --out; "left": STEP for a preempted one); torchrun
                           runs: rank 0's, with the job's records so far (--resume carries them over restarts)
  RUN-tcp.tsv              each second, each namespace's TcpExtTCPTimeouts and TcpRetransSegs (absolute)
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from loop_timeline import read_loop, waits  # noqa: E402

BATCH = 128  # train.py's default batch per host, which bench/spot keeps
AROUND = (2.0, 10.0)  # s before and after a preemption or a join that the other hosts' steps are looked at
STALL_S = 3.0  # a wait of a host this long outside those windows is listed, with the RTOs counted while it lasted


def read_run(out, run, offset):
    events = []
    with open(os.path.join(out, f"{run}-events.tsv")) as f:
        for line in f:
            t, kind, host, _ = line.rstrip("\n").split("\t")
            events.append((float(t), kind, host))
    steps, evaluations = {}, []
    for path in glob.glob(os.path.join(out, f"{run}-h*.loop.json")):
        host = re.search(rf"{run}-(h\d+)\.\d+\.loop\.json$", path).group(1)
        ends, evaluated = read_loop(path, offset)
        steps.setdefault(host, []).extend(ends)
        evaluations += evaluated
    for host in steps:
        steps[host].sort()
    finals = []  # (step, accuracy) of each host's last evaluation, for those that did not leave
    for path in glob.glob(os.path.join(out, f"{run}-h*.json")):
        if path.endswith(".loop.json"):
            continue  # a timeline
        with open(path) as f:
            result = json.load(f)
        if "left" not in result and result["records"]:
            finals.append((result["records"][-1]["step"], result["records"][-1]["test_acc"]))
    if run.startswith("torchrun") and finals:
        finals = [max(finals)]  # one job: its rank 0 wrote the records, the latest file holds all of them
    return events, steps, sorted(evaluations), [acc for _, acc in finals]


def read_retransmissions(out, run):
    """{namespace: [(wall-clock second, RTOs so far)]} from RUN-tcp.tsv; {} without it."""
    samples = {}
    path = os.path.join(out, f"{run}-tcp.tsv")
    if not os.path.exists(path):
        return samples
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3:
                continue
            counters = dict(kv.split("=") for kv in fields[2].split())
            samples.setdefault(fields[1], []).append((float(fields[0]), int(counters.get("TcpExtTCPTimeouts", 0))))
    return samples


def rtos_between(samples, lo, hi):
    """{namespace: RTOs counted from the last sample at or before lo to the first at or after hi}, the nonzero ones."""
    counted = {}
    for ns, points in samples.items():
        before = [n for t, n in points if t <= lo]
        after = [n for t, n in points if t >= hi]
        if before and after and after[0] > before[-1]:
            counted[ns] = after[0] - before[-1]
    return counted


def stalls(events, steps, evaluations):
    """(host, start, seconds) of every wait over STALL_S of a host, outside AROUND of any preemption or join."""
    windows = [(t - AROUND[0], t + AROUND[1]) for t, kind, _ in events if kind in ("preempt", "join")]
    found = []
    for host, ends in steps.items():
        for gap, a, b in zip(waits(ends, evaluations), ends, ends[1:]):
            if gap > STALL_S and not any(b >= lo and a <= hi for lo, hi in windows):
                found.append((host, a, gap))
    return sorted(found, key=lambda f: f[1])


def measure(events, steps, hosts):
    """(window start, end, images in it, live host-seconds in it). The window opens once every first host stepped."""
    joined = {host: t for t, kind, host in events if kind == "join"}
    gone = {host: t for t, kind, host in events if kind == "gone"}
    end = max(t for t, kind, _ in events if kind == "end")
    first = sorted(joined, key=joined.get)[:hosts]
    start = max(steps[h][0] for h in first if steps.get(h))
    images = BATCH * sum(1 for ends in steps.values() for t in ends if start < t <= end)
    live = sum(max(0.0, min(gone.get(h, end), end) - max(t, start)) for h, t in joined.items())
    return start, end, images, live


def longest_waits(events, steps, evaluations):
    """Per preemption and join: the longest wait of a host live across it (evaluations excluded), and its median."""
    out = []
    for t, kind, host in events:
        if kind not in ("preempt", "join"):
            continue
        lo, hi = t - AROUND[0], t + AROUND[1]
        worst = None
        for other, ends in steps.items():
            if other == host or not ends or ends[0] > lo or ends[-1] < hi:
                continue
            gaps = waits(ends, evaluations)
            window = [g for g, a, b in zip(gaps, ends, ends[1:]) if b >= lo and a <= hi]
            if window and (worst is None or max(window) > worst[0]):
                worst = (max(window), statistics.median(gaps))
        if worst:
            out.append((kind, host, worst[0], worst[1]))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--runs", required=True)
    p.add_argument("--hosts", type=int, required=True)
    a = p.parse_args()
    with open(os.path.join(a.out, "clock-offset")) as f:
        offset = float(f.read())
    per_host_second = {}
    print(f"{'run':<12} {'seconds':>7} {'images':>8} {'host-s':>7} {'images/s':>9} {'per host-s':>10} "
          f"{'of ideal':>8} {'final acc':>9}")
    rows = []
    for run in a.runs.split(","):
        events, steps, evaluations, accuracies = read_run(a.out, run, offset)
        start, end, images, live = measure(events, steps, a.hosts)
        per_host_second[run] = images / live
        rows.append((run, events, steps, evaluations, accuracies, start, end, images, live))
    ideal = per_host_second.get("still")
    for run, events, steps, evaluations, accuracies, start, end, images, live in rows:
        of_ideal = f"{per_host_second[run] / ideal:.3f}" if ideal else "-"
        accuracy = f"{statistics.mean(accuracies):.4f}" if accuracies else "-"
        print(f"{run:<12} {end - start:>7.0f} {images:>8} {live:>7.0f} {images / (end - start):>9.1f} "
              f"{per_host_second[run]:>10.2f} {of_ideal:>8} {accuracy:>9}")
    for run, events, steps, evaluations, *_ in rows:
        for kind, host, worst, median in longest_waits(events, steps, evaluations):
            print(f"{run}: {kind} {host}: the other hosts' longest wait {worst:.2f} s (their median step "
                  f"{median:.2f} s)")
        samples = read_retransmissions(a.out, run)
        t0 = min((t for t, _, _ in events), default=0.0)
        for host, start, gap in stalls(events, steps, evaluations):
            rtos = rtos_between(samples, start, start + gap)
            counted = ", ".join(f"{ns} {n}" for ns, n in sorted(rtos.items())) or "none"
            print(f"{run}: {host} waited {gap:.2f} s at +{start - t0:.0f} s, no host coming or going; RTOs meanwhile: "
                  f"{counted}")
    print("(of ideal: images per live host-second against the still run's; the window opens once every first host "
          "stepped; a host's start-up counts as live: the capacity a spot host costs until it trains)")


if __name__ == "__main__":
    main()
