// The project's one hash: XXH3-128 (fast, non-cryptographic, stable across platforms) over a
// sequence of byte strings, each terminated by a NUL so that ("ab","c") != ("a","bc").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gmmgen {

// 32 lowercase hex digits.
std::string hash128_hex(const std::vector<std::string_view>& parts);

}  // namespace gmmgen
