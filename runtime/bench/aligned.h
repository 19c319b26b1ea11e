// A byte buffer for bench's operands and probes that starts `offset` bytes past a 64-byte boundary
// (zero-filled: its pages are touched when it is made, not inside a timing). With huge pages on
// (bench --huge-pages), each buffer is its own mapping, 2 MiB aligned and advised MADV_HUGEPAGE
// before it is touched, so that where the kernel allows transparent huge pages on request the
// operands are mapped by 2 MiB pages: on a VM each 4 KiB page a kernel walks to costs a nested
// page walk.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "gmmgen/bench/bench.h"

namespace gmmgen::bench {

class Aligned {
 public:
  explicit Aligned(size_t count, size_t offset = 0) {
    count = std::max<size_t>(count, 1) + offset;
    if (!huge_pages()) {
      bytes_.resize(count + 64);
      data_ = bytes_.data() + (64 - reinterpret_cast<uintptr_t>(bytes_.data()) % 64) % 64 + offset;
      return;
    }
    constexpr size_t kHuge = size_t(2) << 20;
    mapped_ = (count + kHuge - 1) / kHuge * kHuge + kHuge;  // room to align to 2 MiB
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    map_ = static_cast<unsigned char*>(p);
    unsigned char* start = map_ + (kHuge - reinterpret_cast<uintptr_t>(map_) % kHuge) % kHuge;
    madvise(start, mapped_ - size_t(start - map_), MADV_HUGEPAGE);  // advice: refused is fine
    std::memset(start, 0, count);
    data_ = start + offset;
  }
  ~Aligned() {
    if (map_) munmap(map_, mapped_);
  }
  Aligned(Aligned&& o) noexcept
      : bytes_(std::move(o.bytes_)),
        map_(std::exchange(o.map_, nullptr)),
        mapped_(std::exchange(o.mapped_, 0)),
        data_(std::exchange(o.data_, nullptr)) {}
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  Aligned& operator=(Aligned&&) = delete;

  unsigned char* data() { return data_; }
  const unsigned char* data() const { return data_; }

 private:
  std::vector<unsigned char> bytes_;  // 4 KiB pages: a plain allocation
  unsigned char* map_ = nullptr;      // huge pages: the mapping
  size_t mapped_ = 0;
  unsigned char* data_ = nullptr;
};

}  // namespace gmmgen::bench
