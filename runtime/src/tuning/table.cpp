#include "gmmgen/tuning/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_set>

namespace gmmgen::tuning {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;

// A value from a file, for messages: at most ~100 characters, control characters escaped.
std::string shown(std::string_view v) {
  std::string out;
  for (char c : v.substr(0, 100)) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return v.size() > 100 ? out + "..." : out;
}

std::string kind_of(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string:
      return "the string \"" + shown(v.get_ref<const std::string&>()) + "\"";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    default:
      return "the number " + shown(v.dump());
  }
}

// Strict JSON: no key twice in one object (nlohmann would keep the last silently), at most
// kMaxDepth levels.
Json parse_strict(std::string_view text, const std::string& origin) {
  if (int64_t(text.size()) > kMaxTableBytes)
    throw TableError(origin + ": " + std::to_string(text.size()) + " bytes, more than the " +
                     std::to_string(kMaxTableBytes) + " a tuning table may have");
  std::vector<std::unordered_set<std::string>> keys;  // one set per open object
  // The key whose value is being read, for errors the parser itself raises (1e400): the last
  // key, and for each open container the key it is the value of.
  std::string pending_key;
  std::vector<std::string> container_keys;
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    if (event == E::object_start || event == E::array_start) container_keys.push_back(pending_key);
    if ((event == E::object_end || event == E::array_end) && !container_keys.empty()) {
      container_keys.pop_back();
      pending_key = container_keys.empty() ? "" : container_keys.back();
    }
    if (depth > kMaxDepth)
      throw TableError(origin + ": nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second)
        throw TableError(origin + ": key '" + shown(k) + "' appears twice in one object");
      pending_key = k;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number out of range
    const std::string at =
        pending_key.empty() ? "" : " in the value of key '" + shown(pending_key) + "'";
    throw TableError(origin + ": not JSON" + at + " (" + e.what() + ")");
  }
}

const Json& member(const Json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw TableError(where + ": key '" + key + "' is missing");
  return *it;
}

const std::string& string_member(const Json& obj, const char* key, const std::string& where) {
  const Json& v = member(obj, key, where);
  if (!v.is_string())
    throw TableError(where + ": '" + key + "' must be a string, got " + kind_of(v));
  return v.get_ref<const std::string&>();
}

double number(const Json& v, const std::string& what) {
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw TableError(what + " must be a finite number, got " + kind_of(v));
  return v.get<double>();
}

// An optional number >= 0 (0 when absent).
double optional_number(const Json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) return 0;
  const double v = number(*it, where + ": '" + key + "'");
  if (v < 0) throw TableError(where + ": '" + key + "'=" + it->dump() + " must be >= 0");
  return v;
}

// An optional integer in [lo, hi] (0 when absent).
int64_t optional_int(const Json& obj, const char* key, int64_t lo, int64_t hi,
                     const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi ||
      (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(hi)))
    throw TableError(where + ": '" + key + "' must be an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got " + kind_of(*it));
  return it->get<int64_t>();
}

Bucket parse_bucket(const Json& v, const std::string& where) {
  const std::string what = where + ": 'rows_per_group'";
  if (!v.is_array() || v.size() != 2)
    throw TableError(what + " must be [lo, hi] (hi null: no upper bound), got " + kind_of(v));
  Bucket b;
  b.lo = number(v[0], what + "[0]");
  if (!v[1].is_null()) b.hi = number(v[1], what + "[1]");
  if (b.lo < 0 || !(b.hi > b.lo))
    throw TableError(what + "=" + shown(v.dump()) + " must have 0 <= lo < hi");
  return b;
}

// The spec of an entry: its problem keys (problem fields only), its tiling and its ISA family,
// through the spec's own JSON reader (types and values checked there) and validate().
KernelSpec parse_entry_spec(const Json& e, const std::string& where) {
  const Json& problem = member(e, "problem", where);
  if (!problem.is_object())
    throw TableError(where + ": 'problem' must be an object, got " + kind_of(problem));
  Json spec = Json::object();
  try {
    for (const auto& [key, value] : problem.items()) {
      if (spec_field(key).role != FieldRole::kProblem)
        throw TableError(where + ": problem key '" + key +
                         "' is not a problem field (the tiling and ISA have keys of their own)");
      spec[key] = value;
    }
  } catch (const SpecError& err) {
    throw TableError(where + ": problem: " + err.what());
  }
  const Json& tiling = member(e, "tiling", where);
  if (!tiling.is_object())
    throw TableError(where + ": 'tiling' must be an object {\"tm\", \"tk\", \"tn\"}, got " +
                     kind_of(tiling));
  for (const auto& [key, value] : tiling.items()) {
    if (key != "tm" && key != "tk" && key != "tn")
      throw TableError(where + ": tiling key '" + shown(key) + "' is not one of tm, tk, tn");
    spec[key] = value;
  }
  for (const char* key : {"tm", "tk", "tn"}) member(tiling, key, where + ": tiling");
  if (const auto it = e.find("isa"); it != e.end()) spec["isa"] = *it;
  try {
    const KernelSpec s = from_json(spec);
    validate(s);
    return s;
  } catch (const SpecError& err) {
    throw TableError(where + ": " + err.what());
  }
}

Entry parse_entry(const Json& e, const std::string& where) {
  if (!e.is_object()) throw TableError(where + " must be an object, got " + kind_of(e));
  Entry out;
  out.spec = parse_entry_spec(e, where);
  out.rows_per_group = parse_bucket(member(e, "rows_per_group", where), where);
  out.gflops = optional_number(e, "gflops", where);
  out.baseline_gflops = optional_number(e, "baseline_gflops", where);
  out.m = optional_int(e, "m", 0, std::numeric_limits<int32_t>::max(), where);
  out.threads = int(optional_int(e, "threads", 1, 4096, where));
  if (const auto it = e.find("dist"); it != e.end()) {
    if (!it->is_string())
      throw TableError(where + ": 'dist' must be a string, got " + kind_of(*it));
    out.dist = it->get<std::string>();
  }
  return out;
}

// A bucket bound as written: an integer when it is one (as tune's power-of-two buckets are).
Json bound(double v) {
  return v == std::floor(v) && std::fabs(v) < 0x1p53 ? Json(int64_t(v)) : Json(v);
}

// GFLOP/s as written: one decimal is all a measurement supports.
double rounded(double gflops) {
  return std::round(gflops * 10) / 10;
}

}  // namespace

Table parse_table(std::string_view text, const std::string& origin,
                  std::vector<std::string>* skipped) {
  const Json j = parse_strict(text, origin);
  if (!j.is_object())
    throw TableError(origin +
                     ": not a gmm-gen tuning table (a JSON object with version, device "
                     "and entries), got " +
                     kind_of(j));
  const Json& version = member(j, "version", origin);
  if (!version.is_number_integer() || version.get<int64_t>() != kTableVersion)
    throw TableError(origin + ": version " + shown(version.dump()) +
                     "; this gmm-gen reads tuning tables of version " +
                     std::to_string(kTableVersion));
  Table t;
  const Json& device = member(j, "device", origin);
  if (!device.is_object())
    throw TableError(origin + ": 'device' must be an object, got " + kind_of(device));
  t.device.cpu = string_member(device, "cpu", origin + ": device");
  t.device.isa = string_member(device, "isa", origin + ": device");
  t.device.compiler = string_member(device, "compiler", origin + ": device");
  const Json& entries = member(j, "entries", origin);
  if (!entries.is_array())
    throw TableError(origin + ": 'entries' must be an array, got " + kind_of(entries));
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where = origin + ": entries[" + std::to_string(i) + "]";
    try {
      t.entries.push_back(parse_entry(entries[i], where));
    } catch (const TableError& e) {
      if (!skipped) throw;
      skipped->push_back(e.what());
    }
  }
  return t;
}

std::string dump_table(const Table& t) {
  Json entries = Json::array();
  for (const Entry& e : t.entries) {
    Json j;
    j["problem"] = problem_json(e.spec);
    j["rows_per_group"] = {bound(e.rows_per_group.lo), std::isinf(e.rows_per_group.hi)
                                                           ? Json(nullptr)
                                                           : bound(e.rows_per_group.hi)};
    j["tiling"] = {{"tm", e.spec.tiling.tm}, {"tk", e.spec.tiling.tk}, {"tn", e.spec.tiling.tn}};
    if (e.spec.isa != Isa::kNative) j["isa"] = std::string(to_string(e.spec.isa));
    j["gflops"] = rounded(e.gflops);
    j["baseline_gflops"] = rounded(e.baseline_gflops);
    if (e.m) j["m"] = e.m;
    if (!e.dist.empty()) j["dist"] = e.dist;
    if (e.threads) j["threads"] = e.threads;
    entries.push_back(std::move(j));
  }
  const Json j = {
      {"version", kTableVersion},
      {"device", {{"cpu", t.device.cpu}, {"isa", t.device.isa}, {"compiler", t.device.compiler}}},
      {"entries", std::move(entries)}};
  return j.dump(2) + "\n";
}

void merge(Table& into, const Table& from) {
  for (const Entry& e : from.entries)
    std::erase_if(into.entries, [&](const Entry& old) {
      return SameProblem{}(old.spec, e.spec) && old.rows_per_group.overlaps(e.rows_per_group);
    });
  into.entries.insert(into.entries.end(), from.entries.begin(), from.entries.end());
  into.device = from.device;
}

const Entry* match(const Table& t, const KernelSpec& problem, double rows) {
  for (const Entry& e : t.entries)
    if (e.rows_per_group.contains(rows) && SameProblem{}(e.spec, problem)) return &e;
  return nullptr;
}

Bucket bucket_of(double rows) {
  if (!(rows >= 1)) return {0, 1};
  const int e = std::ilogb(rows);
  return {std::ldexp(1.0, e), std::ldexp(1.0, e + 1)};
}

double rows_per_group(std::span<const int32_t> sizes, int64_t group_offset, int64_t g_local) {
  if (g_local <= 0) return 0;
  const int64_t g = int64_t(sizes.size());
  const int64_t begin = std::clamp<int64_t>(group_offset, 0, g);
  const int64_t end = std::clamp<int64_t>(group_offset + std::min(g_local, g), begin, g);
  int64_t rows = 0;
  for (int64_t i = begin; i < end; ++i) rows += std::max<int32_t>(sizes[size_t(i)], 0);
  return double(rows) / double(g_local);
}

std::string problem_text(const KernelSpec& s) {
  std::string out;
  for (const SpecField& f : spec_fields()) {
    if (f.role != FieldRole::kProblem || (f.applies && !f.applies(s))) continue;
    out += (out.empty() ? "" : ",") + std::string(f.key) + "=" + field_text(f, s);
  }
  return out;
}

nlohmann::ordered_json problem_json(const KernelSpec& s) {
  const Json all = to_json(s);
  Json out = Json::object();
  for (const SpecField& f : spec_fields())
    if (f.role == FieldRole::kProblem)
      if (const auto it = all.find(std::string(f.key)); it != all.end()) out[it.key()] = *it;
  return out;
}

std::string to_string(const Bucket& b) {
  const auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  return "[" + num(b.lo) + ", " + (std::isinf(b.hi) ? std::string("inf") : num(b.hi)) + ")";
}

}  // namespace gmmgen::tuning
