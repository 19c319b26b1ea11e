#include "jit/loader.h"

#include <dlfcn.h>
#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "gmmgen/errors.hpp"

namespace gmmgen {

SharedObject SharedObject::open(const std::filesystem::path& so) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw CacheError("cannot load " + so.string() + ": " + dlerror());
  SharedObject lib;
  lib.handle_ = std::shared_ptr<void>(h, [](void* p) { dlclose(p); });
  lib.path_ = so;
  return lib;
}

void* SharedObject::find(const std::string& symbol) const {
  return handle_ ? dlsym(handle_.get(), symbol.c_str()) : nullptr;
}

namespace {

// [offset, offset + count * size) lies inside a file of `total` bytes (no overflow).
bool inside(uint64_t offset, uint64_t count, uint64_t size, uint64_t total) {
  uint64_t bytes = 0;
  return !__builtin_mul_overflow(count, size, &bytes) && offset <= total && bytes <= total - offset;
}

template <typename T>
T read_at(const std::string& file, uint64_t offset) {
  T v;
  std::memcpy(&v, file.data() + offset, sizeof v);  // bounds checked by the caller
  return v;
}

}  // namespace

std::string read_elf_section(const std::filesystem::path& so, const std::string& name,
                             size_t max_bytes) {
  auto bad = [&](const std::string& why) {
    return CacheError(so.string() + " is not a loadable shared object: " + why);
  };
  std::ifstream in(so, std::ios::binary);
  if (!in) throw bad("cannot be read");
  const std::string file{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const uint64_t total = file.size();
  if (total < sizeof(Elf64_Ehdr)) throw bad("shorter than an ELF header");
  const auto eh = read_at<Elf64_Ehdr>(file, 0);
  const bool little = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) throw bad("no ELF magic");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != (little ? ELFDATA2LSB : ELFDATA2MSB) || eh.e_type != ET_DYN)
    throw bad("not a 64-bit shared object of this machine's byte order");
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_shentsize != sizeof(Elf64_Shdr))
    throw bad("unexpected header sizes");
  if (!inside(eh.e_phoff, eh.e_phnum, sizeof(Elf64_Phdr), total))
    throw bad("program headers lie past the end of the file (truncated?)");
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    const auto ph = read_at<Elf64_Phdr>(file, eh.e_phoff + i * sizeof(Elf64_Phdr));
    if (ph.p_type == PT_LOAD && !inside(ph.p_offset, ph.p_filesz, 1, total))
      throw bad("a loadable segment lies past the end of the file (truncated?)");
  }
  if (!inside(eh.e_shoff, eh.e_shnum, sizeof(Elf64_Shdr), total) || eh.e_shstrndx >= eh.e_shnum)
    throw bad("section headers lie past the end of the file (truncated?)");
  auto section = [&](uint64_t i) {
    return read_at<Elf64_Shdr>(file, eh.e_shoff + i * sizeof(Elf64_Shdr));
  };
  const Elf64_Shdr names = section(eh.e_shstrndx);
  if (names.sh_type == SHT_NOBITS || !inside(names.sh_offset, names.sh_size, 1, total))
    throw bad("the section name table lies past the end of the file");
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr sh = section(i);
    if (sh.sh_name >= names.sh_size) throw bad("a section name lies outside the name table");
    const char* s = file.data() + names.sh_offset + sh.sh_name;
    const size_t room = names.sh_size - sh.sh_name;
    if (strnlen(s, room) != name.size() || name.compare(0, name.size(), s, name.size()) != 0)
      continue;
    if (sh.sh_type == SHT_NOBITS || !inside(sh.sh_offset, sh.sh_size, 1, total))
      throw bad("section " + name + " lies past the end of the file");
    if (sh.sh_size > max_bytes)
      throw bad("section " + name + " holds " + std::to_string(sh.sh_size) + " bytes, more than " +
                std::to_string(max_bytes));
    const char* p = file.data() + sh.sh_offset;
    return std::string(p, strnlen(p, sh.sh_size));
  }
  throw bad("it has no section " + name);
}

}  // namespace gmmgen
