#!/usr/bin/env python3
"""Plots the results of `stepsim sweep` (DIR/results.csv) as PNG files.

usage: tools/plot_sweep.py DIR [--out PLOTDIR]

Writes, into PLOTDIR (default DIR/plots), whichever of these the results support:
  bubble_vs_microbatches.png  pipeline bubble fraction against micro-batches per pipeline, one
                              line per series: the schedule with its vp and every other swept key
                              that is not a batch size (no two series are averaged together)
  step_time_mfu.png           step time and MFU per configuration (the layout: every swept key
                              that is not the schedule), coloured by schedule and vp
  memory.png                  peak memory per GPU per configuration with the GPU's capacity as a
                              line (only when the summaries carry memory figures)
Rows with status `ok` are plotted; rows with status `oom` (simulated, but the layout does not fit
in GPU memory) are left out of the bubble plot, hatched and labelled "(oom)" in the step-time /
MFU plot and red in the memory plot. Legends sit beside the axes, never over the bars. Needs
python3-matplotlib (Debian); no pip.
"""

import argparse
import csv
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    # A python3 other than Debian's (pyenv, a venv) may lack matplotlib: retry with Debian's.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
            and not os.environ.get("STEPSIM_PLOT_REEXEC"):
        os.environ["STEPSIM_PLOT_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("plot_sweep: matplotlib is missing; install the Debian package python3-matplotlib")

FIXED = {"id", "index", "status", "reason", "num_gpus", "micro_batches", "step_time_s", "tokens_per_s",
         "tflops_per_gpu", "mfu", "hfu", "bubble_fraction", "compute_s", "exposed_tp_s", "exposed_pp_s",
         "exposed_dp_s", "exposed_ep_s", "exposed_cp_s", "peak_memory_bytes", "fits_in_memory",
         "hbm_capacity_bytes"}
SCHEDULE = "parallel.schedule"
VP = "parallel.vp"
GIB = float(1 << 30)


def read_rows(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        keys = [k for k in reader.fieldnames if k not in FIXED]
    return rows, keys


def num(row, key):
    try:
        return float(row.get(key, "") or "nan")
    except ValueError:
        return float("nan")


def short(key):
    """'parallel.tp' -> 'tp', 'batch.micro_batch' -> 'micro_batch'."""
    return key.rsplit(".", 1)[-1]


def layout_label(row, keys):
    return " ".join(f"{short(k)}={row[k]}" for k in keys if row.get(k, "") != "")


def schedule_label(row):
    """The schedule and its interleaving degree: '1f1b', 'interleaved vp2'."""
    schedule = row.get(SCHEDULE) or "(workload's schedule)"
    vp = row.get(VP, "")
    return f"{schedule} vp{vp}" if vp not in ("", "1") else schedule


def series_label(row, keys):
    """Everything that tells two bubble curves apart: schedule and vp, and every other swept key
    that does not set the number of micro-batches (the x axis)."""
    rest = [k for k in keys if k not in (SCHEDULE, VP) and not k.startswith("batch.")]
    label = layout_label(row, rest)
    return schedule_label(row) + (f" {label}" if label else "")


def is_oom(row):
    return row["status"] == "oom"


def plot_bubble(rows, keys, out):
    series = {}
    for r in rows:
        if is_oom(r):
            continue
        m, b = num(r, "micro_batches"), num(r, "bubble_fraction")
        if m == m and b == b:
            series.setdefault(series_label(r, keys), {})[m] = b
    if not series or all(len(pts) < 2 for pts in series.values()):
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--")]
    for i, (label, pts) in enumerate(sorted(series.items())):
        xs = sorted(pts)
        marker, line = styles[i % len(styles)]
        ax.plot(xs, [pts[x] for x in xs], marker=marker, linestyle=line, label=label,
                markersize=max(3, 8 - i % 6), alpha=0.85)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches per pipeline")
    ax.set_ylabel("pipeline bubble fraction")
    ax.set_title("Pipeline bubble vs micro-batches")
    ax.grid(True, alpha=0.3)
    ax.legend(title="series", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    path = os.path.join(out, "bubble_vs_microbatches.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_time_mfu(rows, keys, out):
    layout_keys = [k for k in keys if k not in (SCHEDULE, VP)]
    groups = [schedule_label(r) for r in rows]
    labels = [layout_label(r, layout_keys) or r["id"] for r in rows]
    if len(set(groups)) > 1:
        labels = [f"{l} {g}" for l, g in zip(labels, groups)]
    labels = [f"{l} (oom)" if is_oom(r) else l for l, r in zip(labels, rows)]
    n = len(rows)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8, 0.38 * n + 4), 7.5), sharex=True)
    xs = range(n)
    colors = {g: f"C{i}" for i, g in enumerate(sorted(set(groups)))}
    hatches = ["//" if is_oom(r) else "" for r in rows]
    for ax, values in ((ax1, [num(r, "step_time_s") for r in rows]), (ax2, [100 * num(r, "mfu") for r in rows])):
        bars = ax.bar(xs, values, color=[colors[g] for g in groups])
        for bar, hatch in zip(bars, hatches):
            if hatch:
                bar.set_hatch(hatch)
                bar.set_edgecolor("C3")
        ax.grid(True, axis="y", alpha=0.3)
    ax1.set_ylabel("step time (s)")
    ax1.set_title("Step time and MFU per configuration")
    ax2.set_ylabel("MFU (%)")
    ax2.set_xticks(list(xs))
    ax2.set_xticklabels(labels, rotation=75, ha="right", fontsize=8)
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=g) for g, c in colors.items()] if len(colors) > 1 else []
    if any(hatches):
        handles.append(Patch(facecolor="white", edgecolor="C3", hatch="//", label="does not fit (oom)"))
    if handles:
        ax1.legend(handles=handles, title="schedule", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    path = os.path.join(out, "step_time_mfu.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_memory(rows, keys, out):
    mem = [num(r, "peak_memory_bytes") for r in rows]
    if all(m != m for m in mem):
        return None
    labels = [(layout_label(r, keys) or r["id"]) + (" (oom)" if is_oom(r) else "") for r in rows]
    n = len(rows)
    fig, ax = plt.subplots(figsize=(max(8, 0.38 * n + 4), 5))
    fits = [r.get("fits_in_memory", "") for r in rows]
    colors = ["C3" if f == "false" else "C0" for f in fits]
    ax.bar(range(n), [m / GIB for m in mem], color=colors)
    caps = sorted({num(r, "hbm_capacity_bytes") for r in rows} - {float("nan")})
    for cap in caps:
        if cap == cap:
            ax.axhline(cap / GIB, color="k", linestyle="--", label=f"capacity {cap / GIB:.0f} GiB")
    ax.set_ylabel("peak memory per GPU (GiB)")
    ax.set_title("Peak memory per configuration")
    ax.set_xticks(list(range(n)))
    ax.set_xticklabels(labels, rotation=75, ha="right", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    if caps:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    path = os.path.join(out, "memory.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main():
    p = argparse.ArgumentParser(description="Plot the results of `stepsim sweep`.")
    p.add_argument("dir", help="the sweep's --out folder (holding results.csv)")
    p.add_argument("--out", help="folder for the PNG files (default DIR/plots)")
    args = p.parse_args()
    csv_path = os.path.join(args.dir, "results.csv")
    if not os.path.exists(csv_path):
        sys.exit(f"plot_sweep: {csv_path} does not exist (run `stepsim sweep ... --out {args.dir}`, "
                 f"or `stepsim sweep --merge {args.dir}` after sharded runs)")
    rows, keys = read_rows(csv_path)
    ok = [r for r in rows if r["status"] in ("ok", "oom")]
    if not ok:
        sys.exit(f"plot_sweep: {csv_path} has no rows with status ok or oom")
    out = args.out or os.path.join(args.dir, "plots")
    os.makedirs(out, exist_ok=True)
    for fn in (plot_bubble, plot_time_mfu, plot_memory):
        path = fn(ok, keys, out)
        if path:
            print(f"plot_sweep: wrote {path}")


if __name__ == "__main__":
    main()
