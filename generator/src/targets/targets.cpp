// The table of targets: one implementation per TargetKind.
#include "gmmgen/target.h"

namespace gmmgen {

const Target& cpp_target();

namespace {
// A target gmm-gen cannot emit yet: every spec for it is rejected with "not supported yet".
class UnsupportedTarget final : public Target {
 public:
  explicit UnsupportedTarget(TargetKind k) : kind_(k) {}
  TargetKind kind() const override { return kind_; }
  void check(const KernelSpec&) const override { fail(); }
  std::vector<EmittedFile> render(const KernelSpec&, const KernelId&, Renderer&) const override {
    fail();
  }
  nlohmann::ordered_json manifest_fields(const KernelSpec&, const KernelId&) const override {
    fail();
  }
  std::vector<EmittedFile> support_files() const override { return {}; }
  std::vector<EmittedFile> bundle(const std::string&, std::span<const KernelSpec>,
                                  std::span<const KernelId>,
                                  nlohmann::ordered_json&) const override {
    fail();
  }
  std::vector<std::string> toolchain_flags(const KernelSpec&) const override { return {}; }

 private:
  [[noreturn]] void fail() const {
    throw SpecError("not supported yet: target=" + std::string(name()));
  }
  TargetKind kind_;
};
}  // namespace

const Target& target_of(TargetKind kind) {
  static const UnsupportedTarget pallas(TargetKind::kPallas);
  switch (kind) {
    case TargetKind::kCpp:
      return cpp_target();
    case TargetKind::kPallas:
      return pallas;
  }
  throw SpecError("target code " + std::to_string(int(kind)) + " is not a known target");
}

}  // namespace gmmgen
