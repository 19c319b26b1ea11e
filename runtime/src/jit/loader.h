// A loaded shared object (dlopen) and its symbols. Knows nothing of GMM.
#pragma once

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

}  // namespace gmmgen
