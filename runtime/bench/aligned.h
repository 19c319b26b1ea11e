// A 64-byte aligned byte buffer for bench's operands and probes (zero-filled: its pages are
// touched when it is made, not inside a timing).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gmmgen::bench {

struct Aligned {
  std::vector<unsigned char> bytes;
  size_t offset = 0;
  explicit Aligned(size_t count) : bytes(std::max<size_t>(count, 1) + 64) {
    offset = (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
  }
  unsigned char* data() { return bytes.data() + offset; }
  const unsigned char* data() const { return bytes.data() + offset; }
};

}  // namespace gmmgen::bench
