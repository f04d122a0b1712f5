#!/usr/bin/env python3
"""Auto against each fixed algorithm, per collective, world and size (perf/PERF.md).

Usage: python3 perf/scripts/auto_vs_fixed.py 4,8 all-reduce,reduce-scatter,all-gather,broadcast 3
(worlds, collectives, interleaved rounds) from the workspace root, after
`cargo build --release -p ruccl-perf`; prints one Markdown table per collective and world.
"""
import json, sys, subprocess, os
BIN = os.environ.get("RUCCL_PERF", "target/release/ruccl-perf")
ALGS = ["auto", "ring", "direct", "halving-doubling"]
def one(coll, world, alg, size, n):
    args = [BIN, coll + "-perf", "-g", str(world), "-A", alg, "-b", str(size), "-e", str(size),
            "-n", str(n), "-w", "1", "-c", "0", "--json"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        print("FAILED", args, out.stderr, file=sys.stderr); return None
    row = json.loads(out.stdout)["rows"][0]
    return row["in_place"]["time_us"], row["algorithm"]
worlds = [int(w) for w in sys.argv[1].split(",")]
colls = sys.argv[2].split(",")
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
sizes = [4 * 4**k for k in range(12)]  # 4 B .. 16 MiB
for world in worlds:
    for coll in colls:
        print(f"\n#### {coll}, W = {world} (in place, best of {rounds} interleaved runs; load {os.getloadavg()[0]:.1f})\n", flush=True)
        print("| size (B) | auto picks | auto (µs) | ring | direct | halving-doubling | auto / best fixed | auto's pick / best fixed |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|", flush=True)
        for size in sizes:
            n = 200 if size <= 65536 else (20 if size <= 1 << 20 else 5)
            times = {alg: [] for alg in ALGS}; pick = None
            for r in range(rounds):
                for alg in ALGS:
                    got = one(coll, world, alg, size, n)
                    if got:
                        times[alg].append(got[0])
                        if alg == "auto": pick = got[1]
            # The best of the rounds: load only ever adds time.
            med = {alg: min(v) for alg, v in times.items() if v}
            fixed = {a: med[a] for a in ALGS[1:] if a in med}
            best = min(fixed.values())
            cells = " | ".join(f"{med[a]:.2f}" if a in med else "-" for a in ALGS[1:])
            picked = fixed.get(pick, float('nan'))
            print(f"| {size} | {pick} | {med['auto']:.2f} | {cells} | {med['auto']/best:.2f} | {picked/best:.2f} |", flush=True)
