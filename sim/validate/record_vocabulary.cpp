#include "validate/record_vocabulary.hpp"

#include "config/config.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

namespace stepsim::validate {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool has(const std::string& text, const char* word) {
  return lower(text).find(word) != std::string::npos;
}

/// True when the text's first word says no: none, no, false, off, disabled, without.
bool leads_with_no(const std::string& lowered) {
  size_t end = 0;
  while (end < lowered.size() && std::isalpha(static_cast<unsigned char>(lowered[end])) != 0)
    ++end;
  const std::string first = lowered.substr(0, end);
  return first == "none" || first == "no" || first == "false" || first == "off" || first == "disabled" ||
         first == "without";
}

} // namespace

ScheduleText parse_schedule(const std::string& text) {
  ScheduleText s;
  s.bidirectional = has(text, "dualpipe") || has(text, "dual pipe");
  // A hedge between schedules ("1F1B / interleaved not stated", "1F1B or interleaved") names
  // neither; "interleaved (V not stated)" names the interleaved schedule without its depth.
  s.interleaved = has(text, "interleav") && !has(text, "/") && !has(text, " or ");
  s.one_f_one_b_family = has(text, "interleav") || has(text, "1f1b");
  if (has(text, "zb-h2"))
    s.named = Schedule::ZB_H2;
  else if (has(text, "zb-h1"))
    s.named = Schedule::ZB_H1;
  else if (has(text, "gpipe"))
    s.named = Schedule::GPIPE;
  else if (has(text, "1f1b"))
    s.named = Schedule::ONE_F_ONE_B;
  return s;
}

Parsed<int> parse_zero_stage(const std::string& text, bool fsdp) {
  const std::string z = lower(text);
  Parsed<int> out;
  // A leading digit decides ("2 (FSDP of the optimizer states and gradients)"), then the FSDP words.
  if (!z.empty() && std::isdigit(static_cast<unsigned char>(z[0])) != 0)
    out.value = z[0] - '0';
  else if (has(z, "shard_grad_op"))
    out.value = 2; // FSDP sharding gradients and optimizer states only
  else if (fsdp || has(z, "fsdp") || has(z, "full_shard") || has(z, "hybrid_shard"))
    out.value = 3;
  else if (!z.empty())
    out.error = "unrecognised zero_stage '" + text + "'";
  if (out.value && *out.value > 3) {
    out.error = "zero_stage " + std::to_string(*out.value) + " does not exist";
    out.value.reset();
  }
  return out;
}

Parsed<Precision> parse_precision(const std::string& text) {
  Parsed<Precision> out;
  if (has(text, "fp8") || has(text, "float8") || has(text, "e4m3") || has(text, "e5m2"))
    out.value = Precision::FP8;
  else if (has(text, "bf16") || has(text, "bfloat16"))
    out.value = Precision::BF16;
  else if (has(text, "fp16") || has(text, "float16") || has(text, "half"))
    out.value = Precision::FP16;
  else if (!text.empty() && lower(text) != "null")
    out.error = "precision '" + text + "' is not modelled (bf16, fp16 or fp8 training)";
  return out;
}

Parsed<Recompute> parse_recompute(const std::string& text, bool has_modules) {
  const std::string rc = lower(text);
  Parsed<Recompute> out;
  if (rc.empty() && has_modules) {
    out.value = Recompute::SELECTIVE; // the modules a selective recomputation repeats
  } else if (rc.empty()) {
    out.value = Recompute::NONE;
    out.note = "recompute=none";
  } else if (leads_with_no(rc)) { // "none (trained without activation checkpointing)"
    out.value = Recompute::NONE;
  } else if (has(rc, "selective")) {
    out.value = Recompute::SELECTIVE;
  } else if (has(rc, "full")) {
    out.value = Recompute::FULL;
  } else if (rc == "none" || rc == "no" || rc == "false" || has(rc, "no recompute") || has(rc, "disabled")) {
    out.value = Recompute::NONE;
  } else if (rc == "true" || rc == "yes" || has(rc, "checkpoint") || has(rc, "recompute")) {
    // Activation checkpointing named without a kind checkpoints whole layers: full recomputation.
    out.value = Recompute::FULL;
    out.note = "recompute=full (from '" + text + "')";
  } else {
    out.error = "unrecognised recompute '" + text + "'";
  }
  return out;
}

StatedOptions parse_stated_options(const std::string& framework) {
  const std::string f = lower(framework);
  StatedOptions out;
  if (has(f, "eager"))
    out.pointwise = Pointwise::EAGER;
  else if (has(f, "torch.compile") || has(f, "compiled"))
    out.pointwise = Pointwise::FUSED;
  out.tp_comm_overlap = has(f, "tp-comm-overlap") || has(f, "tp comm overlap") || has(f, "userbuffers") ||
                        has(f, "async tp") || has(f, "async-tp") || has(f, "asynchronous tp");
  out.overlap_param_gather =
      has(f, "overlap-param-gather") || has(f, "overlap_param_gather") || has(f, "overlap param gather");
  out.fp8_all_gather = has(f, "fsdp_float8_all_gather") || has(f, "float8 fsdp all-gather") ||
                       has(f, "float8 all-gather") || has(f, "fp8 all-gather");
  return out;
}

bool names_per_op_policy(const std::string& text) {
  const std::string rc = lower(text);
  return has(rc, "per-op") || has(rc, "op policy") || has(rc, "selective_ac_option op") ||
         has(rc, "selective_ac_option: op");
}

bool names_rowwise_scaling(const std::string& text) {
  const std::string p = lower(text);
  return has(p, "rowwise") || has(p, "row-wise") || has(p, "axiswise");
}

Parsed<RecomputeModules> parse_recompute_modules(const std::vector<std::string>& names) {
  Parsed<RecomputeModules> out;
  if (names.empty())
    return out;
  RecomputeModules modules;
  if (const std::string why = config::recompute_modules_of(names, modules); !why.empty())
    out.error = "recompute_modules: " + why;
  else
    out.value = modules;
  return out;
}

std::optional<NodeNics> parse_inter_node(const std::string& text, int64_t gpus_per_node) {
  // A rate: a number and a unit not followed by a letter; bits unless the B is a capital.
  static const std::regex rate_re(
      R"((\d{1,6}(?:\.\d{1,6})?)\s*(Gb/s|Gbps|Gbit/s|Tb/s|Tbps|GB/s|GBps|Gb)(?![A-Za-z]))",
      std::regex::icase);
  // A count: "8x", "8 x", "8×" before a space or a digit ("8x200").
  static const std::regex count_re(R"((?:^|[^\w.])(\d{1,3})\s*(?:x|X|\xC3\x97)(?=[\s\d]))");
  // The first rate in bits, or in bytes per second ("80GB" is a capacity, not a rate).
  double gbps = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), rate_re); it != std::sregex_iterator();
       ++it) {
    const std::string unit = (*it)[2].str();
    const double value = std::stod((*it)[1].str());
    if (unit[1] == 'b')
      gbps = (unit[0] == 'T' || unit[0] == 't') ? value * 1000 : value;
    else if (unit == "GB/s" || unit == "GBps")
      gbps = value * 8;
    else
      continue;
    break;
  }
  if (!(gbps > 0))
    return std::nullopt;
  NodeNics n;
  std::smatch count;
  if (std::regex_search(text, count, count_re) && std::stoll(count[1].str()) > 0 &&
      std::stoll(count[1].str()) <= 128) {
    n.count = std::stoll(count[1].str());
    n.gbps = gbps;
    return n;
  }
  const std::string t = lower(text);
  const bool per_port = has(t, "per nic") || has(t, "per port") || has(t, "per hca") || has(t, "per gpu");
  n.count = std::max<int64_t>(1, gpus_per_node);
  n.gbps = per_port ? gbps : gbps / static_cast<double>(n.count);
  return n;
}

} // namespace stepsim::validate
