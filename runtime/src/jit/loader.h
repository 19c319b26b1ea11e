// A loaded shared object (dlopen) and its symbols. Knows nothing of GMM.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

namespace gmmgen {

class SharedObject {
 public:
  // Loads the object (RTLD_NOW | RTLD_LOCAL); throws CacheError with dlopen's message.
  static SharedObject open(const std::filesystem::path& so);
  // Address of a symbol, or nullptr.
  void* find(const std::string& symbol) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::shared_ptr<void> handle_;  // closed when the last copy goes away
  std::filesystem::path path_;
};

// The contents (up to the first NUL) of section `name` of the ELF shared object `so`, read from
// the file without loading it, so none of its code runs. Also checks that every part of the file
// dlopen would map lies inside it (a truncated object would fault with SIGBUS once mapped).
// Throws CacheError saying what is wrong: not a 64-bit native ELF shared object, truncated,
// no such section, or a section larger than max_bytes.
std::string read_elf_section(const std::filesystem::path& so, const std::string& name,
                             size_t max_bytes);

}  // namespace gmmgen
