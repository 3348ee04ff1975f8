#!/usr/bin/env python3
"""The benchmark table of docs/performance.md, from bench/step_bench's JSON output.

    bench/step_bench --benchmark_out=bench.json --benchmark_out_format=json
    tools/bench_table.py bench.json                    # prints the table as JSON
    tools/bench_table.py bench.json --doc docs/performance.md   # also rewrites its table

Each row: the case, CPU seconds (user + system of the stepsim process, median over repetitions),
peak RSS in MB, GPUs, and the case's targets with whether they are met. Derived rows: the log-log
slope of CPU time over GPUs for the GPT-3 scaling series (target <= 1.2), the fat-tree to
rail-optimised ratio for Llama 3.1 405B on 16 384 H100s (target <= 3) and the CPU per
configuration of the sweep.
"""
import json
import math
import sys

BEGIN = "<!-- bench-table begin (tools/bench_table.py) -->"
END = "<!-- bench-table end -->"


def rows_of(report):
    """One row per benchmark: its median where repetitions were aggregated, else its only run."""
    rows = {}
    for b in report.get("benchmarks", []):
        name = b.get("run_name", b["name"]).split("/iterations:")[0]
        if b.get("error_occurred"):
            rows[name] = {"case": name, "error": b.get("error_message", "failed")}
            continue
        aggregate = b.get("aggregate_name")
        if aggregate not in (None, "median"):
            continue
        if aggregate is None and name in rows:
            continue
        row = {"case": name, "cpu_s": round(b["cpu_s"], 3), "peak_rss_MB": round(b["peak_rss_MB"], 1),
               "gpus": int(b["gpus"])}
        for key in ("target_cpu_s", "target_rss_MB", "configurations"):
            if key in b:
                row[key] = b[key]
        met = True
        if "target_cpu_s" in row:
            met = met and row["cpu_s"] <= row["target_cpu_s"]
        if "target_rss_MB" in row:
            met = met and row["peak_rss_MB"] <= row["target_rss_MB"]
        if "target_cpu_s" in row or "target_rss_MB" in row:
            row["met"] = met
        rows[name] = row
    return rows


def derived(rows):
    out = []
    series = sorted((r["gpus"], r["cpu_s"]) for n, r in rows.items()
                    if n.startswith("scale/gpt3_175b_") and "cpu_s" in r)
    if len(series) >= 2 and series[0][1] > 0:
        (g0, t0), (g1, t1) = series[0], series[-1]
        slope = math.log(t1 / t0) / math.log(g1 / g0)
        out.append({"case": f"scale/gpt3_175b log-log slope {g0}..{g1} GPUs", "value": round(slope, 3),
                    "target": 1.2, "met": slope <= 1.2})
    rail = rows.get("scale/llama31_405b_16384h100_rail_optimized", {}).get("cpu_s")
    fat = rows.get("scale/llama31_405b_16384h100_fat_tree", {}).get("cpu_s")
    if rail and fat:
        out.append({"case": "scale/llama31_405b_16384h100 fat tree / rail-optimised CPU", "value": round(fat / rail, 2),
                    "target": 3.0, "met": fat / rail <= 3.0})
    for n, r in rows.items():
        if "configurations" in r and "cpu_s" in r:
            out.append({"case": n + " CPU per configuration", "value": round(r["cpu_s"] / r["configurations"], 3)})
    return out


def markdown(table):
    lines = ["| case | CPU s | peak RSS MB | GPUs | target | met |", "|---|---|---|---|---|---|"]
    for r in table["cases"]:
        if "error" in r:
            lines.append(f"| {r['case']} | failed: {r['error']} | | | | |")
            continue
        target = ", ".join(x for x in (f"<= {r['target_cpu_s']:g} s" if "target_cpu_s" in r else "",
                                       f"<= {r['target_rss_MB']:g} MB" if "target_rss_MB" in r else "") if x)
        met = "" if "met" not in r else ("yes" if r["met"] else "**no**")
        lines.append(f"| {r['case']} | {r['cpu_s']:.2f} | {r['peak_rss_MB']:.0f} | {r['gpus']} | {target} | {met} |")
    for d in table["derived"]:
        target = f"<= {d['target']:g}" if "target" in d else ""
        met = "" if "met" not in d else ("yes" if d["met"] else "**no**")
        lines.append(f"| {d['case']} | {d['value']} | | | {target} | {met} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    with open(argv[1]) as f:
        report = json.load(f)
    rows = rows_of(report)
    table = {"machine": {"cpus": report.get("context", {}).get("num_cpus"),
                         "date": report.get("context", {}).get("date")},
             "cases": list(rows.values()), "derived": derived(rows)}
    print(json.dumps(table, indent=1))
    if len(argv) >= 4 and argv[2] == "--doc":
        with open(argv[3]) as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            print(f"bench_table.py: {argv[3]} has no {BEGIN} ... {END} block", file=sys.stderr)
            return 2
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(argv[3], "w") as f:
            f.write(head + BEGIN + "\n" + markdown(table) + "\n" + END + tail)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
