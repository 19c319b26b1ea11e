// gmmgen._gmmgen: the pybind11 layer over libgmmgen_runtime.so. It takes tensor views that the
// pure-Python package (python/gmmgen/__init__.py) has already checked and described as
// (address, dtype code, shape, ld) tuples, builds gmmgen::TensorView's from them and calls the
// runtime with the GIL released. Array handling (numpy, DLPack, dtypes, allocation of outputs)
// lives in Python, where it is readable; this file only crosses the language boundary.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gmmgen/quantize.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/tune/tune.h"
#include "gmmgen/version.h"

namespace py = pybind11;
using namespace gmmgen;

namespace {

// (address, dtype code, shape, ld): one operand as __init__.py describes it.
using View = std::tuple<uintptr_t, int, std::vector<int64_t>, int64_t>;
// (scheme text, address of f32 scales, ld), or None.
using ScalesArg = std::optional<std::tuple<std::string, uintptr_t, int64_t>>;
using TilingArg = std::optional<std::vector<int64_t>>;
// A gmm call's quantize_lhs: (dtype code, scheme text, calibration text), or None.
using LhsQuantArg = std::optional<std::tuple<int, std::string, std::string>>;

TensorView to_view(const View& v, const char* name) {
  const auto& [addr, dtype, shape, ld] = v;
  if (shape.size() != 2 && shape.size() != 3)
    throw InvalidArgument(std::string(name) + " must be 2-D or 3-D, got " +
                          std::to_string(shape.size()) + "-D");
  TensorView t;
  t.data = reinterpret_cast<void*>(addr);
  t.dtype = DType(dtype);
  t.ndim = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  t.ld = ld;
  return t;
}

Scales to_scales(const ScalesArg& s) {
  if (!s) return {};
  const auto& [scheme, addr, ld] = *s;
  return {parse_quant_scheme(scheme), reinterpret_cast<const float*>(addr), ld};
}

std::optional<LhsQuantization> to_lhs_quantization(const LhsQuantArg& q) {
  if (!q) return std::nullopt;
  const auto& [dtype, scheme, calibration] = *q;
  return LhsQuantization{DType(dtype), parse_quant_scheme(scheme), parse_calibration(calibration)};
}

std::optional<Tiling> to_tiling(const std::vector<int64_t>& t, size_t at, const char* name) {
  if (t.size() < at + 3) throw InvalidArgument(std::string(name) + " has too few entries");
  if (t[at] == 0 && t[at + 1] == 0 && t[at + 2] == 0) return std::nullopt;
  return Tiling{t[at], t[at + 1], t[at + 2]};
}

std::optional<Tiling> to_tiling(const TilingArg& t) {
  if (!t) return std::nullopt;
  if (t->size() != 3)
    throw InvalidArgument("tiling must be (tm, tk, tn), got " + std::to_string(t->size()) +
                          " values");
  return to_tiling(*t, 0, "tiling");
}

std::span<const int32_t> to_sizes(uintptr_t addr, int64_t count) {
  return {reinterpret_cast<const int32_t*>(addr), size_t(count)};
}

// The process's runtime, created on first use from the environment (GMMGEN_CACHE_DIR,
// GMMGEN_NUM_THREADS, ...) or by configure(). Calls hold a shared_ptr, so configure() may swap it
// while another thread still runs a kernel on the old one. The last runtime is never destroyed:
// its pool's threads must not be joined during interpreter shutdown (a leak at exit, by intent).
std::mutex runtime_mutex;
std::shared_ptr<Runtime>* current_runtime = nullptr;

std::shared_ptr<Runtime> runtime() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (!current_runtime) current_runtime = new std::shared_ptr<Runtime>(std::make_shared<Runtime>());
  return *current_runtime;
}

void configure(const std::optional<std::string>& cache_dir, int num_threads,
               std::optional<bool> jit) {
  RuntimeOptions o;
  if (cache_dir) o.cache_dir = *cache_dir;
  if (num_threads < 0)
    throw InvalidArgument("num_threads=" + std::to_string(num_threads) + " must be >= 0");
  o.num_threads = num_threads;
  o.jit = jit;
  auto fresh = std::make_shared<Runtime>(o);
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (!current_runtime)
    current_runtime = new std::shared_ptr<Runtime>(std::move(fresh));
  else
    *current_runtime = std::move(fresh);
}

// A call's spec, validated as the runtime would before compiling it (dtypes, quantization,
// tiling): the package checks a call this way before it allocates the call's output.
std::string checked(const KernelSpec& spec) {
  validate(spec);
  return to_text(spec);
}

QuantizeOptions quant_options(int dtype, const std::string& scheme, int axis,
                              const std::string& calibration) {
  QuantizeOptions o;
  o.dtype = DType(dtype);
  o.scheme = parse_quant_scheme(scheme);
  o.axis = axis == 0 ? QuantAxis::kRows : QuantAxis::kCols;
  o.calibration = parse_calibration(calibration);
  return o;
}

// gmmgen.tune in this process (the tuning library): the sweep runs with the GIL released; each
// variant done is reported to `progress` (a callable taking a dict, or None) with the GIL held, and
// a Ctrl-C (a pending signal, or `progress` raising) stops the sweep and is raised here, nothing
// written. Returns what the run did; the package reads the table it wrote.
py::dict run_tune(const std::vector<std::string>& specs, int64_t m, const std::string& dist,
                  const std::string& space, const std::string& isa, int jobs, double budget,
                  int threads, int reps, const std::string& table, const std::string& csv,
                  const std::string& svg, py::object progress) {
  tune::Request rq;
  for (const auto& text : specs) rq.specs.push_back(parse_text(text));
  rq.m = m, rq.dist = dist, rq.jobs = jobs, rq.budget = budget, rq.reps = reps;
  if (!space.empty()) rq.space = tune::parse_space(space, "space");
  if (!isa.empty()) rq.isas = tune::parse_isa_list(isa, "isa");
  rq.table = table, rq.csv = csv, rq.svg = svg;
  RuntimeOptions ro;
  ro.cache_dir = runtime()->cache_dir();  // the package's cache, whose tables its calls read
  ro.num_threads = threads, ro.jit = true, ro.log = false;
  Runtime rt(ro);
  std::optional<py::error_already_set> raised;  // from a signal handler or from `progress`
  tune::Hooks hooks;
  hooks.progress.variant = [&](const tune::Variant& v, double heuristic, double best, double left) {
    py::gil_scoped_acquire gil;
    if (raised || progress.is_none()) return;
    try {
      py::dict d;
      d["problem"] = tuning::problem_text(v.spec);
      d["tiling"] = py::make_tuple(v.spec.tiling.tm, v.spec.tiling.tk, v.spec.tiling.tn);
      d["isa"] = std::string(to_string(v.spec.isa));
      d["heuristic"] = v.heuristic;
      d["state"] = tune::state_name(v.state);
      d["gflops"] = v.gflops;
      d["speedup"] = heuristic > 0 && v.gflops > 0 ? v.gflops / heuristic : 0.0;
      d["best_gflops"] = best;
      d["seconds_left"] = left;
      d["failure"] = v.failure;
      progress(d);
    } catch (py::error_already_set& e) {
      raised.emplace(std::move(e));
    }
  };
  hooks.progress.stop = [&] {
    py::gil_scoped_acquire gil;
    if (!raised && PyErr_CheckSignals() != 0) raised.emplace();
    return raised.has_value();
  };
  tune::Result r;
  {
    py::gil_scoped_release release;
    r = tune::run(rt, rq, hooks);
  }
  if (raised) throw std::move(*raised);
  py::dict out;
  out["table"] = r.table_path.string();
  out["entries_written"] = r.tuned.entries.size();
  out["mismatches"] = r.mismatches;
  out["unresolved"] = r.unresolved;
  out["seconds"] = r.seconds;
  py::list sweeps;
  for (const tune::Sweep& sw : r.sweeps) {
    py::dict d;
    d["problem"] = tuning::problem_text(sw.problem);
    d["candidates"] = sw.cands.variants.size();
    d["attempted"] = sw.attempted();
    d["stopped_by_budget"] = sw.stopped_by_budget;
    d["heuristic_gflops"] = sw.heuristic_gflops();
    d["best_gflops"] = sw.best() ? sw.best()->gflops : 0.0;
    sweeps.append(d);
  }
  out["sweeps"] = sweeps;
  return out;
}

}  // namespace

PYBIND11_MODULE(_gmmgen, m) {
  m.doc() = "gmm-gen runtime bindings (use the gmmgen package, not this module)";
  m.attr("__version__") = GMMGEN_VERSION;
  // Compile and cache failures keep their kind; bad arguments (gmmgen::InvalidArgument,
  // SpecError: std::invalid_argument) become ValueError through pybind11's own translation.
  py::register_exception<CompileError>(m, "CompileError", PyExc_RuntimeError);
  py::register_exception<CacheError>(m, "CacheError", PyExc_RuntimeError);
  py::register_exception<JitDisabledError>(m, "JitDisabledError", PyExc_RuntimeError);

  m.def("configure", &configure, py::arg("cache_dir"), py::arg("num_threads"), py::arg("jit"));
  m.def("tune", &run_tune, py::arg("specs"), py::arg("m"), py::arg("dist"), py::arg("space"),
        py::arg("isa"), py::arg("jobs"), py::arg("budget"), py::arg("threads"), py::arg("reps"),
        py::arg("table"), py::arg("csv"), py::arg("svg"), py::arg("progress"));
  m.def("cache_dir", [] { return runtime()->cache_dir().string(); });
  m.def("num_threads", [] { return runtime()->num_threads(); });
  m.def("stats", [] {
    const RuntimeStats s = runtime()->stats();
    py::dict d;
    d["lookups"] = s.lookups, d["registry_hits"] = s.registry_hits;
    d["memory_hits"] = s.memory_hits, d["disk_hits"] = s.disk_hits;
    d["compiles"] = s.compiles, d["rebuilds"] = s.rebuilds;
    d["compile_seconds"] = s.compile_seconds, d["disk_load_seconds"] = s.disk_load_seconds;
    return d;
  });

  // The DLPack tensor behind a "dltensor" capsule, read without consuming it: the capsule keeps
  // its producer's deleter, and the caller keeps the producing object alive while the address
  // is in use. Returns (address, (code, bits, lanes), shape, strides or None, (device type, id)).
  m.def("dlpack_info", [](py::capsule cap) {
    struct DLDevice {
      int32_t device_type, device_id;
    };
    struct DLDataType {
      uint8_t code, bits;
      uint16_t lanes;
    };
    struct DLTensor {
      void* data;
      DLDevice device;
      int32_t ndim;
      DLDataType dtype;
      int64_t* shape;
      int64_t* strides;
      uint64_t byte_offset;
    };
    if (std::string(cap.name() ? cap.name() : "") != "dltensor")
      throw InvalidArgument("__dlpack__() returned a capsule named '" +
                            std::string(cap.name() ? cap.name() : "") +
                            "', not an unused 'dltensor'");
    // DLManagedTensor starts with its DLTensor (every DLPack version before 1.0's versioned one).
    const auto* t = static_cast<const DLTensor*>(cap.get_pointer());
    std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
    py::object strides = py::none();
    if (t->strides) strides = py::cast(std::vector<int64_t>(t->strides, t->strides + t->ndim));
    const uintptr_t addr = reinterpret_cast<uintptr_t>(t->data) + uintptr_t(t->byte_offset);
    return py::make_tuple(
        addr, py::make_tuple(int(t->dtype.code), int(t->dtype.bits), int(t->dtype.lanes)), shape,
        strides, py::make_tuple(t->device.device_type, t->device.device_id));
  });

  m.def(
      "gmm_spec",
      [](const View& lhs, const View& rhs, uintptr_t sizes, int64_t num_groups, const View& out,
         bool transpose_rhs, int32_t group_offset, const TilingArg& tiling, bool existing,
         bool accumulate, const ScalesArg& lhs_scales, const ScalesArg& rhs_scales,
         const LhsQuantArg& quantize_lhs) {
        const TensorView o = to_view(out, "out");
        GmmOptions opt;
        opt.transpose_rhs = transpose_rhs, opt.group_offset = group_offset;
        opt.tiling = to_tiling(tiling);
        opt.existing_out = existing ? &o : nullptr;
        opt.accumulate = accumulate;
        opt.lhs_scales = to_scales(lhs_scales), opt.rhs_scales = to_scales(rhs_scales);
        opt.quantize_lhs = to_lhs_quantization(quantize_lhs);
        return checked(runtime()->gmm_spec(to_view(lhs, "lhs"), to_view(rhs, "rhs"),
                                           to_sizes(sizes, num_groups), o, opt));
      },
      py::arg("lhs"), py::arg("rhs"), py::arg("sizes"), py::arg("num_groups"), py::arg("out"),
      py::arg("transpose_rhs"), py::arg("group_offset"), py::arg("tiling"), py::arg("existing"),
      py::arg("accumulate"), py::arg("lhs_scales"), py::arg("rhs_scales"),
      py::arg("quantize_lhs") = py::none());

  m.def(
      "gmm",
      [](const View& lhs, const View& rhs, uintptr_t sizes, int64_t num_groups, const View& out,
         bool transpose_rhs, int32_t group_offset, const TilingArg& tiling,
         const std::optional<View>& existing, bool accumulate, const ScalesArg& lhs_scales,
         const ScalesArg& rhs_scales, const LhsQuantArg& quantize_lhs) {
        const TensorView l = to_view(lhs, "lhs"), r = to_view(rhs, "rhs"), o = to_view(out, "out");
        std::optional<TensorView> e;
        if (existing) e = to_view(*existing, "existing_out");
        GmmOptions opt;
        opt.transpose_rhs = transpose_rhs, opt.group_offset = group_offset;
        opt.tiling = to_tiling(tiling);
        opt.existing_out = e ? &*e : nullptr;
        opt.accumulate = accumulate;
        opt.lhs_scales = to_scales(lhs_scales), opt.rhs_scales = to_scales(rhs_scales);
        opt.quantize_lhs = to_lhs_quantization(quantize_lhs);
        std::shared_ptr<Runtime> rt = runtime();
        py::gil_scoped_release release;
        rt->gmm(l, r, to_sizes(sizes, num_groups), o, opt);
      },
      py::arg("lhs"), py::arg("rhs"), py::arg("sizes"), py::arg("num_groups"), py::arg("out"),
      py::arg("transpose_rhs"), py::arg("group_offset"), py::arg("tiling"), py::arg("existing_out"),
      py::arg("accumulate"), py::arg("lhs_scales"), py::arg("rhs_scales"),
      py::arg("quantize_lhs") = py::none());

  m.def(
      "tgmm_spec",
      [](const View& lhs, const View& rhs, uintptr_t sizes, int64_t num_groups, const View& out,
         bool lhs_transposed, bool transpose_out, int32_t group_offset, const TilingArg& tiling,
         bool existing, const ScalesArg& lhs_scales, const ScalesArg& rhs_scales) {
        const TensorView o = to_view(out, "out");
        TgmmOptions opt;
        opt.group_offset = group_offset;
        opt.lhs_transposed = lhs_transposed, opt.transpose_out = transpose_out;
        opt.tiling = to_tiling(tiling);
        opt.existing_out = existing ? &o : nullptr;
        opt.lhs_scales = to_scales(lhs_scales), opt.rhs_scales = to_scales(rhs_scales);
        return checked(runtime()->tgmm_spec(to_view(lhs, "lhs"), to_view(rhs, "rhs"),
                                            to_sizes(sizes, num_groups), o, opt));
      },
      py::arg("lhs"), py::arg("rhs"), py::arg("sizes"), py::arg("num_groups"), py::arg("out"),
      py::arg("lhs_transposed"), py::arg("transpose_out"), py::arg("group_offset"),
      py::arg("tiling"), py::arg("existing"), py::arg("lhs_scales"), py::arg("rhs_scales"));

  m.def(
      "tgmm",
      [](const View& lhs, const View& rhs, uintptr_t sizes, int64_t num_groups, const View& out,
         bool lhs_transposed, bool transpose_out, int32_t group_offset, const TilingArg& tiling,
         const std::optional<View>& existing, const ScalesArg& lhs_scales,
         const ScalesArg& rhs_scales) {
        const TensorView l = to_view(lhs, "lhs"), r = to_view(rhs, "rhs"), o = to_view(out, "out");
        std::optional<TensorView> e;
        if (existing) e = to_view(*existing, "existing_out");
        TgmmOptions opt;
        opt.group_offset = group_offset;
        opt.lhs_transposed = lhs_transposed, opt.transpose_out = transpose_out;
        opt.tiling = to_tiling(tiling);
        opt.existing_out = e ? &*e : nullptr;
        opt.lhs_scales = to_scales(lhs_scales), opt.rhs_scales = to_scales(rhs_scales);
        std::shared_ptr<Runtime> rt = runtime();
        py::gil_scoped_release release;
        rt->tgmm(l, r, to_sizes(sizes, num_groups), o, opt);
      },
      py::arg("lhs"), py::arg("rhs"), py::arg("sizes"), py::arg("num_groups"), py::arg("out"),
      py::arg("lhs_transposed"), py::arg("transpose_out"), py::arg("group_offset"),
      py::arg("tiling"), py::arg("existing_out"), py::arg("lhs_scales"), py::arg("rhs_scales"));

  m.def(
      "gmm_vjp",
      [](const View& dout, const View& lhs, const View& rhs, uintptr_t sizes, int64_t num_groups,
         const View& dlhs, const View& drhs, bool transpose_rhs, int32_t group_offset,
         const TilingArg& tiling, bool quant, const ScalesArg& lhs_scales,
         const ScalesArg& rhs_scales, int grad_dtype, int64_t grad_block) {
        const TensorView d = to_view(dout, "dout"), l = to_view(lhs, "lhs"),
                         r = to_view(rhs, "rhs"), dl = to_view(dlhs, "dlhs"),
                         dr = to_view(drhs, "drhs");
        GmmVjpOptions opt;
        opt.transpose_rhs = transpose_rhs, opt.group_offset = group_offset;
        if (tiling) {
          if (tiling->size() != 9)
            throw InvalidArgument(
                "tiling must have 9 values (tm, tk, tn of the forward, dlhs "
                "and drhs), got " +
                std::to_string(tiling->size()));
          opt.tiling = {to_tiling(*tiling, 0, "tiling"), to_tiling(*tiling, 3, "tiling"),
                        to_tiling(*tiling, 6, "tiling")};
        }
        // A quantized forward (GmmVjpOptions::quant): lhs as tgmm reads it (codes quantized
        // along M), the forward's rhs codes and scales, dout's codes (-1: dout stays f32).
        if (quant) {
          QuantVjp& q = opt.quant.emplace();
          q.lhs_scales = to_scales(lhs_scales), q.rhs_scales = to_scales(rhs_scales);
          q.grad_dtype = grad_dtype < 0 ? std::nullopt : std::optional<DType>(DType(grad_dtype));
          q.grad_block = grad_block;
        }
        std::shared_ptr<Runtime> rt = runtime();
        py::gil_scoped_release release;
        rt->gmm_vjp(d, l, r, to_sizes(sizes, num_groups), dl, dr, opt);
      },
      py::arg("dout"), py::arg("lhs"), py::arg("rhs"), py::arg("sizes"), py::arg("num_groups"),
      py::arg("dlhs"), py::arg("drhs"), py::arg("transpose_rhs"), py::arg("group_offset"),
      py::arg("tiling"), py::arg("quant"), py::arg("lhs_scales"), py::arg("rhs_scales"),
      py::arg("grad_dtype"), py::arg("grad_block"));

  // The quantizers on one [rows, cols] matrix; __init__.py loops over experts of a 3-D tensor.
  m.def("scale_shape", [](const std::string& scheme, int axis, int64_t rows, int64_t cols) {
    const ScaleShape s = scale_shape(parse_quant_scheme(scheme),
                                     axis == 0 ? QuantAxis::kRows : QuantAxis::kCols, rows, cols);
    return std::make_pair(s.rows, s.cols);
  });
  m.def("packed_codes_ld",
        [](int dtype, int64_t cols) { return packed_codes_ld(DType(dtype), cols); });
  m.def(
      "quantize",
      [](uintptr_t x, int64_t rows, int64_t cols, int64_t x_ld, int dtype,
         const std::string& scheme, int axis, const std::string& calibration, uintptr_t codes,
         int64_t codes_ld, uintptr_t scales) {
        // codes and scales are arrays the package made for this call and drops on an error:
        // x is read once, its values checked as they are encoded.
        QuantizeOptions o = quant_options(dtype, scheme, axis, calibration);
        o.check = ValueCheck::kWhileWriting;
        py::gil_scoped_release release;
        quantize(reinterpret_cast<const float*>(x), rows, cols, x_ld, o,
                 reinterpret_cast<void*>(codes), codes_ld, reinterpret_cast<float*>(scales), 0);
      },
      py::arg("x"), py::arg("rows"), py::arg("cols"), py::arg("x_ld"), py::arg("dtype"),
      py::arg("scheme"), py::arg("axis"), py::arg("calibration"), py::arg("codes"),
      py::arg("codes_ld"), py::arg("scales"));
  m.def(
      "dequantize",
      [](uintptr_t codes, int64_t codes_ld, uintptr_t scales, int64_t rows, int64_t cols, int dtype,
         const std::string& scheme, int axis, uintptr_t x) {
        const QuantizeOptions o = quant_options(dtype, scheme, axis, "absmax");
        py::gil_scoped_release release;
        dequantize(reinterpret_cast<const void*>(codes), codes_ld,
                   reinterpret_cast<const float*>(scales), 0, rows, cols, o,
                   reinterpret_cast<float*>(x), 0);
      },
      py::arg("codes"), py::arg("codes_ld"), py::arg("scales"), py::arg("rows"), py::arg("cols"),
      py::arg("dtype"), py::arg("scheme"), py::arg("axis"), py::arg("x"));
}
