// A target: what gmm-gen emits for a spec (C++ for CPUs, later a Pallas module). The only place
// that knows a target's files, its render context, its limits and its toolchain flags is its
// implementation in src/targets/; the emitter and the runtime ask through this interface.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "gmmgen/spec.h"

namespace gmmgen {

class Renderer;

struct EmittedFile {
  std::string path;  // relative to the output folder (emit_set) or the target's folder (Target)
  std::string content;
};

struct KernelId {
  std::string name;  // kernel_name(spec)
  std::string hash;  // spec_hash(spec)
};

// One entry of a set emitted with a bundle, in input order (any target): its kernel, the entry
// that first has that kernel (a later entry of the same kernel adds no code), and on that first
// entry every alias of the kernel (stable C names from spec files).
struct BundleMember {
  KernelSpec spec;
  KernelId id;
  size_t first = 0;
  std::vector<std::string> aliases;
};

// What a target can do, for the code that treats targets alike.
struct TargetCaps {
  // Its kernels go into bundles, with C entry points (and so take aliases in spec files).
  bool bundles = false;
  // The runtime builds and runs its kernels on this machine: verify checks them through a
  // Runtime, tune times them, bench runs them. (Other targets' are checked by a checker of their
  // own: Pallas modules by check_pallas.py under JAX.)
  bool runtime_runs = false;
};

class Target {
 public:
  virtual ~Target() = default;
  virtual TargetKind kind() const = 0;
  // The target's name, also the folder of its files in an emitted set.
  std::string_view name() const { return to_string(kind()); }

  // Throws SpecError if this target cannot build a spec that is otherwise valid: its limits
  // (e.g. scratch), or "not supported yet: ..." for a feature it does not have.
  virtual void check(const KernelSpec& s) const = 0;
  virtual TargetCaps caps() const = 0;
  // The tiling of a spec that names none (the fields it leaves out take it): for its op and
  // shape, clipped to the problem; never dependent on the machine that emits it.
  virtual Tiling default_tiling(const KernelSpec& s) const = 0;
  // The kernel's files, paths relative to the target's folder, rendered through r.
  virtual std::vector<EmittedFile> render(const KernelSpec& s, const KernelId& id,
                                          Renderer& r) const = 0;
  // Target-specific fields of the kernel's manifest entry (files, symbols, footprint).
  virtual nlohmann::ordered_json manifest_fields(const KernelSpec& s, const KernelId& id) const = 0;
  // Files every emitted set of this target carries (C++: gmmgen/kernel_abi.h).
  virtual std::vector<EmittedFile> support_files() const = 0;
  // Throws SpecError if bundle() would reject this bundle (its name, clashing symbols); checks
  // nothing for a target without bundles.
  virtual void check_bundle(const std::string& /*name*/,
                            std::span<const BundleMember> /*members*/) const {}
  // The files of a bundle of the set's kernels (C++: a translation unit per entry, a table of
  // entry points, a header), and its manifest entry; throws SpecError if the target has no
  // bundles. `members` is every entry of the set, other targets' too.
  virtual std::vector<EmittedFile> bundle(const std::string& name,
                                          std::span<const BundleMember> members,
                                          nlohmann::ordered_json& manifest) const = 0;
  // Flags that compile the kernel's sources (C++: the ISA family's); empty otherwise.
  virtual std::vector<std::string> toolchain_flags(const KernelSpec& s) const = 0;
};

// The registry: every target, in TargetKind order (one row per target in src/targets/targets.cpp),
// and the one of a kind.
std::span<const Target* const> targets();
const Target& target_of(TargetKind kind);

}  // namespace gmmgen
