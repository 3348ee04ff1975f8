// The cross-validation's table and CSV (validate/crossval.hpp).

#include "validate/crossval.hpp"

#include "core/csv.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace stepsim::validate {

namespace {

std::string pct(double v) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << v;
  return o.str();
}

std::string signed_pct(const RunResult& r) {
  if (r.status != RunStatus::OK)
    return std::string(to_string(r.status));
  std::ostringstream o;
  o << std::showpos << std::fixed << std::setprecision(2) << r.error_pct;
  return o.str();
}

std::string pair_text(const ErrorStats& s, int compared) {
  return compared == 0 ? "-" : pct(s.median_abs) + " / " + pct(s.max_abs);
}

/// What happened to the group's kinds: "A100-SXM4-80GB refit without 2 of 7 fit runs:
/// gpu.gemm_efficiency=0.83 ...", or that the group holds no fit run.
std::string refit_text(const CrossGroup& g) {
  if (g.refits.empty())
    return "no fit run in the group: out-of-group = in-sample";
  std::string out;
  for (const KindRefit& k : g.refits) {
    out += (out.empty() ? "" : "; ") + k.gpu_kind + " without " + std::to_string(k.left_out.size()) +
           " fit run" + (k.left_out.size() == 1 ? "" : "s") + ":";
    for (const KnobValue& v : k.values) {
      out += " " + v.key + "=" + v.text();
      if (std::find(k.defaulted.begin(), k.defaulted.end(), v.key) != k.defaulted.end())
        out += " (no fit run left: uncalibrated default)";
      else if (std::find(k.kept.begin(), k.kept.end(), v.key) != k.kept.end())
        out += " (stored)";
    }
  }
  return out;
}

std::vector<const CrossRun*> all_runs(const CrossValidation& cv) {
  std::vector<const CrossRun*> out;
  for (const CrossGroup& g : cv.groups)
    for (const CrossRun& c : g.runs)
      out.push_back(&c);
  return out;
}

std::vector<const CrossRun*> group_runs(const CrossGroup& g) {
  std::vector<const CrossRun*> out;
  for (const CrossRun& c : g.runs)
    out.push_back(&c);
  return out;
}

void stats_row(std::ostream& out, const std::string& name, const PairedStats& s, std::size_t width) {
  out << std::left << std::setw(static_cast<int>(width)) << name << std::right << std::setw(6) << s.runs
      << std::setw(6) << s.compared << "  " << std::setw(18) << pair_text(s.in_sample, s.compared) << "  "
      << std::setw(18) << pair_text(s.out_of_group, s.compared) << '\n';
}

} // namespace

PairedStats paired_stats(const std::vector<const CrossRun*>& runs) {
  PairedStats s;
  std::vector<RunResult> in;
  std::vector<RunResult> out;
  for (const CrossRun* c : runs) {
    ++s.runs;
    if (c->in_sample.status == RunStatus::OK && c->out_of_group.status == RunStatus::OK) {
      in.push_back(c->in_sample);
      out.push_back(c->out_of_group);
    }
  }
  s.compared = static_cast<int>(in.size());
  s.in_sample = error_stats(in);
  s.out_of_group = error_stats(out);
  return s;
}

void print_cross_validation(std::ostream& out, const CrossValidation& cv) {
  std::size_t width = 8;
  for (const CrossGroup& g : cv.groups)
    width = std::max(width, g.key.size() + 2);
  out << "cross-validation by " << group_by_name(cv.by) << ": " << cv.groups.size()
      << " groups; in-sample = the stored calibration, out-of-group = each GPU kind's calibration "
         "refitted as its record says without the group's runs\n\n";
  out << std::left << std::setw(static_cast<int>(width)) << "group" << std::right << std::setw(6) << "runs"
      << std::setw(6) << "ok"
      << "  " << std::setw(18) << "in-sample |err|"
      << "  " << std::setw(18) << "out-of-group |err|" << '\n'
      << std::left << std::setw(static_cast<int>(width)) << "" << std::right << std::setw(12) << ""
      << "  " << std::setw(18) << "median / max %"
      << "  " << std::setw(18) << "median / max %" << '\n';
  for (const CrossGroup& g : cv.groups)
    stats_row(out, g.key, paired_stats(group_runs(g)), width);
  const PairedStats overall = paired_stats(all_runs(cv));
  stats_row(out, "overall", overall, width);
  out << "\nrefits:\n";
  for (const CrossGroup& g : cv.groups)
    out << "  " << g.key << ": " << refit_text(g) << '\n';
  for (const std::string& n : cv.notes)
    out << "  note: " << n << '\n';
  std::size_t id_width = 4;
  for (const CrossRun* c : all_runs(cv))
    id_width = std::max(id_width, c->in_sample.plan.id.size() + 2);
  out << "\nper run (error %, signed):\n"
      << std::left << std::setw(static_cast<int>(id_width)) << "id" << std::setw(static_cast<int>(width))
      << "group" << std::right << std::setw(12) << "in-sample" << std::setw(14) << "out-of-group"
      << "  note\n";
  for (const CrossGroup& g : cv.groups)
    for (const CrossRun& c : g.runs)
      out << std::left << std::setw(static_cast<int>(id_width)) << c.in_sample.plan.id
          << std::setw(static_cast<int>(width)) << g.key << std::right << std::setw(12)
          << signed_pct(c.in_sample) << std::setw(14) << signed_pct(c.out_of_group) << "  "
          << (c.fit_run ? "fit run" : "") << (c.fit_run && c.refit ? ", " : "") << (c.refit ? "refitted" : "")
          << '\n';
  out << "\ncross-validated " << overall.compared << " runs in " << cv.groups.size() << " groups by "
      << group_by_name(cv.by) << ": in_sample median_abs_error_pct=" << pct(overall.in_sample.median_abs)
      << " max_abs_error_pct=" << pct(overall.in_sample.max_abs)
      << "; out_of_group median_abs_error_pct=" << pct(overall.out_of_group.median_abs)
      << " max_abs_error_pct=" << pct(overall.out_of_group.max_abs) << '\n';
}

void write_cross_validation_csv(std::ostream& out, const CrossValidation& cv) {
  out << "group,id,gpu_kind,fit_run,refit,status,measured,in_sample_predicted,in_sample_error_pct,"
         "out_of_group_predicted,out_of_group_error_pct\n";
  const auto figure = [](const RunResult& r, double v) {
    if (r.status != RunStatus::OK)
      return std::string();
    std::ostringstream o;
    o << std::setprecision(6) << v;
    return o.str();
  };
  for (const CrossGroup& g : cv.groups)
    for (const CrossRun& c : g.runs) {
      const RunResult& a = c.in_sample;
      const RunResult& b = c.out_of_group;
      const RunStatus status = a.status != RunStatus::OK ? a.status : b.status;
      std::ostringstream measured;
      measured << std::setprecision(6) << a.plan.measured;
      out << csv_cell(g.key) << ',' << csv_cell(a.plan.id) << ',' << csv_cell(c.gpu_kind) << ','
          << (c.fit_run ? 1 : 0) << ',' << (c.refit ? 1 : 0) << ',' << to_string(status) << ','
          << measured.str() << ',' << figure(a, a.predicted) << ',' << figure(a, a.error_pct) << ','
          << figure(b, b.predicted) << ',' << figure(b, b.error_pct) << '\n';
    }
}

} // namespace stepsim::validate
