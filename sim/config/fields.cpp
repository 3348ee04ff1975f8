#include "config/fields.hpp"

#include "config/config.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace stepsim::config::detail {

namespace {

using schema::Bound;
using schema::Kind;

bool below(const std::optional<Bound>& b, double v) {
  return b && (b->inclusive ? v < b->value : v <= b->value);
}

bool above(const std::optional<Bound>& b, double v) {
  return b && (b->inclusive ? v > b->value : v >= b->value);
}

/// "a positive integer up to N (the size limit)": an integer key's meaning with its size limit.
std::string integer_up_to(const schema::Range& r) {
  const std::string max = std::to_string(static_cast<int64_t>(r.limit_max->value));
  if (r.min && r.min->value == 1)
    return "a positive integer up to " + max + " (the size limit)";
  return "an integer in " + (r.min ? std::to_string(static_cast<int64_t>(r.min->value)) : std::string("0")) +
         ".." + max + " (the size limit)";
}

/// A bound as messages write it.
std::string text_of(const Bound& b) {
  if (!b.text.empty())
    return std::string(b.text);
  return std::to_string(static_cast<int64_t>(b.value));
}

} // namespace

const schema::Key& declared(const Field& f, std::initializer_list<Kind> kinds) {
  const auto file = f.document().schema();
  if (!file)
    throw std::logic_error("schema: '" + f.path() + "' is read from a document without a declaration");
  const schema::Key& key = schema::key(*file, f.path());
  for (Kind k : kinds)
    if (key.value.kind == k)
      return key;
  throw std::logic_error("schema: '" + f.path() + "' is read as a kind it is not declared as");
}

void check_range(const Field& f, const schema::Key& key, double value, const std::string& text) {
  const schema::Range& r = key.value.range;
  const bool quantity = key.value.kind != Kind::INTEGER && key.value.kind != Kind::NUMBER;
  const bool off = r.or_zero && value == 0;
  if (!off && (below(r.min, value) || above(r.max, value)))
    f.fail("expected " + schema::expected(key.value) + ", found " + (quantity ? "'" + text + "'" : text));
  if (key.value.kind == Kind::INTEGER && above(r.limit_max, value))
    f.fail("expected " + integer_up_to(r) + ", found " + text);
  if (below(r.limit_min, value))
    f.fail("expected at least " + text_of(*r.limit_min) + " (the sanity limit), found '" + text + "'");
  if (above(r.limit_max, value))
    f.fail("expected at most " + text_of(*r.limit_max) + " (the sanity limit), found '" + text + "'");
}

int64_t read_integer(const Field& f) {
  const schema::Key& key = declared(f, {Kind::INTEGER});
  const int64_t v = f.integer(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                              schema::expected(key.value));
  check_range(f, key, static_cast<double>(v), f.value().Scalar());
  return v;
}

int read_int(const Field& f) {
  const schema::Range& r = declared(f, {Kind::INTEGER}).value.range;
  const auto& max = r.max ? r.max : r.limit_max;
  if (!max || max->value > std::numeric_limits<int>::max() || !r.min || r.min->value < 0)
    throw std::logic_error("schema: '" + f.path() + "' is read as an int but its declared range is wider");
  return static_cast<int>(read_integer(f));
}

double read_number(const Field& f) {
  const schema::Key& key = declared(f, {Kind::NUMBER});
  const double v = f.number(schema::expected(key.value), [](double) { return true; });
  check_range(f, key, v, f.value().Scalar());
  return v;
}

bool read_bool(const Field& f) {
  (void)declared(f, {Kind::BOOL});
  return f.boolean();
}

std::string read_string(const Field& f) {
  (void)declared(f, {Kind::STRING, Kind::PATH});
  return f.string();
}

namespace {

/// A quantity with a unit, parsed by `parse` and checked against `key`'s range.
template <class Q, class Parse>
Q quantity(const Field& f, Kind kind, std::string_view example, const Parse& parse) {
  const schema::Key& key = declared(f, {kind});
  const std::string text = f.scalar(example);
  const Q q = parse(text, f.where());
  check_range(f, key, q.value(), text);
  return q;
}

} // namespace

Bytes read_bytes(const Field& f) {
  return quantity<Bytes>(f, Kind::BYTES, "a byte size with a unit, e.g. 80GiB", parse_bytes);
}

BytesPerSec read_bandwidth(const Field& f) {
  return quantity<BytesPerSec>(f, Kind::BANDWIDTH, "a bandwidth with a unit, e.g. 200Gbps", parse_bandwidth);
}

Seconds read_duration(const Field& f) {
  return quantity<Seconds>(f, Kind::DURATION, "a time with a unit, e.g. 2us", parse_time);
}

FlopsPerSec read_flops(const Field& f) {
  return quantity<FlopsPerSec>(f, Kind::FLOPS, "a FLOP rate with a unit, e.g. 312TFLOPS", parse_flops_rate);
}

double read_power(const Field& f) {
  const schema::Key& key = declared(f, {Kind::POWER});
  const std::string text = f.scalar("a power with a unit, e.g. 700W");
  const double w = parse_power(text, f.where());
  check_range(f, key, w, text);
  return w;
}

double read_frequency(const Field& f) {
  const schema::Key& key = declared(f, {Kind::FREQUENCY});
  const std::string text = f.scalar("a frequency with a unit, e.g. 1830MHz");
  const double hz = parse_frequency(text, f.where());
  check_range(f, key, hz, text);
  return hz;
}

void check_choices(const schema::Key& key, const std::vector<std::string_view>& names) {
  const auto declared_names = key.value.choices.all();
  if (!std::equal(names.begin(), names.end(), declared_names.begin(), declared_names.end()))
    throw std::logic_error("schema: the reader of '" + std::string(key.path) +
                           "' names other values than its declaration");
}

int64_t upper_bound(File file, std::string_view path) {
  const schema::Range& r = schema::key(file, path).value.range;
  const auto& max = r.max ? r.max : r.limit_max;
  if (!max)
    throw std::logic_error("schema: '" + std::string(path) + "' declares no upper bound");
  return static_cast<int64_t>(max->value);
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
  required_key(m, "bandwidth", [&](const Field& f) { link.bandwidth = read_bandwidth(f); });
  required_key(m, "latency", [&](const Field& f) { link.latency = read_duration(f); });
  required_key(m, "efficiency", [&](const Field& f) { link.efficiency = read_number(f); });
}

} // namespace stepsim::config::detail
