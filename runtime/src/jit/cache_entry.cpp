#include "jit/cache_entry.h"

#include <nlohmann/json.hpp>

namespace gmmgen {

std::string entry_mismatch(std::string_view json, const std::string& key, uintmax_t so_bytes,
                           const std::function<std::string()>& so_hash) {
  if (int64_t(json.size()) > kMaxEntryJsonBytes)
    return "entry.json has " + std::to_string(json.size()) + " bytes, more than the " +
           std::to_string(kMaxEntryJsonBytes) + " an entry may have";
  // No exceptions: a syntax error or a number nlohmann cannot hold is a discarded value.
  const nlohmann::json entry = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (entry.is_discarded()) return "entry.json is unreadable: not JSON";
  auto field = [&](const char* name) -> const nlohmann::json* {
    if (!entry.is_object()) return nullptr;
    auto it = entry.find(name);
    return it == entry.end() ? nullptr : &*it;
  };
  const nlohmann::json *k = field("key"), *bytes = field("so_bytes"), *hash = field("so_hash");
  if (!k || !k->is_string() || k->get_ref<const std::string&>() != key)
    return "entry.json does not name key " + key + " as a string \"key\"";
  if (!bytes || !bytes->is_number_unsigned() || bytes->get<uintmax_t>() != so_bytes)
    return "kernel.so does not have the size \"so_bytes\" in entry.json (truncated?)";
  if (!hash || !hash->is_string() || hash->get_ref<const std::string&>() != so_hash())
    return "kernel.so does not have the hash \"so_hash\" in entry.json";
  return "";
}

}  // namespace gmmgen
