#!/usr/bin/env python3
"""The CPU speed guard: notices a slowdown before it lands, on any machine, without PyTorch.

Usage: python3 benches/guard.py [--quick] [--floors benches/cpu-floors.json]
       (benches/compare.sh --guard runs it)

It runs every workload of `cargo bench --bench engine` RUNS times, each just after a measure of
the ceiling that bounds it (f32 FMA peak for products and steps, memory read bandwidth for the
rest: `--beside-ceilings`), and holds each workload's best share of its ceiling (its rate over
that ceiling) to a floor: a fixed part (`floor_part`, 0.6: a 2x slowdown fails) of the share
recorded for this CPU in `benches/cpu-floors.json` (the runs `benches/RESULTS.md` reports), or,
on a CPU with no record, of the lowest share any CPU recorded. Shares, not times, and each
against a ceiling measured beside it, so a slower or busier machine does not read as a slowdown:
both sides of the division meet the same load. The best of RUNS, because noise only ever makes
a share smaller. A workload under its floor is measured RUNS times more before it counts.
Exits 1 naming each workload that fell, and by how much.

`--record` prints this CPU's entry for cpu-floors.json from the same measurement.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = ["cargo", "bench", "--quiet", "-p", "placelab", "--bench", "engine", "--"]


RUNS = 3


def rate_and_share(row, ceilings):
    """(rate text, share of the bounding ceiling or None) for one line of the engine bench: of
    the ceiling on the line itself (`--beside-ceilings`), else of `ceilings`."""
    seconds = row["median_ms"] / 1e3
    if "flop" in row:
        rate = row["flop"] / seconds / 1e9
        return f"{rate:.0f} GFLOP/s", rate / (row["ceiling"] if "ceiling" in row else ceilings["fma_peak_gflops"])
    if "bytes" in row:
        rate = row["bytes"] / seconds / 1e9
        return f"{rate:.1f} GB/s", rate / (row["ceiling"] if "ceiling" in row else ceilings["memory_read_gbps"])
    return "", None


def run_bench(args):
    out = subprocess.run(BENCH + args, check=True, capture_output=True, text=True, cwd=os.path.dirname(HERE))
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def best_rows(runs):
    """{name: row}: each workload's row with the highest share of all `runs` (lists of rows)."""
    best = {}
    for rows in runs:
        for row in rows:
            share = rate_and_share(row, {})[1]
            old = best.get(row["name"])
            if old is None or share > rate_and_share(old, {})[1]:
                best[row["name"]] = row
    return best


def measure(only, quick):
    """(this machine's ceilings, {name: best row of RUNS, each with its ceiling beside it})."""
    ceilings = run_bench(["--ceilings"])[0]
    args = ["--beside-ceilings"] + (["--quick"] if quick else []) + (["--only", ",".join(only)] if only else [])
    return ceilings, best_rows(run_bench(args) for _ in range(RUNS))


def cpu_model(lscpu=None):
    """This CPU as cpu-floors.json keys it: lscpu's model name, family and model. The name alone
    is not enough: VMs of Zen 2, 3 and 4 all say "AMD EPYC"."""
    cpu = lscpu if lscpu is not None else subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    field = lambda name: next((l.split(":", 1)[1].strip() for l in cpu.splitlines()
                               if l.strip().startswith(name + ":")), "?")
    return f"{field('Model name')} (family {field('CPU family')} model {field('Model')})"


def recorded_shares(floors, model):
    """(shares, where from): this CPU's record, else each workload's lowest share on any CPU."""
    cpus = floors["cpus"]
    if model in cpus:
        rec = cpus[model]
        return rec["shares"], f"this CPU's record of {rec['date']} at {rec['commit']}"
    lowest = {}
    for rec in cpus.values():
        for name, share in rec["shares"].items():
            lowest[name] = min(share, lowest.get(name, share))
    return lowest, f"no record for this CPU: the lowest share of {len(cpus)} recorded CPUs"


def verdicts(rows, ceilings, floors, shares):
    """{name: (row, rate text, share, recorded share, floor)} for every measured workload."""
    part = floors["floor_part"]
    out = {}
    for name, row in rows.items():
        rate, share = rate_and_share(row, ceilings)
        recorded = shares.get(name)
        floor = recorded * part if recorded is not None else None
        out[name] = (row, rate, share, recorded, floor)
    return out


def fell(v):
    _, _, share, _, floor = v
    return floor is not None and share is not None and share < floor


def record(model, quick):
    """Prints {model: {date, commit, shares}}: this CPU's entry for cpu-floors.json."""
    _, rows = measure(None, quick)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip()
    shares = {name: round(rate_and_share(row, {})[1], 3) for name, row in rows.items()}
    entry = {"date": datetime.date.today().isoformat(), "commit": commit, "shares": shares}
    print(json.dumps({model: entry}, indent=2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--floors", default=os.path.join(HERE, "cpu-floors.json"))
    ap.add_argument("--quick", action="store_true", help="3 repetitions a workload, not ~1 s")
    ap.add_argument("--record", action="store_true",
                    help="print this CPU's entry for the floors file from one measurement, and exit")
    a = ap.parse_args()
    floors = json.load(open(a.floors))
    model = cpu_model()
    if a.record:
        record(model, a.quick)
        return
    shares, source = recorded_shares(floors, model)
    ceilings, rows = measure(None, a.quick)
    first = verdicts(rows, ceilings, floors, shares)
    again = [n for n, v in first.items() if fell(v)]
    final = dict(first)
    if again:
        print(f"under the floor once: {', '.join(again)}; measuring them again", file=sys.stderr)
        c2, r2 = measure(again, a.quick)
        final.update(verdicts(r2, c2, floors, shares))
        ceilings = c2
    missing = sorted(set(shares) - set(rows))
    print(f"CPU: {model}, {ceilings['threads']} threads; ceilings: f32 FMA peak "
          f"{ceilings['fma_peak_gflops']:.0f} GFLOP/s, memory read {ceilings['memory_read_gbps']:.1f} GB/s")
    print(f"floors: {floors['floor_part']:.2f} of the recorded shares ({source})")
    print(f"{'workload':24} {'ms':>9} {'rate':>13} {'share':>6} {'recorded':>9} {'floor':>6}  verdict")
    failed = []
    for name, (row, rate, share, recorded, floor) in final.items():
        s = f"{share:.0%}" if share is not None else "-"
        r = f"{recorded:.0%}" if recorded is not None else "-"
        f = f"{floor:.0%}" if floor is not None else "-"
        if floor is None:
            verdict = "no floor recorded"
        elif share < floor:
            verdict = f"FELL: {1 - share / recorded:.0%} below the recorded share"
            failed.append((name, share, recorded, floor))
        else:
            verdict = f"ok ({share / recorded:.2f}x the recorded share)"
        print(f"{name:24} {row['median_ms']:9.3f} {rate:>13} {s:>6} {r:>9} {f:>6}  {verdict}")
    for name in missing:
        print(f"{name:24} not measured: the engine bench no longer has it (update {a.floors})")
    if failed or missing:
        for name, share, recorded, floor in failed:
            print(f"error: {name} fell to {share:.1%} of its ceiling, under its floor of {floor:.1%} "
                  f"(recorded {recorded:.1%}), twice in a row. Find the change with "
                  f"`cargo bench -p placelab --bench engine -- --only {name}` on each commit.",
                  file=sys.stderr)
        sys.exit(1)
    print(f"{len(final)} workloads, every one at or above its floor")


if __name__ == "__main__":
    main()
