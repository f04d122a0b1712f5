#!/usr/bin/env python3
"""Auto against each fixed algorithm, per collective, world and size (perf/PERF.md).

Usage: python3 perf/scripts/auto_vs_fixed.py 2,4,8 all-reduce,reduce-scatter,all-gather,broadcast 5
(worlds, collectives, runs) from the workspace root, after `cargo build --release -p ruccl-perf`;
prints one Markdown table per collective and world, then how many cells are within 1.10.

Every algorithm is measured in the same process, in turn at every size (`-A auto,ring,…`, the
order rotated from run to run), so a ratio compares times taken under the same conditions; each
of the runs is a fresh process. The best
fixed algorithm of a cell is the one with the least median time over the runs; the cell reports
the median, over the runs, of each run's own ratio of auto to it. `auto / its pick` measures the one
schedule auto resolved to twice in the same run: the method's own noise.

Two algorithms can build the very same schedule (at W = 2 every all-gather algorithm is the same
step; ring and halving-doubling all-reduce are the same two steps): the tool's JSON rows carry a
fingerprint of the plan's work (`schedule`). `auto's schedule / best` compares schedules, not
names: in each run, a schedule's time is the median of every row that ran it (auto's and its
pick's included), the best schedule is the one with the least median over the runs, and the cell
is the median of the runs' ratios of auto's schedule to it — exactly 1 where auto resolved to
the best schedule, whatever the noise between two measurements of it.
"""
import json, os, statistics, subprocess, sys

BIN = os.environ.get("RUCCL_PERF", "target/release/ruccl-perf")
FIXED = ["ring", "direct", "halving-doubling"]
# (smallest, largest, timed iterations): a measurement takes a few ms or more (the time per
# collective is a mean over the iterations), so that a larger size gets fewer.
BANDS = [(4, 65536, 2000), (1 << 18, 1 << 18, 200), (1 << 20, 1 << 20, 60),
         (4 << 20, 4 << 20, 30), (16 << 20, 16 << 20, 12)]


def run(coll, world, lo, hi, n, turn):
    """One process: every algorithm in turn at every size, the order rotated by `turn` so that no
    algorithm is always measured first; {(lo, k): {asked: (bytes, time, resolved)}} for the k-th
    size from `lo` (sizes that round to the same bytes stay apart)."""
    algs = ["auto"] + [a for a in FIXED if a != "halving-doubling" or world & (world - 1) == 0]
    order = algs[turn % len(algs):] + algs[:turn % len(algs)]
    args = [BIN, coll + "-perf", "-g", str(world), "-A", ",".join(order), "-b", str(lo),
            "-e", str(hi), "-f", "4", "-n", str(n), "-w", "5", "-c", "0", "--json"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAILED {' '.join(args)}\n{out.stderr}")
    cells, seen = {}, {}
    for row in json.loads(out.stdout)["rows"]:
        k = seen[row["asked"]] = seen.get(row["asked"], -1) + 1
        # Without a fingerprint (an older build), the resolved algorithm names the schedule.
        schedule = row.get("schedule") or row["algorithm"]
        cells.setdefault((lo, k), {})[row["asked"]] = (row["bytes"], row["in_place"]["time_us"], row["algorithm"], schedule)
    return cells


worlds = [int(w) for w in sys.argv[1].split(",")]
colls = sys.argv[2].split(",")
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
within = by_schedule = total = 0
for world in worlds:
    for coll in colls:
        print(f"\n#### {coll}, W = {world} (in place, median of {runs} runs; load {os.getloadavg()[0]:.1f})\n", flush=True)
        print("| size (B) | auto picks | auto (µs) | ring | direct | halving-doubling | auto / best fixed | same schedule as auto | auto's schedule / best | auto / its pick |")
        print("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|", flush=True)
        measured = [{} for _ in range(runs)]
        for r in range(runs):
            for lo, hi, n in BANDS:
                measured[r].update(run(coll, world, lo, hi, n, r))
        for key in sorted(measured[0]):
            per_run = [m[key] for m in measured if key in m]
            size = per_run[0]["auto"][0]
            picks = {cell["auto"][2] for cell in per_run}
            times = {a: [cell[a][1] for cell in per_run if a in cell] for a in ["auto"] + FIXED}
            med = {a: statistics.median(v) for a, v in times.items() if v}
            # The best fixed algorithm is the one with the least median time; each run is then
            # compared with it, in that run (a minimum over noisy columns per run would favour
            # whichever column was luckiest).
            best = min((a for a in FIXED if a in med), key=med.get)
            ratio = [cell["auto"][1] / cell[best][1] for cell in per_run]
            noise = [cell["auto"][1] / cell[cell["auto"][2]][1] for cell in per_run]
            r = statistics.median(ratio)
            # The same by schedule: a run's time of a schedule is the median of its rows.
            ran = [{} for _ in per_run]
            for cell, schedules in zip(per_run, ran):
                for _, t, _, schedule in cell.values():
                    schedules.setdefault(schedule, []).append(t)
            mine = per_run[0]["auto"][3]
            fixed = {cell[a][3] for cell in per_run for a in FIXED if a in cell}
            best_schedule = min(fixed, key=lambda s: statistics.median(
                statistics.median(schedules[s]) for schedules in ran if s in schedules))
            pooled = statistics.median(
                statistics.median(schedules[mine]) / statistics.median(schedules[best_schedule])
                for schedules in ran if mine in schedules and best_schedule in schedules)
            same = "=".join(a for a in FIXED if a in per_run[0] and per_run[0][a][3] == mine)
            total += 1
            within += r <= 1.10
            by_schedule += pooled <= 1.10
            cols = " | ".join(f"{med[a]:.2f}" if a in med else "-" for a in FIXED)
            print(f"| {size} | {'/'.join(sorted(picks))} | {med['auto']:.2f} | {cols} | "
                  f"{r:.2f} | {same or '-'} | {pooled:.2f} | {statistics.median(noise):.2f} |", flush=True)
print(f"\nauto within 1.10 of the best fixed algorithm (median of the runs' ratios): {within} of {total} cells")
print(f"auto's schedule within 1.10 of the best schedule (rows of one schedule pooled): {by_schedule} of {total} cells")
