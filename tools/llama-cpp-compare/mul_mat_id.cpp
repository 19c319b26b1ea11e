// Times llama.cpp's MoE matmul, ggml_mul_mat_id on ggml's CPU backend, on one grouped problem:
// f32 activations in (ggml quantizes them to its weights' dot-product type inside the call, as
// llama.cpp's inference does), f32 out, weights [G][N][K] quantized from random normals. Built and
// run by compare.sh beside `gmm-gen bench`, on the group sizes the bench's row ran on.
//
// usage: mul_mat_id K N TYPE REPACK THREADS REPS SIZES
//   TYPE q4_0 or q8_0; REPACK 1 puts the weights in ggml's CPU_REPACK buffer (interleaved rows,
//   what llama.cpp loads them into where the CPU has a kernel for it), 0 in a plain one; SIZES the
//   rows of each group, comma-separated (each row multiplies its own group's weights).
// Prints the median and quartiles of REPS timed calls after two warm-up calls, in ms; exits 3
// where ggml has no CPU_REPACK layout for TYPE on this CPU.
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

int fail(const char* msg) {
  std::fprintf(stderr, "mul_mat_id: %s\n", msg);
  return 1;
}

// "a,b,c" as non-negative integers; empty on a malformed list.
std::vector<int32_t> parse_sizes(const char* text) {
  std::vector<int32_t> sizes;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < 0 || (*end && *end != ',')) return {};
    sizes.push_back(int32_t(v));
    p = *end ? end + 1 : end;
  }
  return sizes;
}

// The CPU backend's buffer type named `name` among its extra ones, or nullptr.
ggml_backend_buffer_type_t extra_buffer_type(ggml_backend_t cpu, const std::string& name) {
  ggml_backend_dev_t dev = ggml_backend_get_device(cpu);
  auto get = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(ggml_backend_reg_get_proc_address(
      ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts"));
  for (ggml_backend_buffer_type_t* b = get ? get(dev) : nullptr; b && *b; ++b)
    if (name == ggml_backend_buft_name(*b)) return *b;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) return fail("usage: mul_mat_id K N TYPE REPACK THREADS REPS SIZES");
  const int64_t k = std::atoll(argv[1]), n = std::atoll(argv[2]);
  const std::string type_name = argv[3];
  const bool repack = std::strcmp(argv[4], "1") == 0;
  const int threads = std::atoi(argv[5]), reps = std::atoi(argv[6]);
  const std::vector<int32_t> sizes = parse_sizes(argv[7]);
  if (k < 32 || k % 32 || n < 1) return fail("K must be a positive multiple of 32, N >= 1");
  if (type_name != "q4_0" && type_name != "q8_0") return fail("TYPE must be q4_0 or q8_0");
  if (threads < 1 || reps < 1) return fail("THREADS and REPS must be >= 1");
  if (sizes.empty()) return fail("SIZES must be a comma-separated list of group sizes >= 0");
  const ggml_type type = type_name == "q4_0" ? GGML_TYPE_Q4_0 : GGML_TYPE_Q8_0;
  const int64_t g = int64_t(sizes.size());
  std::vector<int32_t> ids;  // each row's group, the rows grouped as gmm-gen's are
  for (int64_t j = 0; j < g; ++j) ids.insert(ids.end(), size_t(sizes[j]), int32_t(j));
  const int64_t rows = int64_t(ids.size());
  if (rows == 0) return fail("SIZES must hold at least one row");

  ggml_backend_t cpu = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(cpu, threads);
  ggml_backend_buffer_type_t weight_buft = ggml_backend_cpu_buffer_type();
  if (repack && !(weight_buft = extra_buffer_type(cpu, "CPU_REPACK")))
    return fail("this ggml has no CPU_REPACK buffer type");

  // Weights: ne0 = K, ne1 = N, ne2 = G (rows of K: llama.cpp's layout), set through the buffer
  // (a CPU_REPACK buffer interleaves them as they are set).
  ggml_init_params weight_params = {ggml_tensor_overhead(), nullptr, true};
  ggml_context* weight_ctx = ggml_init(weight_params);
  ggml_tensor* weights = ggml_new_tensor_3d(weight_ctx, type, k, n, g);
  ggml_backend_buffer_t weight_buf =
      ggml_backend_alloc_ctx_tensors_from_buft(weight_ctx, weight_buft);
  if (!weight_buf) return fail("cannot allocate the weights");
  if (repack && !weights->extra) {  // CPU_REPACK holds it, but has no kernel for it on this CPU
    std::fprintf(stderr, "mul_mat_id: no CPU_REPACK layout for %s here\n", type_name.c_str());
    return 3;
  }
  {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.f, 0.05f);
    std::vector<float> values(size_t(k * n));
    std::vector<char> codes(ggml_nbytes(weights));
    const size_t group_bytes = ggml_row_size(type, k) * size_t(n);
    for (int64_t j = 0; j < g; ++j) {
      for (float& v : values) v = normal(rng);
      ggml_quantize_chunk(type, values.data(), codes.data() + j * group_bytes, 0, n, k, nullptr);
    }
    ggml_backend_tensor_set(weights, codes.data(), 0, codes.size());
  }

  // Activations: ne0 = K, ne1 = 1 group per row, ne2 = rows; ids: ne0 = 1, ne1 = rows.
  ggml_init_params params = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, 1, rows);
  ggml_tensor* row_ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, rows);
  ggml_tensor* out = ggml_mul_mat_id(ctx, weights, x, row_ids);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
  if (!buf) return fail("cannot allocate the activations");
  {
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    std::vector<float> values(size_t(k * rows));
    for (float& v : values) v = uniform(rng);
    ggml_backend_tensor_set(x, values.data(), 0, values.size() * sizeof(float));
    ggml_backend_tensor_set(row_ids, ids.data(), 0, ids.size() * sizeof(int32_t));
  }

  std::vector<double> ms;
  for (int r = 0; r < reps + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (ggml_backend_graph_compute(cpu, graph) != GGML_STATUS_SUCCESS)
      return fail("compute failed");
    const auto t1 = std::chrono::steady_clock::now();
    if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%.3f %.3f %.3f\n", ms[ms.size() / 2], ms[ms.size() / 4], ms[ms.size() * 3 / 4]);

  ggml_backend_buffer_free(buf);
  ggml_backend_buffer_free(weight_buf);
  ggml_free(ctx);
  ggml_free(weight_ctx);
  ggml_backend_free(cpu);
  return 0;
}
