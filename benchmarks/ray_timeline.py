"""Where a tuning run's time went on a Ray cluster, from its timeline (`ray.timeline()`,
written by `benchmarks/multi_gpu.py --trace`): per kind of call (build tasks, actor
methods) how many and how long in all, second by second how many builds ran and how
busy the measuring actors were, when the first and the last measurement ended, and the
steady rate: measurements per minute between the end of the 10th and of the 90th
percentile measurement (a run's start and its tail left out).

Usage:
    python benchmarks/ray_timeline.py docs/benchmarks/multi_gpu_h100x4_model_1gpu_timeline.json [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

BUILD = "run_build"  # the build task (tensortune.distributed.actor.run_build)
ACTOR_CALLS = ("measure", "prepare", "late", "release")


def summarize(events: list[dict]) -> dict:
    """Totals per call name, and per second the builds running and the actors' busy share."""
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in spans:
        totals[e["name"]][0] += 1
        totals[e["name"]][1] += e["dur"] / 1e6
    work = [e for e in spans if e["name"].endswith(BUILD) or e["name"] in ACTOR_CALLS]
    if not work:
        return {"totals": dict(totals), "seconds": []}
    t0 = min(e["ts"] for e in work)
    end = max(e["ts"] + e["dur"] for e in work)
    bins = int((end - t0) / 1e6) + 1
    builds, actors = [0.0] * bins, [0.0] * bins
    for e in work:
        into = builds if e["name"].endswith(BUILD) else actors
        x, stop = (e["ts"] - t0) / 1e6, (e["ts"] + e["dur"] - t0) / 1e6
        while x < stop:
            i = int(x)
            nxt = min(i + 1.0, stop)
            into[i] += nxt - x
            x = nxt
    return {"totals": {k: {"calls": int(n), "seconds": s} for k, (n, s) in totals.items()},
            "span_seconds": (end - t0) / 1e6, **measurements(spans, t0),
            "seconds": [{"second": i, "builds": b, "actors_busy": a} for i, (b, a) in enumerate(zip(builds, actors))]}


def measurements(spans: list[dict], t0: float) -> dict:
    """When the first and last `measure` calls ended (seconds from the first work), and the
    steady rate between the ends of the 10th and 90th percentile calls, per minute."""
    ends = sorted((e["ts"] + e["dur"] - t0) / 1e6 for e in spans if e["name"] == "measure")
    if len(ends) < 10:
        return {"measurements": len(ends)}
    low, high = len(ends) // 10, (9 * len(ends)) // 10
    steady = 60 * (high - low) / max(ends[high] - ends[low], 1e-9)
    return {"measurements": len(ends), "first_measured_seconds": ends[0], "last_measured_seconds": ends[-1],
            "steady_per_minute": steady}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with open(args.timeline) as f:
        summary = summarize(json.load(f))
    print(f"{'call':45s} {'calls':>6s} {'seconds':>8s}")
    for name, t in sorted(summary["totals"].items(), key=lambda kv: -kv[1]["seconds"]):
        print(f"{name[-45:]:45s} {t['calls']:6d} {t['seconds']:8.1f}")
    if "steady_per_minute" in summary:
        print(f"\n{summary['measurements']} measurements, the first ended at {summary['first_measured_seconds']:.1f} s, "
              f"the last at {summary['last_measured_seconds']:.1f} s; steady (10th to 90th percentile): "
              f"{summary['steady_per_minute']:.0f}/min")
    print(f"\nspan {summary.get('span_seconds', 0.0):.1f} s; per second: builds running, measuring actors busy")
    for row in summary["seconds"]:
        print(f"{row['second']:4d} {row['builds']:6.1f} {row['actors_busy']:5.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
