"""The Python module `stepsim` (docs/python.md) against the `stepsim` command line.

Run by the ctest python_module with PYTHONPATH at the built module, STEPSIM_SOURCE_DIR at the
repository and STEPSIM_BINARY at the CLI.
"""

import json
import os
import re
import subprocess
import tempfile
import unittest

import stepsim

SOURCE = os.environ["STEPSIM_SOURCE_DIR"]
BINARY = os.environ["STEPSIM_BINARY"]
CLUSTER = os.path.join(SOURCE, "topologies", "dgx-h100.yaml")
WORKLOAD = os.path.join(SOURCE, "workloads", "tiny-gpt.yaml")
ONE_NODE = {"cluster.nodes": 1}


def cli(*args):
    """Runs the CLI; its stdout."""
    done = subprocess.run([BINARY, *args], capture_output=True, text=True, check=True)
    return done.stdout


def cli_sets(overrides):
    out = []
    for key, value in overrides.items():
        out += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return out


class Run(unittest.TestCase):
    def test_summary_is_the_cli_summary(self):
        overrides = {**ONE_NODE, "parallel.pp": 4, "parallel.tp": 1}
        r = stepsim.run(cluster=CLUSTER, workload=WORKLOAD, set=overrides)
        with tempfile.TemporaryDirectory() as out:
            cli("run", "--cluster", CLUSTER, "--workload", WORKLOAD, *cli_sets(overrides),
                "--no-trace", "--quiet", "--out", out)
            with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
                expected = json.load(f)
        self.assertEqual(r, expected)
        self.assertEqual([s["stage"] for s in r["stages"]], [0, 1, 2, 3])
        self.assertGreater(r["step_time_s"], 0)

    def test_several_simulations_in_one_process(self):
        # SimGrid runs one simulation per process; each call has its own child.
        steps = {}
        for pp in (1, 2, 4):
            r = stepsim.run(CLUSTER, WORKLOAD, set={**ONE_NODE, "parallel.pp": pp, "parallel.tp": 1})
            self.assertEqual(len(r["stages"]), pp)
            steps[pp] = r["step_time_s"]
        # Three layouts, three simulations: three different step times.
        self.assertEqual(len(set(steps.values())), 3)

    def test_path_like_and_bool_values(self):
        import pathlib
        r = stepsim.run(pathlib.Path(CLUSTER), pathlib.Path(WORKLOAD),
                        set={**ONE_NODE, "parallel.sp": True}, collectives="coarse")
        with tempfile.TemporaryDirectory() as out:
            cli("run", "--cluster", CLUSTER, "--workload", WORKLOAD, *cli_sets({**ONE_NODE, "parallel.sp": True}),
                "--collectives", "coarse", "--no-trace", "--quiet", "--out", out)
            with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
                self.assertEqual(r, json.load(f))


class Memory(unittest.TestCase):
    def test_ledger_is_the_cli_table(self):
        overrides = {**ONE_NODE, "parallel.pp": 2, "parallel.tp": 2}
        m = stepsim.memory(CLUSTER, WORKLOAD, set=overrides)
        table = cli("memory", "--cluster", CLUSTER, "--workload", WORKLOAD, *cli_sets(overrides))
        rows = [line.split() for line in table.splitlines() if line.strip().startswith("stage ")]
        self.assertEqual(len(m["stages"]), 2)
        self.assertEqual(len(rows), 2)
        gib = 1024.0 ** 3
        for stage, row in zip(m["stages"], rows):
            parts = ["weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes"]
            self.assertAlmostEqual(stage["peak_bytes"], sum(stage[p] for p in parts), delta=1.0)
            printed = [float(x) for x in row[2:9]]  # weights .. capacity, GiB with two decimals
            ours = [stage[p] / gib for p in parts + ["peak_bytes"]] + [m["capacity_bytes"] / gib]
            for a, b in zip(ours, printed):
                self.assertAlmostEqual(a, b, delta=0.006)
            self.assertEqual(stage["in_flight_micro_batches"], int(row[9]))
            self.assertEqual(stage["fits"], stage["peak_bytes"] <= m["capacity_bytes"])
        self.assertTrue(m["fits_in_memory"])
        self.assertIn("fits in memory", table)


class Sweep(unittest.TestCase):
    def test_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "pp.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"cluster: {CLUSTER}\nworkload: {WORKLOAD}\nset:\n  cluster.nodes: 1\n"
                        "  parallel.tp: 1\ngrid:\n  parallel.pp: [1, 2, 4]\n")
            rows = stepsim.sweep(path, out=os.path.join(tmp, "out"), jobs=2)
            self.assertTrue(os.path.exists(os.path.join(tmp, "out", "results.csv")))
            self.assertEqual(stepsim.sweep(path), rows)  # a temporary folder, same rows
        self.assertEqual([r["index"] for r in rows], [0, 1, 2])
        self.assertEqual([r["status"] for r in rows], ["ok"] * 3)
        for row, pp in zip(rows, (1, 2, 4)):
            r = stepsim.run(CLUSTER, WORKLOAD, set={**ONE_NODE, "parallel.tp": 1, "parallel.pp": pp})
            self.assertEqual(row["summary"], r)


class Errors(unittest.TestCase):
    def bad_workload(self, tmp):
        with open(WORKLOAD, encoding="utf-8") as f:
            lines = f.read().splitlines()
        line = next(i for i, l in enumerate(lines) if l.startswith("  micro_batch:")) + 1
        lines[line - 1] = "  micro_bach: 2"
        path = os.path.join(tmp, "bad.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        return path, line

    def check(self, error, path, line):
        self.assertIsInstance(error, stepsim.Error)
        self.assertEqual(error.file, path)
        self.assertEqual(error.line, line)
        self.assertIn("micro_bach", str(error))
        self.assertRegex(str(error), re.escape(f"{path}:{line}:"))

    def test_config_error(self):
        # run reads the files in its child, memory in this process: both raise the same.
        for function in (stepsim.run, stepsim.memory):
            with self.subTest(function=function.__name__), tempfile.TemporaryDirectory() as tmp:
                path, line = self.bad_workload(tmp)
                with self.assertRaises(stepsim.ConfigError) as caught:
                    function(CLUSTER, path, set=ONE_NODE)
                self.check(caught.exception, path, line)

    def test_layout_error(self):
        # 8 GPUs cannot hold tp 2 x pp 3: no dp makes the product.
        with self.assertRaises(stepsim.Error) as caught:
            stepsim.run(CLUSTER, WORKLOAD, set={**ONE_NODE, "parallel.pp": 3})
        self.assertIn("pp", str(caught.exception))

    def test_bad_option(self):
        with self.assertRaises(stepsim.ConfigError):
            stepsim.run(CLUSTER, WORKLOAD, set=ONE_NODE, collectives="ring")

    def test_missing_sweep_file(self):
        with self.assertRaises(stepsim.ConfigError):
            stepsim.sweep(os.path.join(SOURCE, "sweeps", "no-such-sweep.yaml"))


if __name__ == "__main__":
    unittest.main()
