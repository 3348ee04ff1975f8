// How the declaration of schema.cpp reads: the phrase messages give for what a key expects, and
// docs/schema.md's columns and tables.

#include "config/schema.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <stdexcept>

namespace stepsim::config::schema {

namespace {

using enum Kind;
using enum Presence;

/// One Markdown table row; an empty cell is written "| |".
std::string row(std::initializer_list<std::string_view> cells) {
  std::string out = "|";
  for (std::string_view c : cells)
    out += c.empty() ? std::string(" |") : " " + std::string(c) + " |";
  return out + "\n";
}

/// A bound's value as messages write it: its text, else the shortest decimal form.
std::string text_of(const Bound& b) {
  if (!b.text.empty())
    return std::string(b.text);
  if (b.value == std::floor(b.value) && std::fabs(b.value) < 1e15)
    return std::to_string(static_cast<int64_t>(b.value));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", b.value);
  return buf;
}

/// As text_of, with powers of two from 2^20 written 2^k and 2^31-1 so (the document's tables).
std::string doc_text(const Bound& b) {
  if (b.text.empty() && b.value == static_cast<double>(std::numeric_limits<int>::max()))
    return "2^31-1";
  if (b.text.empty() && b.value >= 1048576.0 && b.value < 1e15) {
    const auto v = static_cast<int64_t>(b.value);
    if (static_cast<double>(v) == b.value && (v & (v - 1)) == 0)
      return "2^" + std::to_string(std::countr_zero(static_cast<uint64_t>(v)));
  }
  return text_of(b);
}

bool is_quantity(Kind k) {
  return k == BYTES || k == BANDWIDTH || k == DURATION || k == FLOPS || k == POWER || k == FREQUENCY;
}

/// The constraint column's range: the key's meaning, then its limits.
std::string range_column(const Value& v) {
  const Range& r = v.range;
  std::string out;
  if (v.kind == INTEGER && r.min && r.max)
    out = doc_text(*r.min) + ".." + doc_text(*r.max);
  else if (v.kind == NUMBER && r.min && r.max)
    out = std::string("in ") + (r.min->inclusive ? "[" : "(") + doc_text(*r.min) + ", " + doc_text(*r.max) +
          (r.max->inclusive ? "]" : ")");
  else if (r.min && !r.limit_min) // a sanity limit above the minimum says more
    out = (r.min->inclusive ? ">= " : "> ") + doc_text(*r.min);
  else if (is_quantity(v.kind))
    out = ">= 0";
  if (r.or_zero)
    out = "0 or " + out;
  if (!r.note.empty())
    out += " (" + std::string(r.note) + ")";
  if (v.kind == INTEGER && r.min && r.limit_max && !r.max)
    return doc_text(*r.min) + ".." + doc_text(*r.limit_max) + " (size limit)";
  std::string limits;
  if (r.limit_min)
    limits = "at least " + doc_text(*r.limit_min);
  if (r.limit_max)
    limits += (limits.empty() ? "at most " : ", at most ") + doc_text(*r.limit_max);
  if (!limits.empty())
    out += (out.empty() ? "" : ", ") + limits + " (sanity limit)";
  return out;
}

} // namespace

std::string expected(const Value& value) {
  const Range& r = value.range;
  std::string out;
  switch (value.kind) {
  case INTEGER:
    if (r.min && r.max)
      out = r.max->value - r.min->value == 1 ? text_of(*r.min) + " or " + text_of(*r.max)
                                             : "an integer in " + text_of(*r.min) + ".." + text_of(*r.max);
    else if (r.min && r.min->value == 1)
      out = "a positive integer";
    else if (r.min && r.min->value == 0)
      out = "a non-negative integer";
    else
      out = r.min ? "an integer >= " + text_of(*r.min) : "an integer";
    break;
  case NUMBER:
    if (r.min && r.max)
      out = std::string("a number in ") + (r.min->inclusive ? "[" : "(") + text_of(*r.min) + ", " +
            text_of(*r.max) + (r.max->inclusive ? "]" : ")");
    else
      out =
          r.min ? std::string("a number ") + (r.min->inclusive ? ">= " : "> ") + text_of(*r.min) : "a number";
    if (r.or_zero)
      out += ", or 0";
    break;
  case BYTES:
    out = r.min ? "a positive byte size" : "a byte size";
    break;
  case BANDWIDTH:
    out = r.min ? "a positive bandwidth of at least " + text_of(*r.min) : "a bandwidth";
    break;
  case DURATION:
    out = "a time";
    break;
  case FLOPS:
    out = r.min ? "a positive FLOP rate" : "a FLOP rate";
    break;
  case POWER:
    out = "a positive power";
    break;
  case FREQUENCY:
    out = "a positive frequency";
    break;
  case BOOL:
    out = "true or false";
    break;
  case ENUM:
    for (std::string_view n : value.choices.all())
      out += (out.empty() ? "one of " : ", ") + std::string(n);
    break;
  case MAPPING:
    out = "a mapping";
    break;
  case LIST:
    out = "a list";
    break;
  case STRING:
  case PATH:
    out = "a non-empty string";
    break;
  }
  if (!r.note.empty())
    out += " (" + std::string(r.note) + ")";
  return out;
}

std::string type_column(const Key& key) {
  if (!key.value.type_text.empty())
    return std::string(key.value.type_text);
  switch (key.value.kind) {
  case MAPPING:
    return "mapping";
  case LIST:
    return "list";
  case STRING:
    return "string";
  case PATH:
    return "path";
  case INTEGER:
    return "integer";
  case NUMBER:
    return "number";
  case BOOL:
    return "boolean";
  case ENUM:
    return "enum";
  case BYTES:
    return "byte size";
  case BANDWIDTH:
    return "bandwidth";
  case DURATION:
    return "time";
  case FLOPS:
    return "FLOP rate";
  case POWER:
    return "power";
  case FREQUENCY:
    return "frequency";
  }
  return "";
}

std::string presence_column(const Key& key) {
  const std::string when(key.when);
  switch (key.presence) {
  case REQUIRED:
    return when.empty() ? "required" : "required " + when;
  case OPTIONAL:
    if (!key.dflt.empty())
      return "optional, **" + std::string(key.dflt) + "**" + when;
    return when.empty() ? "optional" : "optional, " + when;
  case CONDITIONAL:
    return when;
  }
  return when;
}

std::string constraint_column(const Key& key) {
  std::string out;
  if (key.value.kind == ENUM) {
    for (std::string_view n : key.value.choices.all())
      out += (out.empty() ? "`" : ", `") + std::string(n) + "`";
  } else if (key.value.kind == STRING) {
    out = "non-empty";
  } else {
    out = range_column(key.value);
  }
  if (!key.rule.empty())
    out += (out.empty() ? "" : "; ") + std::string(key.rule);
  return out;
}

std::string markdown_table(File file) {
  std::string out = std::string("| Key | Type | Required / default | Constraint | Meaning (field in `") +
                    (file == File::CLUSTER ? "ClusterSpec" : "WorkloadSpec") +
                    "`) |\n|---|---|---|---|---|\n";
  for (const Key& k : keys(file))
    out += row({"`" + std::string(k.path) + "`", type_column(k), presence_column(k), constraint_column(k),
                k.meaning});
  return out;
}

std::string with_table(const std::string& document, File file) {
  const std::string begin =
      "<!-- " + std::string(file_name(file)) + " keys: generated from sim/config/schema.cpp -->\n";
  const std::string end = "<!-- end of " + std::string(file_name(file)) + " keys -->";
  const auto from = document.find(begin);
  const auto to = from == std::string::npos ? from : document.find(end, from);
  if (to == std::string::npos)
    throw std::runtime_error("docs/schema.md has no '" + begin.substr(0, begin.size() - 1) + "' ... '" + end +
                             "' markers");
  return document.substr(0, from + begin.size()) + markdown_table(file) + document.substr(to);
}

} // namespace stepsim::config::schema
