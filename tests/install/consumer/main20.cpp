// The C++ API (C++20) through the shared library: what its headers declare is exported.
#include <kvflash/kvflash.h>

#include <cmath>
#include <cstdio>
#include <kvflash/formats.hpp>
#include <kvflash/registry.hpp>
#include <vector>

int main() {
  kvflash::AttentionProblem p;  // 32/8 heads, head dim 128
  p.k_type = kvflash::KvType::q8_0;
  p.v_type = kvflash::KvType::f16;
  p.kv_capacity = 64;
  const size_t k_row = kvflash::row_size(p.k_type, 128), v_row = kvflash::row_size(p.v_type, 128);
  const int64_t rows = p.kv_capacity * p.n_kv_heads;
  std::vector<float> x(128, 0.5f), q(32 * 128, 0.1f), out(32 * 128, -1.0f);
  std::vector<char> k(rows * k_row), v(rows * v_row);
  kvflash::quantize_rows(p.k_type, std::vector<float>(rows * 128, 0.5f).data(), rows, 128,
                         k.data());
  kvflash::quantize_rows(p.v_type, std::vector<float>(rows * 128, 0.5f).data(), rows, 128,
                         v.data());
  kvflash::AttentionTensors t;
  t.q = q.data();
  t.out = out.data();
  t.k = kvflash::kv_tensor_contiguous(k.data(), p.k_type, 128, p.n_kv_heads, p.kv_capacity);
  t.v = kvflash::kv_tensor_contiguous(v.data(), p.v_type, 128, p.n_kv_heads, p.kv_capacity);
  kvflash::PlanOptions opt;
  opt.select.backend = kvflash::Backend::cpu;
  auto plan = kvflash::plan(p, opt);
  if (!plan) {
    std::fprintf(stderr, "plan: %s\n", plan.error().message.c_str());
    return 1;
  }
  std::vector<char> workspace(plan->workspace_bytes);
  if (kvflash::Status s = kvflash::run(*plan, t, workspace.data()); !s) {
    std::fprintf(stderr, "run: %s\n", s.message().c_str());
    return 1;
  }
  for (float y : out) {
    if (std::fabs(y - 0.5f) > 1e-5f) {
      std::fprintf(stderr, "out = %g, expected 0.5\n", y);
      return 1;
    }
  }
  std::printf("kvflash %s (C++20, %s): ok\n", kvflash_version(), plan->kernel->name.c_str());
  return 0;
}
