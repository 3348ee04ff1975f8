// The Python module `stepsim` (docs/python.md): stepsim.run, stepsim.memory and stepsim.sweep
// over the public C++ API (api/stepsim.hpp). SimGrid allows one simulation per process, so run
// and sweep work in a child process (process::run, a fork of this interpreter that touches no
// Python object); the child's answer comes back as one JSON message and is returned as Python
// objects (json.loads). A stepsim error, in the child or here, is raised as stepsim.ConfigError,
// stepsim.ModelError or stepsim.SimulationError (all stepsim.Error) with the message and, when it
// names one, the file, line and column of the first error.

#include "api/stepsim.hpp"
#include "core/error.hpp"
#include "process/process.hpp"
#include "sweep/sweep.hpp"

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace py = pybind11;
namespace fs = std::filesystem;

namespace stepsim::python {

namespace {

using process::Message;

// The exception classes of the module, made at import (owned by the module object).
struct ErrorClasses {
  PyObject* error = nullptr;
  PyObject* config = nullptr;
  PyObject* model = nullptr;
  PyObject* simulation = nullptr;
};
ErrorClasses& classes() {
  static ErrorClasses c;
  return c;
}

// Raises the Python class of `kind` ("ConfigError", "ModelError", "SimulationError", else
// Error) with `message`, its `file`, `line` and `column` from the first "FILE:LINE:COL: " in it.
[[noreturn]] void raise(const std::string& kind, const std::string& message) {
  const ErrorClasses& c = classes();
  PyObject* type = kind == "ConfigError"       ? c.config
                   : kind == "ModelError"      ? c.model
                   : kind == "SimulationError" ? c.simulation
                                               : c.error;
  py::object exc = py::reinterpret_borrow<py::object>(type)(message);
  static const std::regex located(R"((?:^|\n|: )([^\s:]+):(\d+):(\d+): )");
  std::smatch m;
  if (std::regex_search(message, m, located)) {
    exc.attr("file") = m[1].str();
    exc.attr("line") = std::stoi(m[2].str());
    exc.attr("column") = std::stoi(m[3].str());
  } else {
    exc.attr("file") = py::none();
    exc.attr("line") = py::none();
    exc.attr("column") = py::none();
  }
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

// The class name of a stepsim exception, for the message a child sends.
std::string kind_of(const Error& e) {
  if (dynamic_cast<const ConfigError*>(&e) != nullptr)
    return "ConfigError";
  if (dynamic_cast<const ModelError*>(&e) != nullptr)
    return "ModelError";
  if (dynamic_cast<const SimulationError*>(&e) != nullptr)
    return "SimulationError";
  return "Error";
}

// Python objects of a JSON text.
py::object from_json(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}

std::string path_of(const py::object& path) {
  return py::str(py::module_::import("os").attr("fspath")(path));
}

// {"parallel.pp": 4, "parallel.sp": True} -> {"parallel.pp=4", "parallel.sp=true"}, in the dict's order.
std::vector<std::string> overrides_of(const py::object& set) {
  std::vector<std::string> out;
  if (set.is_none())
    return out;
  for (const auto& [key, value] : py::cast<py::dict>(set)) {
    std::string text;
    if (py::isinstance<py::bool_>(value))
      text = value.cast<bool>() ? "true" : "false";
    else
      text = py::str(value);
    out.push_back(py::str(key).cast<std::string>() + "=" + text);
  }
  return out;
}

// Runs `body` in a child process and returns its value as Python objects. The child's stdout and
// stderr (warnings) are written to sys.stderr. A stepsim error in the child is raised here.
py::object in_child(const std::function<Message()>& body, double timeout_s) {
  const process::Job job{.body = [&body]() -> Message {
                           try {
                             return Message{{"value", body()}};
                           } catch (const Error& e) {
                             return Message{{"error", {{"kind", kind_of(e)}, {"message", e.what()}}}};
                           }
                         },
                         .argv = {}};
  process::Outcome outcome;
  {
    py::gil_scoped_release unlocked;
    outcome = process::run(job, {.output = process::Output::CAPTURE, .timeout_s = timeout_s});
  }
  if (!outcome.output.empty())
    py::module_::import("sys").attr("stderr").attr("write")(outcome.output);
  if (outcome.timed_out)
    raise("SimulationError", "the simulation did not finish within " + std::to_string(timeout_s) + " s");
  if (!outcome.message) {
    const std::string how = outcome.signal != 0 ? "was killed by signal " + std::to_string(outcome.signal)
                                                : "exited with code " + std::to_string(outcome.exit_code);
    raise("SimulationError",
          "the simulation's process " + how + (outcome.exception.empty() ? "" : ": " + outcome.exception));
  }
  const Message& m = *outcome.message;
  if (m.contains("error"))
    raise(m["error"]["kind"].get<std::string>(), m["error"]["message"].get<std::string>());
  return from_json(m["value"].dump());
}

CollectiveForm collective_form_of(const std::string& text) {
  if (const auto form = collective_form_by_name_or_null(text))
    return *form;
  throw ConfigError("collectives: expected auto, fine or coarse, got '" + text + "'");
}

py::object run(const py::object& cluster, const py::object& workload, const py::object& set,
               const std::string& collectives, bool fold, bool sampling, double timeout) {
  const api::Inputs inputs{
      .cluster_file = path_of(cluster), .workload_file = path_of(workload), .set = overrides_of(set)};
  const runner::SimulateOptions options{
      .collective_form = collective_form_of(collectives), .fold_dp = fold, .sample_collectives = sampling};
  return in_child(
      [&] {
        const api::Specs specs = api::load(inputs);
        return Message::parse(api::summary_json(api::simulate_step(specs, options)));
      },
      timeout);
}

py::object memory(const py::object& cluster, const py::object& workload, const py::object& set) {
  const api::Inputs inputs{
      .cluster_file = path_of(cluster), .workload_file = path_of(workload), .set = overrides_of(set)};
  return from_json(api::memory_json(api::load(inputs))); // no simulation: here, not in a child
}

// Removes a temporary folder when it goes out of scope.
struct TemporaryFolder {
  fs::path path;
  TemporaryFolder() {
    std::string name = (fs::temp_directory_path() / "stepsim-sweep-XXXXXX").string();
    if (mkdtemp(name.data()) == nullptr)
      throw Error("cannot create a temporary folder in " + fs::temp_directory_path().string());
    path = name;
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  ~TemporaryFolder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

py::object sweep(const py::object& sweep_file, const py::object& out, int jobs, double timeout,
                 bool retry_failed) {
  std::optional<TemporaryFolder> scratch;
  fs::path dir;
  if (out.is_none()) {
    scratch.emplace();
    dir = scratch->path;
  } else {
    dir = path_of(out);
  }
  const sweep::SweepOptions options{.sweep_file = path_of(sweep_file),
                                    .out_dir = dir,
                                    .jobs = jobs,
                                    .shard = std::nullopt,
                                    .timeout_s = timeout,
                                    .retry_failed = retry_failed,
                                    .simulate = {}};
  // The sweep's own children simulate; running it in a child too keeps this process free of its
  // progress lines and of any state it leaves.
  in_child(
      [&] {
        std::ostringstream progress;
        const sweep::SweepOutcome o = sweep::run_sweep(options, progress);
        return Message{{"total", o.total}, {"ok", o.ok}, {"skipped", o.skipped}, {"failed", o.failed}};
      },
      0);
  py::list rows;
  std::ifstream in(dir / "results.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      rows.append(from_json(line));
  return rows;
}

} // namespace

} // namespace stepsim::python

PYBIND11_MODULE(stepsim, m) {
  using namespace stepsim::python;
  m.doc() = "stepsim: simulate distributed training steps (docs/python.md). Each simulation runs in a "
            "child process.";
  // The classes live as long as the interpreter (one reference kept here, one by the module).
  ErrorClasses& c = classes();
  c.error = PyErr_NewException("stepsim.Error", PyExc_RuntimeError, nullptr);
  c.config = PyErr_NewException("stepsim.ConfigError", c.error, nullptr);
  c.model = PyErr_NewException("stepsim.ModelError", c.error, nullptr);
  c.simulation = PyErr_NewException("stepsim.SimulationError", c.error, nullptr);
  m.add_object("Error", py::handle(c.error));
  m.add_object("ConfigError", py::handle(c.config));
  m.add_object("ModelError", py::handle(c.model));
  m.add_object("SimulationError", py::handle(c.simulation));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const stepsim::Error& e) {
      try {
        raise(kind_of(e), e.what());
      } catch (py::error_already_set& set) {
        set.restore();
      }
    }
  });

  m.def("run", &run, py::arg("cluster"), py::arg("workload"), py::arg("set") = py::none(),
        py::arg("collectives") = "auto", py::arg("fold") = true, py::arg("sampling") = true,
        py::arg("timeout") = 0.0,
        R"(Simulates one training step and returns its summary as a dict (the content of
summary.json, docs/output of `stepsim run --out`). cluster and workload are YAML files; set
maps dotted keys to values as --set takes them, e.g. {"parallel.pp": 4, "cluster.nodes": 2};
collectives is "auto", "fine" or "coarse"; fold=False simulates every DP replica; sampling=False
runs every flow of large collectives; timeout (seconds, 0: none) kills the simulation's process.
Raises stepsim.ConfigError (file, line, column), ModelError or SimulationError.)");
  m.def("memory", &memory, py::arg("cluster"), py::arg("workload"), py::arg("set") = py::none(),
        R"(The static per-GPU memory ledger of each pipeline stage, as `stepsim memory` prints it,
in bytes, as a dict: capacity_bytes, stages (weights, gradients, optimizer, activations, other,
peak, in-flight micro-batches, fits) and fits_in_memory. No simulation.)");
  m.def("sweep", &sweep, py::arg("sweep_file"), py::arg("out") = py::none(), py::arg("jobs") = 0,
        py::arg("timeout") = 0.0, py::arg("retry_failed") = false,
        R"(Runs a sweep file (docs/sweeps.md) and returns its rows, one dict per configuration in
index order (the lines of results.jsonl). out: the output folder (resumed when it holds results);
None: a temporary folder, removed afterwards. jobs: simulations at a time (0: the CPUs);
timeout: seconds per configuration (0: none).)");
}
