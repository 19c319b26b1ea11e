#include "commands.h"

namespace gmmgen::cli {

void SpecOptions::add_to(CLI::App& app) {
  app.add_option("--spec", texts,
                 "Spec text, e.g. op=gmm,lhs=bf16,rhs=bf16,out=f32,k=512,n=256,g=8")
      ->take_all();
  app.add_option("--spec-file", files, "JSON spec file: [spec, ...] or {\"kernels\": [...]}")
      ->check(CLI::ExistingFile);
  for (const SpecField& f : spec_fields()) {
    const std::string help =
        std::string(f.doc) + ": " + field_values(f) + " [" + std::string(f.default_doc) + "]";
    app.add_option_function<std::string>(
        std::string(f.flag),
        [this, key = std::string(f.key)](const std::string& v) { flags.emplace_back(key, v); },
        help);
  }
}

std::vector<KernelSpec> SpecOptions::specs() const {
  std::vector<KernelSpec> out;
  for (const auto& f : files)
    for (auto& s : load_spec_file(f)) out.push_back(s);
  for (const auto& t : texts) out.push_back(parse_text(t));
  if (!flags.empty()) {
    std::string text;
    for (const auto& [k, v] : flags) text += (text.empty() ? "" : ",") + k + "=" + v;
    out.push_back(parse_text(text));
  }
  if (out.empty()) throw SpecError("no spec given: use --spec, --spec-file or -k/-n/-g flags");
  return out;
}

}  // namespace gmmgen::cli
