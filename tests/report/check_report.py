#!/usr/bin/env python3
"""The HTML report (docs/report.md), read with a plain HTML parser and, with --chromium, rendered
in headless Chromium.

Usage: check_report.py STEPSIM WORK_DIR [--chromium BROWSER]

1. `stepsim run ... --csv --html` on a small layout: the page's figures are summary.json's
   values (as numbers in data-value, and formatted as docs/report.md says), its per-stage rows
   are the stages of summary.json, its memory table is `stepsim memory`'s table, its timeline
   draws exactly the tasks of one pipeline of tasks.csv, and it fetches nothing.
2. `stepsim report DIR` on the same folder and on a sweep's folder: a sortable table with
   results.csv's rows.
3. With --chromium: the DOM Chromium builds holds the same figures, `#sort=-step_time_s` sorts
   the sweep table by its JavaScript, and a screenshot is not blank.
"""

import csv
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(SOURCE, "topologies", "dgx-h100.yaml")
WORKLOAD = os.path.join(SOURCE, "workloads", "tiny-gpt.yaml")
SETS = ["--set", "cluster.nodes=1", "--set", "parallel.pp=4", "--set", "parallel.tp=1"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def seconds(s):
    if abs(s) >= 1 or s == 0:
        return "%.4g s" % s
    if abs(s) >= 1e-3:
        return "%.4g ms" % (s * 1e3)
    return "%.4g us" % (s * 1e6)


def percent(x):
    return "%.1f %%" % (100 * x)


class Page(html.parser.HTMLParser):
    """Figures (data-key -> (data-value, text)), tables (rows of cell texts per table), rects per
    section, and every address the page would fetch."""

    def __init__(self, text):
        super().__init__()
        self.figures, self.tables, self.rects, self.fetches = {}, [], {}, []
        self.section, self.cell, self.figure = None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.section = a.get("id")
        if tag == "table":
            self.tables.append({"section": self.section, "rows": []})
        if tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        if tag in ("td", "th"):
            self.cell = ""
            if "data-key" in a:
                self.figure = (a["data-key"], a["data-value"])
        if tag == "rect":
            self.rects[self.section] = self.rects.get(self.section, 0) + 1
        for key in ("src", "href"):
            if key in a and not a[key].startswith(("data:", "#")):
                self.fetches.append(a[key])
        if tag == "link" or (tag == "script" and "src" in a):
            self.fetches.append(tag)

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1]["rows"][-1].append(self.cell.strip())
            if self.figure:
                self.figures[self.figure[0]] = (json.loads(self.figure[1]), self.cell.strip())
            self.cell, self.figure = None, None


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def check_figures(page, summary, where):
    expected = {
        "step_time_s": seconds(summary["step_time_s"]),
        "tokens_per_s": "%.0f" % summary["tokens_per_s"],
        "tflops_per_gpu": "%.1f" % summary["tflops_per_gpu"],
        "mfu": percent(summary["mfu"]),
        "hfu": percent(summary["hfu"]),
        "bubble_fraction": percent(summary["bubble_fraction"]),
        "compute_s": seconds(summary["compute_s"]),
        "fits_in_memory": "yes" if summary["fits_in_memory"] else "NO",
    }
    for group, v in summary["exposed_comm_s"].items():
        if isinstance(v, (int, float)):
            expected["exposed_comm_s." + group] = seconds(v)
    for key, text in expected.items():
        value = summary
        for part in key.split("."):
            value = value[part]
        got = page.figures.get(key)
        check(got is not None, f"{where}: figure {key} missing")
        if got:
            check(got[0] == value, f"{where}: {key} data-value {got[0]} != summary.json {value}")
            check(got[1] == text, f"{where}: {key} shows '{got[1]}', expected '{text}'")


def pipeline_tasks(tasks_csv):
    """Tasks of the pipeline drawn: per stage, the lowest rank computing for it."""
    with open(tasks_csv, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    lowest = {}
    for r in rows:
        if r["kind"] == "compute":
            s, g = int(r["stage"]), int(r["rank"])
            lowest[s] = min(lowest.get(s, g), g)
    ranks = set(lowest.values())
    return [r for r in rows if int(r["rank"]) in ranks], len(lowest)


def png_pixels(path):
    """(width, height, [(r, g, b)]) of an 8-bit RGB or RGBA PNG (what Chromium's screenshots are)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat = 8, b""
    while pos < len(data):
        length = struct.unpack(">I", data[pos:pos + 4])[0]
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in (2, 6) or interlace:
                raise ValueError(f"{path}: depth {depth}, colour type {colour}, interlace {interlace}")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, step = zlib.decompress(idat), 3 if colour == 2 else 4
    stride, previous, pixels, i = width * step, bytearray(width * step), [], 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            left = line[x - step] if x >= step else 0
            up, corner = previous[x], previous[x - step] if x >= step else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        pixels += [tuple(line[x:x + 3]) for x in range(0, stride, step)]
        previous = line
    return width, height, pixels


def main():
    stepsim, work = sys.argv[1], sys.argv[2]
    browser = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--chromium" else None
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    # 1. run --html
    out = os.path.join(work, "run")
    run(stepsim, "run", "--cluster", CLUSTER, "--workload", WORKLOAD, *SETS, "--out", out, "--csv", "--html",
        "--no-trace", "--quiet")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        text = f.read()
    page = Page(text)
    check_figures(page, summary, "run --html")
    check(page.fetches == [], f"the page fetches {page.fetches}")
    stage_rows = next(t["rows"][1:] for t in page.tables if t["section"] == "stages")
    check([int(r[0]) for r in stage_rows] == [s["stage"] for s in summary["stages"]],
          "per-stage table: one row per stage of summary.json")
    check(page.rects.get("stages", 0) >= 4, "per-stage bars drawn")
    memory_rows = next(t["rows"] for t in page.tables if t["section"] == "memory")
    table = run(stepsim, "memory", "--cluster", CLUSTER, "--workload", WORKLOAD, *SETS)
    cli_rows = [l.split()[2:8] for l in table.splitlines() if l.strip().startswith("stage ")]
    check(len(memory_rows) - 1 == len(cli_rows) == 4, "memory table: four stages")
    for ours, theirs in zip(memory_rows[1:], cli_rows):
        check(all(abs(float(a) - float(b)) <= 0.011 for a, b in zip(ours[1:], theirs)),
              f"memory row {ours} != stepsim memory's {theirs}")
    tasks, stages = pipeline_tasks(os.path.join(out, "tasks.csv"))
    check(stages == 4, "tasks.csv: four stages")
    check(page.rects.get("timeline", 0) == len(tasks),
          f"timeline draws {page.rects.get('timeline', 0)} tasks, the pipeline has {len(tasks)}")
    check(page.rects.get("memory-time") is None and "<polyline" in text, "memory over time drawn")

    # 2. stepsim report on the run folder and on a sweep folder
    run(stepsim, "report", out, "--html", os.path.join(out, "folder.html"))
    with open(os.path.join(out, "folder.html"), encoding="utf-8") as f:
        folder_page = Page(f.read())
    check_figures(folder_page, summary, "report DIR")
    check(folder_page.rects.get("timeline", 0) == len(tasks), "report DIR: the timeline from tasks.csv")
    sweep_file = os.path.join(work, "pp.yaml")
    with open(sweep_file, "w", encoding="utf-8") as f:
        f.write(f"cluster: {CLUSTER}\nworkload: {WORKLOAD}\nset:\n  cluster.nodes: 1\n  parallel.tp: 1\n"
                "grid:\n  parallel.pp: [1, 2, 4]\n")
    sweep_out = os.path.join(work, "sweep")
    run(stepsim, "sweep", sweep_file, "--out", sweep_out, "-j", "2")
    run(stepsim, "report", sweep_out)
    sweep_html = os.path.join(sweep_out, "report.html")
    with open(sweep_html, encoding="utf-8") as f:
        sweep_page = Page(f.read())
    with open(os.path.join(sweep_out, "results.csv"), newline="", encoding="utf-8") as f:
        results = list(csv.reader(f))
    sweep_table = next(t["rows"] for t in sweep_page.tables if t["section"] == "table-0")
    check(sweep_table == results, "sweep report: the table is results.csv")

    # 3. Chromium
    if browser:
        profile = os.path.join(work, "chromium-profile")
        flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--hide-scrollbars"]
        dom = run(*flags, "--dump-dom", "file://" + os.path.join(out, "report.html"))
        check_figures(Page(dom), summary, "chromium DOM")
        column = results[0].index("step_time_s")
        dom = run(*flags, "--dump-dom", "file://" + sweep_html + "#sort=-step_time_s")
        sorted_table = next(t["rows"] for t in Page(dom).tables if t["section"] == "table-0")
        times = [float(r[column]) for r in sorted_table[1:]]
        check(len(times) == 3 and times == sorted(times, reverse=True) and times != [float(r[column]) for r in results[1:]],
              f"chromium: #sort=-step_time_s sorts the table descending: {times}")
        shot = os.path.join(work, "report.png")
        subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1100,1400",
                        "file://" + os.path.join(out, "report.html")], check=True, capture_output=True)
        width, height, pixels = png_pixels(shot)
        inked = sum(1 for p in pixels if p != (255, 255, 255))
        compute_blue = sum(1 for p in pixels if p == (0, 0x72, 0xB2))
        print(f"screenshot {width}x{height}: {inked} non-white pixels, {compute_blue} of the compute colour")
        check(inked > 0.02 * len(pixels), "chromium: the screenshot is not blank")
        check(compute_blue > 500, "chromium: the compute bars are drawn")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("report checks passed" + (" (with chromium)" if browser else " (plain parser)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
