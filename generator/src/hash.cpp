#include "gmmgen/hash.h"

#include <xxhash.h>

#include <memory>

namespace gmmgen {

std::string hash128_hex(const std::vector<std::string_view>& parts) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  XXH3_128bits_reset(state.get());
  for (std::string_view p : parts) {
    XXH3_128bits_update(state.get(), p.data(), p.size());
    XXH3_128bits_update(state.get(), "", 1);
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(state.get()));
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : c.digest) {
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  return hex;
}

}  // namespace gmmgen
