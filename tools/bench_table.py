#!/usr/bin/env python3
"""The benchmark table of docs/performance.md, from bench/step_bench's JSON output.

    bench/step_bench --benchmark_out=bench.json --benchmark_out_format=json
    tools/bench_table.py bench.json                    # prints the table as JSON
    tools/bench_table.py bench.json [more.json ...] --doc docs/performance.md [--note TEXT]
                                                       # also rewrites its table

Each row: the case, CPU seconds (user + system of the stepsim process, median over repetitions),
peak RSS in MB, GPUs, and the case's targets with whether they are met. Derived rows: the log-log
slope of CPU time over GPUs for the GPT-3 scaling series (target <= 1.2), the fat-tree to
rail-optimised ratio for Llama 3.1 405B on 16 384 H100s (target <= 3) and the CPU per
configuration of the sweep. Several files are merged case by case (a later file's row wins), so
`make bench` and `make bench-scale` fill one table. The text between the markers is replaced by
a line naming the files, date and CPUs (and the note), then the table; the rest of the document
is kept byte for byte.
"""
import json
import math
import os
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


def parse_args(argv):
    """(json files, doc or None, note); raises ValueError on a bad command line."""
    files, doc, note = [], None, ""
    i = 1
    while i < len(argv):
        if argv[i] in ("--doc", "--note"):
            if i + 1 >= len(argv):
                raise ValueError(f"{argv[i]} needs a value")
            if argv[i] == "--doc":
                doc = argv[i + 1]
            else:
                note = argv[i + 1]
            i += 2
            continue
        files.append(argv[i])
        i += 1
    if not files:
        raise ValueError("no benchmark JSON file given")
    return files, doc, note


def table_of(reports, names):
    """The merged table of several benchmark reports (a later report's row wins per case)."""
    rows = {}
    for report in reports:
        rows.update(rows_of(report))
    context = reports[-1].get("context", {})
    return {"machine": {"cpus": context.get("num_cpus"), "date": context.get("date")},
            "sources": names, "cases": list(rows.values()), "derived": derived(rows)}


def preamble(table, note):
    """The line above the table: where its figures come from, and the note."""
    machine = table["machine"]
    line = (f"Generated by tools/bench_table.py from {', '.join(table['sources'])} ({machine['date']}, "
            f"{machine['cpus']} CPUs): CPU seconds are user + system of the stepsim process, the median "
            "over repetitions; peak RSS in MB.")
    return line + (" " + note if note else "")


def rewrite_doc(path, text):
    """Replaces what lies between the markers of `path` with `text`; False when they are not one
    begin marker followed by one end marker."""
    with open(path) as f:
        doc = f.read()
    if doc.count(BEGIN) != 1 or doc.count(END) != 1 or doc.index(BEGIN) > doc.index(END):
        return False
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + text + "\n" + END + tail)
    return True


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    try:
        files, doc, note = parse_args(argv)
    except ValueError as e:
        print(f"bench_table.py: {e}", file=sys.stderr)
        return 2
    reports = []
    for name in files:
        with open(name) as f:
            reports.append(json.load(f))
    table = table_of(reports, [os.path.basename(n) for n in files])
    print(json.dumps(table, indent=1))
    if doc is not None and not rewrite_doc(doc, preamble(table, note) + "\n\n" + markdown(table)):
        print(f"bench_table.py: {doc} needs one {BEGIN} followed by one {END}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
