#include "validate/crossval.hpp"

#include "config/config.hpp"
#include "config/schema.hpp"
#include "core/error.hpp"
#include "validate/plan.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace stepsim::validate {

GroupBy parse_group_by(const std::string& text) {
  if (text == "source")
    return GroupBy::SOURCE;
  if (text == "framework")
    return GroupBy::FRAMEWORK;
  if (text == "gpu")
    return GroupBy::GPU;
  throw ConfigError("--cross-validate " + text + ": expected source, framework or gpu");
}

std::string group_by_name(GroupBy by) {
  switch (by) {
  case GroupBy::SOURCE:
    return "source";
  case GroupBy::FRAMEWORK:
    return "framework";
  case GroupBy::GPU:
    return "gpu";
  }
  return "source";
}

std::string normalised_framework(const std::string& text) {
  std::string flat;
  int depth = 0;
  for (const char c : text) {
    if (c == '(')
      ++depth;
    else if (c == ')')
      depth = std::max(0, depth - 1);
    else if (depth == 0)
      flat += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::istringstream words(flat);
  std::string out;
  for (std::string w; words >> w;) {
    const bool version = std::isdigit(static_cast<unsigned char>(w[0])) != 0 ||
                         (w.size() > 1 && w[0] == 'v' && std::isdigit(static_cast<unsigned char>(w[1])) != 0);
    if (!version)
      out += (out.empty() ? "" : " ") + w;
  }
  return out.empty() ? "(none)" : out;
}

std::string group_key(const config::MeasuredRun& run, GroupBy by) {
  switch (by) {
  case GroupBy::SOURCE:
    return run.group.empty() ? "id:" + run.id : run.group;
  case GroupBy::FRAMEWORK:
    return normalised_framework(run.framework);
  case GroupBy::GPU: {
    const std::string f = gpu_family(run.hardware);
    return f.empty() ? "(unknown gpu)" : f;
  }
  }
  return run.group;
}

namespace {

/// One fit's stage from its record: `knobs` (paths prefixed "cluster.") with their ranges.
FitStage make_stage(const std::string& file, const std::vector<std::string>& knobs,
                    const std::vector<std::string>& runs, const std::string& objective,
                    const config::CalibrationFile::Search& search) {
  FitStage s;
  s.where = search.where;
  s.runs = runs;
  for (const std::string& path : knobs) {
    const std::string key = path.substr(8);
    const auto range = std::find_if(search.ranges.begin(), search.ranges.end(),
                                    [&](const auto& r) { return r.first == path; });
    if (range == search.ranges.end())
      throw ConfigError(search.where + ": knob '" + key + "' has no range under ranges (a record names " +
                        "each fitted knob's LO:HI[:UNIT] to be refitted)");
    try {
      s.knobs.push_back(parse_knob(key + "=" + range->second));
    } catch (const ConfigError& e) {
      throw ConfigError(search.where + ": ranges." + key + ": " + e.what());
    }
  }
  for (const auto& [path, text] : search.ranges)
    if (std::find(knobs.begin(), knobs.end(), path) == knobs.end())
      throw ConfigError(search.where + ": ranges." + path.substr(8) + ": the fit does not search this knob");
  if (objective == "rms_error_pct")
    s.objective = Objective::RMS;
  else if (objective.empty() || objective == "mean_abs_error_pct")
    s.objective = Objective::MEAN_ABS;
  else
    throw ConfigError(search.where + ": objective '" + objective +
                      "': a refit minimises mean_abs_error_pct or rms_error_pct (" + file + ")");
  s.rounds = static_cast<int>(search.rounds.value_or(1));
  s.tolerance = search.tolerance.value_or(0.005);
  return s;
}

/// The value a knob has without calibration: its default in the cluster schema, in the unit of
/// its search range. Throws ConfigError when the schema gives no number.
KnobValue schema_default(const Knob& k) {
  for (const config::schema::Key& key : config::schema::keys(config::schema::File::CLUSTER)) {
    if (key.path != k.key)
      continue;
    // The declared default: a number, or a duration in the knob's unit ("0us").
    const std::string text(key.dflt);
    if (!text.empty()) {
      try {
        std::size_t used = 0;
        const double v = std::stod(text, &used);
        if (used == text.size())
          return KnobValue{k.key, v, k.unit};
        if (key.value.kind == config::schema::Kind::DURATION && !k.unit.empty()) // "0s" in "us"
          return KnobValue{k.key,
                           config::parse_time(text, std::string(key.path)).value() /
                               config::parse_time("1" + k.unit, std::string(key.path)).value(),
                           k.unit};
      } catch (const std::logic_error&) {
      }
    }
    throw ConfigError("cross-validation: knob " + k.key + " has no numeric default in the cluster schema (" +
                      "default: " + (text.empty() ? std::string("none") : text) +
                      ") to predict with when no fit run is left");
  }
  throw ConfigError("cross-validation: knob " + k.key + " is not a cluster key");
}

config::Override as_override(const KnobValue& v) {
  return config::Override{"cluster." + v.key, v.text()};
}

/// The stored value of `path` in the record, as an override.
config::Override stored_value(const FitRecord& rec, const std::string& key) {
  for (const config::Override& o : rec.stored)
    if (o.path == "cluster." + key)
      return o;
  throw ConfigError(rec.source + ": knob '" + key + "' is fitted but not stored under knobs");
}

bool in(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

/// Refits `rec` without the runs of `group` (a stage holding none of them, with no earlier
/// stage moved, keeps its stored values); `held` gets every fitted knob's value.
KindRefit refit_kind(const FitRecord& rec, const std::vector<std::string>& group,
                     const config::RunsFile& runs, const ValidateOptions& options,
                     std::vector<config::Override>& held, std::ostream* log) {
  KindRefit out;
  out.gpu_kind = rec.gpu_kind;
  bool moved = false;
  for (const FitStage& stage : rec.stages) {
    std::vector<std::string> left;
    for (const std::string& id : stage.runs)
      (in(group, id) ? out.left_out : left).push_back(id);
    if (!moved && left.size() == stage.runs.size()) {
      for (const Knob& k : stage.knobs) {
        held.push_back(stored_value(rec, k.key));
        out.kept.push_back(k.key);
        out.values.push_back(KnobValue{k.key, std::stod(held.back().value), k.unit});
      }
      continue;
    }
    moved = true;
    if (left.empty()) {
      for (const Knob& k : stage.knobs) {
        out.values.push_back(schema_default(k));
        out.defaulted.push_back(k.key);
        held.push_back(as_override(out.values.back()));
      }
      continue;
    }
    for (const std::string& id : left)
      if (std::none_of(runs.runs.begin(), runs.runs.end(), [&](const auto& r) { return r.id == id; }))
        throw ConfigError(stage.where + ": fit run '" + id + "' is not in the runs files given (" +
                          runs.source + "): give the files the calibration was fitted on");
    CalibrateOptions co;
    co.validate = options;
    co.validate.extra = held;
    co.validate.only.clear();
    co.knobs = stage.knobs;
    co.rounds = stage.rounds;
    co.tolerance = stage.tolerance;
    co.objective = stage.objective;
    if (log != nullptr)
      *log << "  refitting " << rec.gpu_kind << " (" << stage.knobs.size()
           << (stage.knobs.size() == 1 ? " knob" : " knobs") << ") on " << left.size() << " of its "
           << stage.runs.size() << " fit runs\n"
           << std::flush;
    const CalibrationResult r = calibrate(runs, left, co, nullptr);
    out.evaluations += r.evaluations;
    for (const KnobValue& v : r.values) {
      out.values.push_back(v);
      held.push_back(as_override(v));
    }
  }
  return out;
}

std::map<std::string, RunResult> by_id(const std::vector<RunResult>& results) {
  std::map<std::string, RunResult> out;
  for (const RunResult& r : results)
    out.emplace(r.plan.id, r);
  return out;
}

/// The calibration records of the GPU kinds among `runs`, by kind; kinds without a file or
/// without fit runs go to `notes`.
std::map<std::string, FitRecord> load_records(const config::RunsFile& runs, const ValidateOptions& options,
                                              std::vector<std::string>& notes) {
  std::map<std::string, FitRecord> out;
  std::set<std::string> seen;
  for (const config::MeasuredRun& run : runs.runs) {
    const std::string kind = calibration_kind(gpu_family(run.hardware));
    if (kind.empty() || !seen.insert(kind).second)
      continue;
    const std::filesystem::path file = options.topologies / "calibration" / (kind + ".yaml");
    if (!std::filesystem::exists(file)) {
      notes.push_back(kind + ": no calibration file; its runs are predicted uncalibrated both ways");
      continue;
    }
    FitRecord rec = fit_record(config::load_calibration(file));
    if (rec.stages.empty())
      notes.push_back(kind + ": " + file.filename().string() +
                      " records no fit runs (its knobs are transferred from another kind): not refitted, its "
                      "stored knobs are used both ways");
    out.emplace(kind, std::move(rec));
  }
  return out;
}

/// The group's runs, each with its in-sample result, in file order.
std::vector<CrossGroup> make_groups(const config::RunsFile& runs, GroupBy by,
                                    const std::map<std::string, RunResult>& in_sample,
                                    const std::map<std::string, FitRecord>& records) {
  std::vector<CrossGroup> groups;
  for (const config::MeasuredRun& run : runs.runs) {
    const std::string key = group_key(run, by);
    auto g = std::find_if(groups.begin(), groups.end(), [&](const CrossGroup& x) { return x.key == key; });
    if (g == groups.end()) {
      groups.push_back(CrossGroup{key, {}, {}});
      g = groups.end() - 1;
    }
    CrossRun c;
    c.gpu_kind = calibration_kind(gpu_family(run.hardware));
    if (const auto rec = records.find(c.gpu_kind); rec != records.end())
      for (const FitStage& s : rec->second.stages)
        c.fit_run = c.fit_run || in(s.runs, run.id);
    c.in_sample = in_sample.at(run.id);
    c.out_of_group = c.in_sample;
    g->runs.push_back(std::move(c));
  }
  return groups;
}

/// Refits each kind whose fit runs `g` holds and predicts g's runs of that kind.
void cross_validate_group(CrossGroup& g, std::size_t index, const config::RunsFile& runs,
                          const ValidateOptions& options, const std::map<std::string, FitRecord>& records,
                          std::ostream* log) {
  std::vector<std::string> ids;
  for (const CrossRun& c : g.runs)
    ids.push_back(c.in_sample.plan.id);
  for (const auto& [kind, rec] : records) {
    const bool holds = std::any_of(rec.stages.begin(), rec.stages.end(), [&](const FitStage& s) {
      return std::any_of(s.runs.begin(), s.runs.end(), [&](const std::string& id) { return in(ids, id); });
    });
    if (!holds)
      continue;
    if (log != nullptr)
      *log << "group " << g.key << ": holds " << kind << " fit runs\n" << std::flush;
    ValidateOptions v = options;
    v.work_dir = options.work_dir / ("group-" + std::to_string(index + 1));
    std::vector<config::Override> held;
    g.refits.push_back(refit_kind(rec, ids, runs, v, held, log));
    v.calibration = true;
    v.extra = held;
    v.only.clear();
    for (const CrossRun& c : g.runs)
      if (c.gpu_kind == kind)
        v.only.push_back(c.in_sample.plan.id);
    const std::map<std::string, RunResult> predicted = by_id(validate_runs(runs, v, nullptr));
    for (CrossRun& c : g.runs)
      if (c.gpu_kind == kind) {
        c.out_of_group = predicted.at(c.in_sample.plan.id);
        c.refit = true;
      }
  }
}

} // namespace

FitRecord fit_record(const config::CalibrationFile& file) {
  FitRecord rec;
  rec.gpu_kind = file.gpu_kind;
  rec.source = file.source;
  rec.stored = file.knobs;
  if (!file.fit_runs.empty()) {
    std::vector<std::string> first = file.fit_knobs;
    if (first.empty())
      for (const config::Override& o : file.knobs)
        if (std::none_of(file.then.begin(), file.then.end(),
                         [&](const auto& s) { return in(s.knobs, o.path); }))
          first.push_back(o.path);
    rec.stages.push_back(make_stage(file.source, first, file.fit_runs, file.objective, file.fit_search));
  }
  for (const config::CalibrationFile::Stage& s : file.then)
    if (!s.runs.empty())
      rec.stages.push_back(make_stage(file.source, s.knobs, s.runs, s.objective, s.search));
  return rec;
}

CrossValidation cross_validate(const config::RunsFile& runs, GroupBy by, const ValidateOptions& options,
                               std::ostream* log) {
  if (!options.only.empty())
    throw ConfigError("--only and --cross-validate do not combine: the groups are made of every run given");
  CrossValidation cv;
  cv.by = by;
  const std::map<std::string, FitRecord> records = load_records(runs, options, cv.notes);
  ValidateOptions v = options;
  v.calibration = true;
  v.work_dir = options.work_dir / "in-sample";
  if (log != nullptr)
    *log << "in-sample: " << runs.runs.size() << " runs with the stored calibration\n" << std::flush;
  const std::map<std::string, RunResult> in_sample = by_id(validate_runs(runs, v, log));
  cv.groups = make_groups(runs, by, in_sample, records);
  for (std::size_t i = 0; i < cv.groups.size(); ++i)
    cross_validate_group(cv.groups[i], i, runs, options, records, log);
  return cv;
}

} // namespace stepsim::validate
