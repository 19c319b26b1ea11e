// The tables every other module derives from (spec fields, dtypes, ABI entry points), and the
// documents that must agree with them: the spec table of docs/spec.md and the tables of
// docs/c-abi.md.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "gmmgen/heuristics.h"
#include "gmmgen/naming.h"
#include "gmmgen/spec.h"

namespace gmmgen {
namespace {

// A file of the source tree, by its path relative to the root.
std::string read_source(const std::string& rel) {
  std::ifstream in(std::string(GMMGEN_SOURCE_DIR) + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A value other than the default for each field, valid together with the base spec.
std::string other_value(std::string_view key) {
  static const std::map<std::string_view, std::string> k{{"op", "tgmm"},
                                                         {"lhs", "f8e4m3"},
                                                         {"rhs", "f8e5m2"},
                                                         {"out", "bf16"},
                                                         {"lhs_quant", "block:64"},
                                                         {"rhs_quant", "block:64x32"},
                                                         {"k", "384"},
                                                         {"n", "96"},
                                                         {"g", "12"},
                                                         {"g_local", "5"},
                                                         {"tm", "17"},
                                                         {"tk", "33"},
                                                         {"tn", "9"},
                                                         // VJP tilings exist in Pallas gmm specs
                                                         {"dlhs_tiling", "8x128x64,target=pallas"},
                                                         {"drhs_tiling", "16x64x128,target=pallas"},
                                                         {"transpose_rhs", "1"},
                                                         {"lhs_layout", "km"},
                                                         {"out_mode", "accumulate"},
                                                         {"target", "pallas"},
                                                         {"isa", "avx512bf16"},
                                                         {"tpu", "v5p,target=pallas"}};
  return k.at(key);
}

// Every field, set alone to a non-default value, survives text, JSON and kernel-name round
// trips, and changes the canonical text; the name carries every problem and tiling field.
TEST(FieldTable, EveryFieldRoundTripsThroughEveryForm) {
  const std::string base = "k=256,n=64,g=8";
  std::set<std::string> names;
  for (const SpecField& f : spec_fields()) {
    const std::string text =
        f.required ? base : base + "," + std::string(f.key) + "=" + other_value(f.key);
    KernelSpec s = parse_text(text);
    if (f.required) set_field(f, s, other_value(f.key));
    SCOPED_TRACE(text);
    EXPECT_FALSE(field_is_default(f, s) && !f.required) << f.key;
    EXPECT_EQ(s, parse_text(to_text(s)));
    EXPECT_EQ(s, from_json(to_json(s)));
    const std::string stem = name_stem(s);
    EXPECT_EQ(s, parse_kernel_name(stem + "_abcdef12").spec) << stem;
    EXPECT_TRUE(names.insert(stem).second) << "two fields give the same name " << stem;
    // Names are C identifiers (symbols are built from them).
    for (char c : stem)
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << stem;
  }
  // Two optional parts at once, in either order of the table.
  const KernelSpec s = parse_text(base +
                                  ",transpose_rhs=1,out_mode=existing_out,isa=avx2,"
                                  "rhs_quant=channel,lhs_quant=tensor");
  EXPECT_EQ(s, parse_kernel_name(name_stem(s) + "_00000000").spec) << name_stem(s);
}

TEST(FieldTable, DtypeTableMatchesTheAbiCodes) {
  int i = 0;
  for (const DTypeInfo& d : dtype_table()) {
    EXPECT_EQ(i++, int(d.id)) << d.name;
    EXPECT_EQ(d.id, parse_dtype(d.name, "dtype"));
    EXPECT_TRUE(d.bits == 32 || d.bits == 16 || d.bits == 8 || d.bits == 4 || d.bits == 2)
        << d.name;
    EXPECT_NE(0u, d.uses) << d.name;
  }
  EXPECT_EQ(GMMGEN_DTYPE_COUNT_, i);
  EXPECT_EQ(GMMGEN_DTYPE_BF16, int(DType::kBF16));
  EXPECT_THROW(dtype_info(DType(99)), SpecError);
}

TEST(FieldTable, ProblemKeyIgnoresTilingAndImplementation) {
  const KernelSpec a = parse_text("k=256,n=64,g=8,tm=16,isa=avx2");
  const KernelSpec b = parse_text("k=256,n=64,g=8,tm=64,isa=generic");
  const KernelSpec c = parse_text("k=256,n=64,g=8,tm=16,isa=avx2,transpose_rhs=1");
  EXPECT_TRUE(SameProblem{}(a, b));
  EXPECT_EQ(ProblemHash{}(a), ProblemHash{}(b));
  EXPECT_NE(SpecKeyHash{}(a), SpecKeyHash{}(b));
  EXPECT_FALSE(SameProblem{}(a, c));
}

// The spec table of docs/spec.md is the field table's (refresh: cmake --build build --target
// regenerate).
TEST(DocTables, SpecTableIsTheFieldTable) {
  const std::string doc = read_source("docs/spec.md");
  EXPECT_NE(doc.find("<!-- spec-fields:begin -->\n" + spec_fields_markdown() +
                     "<!-- spec-fields:end -->"),
            std::string::npos)
      << "docs/spec.md's spec table differs from the field table; run the regenerate target";
}

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// The identifiers of a text, in order.
std::vector<std::string> identifiers(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    if (!ident_char(text[i]) || std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && ident_char(text[j])) ++j;
    out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

// Field names of a C struct in the header, in order (the last identifier of each declarator).
std::vector<std::string> header_struct_fields(const std::string& header, const std::string& name) {
  const size_t begin = header.find("typedef struct " + name + " {");
  const size_t end = header.find("} " + name + ";", begin);
  std::string body = header.substr(begin, end - begin);
  body = body.substr(body.find('{') + 1);
  for (size_t c; (c = body.find("/*")) != std::string::npos;)
    body.erase(c, body.find("*/", c) + 2 - c);
  std::vector<std::string> fields;
  std::stringstream decls(body);
  for (std::string decl; std::getline(decls, decl, ';');) {
    std::stringstream parts(decl);
    for (std::string part; std::getline(parts, part, ',');)
      if (const auto ids = identifiers(part); !ids.empty()) fields.push_back(ids.back());
  }
  return fields;
}

// Every field of gmmgen_kernel_info is set by name in the kernels' info partial: a field added to
// the header and forgotten there would silently stay zero in every kernel.
TEST(AbiTables, InfoPartialSetsEveryKernelInfoField) {
  const std::string header = read_source("runtime/include/gmmgen/kernel_abi.h");
  const std::string info = read_source("templates/cpp/common/info.inc.mustache");
  const std::vector<std::string> fields = header_struct_fields(header, "gmmgen_kernel_info");
  ASSERT_GT(fields.size(), 10u);
  for (const std::string& f : fields)
    EXPECT_NE(std::string::npos, info.find("  i." + f + " = ")) << f << " is never set";
}

// The backticked identifiers in the first column of a docs table between two markers.
std::vector<std::string> doc_names(const std::string& doc, const std::string& from,
                                   const std::string& to) {
  const size_t b = doc.find(from);
  const size_t e = doc.find(to, b + from.size());
  EXPECT_NE(std::string::npos, b) << from;
  EXPECT_NE(std::string::npos, e) << to;
  std::stringstream lines(doc.substr(b + from.size(), e - b - from.size()));
  std::vector<std::string> names;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("| ")) continue;
    const std::string cell = line.substr(0, line.find('|', 1));
    for (size_t q = cell.find('`'); q != std::string::npos; q = cell.find('`', q)) {
      const size_t close = cell.find('`', q + 1);
      const std::string inner = cell.substr(q + 1, close - q - 1);
      if (identifiers(inner) == std::vector<std::string>{inner}) names.push_back(inner);
      q = close + 1;
    }
  }
  return names;
}

TEST(DocTables, CAbiPageAgreesWithTheHeader) {
  const std::string doc = read_source("docs/c-abi.md");
  const std::string header = read_source("runtime/include/gmmgen/kernel_abi.h");
  // gmmgen_args: the rows of its table name every field, in order.
  EXPECT_EQ(header_struct_fields(header, "gmmgen_args"),
            doc_names(doc, "<!-- abi-args:begin -->", "<!-- abi-args:end -->"));
  EXPECT_EQ(header_struct_fields(header, "gmmgen_kernel_info"),
            doc_names(doc, "<!-- abi-info:begin -->", "<!-- abi-info:end -->"));
  // The entry points: one table row per GMMGEN_ENTRY_POINTS entry, in order.
  std::vector<std::string> documented;
  {
    const size_t b = doc.find("<!-- abi-entries:begin -->");
    const size_t e = doc.find("<!-- abi-entries:end -->");
    ASSERT_NE(std::string::npos, b);
    const std::string part = doc.substr(b, e - b);
    for (size_t at = part.find("<name>"); at != std::string::npos;
         at = part.find("<name>", at + 1)) {
      const size_t open = part.find('(', at);
      documented.push_back(part.substr(at + 6, open - at - 6));
    }
  }
  std::vector<std::string> declared;
#define GMMGEN_SUFFIX_(arg, ret, field, suffix, params) declared.push_back(#suffix);
  GMMGEN_ENTRY_POINTS(GMMGEN_SUFFIX_, ~)
#undef GMMGEN_SUFFIX_
  EXPECT_EQ(declared, documented);
}

}  // namespace
}  // namespace gmmgen
