#include "validate/calibrate.hpp"

#include "config/config.hpp"
#include "core/error.hpp"
#include "validate/plan.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <sstream>

namespace stepsim::validate {

namespace {

std::string number(double v) {
  std::ostringstream o;
  o << std::setprecision(4) << std::fixed << v;
  std::string s = o.str();
  while (s.size() > 1 && s.back() == '0')
    s.pop_back();
  if (s.back() == '.')
    s.pop_back();
  return s;
}

/// The knob's override text for value v.
config::Override knob_override(const Knob& k, double v) {
  return config::Override{"cluster." + k.key, number(v) + k.unit};
}

/// Root mean square of the runs' signed errors (%).
double rms_error(const std::vector<RunResult>& results) {
  double sum = 0;
  for (const RunResult& r : results)
    sum += r.error_pct * r.error_pct;
  return results.empty() ? 0.0 : std::sqrt(sum / static_cast<double>(results.size()));
}

/// Simulates the fit runs with `values` set, returns the objective.
double objective(const config::RunsFile& runs, const std::vector<std::string>& ids,
                 const CalibrateOptions& options, const std::vector<Knob>& knobs,
                 const std::vector<double>& values, std::ostream* log, int& evaluations) {
  ValidateOptions v = options.validate;
  v.calibration = false;
  v.only = ids;
  for (std::size_t i = 0; i < knobs.size(); ++i)
    v.extra.push_back(knob_override(knobs[i], values[i]));
  const std::vector<RunResult> results = validate_runs(runs, v, nullptr);
  ++evaluations;
  for (const RunResult& r : results)
    if (r.status != RunStatus::OK)
      throw ConfigError("calibrate: fit run '" + r.plan.id + "' cannot be simulated: " + r.reason);
  const ErrorStats s = error_stats(results);
  if (log != nullptr) {
    *log << "  trial";
    for (std::size_t i = 0; i < knobs.size(); ++i)
      *log << ' ' << knobs[i].key << '=' << number(values[i]) << knobs[i].unit;
    *log << ": mean |error| " << number(s.mean_abs) << " %, median " << number(s.median_abs) << " %, rms "
         << number(rms_error(results)) << " %  (";
    for (const RunResult& r : results)
      *log << (&r == &results.front() ? "" : ", ") << r.plan.id << ' ' << std::showpos << std::fixed
           << std::setprecision(1) << r.error_pct << std::noshowpos;
    *log << ")\n" << std::flush;
  }
  // The mean: every fit run counts. (A median of a few runs lets a fit of several knobs trade
  // the runs outside its middle away: docs/calibration.md.) Or the RMS error, which has one
  // minimum where the mean |error| is flat. The median breaks exact ties.
  if (options.objective == Objective::RMS)
    return rms_error(results) + 1e-3 * s.median_abs;
  return s.mean_abs + 1e-3 * s.median_abs;
}

} // namespace

Knob parse_knob(const std::string& text) {
  const auto eq = text.find('=');
  const auto bad = [&]() {
    return ConfigError("--knob " + text + ": expected KEY=LO:HI[:UNIT], e.g. gpu.gemm_efficiency=0.5:1");
  };
  if (eq == std::string::npos || eq == 0)
    throw bad();
  Knob k;
  k.key = text.substr(0, eq);
  if (k.key.starts_with("cluster."))
    k.key = k.key.substr(8);
  std::vector<std::string> parts;
  std::stringstream ss(text.substr(eq + 1));
  for (std::string p; std::getline(ss, p, ':');)
    parts.push_back(p);
  if (parts.size() < 2 || parts.size() > 3)
    throw bad();
  try {
    std::size_t u1 = 0;
    std::size_t u2 = 0;
    k.lo = std::stod(parts[0], &u1);
    k.hi = std::stod(parts[1], &u2);
    if (u1 != parts[0].size() || u2 != parts[1].size())
      throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  if (!(k.lo < k.hi))
    throw ConfigError("--knob " + text + ": expected LO < HI, found " + parts[0] + " and " + parts[1]);
  if (parts.size() == 3) {
    k.unit = parts[2];
    if (k.unit.empty())
      throw ConfigError("--knob " + text +
                        ": the unit after the second ':' is empty (omit it, or give e.g. us)");
  }
  return k;
}

std::string KnobValue::text() const {
  return number(value) + unit;
}

CalibrationResult calibrate(const config::RunsFile& runs, const std::vector<std::string>& fit_ids,
                            const CalibrateOptions& options, std::ostream* log) {
  if (fit_ids.empty())
    throw ConfigError("calibrate: no fit runs (--fit ID,ID,... or --fit-file FILE)");
  if (options.knobs.empty())
    throw ConfigError("calibrate: no knobs");
  CalibrationResult out;
  out.fit_runs = fit_ids;
  for (std::size_t i = 0; i < fit_ids.size(); ++i)
    if (std::find(fit_ids.begin(), fit_ids.begin() + static_cast<std::ptrdiff_t>(i), fit_ids[i]) !=
        fit_ids.begin() + static_cast<std::ptrdiff_t>(i))
      throw ConfigError("calibrate: fit run '" + fit_ids[i] + "' is given twice");
  // One GPU kind only: the knobs are per GPU kind.
  std::string family;
  const config::MeasuredRun* first = nullptr;
  for (const auto& id : fit_ids) {
    const auto it =
        std::find_if(runs.runs.begin(), runs.runs.end(), [&](const auto& r) { return r.id == id; });
    if (it == runs.runs.end())
      throw ConfigError(runs.source + ": no run with id '" + id + "'");
    if (first == nullptr)
      first = &*it;
    const std::string f = gpu_family(it->hardware);
    if (!family.empty() && f != family)
      throw ConfigError("calibrate: the fit runs mix GPU kinds (" + family + ", " + f +
                        "); the knobs are per GPU kind: fit each kind separately");
    family = f;
  }
  out.gpu_kind = calibration_kind(family);
  if (out.gpu_kind.empty())
    throw ConfigError("calibrate: no bundled topology for the fit runs' GPU");
  // Each knob's range must be values the cluster accepts, before any run is simulated: its ends and
  // its midpoint, where the search starts (a knob of whole numbers, such as nodes, fails there).
  const RunPlan plan =
      plan_run(*first, {.topologies = options.validate.topologies, .calibration = false, .extra = {}});
  if (plan.skip_reason.empty())
    for (const Knob& k : options.knobs)
      for (const double v : {k.lo, k.hi, 0.5 * (k.lo + k.hi)}) {
        try {
          (void)plan_cluster(plan, {{"cluster." + k.key, number(v) + k.unit}});
        } catch (const ConfigError& e) {
          throw ConfigError("--knob " + k.key + "=" + number(k.lo) + ":" + number(k.hi) +
                            (k.unit.empty() ? "" : ":") + k.unit + ": the cluster refuses " + number(v) +
                            k.unit + ": " + e.what());
        }
      }

  std::vector<double> values;
  for (const Knob& k : options.knobs)
    values.push_back(0.5 * (k.lo + k.hi));
  constexpr double INV_PHI = 0.6180339887498949;
  double best = 0;
  for (int round = 0; round < std::max(1, options.rounds); ++round) {
    for (std::size_t i = 0; i < options.knobs.size(); ++i) {
      const Knob& k = options.knobs[i];
      std::map<double, double> cache;
      const auto f = [&](double x) {
        if (auto it = cache.find(x); it != cache.end())
          return it->second;
        std::vector<double> v = values;
        v[i] = x;
        const double y = objective(runs, fit_ids, options, options.knobs, v, log, out.evaluations);
        cache.emplace(x, y);
        return y;
      };
      // Golden-section search on a grid of `tolerance` (values are rounded so reruns match).
      const auto snap = [&](double x) { return std::round(x / options.tolerance) * options.tolerance; };
      double a = k.lo;
      double b = k.hi;
      double c = snap(b - INV_PHI * (b - a));
      double d = snap(a + INV_PHI * (b - a));
      double fc = f(c);
      double fd = f(d);
      while (b - a > 2 * options.tolerance && c < d) {
        if (fc <= fd) {
          b = d;
          d = c;
          fd = fc;
          c = snap(b - INV_PHI * (b - a));
          if (c >= d)
            break;
          fc = f(c);
        } else {
          a = c;
          c = d;
          fc = fd;
          d = snap(a + INV_PHI * (b - a));
          if (d <= c)
            break;
          fd = f(d);
        }
      }
      double x_best = c;
      best = fc;
      for (const auto& [x, y] : cache)
        if (y < best) {
          best = y;
          x_best = x;
        }
      values[i] = x_best;
    }
  }
  // The fit set's errors at the chosen values.
  ValidateOptions v = options.validate;
  v.calibration = false;
  v.only = fit_ids;
  for (std::size_t i = 0; i < options.knobs.size(); ++i)
    v.extra.push_back(knob_override(options.knobs[i], values[i]));
  const std::vector<RunResult> results = validate_runs(runs, v, nullptr);
  const ErrorStats fit = error_stats(results);
  out.fit_mean_abs_error_pct = fit.mean_abs;
  out.fit_median_abs_error_pct = fit.median_abs;
  out.fit_rms_error_pct = rms_error(results);
  out.objective = options.objective;
  out.knobs = options.knobs;
  out.rounds = std::max(1, options.rounds);
  out.tolerance = options.tolerance;
  for (std::size_t i = 0; i < options.knobs.size(); ++i)
    out.values.push_back(KnobValue{options.knobs[i].key, values[i], options.knobs[i].unit});
  return out;
}

std::string range_text(const Knob& k) {
  return number(k.lo) + ":" + number(k.hi) + (k.unit.empty() ? "" : ":" + k.unit);
}

std::string calibration_yaml(const CalibrationResult& r, const std::string& runs_source) {
  std::ostringstream o;
  o << "# Calibration of " << r.gpu_kind << " and its bundled fabric, written by `stepsim calibrate`\n"
    << "# (docs/calibration.md). Knobs are cluster keys; stepsim validate applies them to every run\n"
    << "# of this GPU kind, and the bundled topologies carry the same values.\n"
    << "gpu_kind: " << r.gpu_kind << "\n"
    << "knobs:\n";
  for (const KnobValue& k : r.values)
    o << "  " << k.key << ": " << k.text() << "\n";
  o << "fit:\n  runs:\n";
  for (const auto& id : r.fit_runs)
    o << "    - " << id << "\n";
  o << "  objective: " << (r.objective == Objective::RMS ? "rms_error_pct" : "mean_abs_error_pct") << "\n"
    << "  mean_abs_error_pct: " << number(r.fit_mean_abs_error_pct) << "\n"
    << "  median_abs_error_pct: " << number(r.fit_median_abs_error_pct) << "\n"
    << "  rms_error_pct: " << number(r.fit_rms_error_pct) << "\n"
    << "  search: golden-section per knob on a grid, " << r.evaluations << " evaluations\n"
    << "  knobs: [";
  for (const Knob& k : r.knobs)
    o << (&k == &r.knobs.front() ? "" : ", ") << k.key;
  o << "]\n  ranges:\n";
  for (const Knob& k : r.knobs)
    o << "    " << k.key << ": \"" << range_text(k) << "\"\n";
  o << "  rounds: " << r.rounds << "\n"
    << "  tolerance: " << number(r.tolerance) << "\n"
    << "  note: fitted on " << runs_source << "\n";
  return o.str();
}

} // namespace stepsim::validate
