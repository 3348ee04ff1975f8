#include "config/fields.hpp"

#include "config/config.hpp"

namespace stepsim::config::detail {

int64_t positive_int64(const Field& f) {
  return f.integer(1, INT64_MAX_VALUE, "a positive integer");
}

int64_t limited_int64(const Field& f, int64_t max) {
  const int64_t v = positive_int64(f);
  if (v > max)
    f.fail("expected a positive integer up to " + std::to_string(max) + " (the size limit), found " +
           std::to_string(v));
  return v;
}

int limited_int(const Field& f, int64_t max) {
  return static_cast<int>(limited_int64(f, max));
}

double fraction(const Field& f) {
  return f.number("a number in [0.001, 1] (the sanity limit)",
                  [](double v) { return v >= 1e-3 && v <= 1.0; });
}

Bytes nonnegative_bytes(const Field& f) {
  return parse_bytes(f.scalar("a byte size with a unit, e.g. 1GiB"), f.where());
}

namespace {

// Sanity limits of physical figures (docs/schema.md, "Size limits"): orders of magnitude beyond
// any hardware, they keep every time the engine forms finite and resolvable in double precision.
constexpr double MAX_BYTES = 1125899906842624.0;    // 1 PiB
constexpr double MAX_BANDWIDTH = 1e15;              // 1 PB/s
constexpr double MIN_FLOPS = 1e9, MAX_FLOPS = 1e21; // 1 GFLOP/s .. 1 ZFLOP/s
constexpr double MAX_LATENCY = 10.0;                // seconds

} // namespace

void at_most(const Field& f, double v, double max, const std::string& text, const char* limit) {
  if (!(v <= max))
    f.fail("expected at most " + std::string(limit) + " (the sanity limit), found '" + text + "'");
}

Bytes positive_bytes(const Field& f) {
  const std::string text = f.scalar("a byte size with a unit, e.g. 80GiB");
  const Bytes b = parse_bytes(text, f.where());
  if (b.value() <= 0) {
    f.fail("expected a positive byte size, found '" + text + "'");
  }
  at_most(f, b.value(), MAX_BYTES, text, "1PiB");
  return b;
}

BytesPerSec positive_bandwidth(const Field& f) {
  const std::string text = f.scalar("a bandwidth with a unit, e.g. 200Gbps");
  const BytesPerSec bw = parse_bandwidth(text, f.where());
  // At least 1 bit/s: a flow over a vanishing rate never ends, which is no simulation at all.
  if (!(bw.value() >= 0.125)) {
    f.fail("expected a positive bandwidth of at least 1bps, found '" + text + "'");
  }
  at_most(f, bw.value(), MAX_BANDWIDTH, text, "1PBps");
  return bw;
}

Seconds latency(const Field& f) {
  const std::string text = f.scalar("a time with a unit, e.g. 2us");
  const Seconds t = parse_time(text, f.where());
  at_most(f, t.value(), MAX_LATENCY, text, "10s");
  return t;
}

FlopsPerSec positive_flops(const Field& f) {
  const std::string text = f.scalar("a FLOP rate with a unit, e.g. 312TFLOPS");
  const FlopsPerSec r = parse_flops_rate(text, f.where());
  if (r.value() <= 0) {
    f.fail("expected a positive FLOP rate, found '" + text + "'");
  }
  if (!(r.value() >= MIN_FLOPS))
    f.fail("expected at least 1GFLOPS (the sanity limit), found '" + text + "'");
  at_most(f, r.value(), MAX_FLOPS, text, "1e21FLOPS");
  return r;
}

std::vector<std::string_view> keys_of(File file, std::string_view mapping) {
  const auto& keys = schema::children(file, mapping);
  return {keys.begin(), keys.end()};
}

std::optional<MapReader> section(const MapReader& m, std::string_view key, File file, bool required) {
  std::optional<MapReader> out;
  m.document().attempt([&] {
    if (auto f = required ? std::optional<Field>(m.require(key)) : m.find(key))
      out.emplace(f->map(keys_of(file, m.path().empty() ? key : m.path() + "." + std::string(key))));
  });
  return out;
}

void read_link(const MapReader& m, LinkSpec& link) {
  required_key(m, "bandwidth", [&](const Field& f) { link.bandwidth = positive_bandwidth(f); });
  required_key(m, "latency", [&](const Field& f) { link.latency = latency(f); });
  required_key(m, "efficiency", [&](const Field& f) { link.efficiency = fraction(f); });
}

} // namespace stepsim::config::detail
