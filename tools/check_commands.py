#!/usr/bin/env python3
"""Runs every `stepsim ...` command the documentation shows.

usage: tools/check_commands.py STEPSIM_BINARY [--list] [--jobs N]

Reads README.md, docs/*.md and the comments of the bundled YAML files (topologies/, workloads/,
sweeps/, jobs/), extracts each command that starts with `stepsim` or `./build/stepsim` followed by a
subcommand (from fenced code blocks, with `\\` continuations joined, from inline code spans, and
from YAML comment lines), and runs it from the source tree. Whatever text the files hold is
read afresh: nothing here lists the commands.

A command is a template, not run, when one of its words is a placeholder (DIR, FILE, RUNS.yaml,
`[...]`, `...`, `${VAR}`) or when it names no file and no --help (`stepsim run --set` names an
option). The rest run with settings that keep them short and leave the tree
clean: `--out` points into a temporary folder; `run` gets `--no-trace` (unless it shapes the
trace); `sweep` gets `--dry-run` (it expands and checks every configuration); `plan` gets
`--top 0` (estimates only); `validate` gets `--only` with the first run of its file; `report`
reads the folder of a tiny run written first. SKIP lists
the few commands that cannot run here, each with its reason. A command fails when it exits
non-zero; the test fails when one does.
"""

import argparse
import concurrent.futures
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBCOMMANDS = ("run", "memory", "plan", "sweep", "collective", "validate", "calibrate", "compare", "kernels",
               "report", "jobs")
START = re.compile(r"(?:\./build/|\b)stepsim\s+(" + "|".join(SUBCOMMANDS) + r")\b")

# (pattern over the command as written, reason): commands that cannot run here.
SKIP = [
    (r"^stepsim sweep --merge ", "merges the shard files a sharded run (--shard I/K) left in DIR"),
    (r"^stepsim calibrate ", "searches the knobs over many simulations of every fit run (minutes); "
                             "tests/validate covers calibrate"),
    (r"--cross-validate", "refits every GPU kind's calibration once per group (minutes); tests/validate covers it"),
    (r"^mpirun ", "needs an MPI launcher and several ranks"),
]

PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*([.=/:][A-Za-z0-9_.=/]*)?$")


def sources():
    files = [os.path.join(ROOT, "README.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for folder in ("topologies", "workloads", "sweeps", "jobs"):
        files += sorted(glob.glob(os.path.join(ROOT, folder, "**", "*.yaml"), recursive=True))
    return files


def commands_in_markdown(text):
    """(line, command) from fenced blocks (continuations joined) and inline code spans."""
    out = []
    lines = text.split("\n")
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            i += 1
            continue
        if fenced:
            first = i
            joined = line
            while joined.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                joined = joined.rstrip()[:-1] + " " + lines[i].strip()
            out += [(first + 1, c) for c in commands_in_text(strip_comment(joined))]
        else:
            for span in re.findall(r"`([^`]+)`", line):
                out += [(i + 1, c) for c in commands_in_text(span)]
        i += 1
    return out


def commands_in_yaml(text):
    """(line, command) from the comment lines of a YAML file (continuations joined)."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"\s*#(.*)$", lines[i])
        if m:
            first = i
            joined = m.group(1)
            while joined.rstrip().endswith("\\") and i + 1 < len(lines):
                nxt = re.match(r"\s*#(.*)$", lines[i + 1])
                if not nxt:
                    break
                i += 1
                joined = joined.rstrip()[:-1] + " " + nxt.group(1).strip()
            out += [(first + 1, c) for c in commands_in_text(joined)]
        i += 1
    return out


def strip_comment(line):
    """A shell line without its trailing `# comment`."""
    return re.sub(r"\s+#.*$", "", line)


def commands_in_text(text):
    """Every `stepsim SUB ARGS` in text whose first argument is an option or a file (prose such as
    "stepsim validate applies ..." is not a command)."""
    found = []
    for m in START.finditer(text):
        rest = strip_comment(text[m.start():]).strip()
        rest = re.split(r"[;)]\s|\s\(|\s+#|`", rest)[0].strip().rstrip(".,:;")
        words = rest.split()
        if words[0].endswith("stepsim"):
            words[0] = "stepsim"
        if len(words) < 3:
            continue  # a bare `stepsim run` names the command, it is not one
        arg = words[2]
        if not (arg.startswith("-") or "/" in arg or arg.endswith(".yaml")):
            continue
        found.append(" ".join(words))
    return found


def template(words):
    # `stepsim run --set` names an option: without a file or --help it is no command to run.
    if not any("/" in w or w.endswith(".yaml") or w in ("-h", "--help") for w in words):
        return True
    for w in words:
        if "[" in w or "..." in w or "${" in w or w in ("<", ">", "|"):
            return True
        if PLACEHOLDER.match(w.split("=", 1)[-1]) and not w.startswith("-"):
            return True
    return False


def first_run_id(runs_file):
    with open(os.path.join(ROOT, runs_file)) as f:
        for line in f:
            m = re.match(r"\s*-?\s*id:\s*['\"]?([^'\"\s#]+)", line)
            if m:
                return m.group(1)
    return None


def set_option(words, name, value=None):
    """Sets option `name` (replacing an existing value, or appending it)."""
    if name in words:
        k = words.index(name)
        if value is not None:
            words[k + 1] = value
        return words
    return words + ([name] if value is None else [name, value])


def prepare(command, binary, tmp, n):
    """The argv to run for `command`, made short and side-effect free."""
    words = shlex.split(command)
    words[0] = binary
    sub = words[1]
    if "--out" in words:
        words = set_option(words, "--out", os.path.join(tmp, f"out{n}"))
    if "--csv" in words and sub == "collective":
        words = set_option(words, "--csv", os.path.join(tmp, f"out{n}.csv"))
    if sub == "run" and not any(w.startswith("--trace-") for w in words) and "--explain" not in words:
        words = set_option(words, "--no-trace")
    if sub == "sweep":
        words = set_option(words, "--dry-run")
    if sub == "plan":
        words = set_option(words, "--top", "0")
    if sub == "report":
        # A report reads a folder another command wrote: a tiny run's, written here first.
        folder = os.path.join(tmp, f"out{n}")
        subprocess.run([binary, "run", "--cluster", "topologies/dgx-h100.yaml", "--workload",
                        "workloads/tiny-gpt.yaml", "--set", "cluster.nodes=1", "--out", folder, "--quiet"],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        words = [binary, "report", folder] + words[3:]
    if sub == "validate":
        runs = [w for w in words[2:] if w.endswith(".yaml")]
        if runs and "--only" not in words:
            words = set_option(words, "--only", first_run_id(runs[0]))
        if "--out" not in words:
            words = set_option(words, "--out", os.path.join(tmp, f"out{n}"))
    return words


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("binary")
    p.add_argument("--list", action="store_true", help="print the commands and what happens to each, run none")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    binary = os.path.abspath(args.binary)

    seen = {}
    for path in sources():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found = commands_in_markdown(text) if path.endswith(".md") else commands_in_yaml(text)
        for line, command in found:
            seen.setdefault(command, f"{os.path.relpath(path, ROOT)}:{line}")

    to_run, skipped, templates = [], [], []
    for command, where in seen.items():
        reason = next((why for pattern, why in SKIP if re.search(pattern, command)), None)
        if reason:
            skipped.append((where, command, reason))
        elif template(shlex.split(command)[2:]):
            templates.append((where, command))
        else:
            to_run.append((where, command))

    if args.list:
        for where, command in to_run:
            print(f"run       {where}: {command}")
        for where, command in templates:
            print(f"template  {where}: {command}")
        for where, command, reason in skipped:
            print(f"skip      {where}: {command}  ({reason})")
        return 0

    failures = 0
    with tempfile.TemporaryDirectory(prefix="stepsim-commands-") as tmp:
        def one(item):
            n, (where, command) = item
            argv = prepare(command, binary, tmp, n)
            try:
                r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
                return where, command, argv, r.returncode, r.stdout[-2000:] + r.stderr[-2000:]
            except subprocess.TimeoutExpired:
                return where, command, argv, -1, "timed out after 300 s"

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for where, command, argv, code, output in pool.map(one, enumerate(to_run)):
                status = "ok" if code == 0 else f"FAILED (exit {code})"
                print(f"{status:8} {where}: {command}")
                if code != 0:
                    failures += 1
                    print("  ran: " + " ".join(shlex.quote(a) for a in argv))
                    print("  " + output.strip().replace("\n", "\n  "))
    for where, command, reason in skipped:
        print(f"skipped  {where}: {command}  ({reason})")
    print(f"check_commands: {len(to_run)} commands run, {failures} failed; {len(templates)} templates, "
          f"{len(skipped)} skipped")
    if not to_run:
        print("check_commands: found no command to run", file=sys.stderr)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
