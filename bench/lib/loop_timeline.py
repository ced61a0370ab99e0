"""train.py --timeline files (each rank's loop as Chrome trace events, one line per span, CLOCK_MONOTONIC
microseconds) read for the checks that need step times: tests/soak/chaos_report.py and bench/spot_report.py."""
import json


def read_loop(path, offset):
    """(the wall-clock ends of the steps, the (start, end) of the evaluations) of one life of a rank: its file, and
    the wall clock minus the monotonic one in seconds. A line cut short (a life killed while writing it) is skipped."""
    ends, evaluations = [], []
    with open(path) as f:
        for line in f:
            line = line.strip().lstrip("[").rstrip(",").rstrip("]")
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            start = offset + event["ts"] / 1e6
            if event.get("name") == "step":
                ends.append(start + event["dur"] / 1e6)
            elif event.get("name") == "evaluation":
                evaluations.append((start, start + event["dur"] / 1e6))
    return ends, evaluations


def waits(ends, evaluations):
    """The time between each two step ends of a rank, less the time in between that an evaluation ran ((start, end)
    spans, sorted; overlapping ones counted once): a sync round waits for its slowest member, also while that one
    evaluates, so any host's evaluation is time that says nothing of hosts coming or going."""
    merged = []
    for s, e in evaluations:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [b - a - sum(min(b, e) - max(a, s) for s, e in merged if s < b and e > a) for a, b in zip(ends, ends[1:])]
