// gmm-gen bench: kernel GFLOP/s side by side with a per-group baseline (docs/performance.md).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "bench_ab.h"
#include "commands.h"
#include "gmmgen/bench/bench.h"

namespace gmmgen::cli {
namespace {

struct BenchOptions {
  SpecOptions specs;
  KernelFilter filter;
  std::string shapes, dist = "uniform", baseline, json, quant;
  std::vector<std::string> ab;  // --ab SIDE_A SIDE_B
  int64_t m = 4096;
  int threads = 2, reps = 7;
  bool huge_pages = false;
  int offset = 0;                       // --offset
  CLI::Option* quant_option = nullptr;  // given at all (an empty --quant is an error)
};

// One row to run; a quantized row names the row of its float counterpart (run before it, and
// timed again beside it).
struct Job {
  KernelSpec spec;
  std::string tiling_source;  // to_string(TilingChoice)
  bench::Workload work;
  int float_job = -1;
  bool companion = false;  // only here as a quantized row's float counterpart
};

// Adds f, the float counterpart of a quantized job q, unless the list already has it, then q.
void add_quantized(std::vector<Job>& jobs, const Job& q, const Job& f) {
  auto same = [&](const Job& j) {
    return j.spec == f.spec && j.work.shape == f.work.shape && j.work.m == f.work.m &&
           j.work.group_sizes == f.work.group_sizes;
  };
  auto it = std::find_if(jobs.begin(), jobs.end(), same);
  int index = int(it - jobs.begin());
  if (it == jobs.end()) jobs.push_back(f), jobs.back().companion = true;
  jobs.push_back(q);
  jobs.back().float_job = index;
}

std::string dtypes_label(const bench::Row& r) {
  return bench::dtypes_label(r.lhs, r.lhs_quant, r.rhs, r.rhs_quant, r.out);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int run_bench(const BenchOptions& o) {
  bench::set_huge_pages(o.huge_pages);  // before any buffer, the bandwidth probe's included
  try {                                 // the library holds the rule; the message names the option
    bench::set_operand_offset(o.offset);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(std::string("--") + e.what());
  }
  bench::Options opt;
  opt.threads = o.threads, opt.reps = o.reps;
  if (!o.baseline.empty()) {
    opt.baseline = bench::parse_baseline(o.baseline);
  } else {  // the best one found at configure time
    opt.baseline =
        bench::baseline_available(bench::BaselineKind::kOneDnn)     ? bench::BaselineKind::kOneDnn
        : bench::baseline_available(bench::BaselineKind::kOpenBlas) ? bench::BaselineKind::kOpenBlas
                                                                    : bench::BaselineKind::kNone;
  }
  if (o.threads < 1 || o.threads > 4096) throw InvalidArgument("--threads must be in [1, 4096]");
  if (o.reps < 1) throw InvalidArgument("--reps must be >= 1");
  const bool quant = o.quant_option && o.quant_option->count() > 0;
  if (quant && o.shapes.empty())
    throw InvalidArgument(
        "--quant needs --shapes (it sets the dtypes of the standard shapes; a --spec names its "
        "own)");
  const std::vector<bench::QuantPreset> presets =
      quant ? bench::parse_quant_set(o.quant) : std::vector<bench::QuantPreset>{};
  // What to run: the standard shapes for gmm and tgmm in f32 and bf16 x bf16 -> f32 (with
  // --quant: gmm with each preset's dtypes, after its float counterpart), or the given specs on
  // --m rows split by --dist. Every quantized row runs after its float counterpart.
  std::vector<Job> jobs;
  RuntimeOptions ro;
  ro.num_threads = o.threads;
  Runtime rt(ro);
  // A row's tiling: as the runtime tiles the call (its tuning tables, else the heuristic; a table
  // entry's ISA family too, unless --isa is given), or the spec's own when it names one;
  // --tm/--tk/--tn given beside --shapes, --spec or --spec-file override the tiling chosen.
  const auto tiled = [&](KernelSpec spec, const bench::Workload& w, bool spec_tiling) {
    bool isa_flag = false, tile_flags = false;
    for (const auto& [key, value] : o.specs.flags)
      if (key == "isa") set_field(spec_field(key), spec, value), isa_flag = true;
    std::string how = "override";
    if (!spec_tiling) {
      const TilingChoice c = bench::workload_tiling(rt, spec, w);
      spec.tiling = c.tiling;
      if (c.isa && !isa_flag) spec.isa = *c.isa;
      how = to_string(c);
    }
    for (const auto& [key, value] : o.specs.flags)
      if (is_tiling_key(key)) set_field(spec_field(key), spec, value), tile_flags = true;
    return Job{spec, tile_flags ? "override" : how, w};
  };
  // Beside the standard shapes or given specs, the spec options are the family and the tiling of
  // every row (--isa, --tm, --tk, --tn); any other would be ignored, so it is an error.
  const bool specs_given = !o.specs.texts.empty() || !o.specs.files.empty();
  if (!o.shapes.empty() || specs_given)
    for (const auto& [key, value] : o.specs.flags)
      if (key != "isa" && key != "tm" && key != "tk" && key != "tn")
        throw InvalidArgument("--" + key + " with " +
                              (specs_given ? "--spec or --spec-file: the specs set it (they take "
                                             "--isa, --tm, --tk and --tn)"
                                           : "--shapes: the standard shapes set it (they take "
                                             "--isa, --tm, --tk and --tn; --quant sets the "
                                             "dtypes)"));
  if (!o.shapes.empty()) {
    // The standard shapes set every field but the family and the tiling.
    if (specs_given)
      throw InvalidArgument("--shapes runs the standard shapes: it takes no --spec or --spec-file");
    struct Kind {
      Op op;
      DType lhs, rhs, out;
    };
    const Kind kinds[] = {{Op::kGmm, DType::kF32, DType::kF32, DType::kF32},
                          {Op::kGmm, DType::kBF16, DType::kBF16, DType::kF32},
                          {Op::kTgmm, DType::kF32, DType::kF32, DType::kF32},
                          {Op::kTgmm, DType::kBF16, DType::kBF16, DType::kF32}};
    const auto names = o.shapes == "all" ? bench::standard_shape_names() : split(o.shapes);
    size_t candidates = 0;  // --filter applies to the rows' kernels (a quantized row's float
                            // counterpart runs with it, for `vs float`)
    if (!quant) {
      for (const Kind& k : kinds)
        for (const auto& name : names) {
          const bench::Shape s = bench::standard_shape(name, k.op, k.lhs, k.rhs, k.out);
          Job job = tiled(s.spec, s.work, false);
          ++candidates;
          if (o.filter.matches(job.spec)) jobs.push_back(std::move(job));
        }
    } else {
      // A quantized row beside its float counterpart, each tiled for its own problem (the
      // float kernel's tiling may differ).
      const auto add_row = [&](const KernelSpec& q, const bench::Workload& work) {
        const Job qj = tiled(q, work, false);
        ++candidates;
        if (o.filter.matches(qj.spec))
          add_quantized(jobs, qj, tiled(bench::float_counterpart(q), work, false));
      };
      for (const auto& name : names) {
        const bench::Shape s =
            bench::standard_shape(name, Op::kGmm, DType::kF32, DType::kF32, DType::kF32);
        for (const auto& p : presets) add_row(bench::with_quant(s.spec, p), s.work);
        // The weight gradients of the presets whose backward runs on codes (fp8-block), beside
        // gmm-gen's f32 tgmm.
        const bench::Shape t =
            bench::standard_shape(name, Op::kTgmm, DType::kF32, DType::kF32, DType::kF32);
        for (const auto& p : presets)
          if (const auto grad = bench::weight_gradient(t.spec, p)) add_row(*grad, t.work);
      }
    }
    if (jobs.empty()) o.filter.no_match(candidates);
  } else {
    // A spec that names no tiling runs at the runtime's for the workload (as a call would).
    // Spec options without --spec or --spec-file form the spec; beside them they override.
    SpecOptions given = o.specs;
    if (specs_given) given.flags.clear();
    const auto entries = given.entries();
    for (const SpecEntry& e : entries) {
      bench::Workload w;
      w.shape = "custom";
      w.m = o.m;
      w.group_sizes = bench::group_sizes(o.dist, int32_t(e.spec.g), o.m, 12345);
      const Job job = tiled(e.spec, w, e.tiling_given);
      if (!o.filter.matches(job.spec)) continue;
      if (bench::is_quantized(e.spec)) {
        KernelSpec f = bench::float_counterpart(e.spec);
        add_quantized(jobs, job, tiled(f, w, e.tiling_given));
      } else {
        jobs.push_back(job);
      }
    }
    if (jobs.empty()) o.filter.no_match(entries.size());
  }
  for (const auto& j : jobs) validate(j.spec);
  if (!o.ab.empty()) {
    std::vector<AbJob> ab_jobs;
    for (const Job& j : jobs)  // a float counterpart only serves `vs float`, which A/B has not
      if (!j.companion) ab_jobs.push_back({j.spec, j.work});
    return run_ab(o.ab, ab_jobs, ro, rt, opt, o.json);
  }
  bool any_quantized = false;
  size_t width = 16, tiling_width = 6;  // the dtypes and tiling columns
  // The tiling column: "512x1024x64 heuristic", "64x128x64 override" or "8x16x8 table 1", the
  // table entries numbered in a note below the rows.
  std::vector<std::string> tilings, entries;
  for (const auto& j : jobs) {
    bench::Row r;
    r.lhs = to_string(j.spec.lhs), r.rhs = to_string(j.spec.rhs), r.out = to_string(j.spec.out);
    r.lhs_quant = to_string(j.spec.lhs_quant), r.rhs_quant = to_string(j.spec.rhs_quant);
    width = std::max(width, dtypes_label(r).size());
    any_quantized |= bench::is_quantized(j.spec);
    const Tiling& t = j.spec.tiling;
    std::string label =
        std::to_string(t.tm) + "x" + std::to_string(t.tk) + "x" + std::to_string(t.tn) + " ";
    if (j.tiling_source.rfind("table ", 0) == 0) {
      auto it = std::find(entries.begin(), entries.end(), j.tiling_source);
      if (it == entries.end()) it = entries.insert(it, j.tiling_source);
      label += "table " + std::to_string(it - entries.begin() + 1);
    } else {
      label += j.tiling_source;
    }
    tiling_width = std::max(tiling_width, label.size());
    tilings.push_back(std::move(label));
  }

  bench::Machine machine = bench::describe_machine(o.threads);
  std::vector<KernelSpec> specs;
  for (const auto& j : jobs) specs.push_back(j.spec);
  bench::measure_paths(machine, specs);
  std::printf(
      "cpu:       %s\nisa:       %s\ncompiler:  %s\nthreads:   %d\npeak:      %.1f GFLOP/s "
      "(f32 FMA, measured)\n",
      machine.cpu.c_str(), machine.isa.c_str(), machine.compiler.c_str(), machine.threads,
      machine.peak_gflops);
  std::vector<std::string> keys;
  for (const auto& s : specs)
    if (std::find(keys.begin(), keys.end(), bench::path_key(s)) == keys.end())
      keys.push_back(bench::path_key(s));
  for (const std::string& key : keys) {
    if (const double gflops = machine.path_peak(key); gflops > 0)
      std::printf("path peak: %.1f GFLOP/s (%s, measured)\n", gflops, key.c_str());
    else
      std::printf("path peak: - (%s, not measured)\n", key.c_str());
  }
  std::printf(
      "bandwidth: %.1f GB/s (DRAM read, measured)\npages:     %s\noffset:    %s\nbaseline:  %s\n\n",
      machine.bandwidth_gbs, machine.pages.c_str(),
      bench::describe_offset(machine.operand_offset).c_str(),
      bench::to_string(opt.baseline).c_str());
  const int w = int(width), tw = int(tiling_width);
  std::printf("%-5s %-5s %-*s %10s %10s %10s %7s %7s %-9s %7s %7s %-7s%s  %-*s  %s\n", "shape",
              "op", w, "lhs x rhs -> out", "ms", "GFLOP/s", "base GF/s", "ratio", "% peak", "path",
              "% path", "% roof", "bound", any_quantized ? " vs float" : "", tw, "tiling", "check");
  std::fflush(stdout);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<bench::Row> done;
  std::vector<std::string> no_baseline;  // why rows have no baseline, each reason once
  int failures = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const char* tiling = tilings[i].c_str();
    // Quantized: gmm-gen's kernel on the float operands is timed again beside this one (round
    // robin), for `vs float`; its own row, run before, vouches for its output.
    const KernelSpec* float_spec = j.float_job >= 0 ? &jobs[size_t(j.float_job)].spec : nullptr;
    bench::Row r = bench::run(rt, j.spec, j.work, opt, machine, float_spec);
    r.tiling_source = j.tiling_source;
    if (float_spec && !done[size_t(j.float_job)].ok) r.float_gflops = r.vs_float = 0;
    const std::string dtypes = dtypes_label(r);
    std::string vs;
    if (any_quantized) {
      char buf[16] = "";
      if (r.vs_float > 0) std::snprintf(buf, sizeof buf, "%.2f", r.vs_float);
      vs = " " + std::string(8 - std::min<size_t>(8, std::strlen(buf)), ' ') + buf;
    }
    if (r.ok) {
      // No baseline timed (none asked, or the baseline cannot run this problem here): "-".
      char base[16] = "-", ratio[16] = "-";
      if (r.baseline_gflops > 0) {
        std::snprintf(base, sizeof base, "%.1f", r.baseline_gflops);
        std::snprintf(ratio, sizeof ratio, "%.2f", r.ratio);
      } else if (opt.baseline != bench::BaselineKind::kNone &&
                 std::find(no_baseline.begin(), no_baseline.end(), r.baseline) ==
                     no_baseline.end()) {
        no_baseline.push_back(r.baseline);
      }
      // The path's peak and the roofline where measured, "-" otherwise.
      char path_pct[16] = "-", roof_pct[16] = "-";
      if (r.path_peak_gflops > 0)
        std::snprintf(path_pct, sizeof path_pct, "%.1f%%", 100 * r.path_fraction);
      if (!r.bound.empty())
        std::snprintf(roof_pct, sizeof roof_pct, "%.1f%%", 100 * r.roofline_fraction);
      std::printf("%-5s %-5s %-*s %10.3f %10.1f %10s %7s %6.1f%% %-9s %7s %7s %-7s%s  %-*s  ok\n",
                  r.shape.c_str(), r.op.c_str(), w, dtypes.c_str(), r.ms, r.gflops, base, ratio,
                  100 * r.peak_fraction, r.path.c_str(), path_pct, roof_pct,
                  r.bound.empty() ? "-" : r.bound.c_str(), vs.c_str(), tw, tiling);
    } else {
      ++failures;  // a wrong kernel reports no speed
      std::printf("%-5s %-5s %-*s %10s %10s %10s %7s %7s %-9s %7s %7s %-7s%s  %-*s  MISMATCH: %s\n",
                  r.shape.c_str(), r.op.c_str(), w, dtypes.c_str(), "-", "-", "-", "-", "-",
                  r.path.c_str(), "-", "-", "-", vs.c_str(), tw, tiling, r.failure.c_str());
    }
    std::fflush(stdout);
    done.push_back(std::move(r));
  }
  // Rows whose kernel reads quantized activations, end to end from f32 activations.
  bool e2e_header = false;
  for (const bench::Row& r : done) {
    if (!r.ok || r.end_to_end_ms <= 0) continue;
    if (!e2e_header) {
      std::printf(
          "\nend to end: f32 activations, quantized alone in one pass (gmmgen_quantize_one_pass: "
          "quant ms), and "
          "quantized in the gmm call (quantize_lhs: e2e; from bf16 activations: e2e bf16)\n"
          "%-5s %-5s %-*s %10s %7s %6s %10s %10s %10s %7s %9s %11s\n",
          "shape", "op", w, "lhs x rhs -> out", "quant ms", "GB/s", "% bw", "kernel ms", "e2e ms",
          "e2e GF/s", "ratio", "vs float", "e2e bf16 ms");
      e2e_header = true;
    }
    char bw[16] = "-", ratio[16] = "-", vs[16] = "-";
    if (r.quantize_bandwidth_fraction > 0)
      std::snprintf(bw, sizeof bw, "%.0f%%", 100 * r.quantize_bandwidth_fraction);
    if (r.end_to_end_ratio > 0) std::snprintf(ratio, sizeof ratio, "%.2f", r.end_to_end_ratio);
    if (r.end_to_end_vs_float > 0) std::snprintf(vs, sizeof vs, "%.2f", r.end_to_end_vs_float);
    std::printf("%-5s %-5s %-*s %10.3f %7.2f %6s %10.3f %10.3f %10.1f %7s %9s %11.3f\n",
                r.shape.c_str(), r.op.c_str(), w, dtypes_label(r).c_str(), r.quantize_ms,
                r.quantize_gbs, bw, r.ms, r.end_to_end_ms, r.end_to_end_gflops, ratio, vs,
                r.end_to_end_bf16_ms);
  }
  for (size_t i = 0; i < no_baseline.size(); ++i)
    std::printf("%sno baseline: %s\n", i ? "" : "\n", no_baseline[i].c_str());
  for (size_t i = 0; i < entries.size(); ++i)
    std::printf("%stable %zu: %s\n", i ? "" : "\n", i + 1, entries[i].c_str() + 6);
  // The f32 FMA peak and the read bandwidth are measured again after the rows: on a shared VM a
  // second at the start can lose a core (a clang++ run here once measured 117 of 234 GFLOP/s), and
  // the bandwidth moves with the neighbours' traffic (26 to 44 GB/s in two runs of a Zen 4 VM).
  // The higher of each pair is the machine's; the JSON takes it, and the table says when it
  // differs.
  // Takes `again` where it is over 5% above `at_start`, saying so after the tables.
  const auto take_higher = [](double& at_start, double again, const char* label, const char* unit,
                              const char* used_by) {
    if (again <= at_start * 1.05) return false;
    std::printf(
        "\n%-10s %.1f %s measured after the rows (%.1f at the start, which %s above used; the "
        "JSON uses %.1f)\n",
        label, again, unit, at_start, used_by, again);
    at_start = again;
    return true;
  };
  // machine.peak_gflops is also the host family's f32 FMA path peak (path_peak).
  bool remeasured =
      take_higher(machine.peak_gflops, bench::measure_peak_gflops(o.threads), "peak:", "GFLOP/s",
                  "% peak and the host family's f32-fma % path and % roof");
  if (machine.bandwidth_gbs > 0)
    remeasured |= take_higher(machine.bandwidth_gbs, bench::measure_read_bandwidth_gbs(o.threads),
                              "bandwidth:", "GB/s", "% roof, bound and % bw");
  if (remeasured)
    for (size_t i = 0; i < done.size(); ++i)
      bench::set_machine_figures(done[i], machine, bench::path_key(jobs[i].spec));
  for (const bench::Row& r : done) rows.push_back(r.to_json());
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << nlohmann::ordered_json{{"machine", machine.to_json()}, {"rows", rows}}.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + o.json);
  }
  return failures ? 1 : 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time kernels beside a per-group oneDNN/OpenBLAS baseline; GFLOP/s, ratio, % peak");
  o->specs.add_to(*cmd);
  o->filter.add_to(*cmd);
  cmd->add_option(
      "--shapes", o->shapes,
      "Standard shapes (docs/performance.md): S1,S2,S3,S4 or all; runs gmm and tgmm, f32 and "
      "bf16 x bf16 -> f32, on each");
  o->quant_option =
      cmd->add_option("--quant", o->quant,
                      "With --shapes: gmm with quantized operands instead, each beside gmm-gen's "
                      "float kernel (`vs float`): `default` or a comma list of presets "
                      "(bf16-fp8-block, bf16-int8-channel, bf16-int4-block, bf16-nf4-block, "
                      "bf16-t2-channel, f32-int8-channel, fp8-block, int8-channel) and "
                      "LHS[@SCHEME]/RHS[@SCHEME] pairs (e.g. bf16/i4@block:128); with fp8 "
                      "activations in blocks (fp8-block) also their weight gradient, tgmm "
                      "f8e4m3@block:B x f8e5m2@block:B");
  cmd->add_option("--m", o->m, "Rows M for --spec runs [4096]");
  cmd->add_option("--dist", o->dist,
                  "Group sizes for --spec runs: uniform | zipf | tiny | decode | sizes:a,b,... "
                  "[uniform]");
  cmd->add_option("--threads", o->threads, "Threads of the kernel and of the baseline [2]");
  cmd->add_option("--reps", o->reps, "Timed runs after warm-up; the median is reported [7]");
  cmd->add_option("--baseline", o->baseline,
                  "onednn | openblas | none [the first found at configure time]");
  cmd->add_option("--ab", o->ab,
                  "A/B: time two kernels of each row in alternating rounds (--reps of them, "
                  "rounded up to even) and print B/A per pair of rounds, its median and "
                  "25th-75th percentiles, instead of the baseline "
                  "table. Each side: this | tiling=TMxTKxTN | cxx=COMPILER | the path of another "
                  "gmm-gen or of its build folder (its kernel, compiled here)")
      ->expected(2);
  cmd->add_flag("--huge-pages", o->huge_pages,
                "Operands (and the bandwidth probe's buffer) on 2 MiB pages where the OS grants "
                "transparent huge pages on request (madvise), to tell TLB walks from the kernel's "
                "own cost; the header's `pages` line says what was asked and the OS's THP mode");
  cmd->add_option("--offset", o->offset,
                  "Operands and outputs start this many bytes past a 64-byte boundary: 0, 16, 32 "
                  "or 48 (numpy's large arrays start 16 bytes past one) [0]");
  cmd->add_option("--json", o->json,
                  "Also write {\"machine\": {...}, \"rows\": [...]} to this file");
  cmd->footer(
      "Each row: warm-up, then --reps rounds of one run of the kernel and one of the baseline\n"
      "(one oneDNN matmul or OpenBLAS sgemm per group, weights [K, N]) in turn, the median of\n"
      "each reported; both outputs are checked against a float64 reference on sampled outputs\n"
      "and against each other; a row that fails reports no speed and the command exits 1.\n"
      "% peak is of the f32 FMA peak measured at start; % path of the peak of the row's\n"
      "own instruction path (the `path` column: f32 FMA, bf16 dot, integer dot or AMX tiles,\n"
      "and the ISA family that runs them; measured at start); % roof of its roofline, the\n"
      "larger of flops / path peak and bytes / DRAM read bandwidth (bytes from the kernel's\n"
      "cost model: weights, activations, scales, output); `bound` names the larger term\n"
      "(compute or memory). The f32 FMA peak and the bandwidth are measured again after the\n"
      "rows: where either is over 5% higher, a last line says so and the JSON uses it.\n"
      "tiling: as the runtime would tile the call (its tuning tables, then the heuristic), unless\n"
      "the spec names one or --tm/--tk/--tn are given (override); `table N` is listed below the\n"
      "rows. Set GMMGEN_TUNING_DIR to use other tables, as for any call.\n"
      "Quantized rows (--quant, or a quantized --spec): random floats quantized by absmax with\n"
      "the library's quantizers; the baseline runs on both operands dequantized to the\n"
      "activation dtype (bf16 when lhs is bf16, else f32); `vs float` is the row's GFLOP/s over\n"
      "gmm-gen's kernel with both operands in that dtype, timed in the same rounds. Rows with\n"
      "integer or fp8 activations on isa=native also time the quantizer and the call that\n"
      "quantizes f32 (and bf16) activations itself (the end-to-end table).\n"
      "Example:\n  gmm-gen bench --shapes all --threads 2 --json bench.json\n"
      "  gmm-gen bench --shapes S1,S3 --quant default\n"
      "  gmm-gen bench --shapes all --filter 'gmm_bf16*'\n"
      "  gmm-gen bench --spec op=gmm,lhs=bf16,rhs=bf16,out=f32,k=2048,n=1408,g=64 --m 8192 "
      "--dist zipf");
  return {cmd, [o] { return run_bench(*o); }};
}

}  // namespace gmmgen::cli
