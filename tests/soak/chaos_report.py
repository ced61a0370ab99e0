#!/usr/bin/python3
"""The chaos run's checks and its table per fault kind (tests/soak/run.sh writes the inputs into --work):

  faults.tsv               one line per fault: kind, target, start and end (wall clock s), detail
  status/JOB-HOST.jsonl    an optimizer shard's status page now and then: {"unix", "event", "status"}; event
                           "before" right before a shard kill or host loss, "after" right after its restart,
                           "sample" every 2 s, "final" at the end
  timeline/JOB-rR.HOST.PID.loop.json  each rank's loop (train.py --timeline) in one life (process) of it,
                           CLOCK_MONOTONIC microseconds; clock-offset holds wall minus monotonic seconds (the elastic
                           job's HOST is its host's name, e1, e2, ...: its steps are counted per host)
  JOB.json                 rank 0's evaluations (train.py --out), written when the job ended; the elastic job's
                           hosts write elastic-NAME.json each (with "left": STEP when it was preempted)

Exit 0 when every check passed, 1 otherwise (each failure is named).
"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "lib"))
from loop_timeline import read_loop, waits  # noqa: E402  (bench/lib: one reading of train.py's timelines)

# The faults that touch every job (a worker host's link carries all jobs; a shard host holds a shard of each), and
# the targets of those that touch one: shard "JOB-HOST", worker "JOB@HOST".
HOST_FAULTS = ("link-down", "link-slow", "host-lost")
# The elastic job's faults (target "elastic@NAME"): a host that goes (preempted, killed) or comes.
ELASTIC = "elastic"
ELASTIC_FAULTS = ("host-preempt", "host-kill", "host-join")
ELASTIC_GONE = ("host-preempt", "host-kill")
# Around an elastic host's coming or going, how far the other hosts' steps are looked at (s before, s after), and how
# much longer than its median step a host may go without one: nobody waits for a host that comes or goes.
AROUND = (2.0, 10.0)
ELASTIC_GAP_S = 2.0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--jobs", required=True)
    p.add_argument("--shard-hosts", required=True)
    p.add_argument("--stall-limit", type=float, required=True)
    p.add_argument("--min-accuracy", type=float, required=True)
    p.add_argument("--seed", required=True)
    p.add_argument("--broken", help="what broke the run before its end (a failure)")
    return p.parse_args()


class Fault:
    def __init__(self, line):
        kind, target, start, end, detail = line.rstrip("\n").split("\t")
        self.kind, self.target, self.start, self.end, self.detail = kind, target, float(start), float(end), detail

    def jobs(self, all_jobs):
        if self.kind in HOST_FAULTS:
            return list(all_jobs)
        return [re.split("[-@]", self.target)[0]]

    def elastic_host(self):
        """The elastic host a host-* fault preempted, killed or added."""
        return self.target.split("@")[1] if self.kind in ELASTIC_FAULTS else None

    def shards(self, optimizer_jobs):
        """The optimizer shards this fault restarted: (job, host)."""
        if self.kind == "shard-kill":
            job, host = self.target.split("-")
            return [(job, host)] if job in optimizer_jobs else []
        if self.kind == "host-lost":
            return [(job, self.target) for job in optimizer_jobs]
        return []


def read_pages(path):
    pages = []
    if not os.path.exists(path):
        return pages
    with open(path) as f:
        for line in f:
            try:
                entry = json.loads(line)
                page = entry["status"]["shards"][0]
            except (ValueError, KeyError, IndexError):
                continue  # a page read while the shard died: the sampler's line may be partial
            pages.append((entry["unix"], entry["event"], page))
    return pages


def block_steps(page):
    return page["model"]["block_steps"]


def checkpoint_block_steps(page):
    return page["checkpoint"]["block_steps"]


def read_steps(work, job, offset, evaluations=None):
    """Per rank (the elastic job: per host): the wall-clock ends of its steps in every life, and per life the number
    of steps it finished. `evaluations` (a dict), when given, gets per rank its evaluations' (start, end)."""
    ends, lives = collections.defaultdict(list), collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(work, "timeline", f"{job}-r*.loop.json"))):
        found = re.search(r"-r(\d+)\.(\w+)\.\d+\.loop\.json$", path)
        rank = found.group(2) if job == ELASTIC else int(found.group(1))
        life, evaluated = read_loop(path, offset)
        ends[rank] += life
        if evaluations is not None:
            evaluations.setdefault(rank, []).extend(evaluated)
        lives[rank].append(len(life))
    return {r: sorted(e) for r, e in ends.items()}, lives


def main():
    a = parse_args()
    work = a.work
    all_jobs = a.jobs.split(",")
    optimizer_jobs = [j for j in all_jobs if j != "hook"]
    shard_hosts = a.shard_hosts.split(",")
    failures = []
    if a.broken:
        failures.append(f"the run broke: {a.broken}")
    with open(os.path.join(work, "clock-offset")) as f:
        offset = float(f.read())
    faults = []
    if os.path.exists(os.path.join(work, "faults.tsv")):
        with open(os.path.join(work, "faults.tsv")) as f:
            faults = [Fault(line) for line in f if line.strip()]
    evaluations = {}  # the elastic hosts' own evaluations: a host that evaluates waits for nobody
    steps = {job: read_steps(work, job, offset, evaluations if job == ELASTIC else None) for job in all_jobs}
    pages = {(job, host): read_pages(os.path.join(work, "status", f"{job}-{host}.jsonl"))
             for job in optimizer_jobs for host in shard_hosts}

    # Stalls: the longest time each rank went without finishing a step (across its lives: a restart counts).
    print(f"seed {a.seed}: {len(faults)} faults")
    for job in all_jobs:
        ends, lives = steps[job]
        if not ends:
            failures.append(f"job {job}: no step recorded (train.py --timeline)")
            continue
        for rank, e in sorted(ends.items()):
            gaps = [b - a_ for a_, b in zip(e, e[1:])]
            longest = max(gaps, default=0.0)
            print(f"job {job} rank {rank}: {len(e)} steps in {len(lives[rank])} lives, longest time without a step "
                  f"{longest:.1f} s")
            if longest > a.stall_limit:
                at = e[gaps.index(longest)]
                failures.append(f"job {job} rank {rank}: no step for {longest:.1f} s (from wall clock {at:.1f}), "
                                f"over --stall-limit {a.stall_limit:g}")

    # The elastic hosts that went on purpose, and when: they step no more after it.
    gone_at = {f.elastic_host(): f.start for f in faults if f.kind in ELASTIC_GONE}

    # Recovery: after each fault, every rank of every job it touched finished a step within the limit.
    rows = collections.OrderedDict()
    for fault in faults:
        row = rows.setdefault(fault.kind, {"n": 0, "recovered": 0, "recovery": [], "lost": [], "bound": [],
                                           "failed": [], "gap": []})
        row["n"] += 1
        worst = 0.0
        recovered = not any(w in fault.detail for w in ("not restarted", "not started", "not joined", "did not leave"))
        for job in fault.jobs(all_jobs):
            for rank, e in steps[job][0].items():
                if job == ELASTIC and ((rank in gone_at and gone_at[rank] <= fault.end) or
                                       (e and e[0] > fault.end and rank != fault.elastic_host())):
                    continue  # preempted or killed by this fault or an earlier one, or joined after it
                after = [t for t in e if t > fault.end]
                if not after:
                    recovered = False
                    failures.append(f"{fault.kind} {fault.target} (ended at {fault.end:.1f}): job {job} rank {rank} "
                                    f"finished no step after it")
                    continue
                worst = max(worst, after[0] - fault.end)
        if worst > a.stall_limit:
            recovered = False
            failures.append(f"{fault.kind} {fault.target}: a rank took {worst:.1f} s to step again")
        # The loss bound of a shard restarted from its checkpoint (or its off-host copy): it comes back with at
        # least the updates of the last checkpoint it had written before the fault.
        for job, host in fault.shards(optimizer_jobs):
            shard = f"{job}-{host}"
            before = [p for t, ev, p in pages[(job, host)] if ev == "before" and fault.start <= t <= fault.end]
            after = [p for t, ev, p in pages[(job, host)] if ev == "after" and fault.start <= t <= fault.end]
            if not before or not after:
                recovered = False
                failures.append(f"{fault.kind} {fault.target}: {shard}'s status page was not read "
                                f"{'before the fault' if not before else 'after the restart'}")
                continue
            b, c, r = block_steps(before[-1]), checkpoint_block_steps(before[-1]), checkpoint_block_steps(after[0])
            blocks = before[-1]["shard"]["blocks"]
            lost = max(0, b - r)
            row["lost"].append(lost / blocks)
            row["bound"].append((b - c) / blocks)
            if r < c:
                recovered = False
                failures.append(f"{fault.kind} {fault.target}: {shard} came back with {r} block updates, fewer than "
                                f"the {c} of its last checkpoint before the fault: it lost more than the promise")
        # Nobody waits for an elastic host that comes or goes: every other host live around it stepped on.
        if fault.kind in ELASTIC_FAULTS:
            lo, hi = fault.start - AROUND[0], fault.end + AROUND[1]
            # A sync round waits for its slowest member, also while that one evaluates: any host's evaluation is
            # time a host may wait that has nothing to do with a host coming or going.
            everyone_evaluating = sorted(span for spans in evaluations.values() for span in spans)
            for host, e in steps[ELASTIC][0].items():
                if host == fault.elastic_host() or not e or e[0] > lo or e[-1] < hi:
                    continue  # the host of the fault, or one not live across the window
                gaps = waits(e, everyone_evaluating)
                median = statistics.median(gaps)
                window = [g for g, a_, b in zip(gaps, e, e[1:]) if b >= lo and a_ <= hi]
                longest = max(window, default=0.0)
                row["gap"].append(longest)
                if longest > median + ELASTIC_GAP_S:
                    recovered = False
                    failures.append(f"{fault.kind} {fault.target}: elastic host {host} went {longest:.1f} s without a "
                                    f"step around it (its median step {median:.2f} s): it waited for the host that "
                                    f"{'joined' if fault.kind == 'host-join' else 'went'}")
        row["recovery"].append(worst)
        if recovered:
            row["recovered"] += 1
        else:
            row["failed"].append(f"{fault.target} at {fault.start:.0f}")

    # No push applied twice: what each optimizer shard applied over its lives (a lower bound: the last page of each
    # life minus what it started from) is at most what the ranks pushed to it (each step pushes every block once;
    # a life's unfinished step counts too).
    for job in optimizer_jobs:
        pushed_steps = sum(n + 1 for lives in steps[job][1].values() for n in lives)
        for host in shard_hosts:
            life_pages = collections.OrderedDict()
            for _, _, page in pages[(job, host)]:
                life_pages.setdefault(page["shard"]["started_unix"], []).append(page)
            if not life_pages:
                failures.append(f"{job}-{host}: no status page was read")
                continue
            applied, first_life = 0, True
            for life in life_pages.values():
                start = 0 if first_life else min(checkpoint_block_steps(p) for p in life)
                applied += max(block_steps(p) for p in life) - start
                first_life = False
            blocks = life[-1]["shard"]["blocks"]
            verdict = "ok" if applied <= pushed_steps * blocks else "APPLIED MORE THAN WAS PUSHED"
            print(f"shard {job}-{host}: {applied / blocks:.0f} updates applied (at least) in {len(life_pages)} lives, "
                  f"{pushed_steps} pushes sent (at most): {verdict}")
            if applied > pushed_steps * blocks:
                failures.append(f"{job}-{host}: applied {applied} block updates, more than the {pushed_steps * blocks} "
                                f"the ranks pushed: a push was applied twice")

    # Accuracy: each job's last evaluation (rank 0's record, written at the end); the elastic job's: each host's that
    # trained to the end.
    outputs = {job: [os.path.join(work, f"{job}.json")] for job in all_jobs if job != ELASTIC}
    if ELASTIC in all_jobs:
        outputs[ELASTIC] = []
        for path in sorted(glob.glob(os.path.join(work, f"{ELASTIC}-*.json"))):
            try:
                with open(path) as f:
                    left = "left" in json.load(f)
            except (OSError, ValueError):
                left = False  # read again below, where it fails naming the file
            if not left:
                outputs[ELASTIC].append(path)
        if not outputs[ELASTIC]:
            failures.append("job elastic: no host trained to the end (no elastic-NAME.json without \"left\")")
    for job, path in ((job, path) for job in all_jobs for path in outputs[job]):
        try:
            with open(path) as f:
                records = json.load(f)["records"]
            accuracy = records[-1]["test_acc"]
        except (OSError, ValueError, KeyError, IndexError):
            failures.append(f"job {job}: no final evaluation ({path})")
            continue
        job = job if job != ELASTIC else f"{job} ({os.path.basename(path)})"
        print(f"job {job}: final test accuracy {accuracy:.4f} after {records[-1]['step']} steps "
              f"(at least {a.min_accuracy:g}): {'ok' if accuracy >= a.min_accuracy else 'TOO LOW'}")
        if accuracy < a.min_accuracy:
            failures.append(f"job {job}: final test accuracy {accuracy:.4f} < {a.min_accuracy:g}")

    print(f"{'fault':<12} {'count':>5} {'recovered':>9} {'recovery s (median/max)':>24} "
          f"{'lost updates (max) / bound':>27} {'others gap s (max)':>18}  failed")
    for kind, row in rows.items():
        recovery = f"{statistics.median(row['recovery']):.1f}/{max(row['recovery']):.1f}" if row["recovery"] else "-"
        lost = (f"{max(row['lost']):.1f} / {max(row['bound']):.1f}" if row["lost"] else "-")
        gap = f"{max(row['gap']):.2f}" if row["gap"] else "-"
        print(f"{kind:<12} {row['n']:>5} {row['recovered']:>9} {recovery:>24} {lost:>27} {gap:>18}  "
              f"{', '.join(row['failed']) or '-'}")
    print("(recovery: from the fault's end to the slowest touched rank's next step; lost updates: optimizer steps of "
          "a restarted shard lost, in model steps, against the updates since its last checkpoint; others gap: around "
          "an elastic host's coming or going, the longest time another elastic host went without a step)")
    if failures:
        for failure in failures:
            print(f"CHECK FAILED: {failure}")
        return 1
    print("every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
