// The C API from C++17: kvflash.h must compile as C++17 (an engine that cannot take C++20).
#include <kvflash/kvflash.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

static_assert(__cplusplus >= 201703L && __cplusplus < 202002L, "built as C++17");

int main() {
  kvflash_problem p = kvflash_problem_default();
  p.k_type = kvflash_type_from_name("q4_0");
  p.v_type = KVFLASH_TYPE_F16;
  p.n_q_heads = 8;
  p.n_kv_heads = 2;
  p.kv_capacity = 64;
  const int64_t rows = p.kv_capacity * p.n_kv_heads;
  const size_t k_row = kvflash_row_size(p.k_type, 128), v_row = kvflash_row_size(p.v_type, 128);
  std::vector<char> k(rows * k_row), v(rows * v_row);
  std::vector<float> x(128, 0.25f), q(8 * 128, 0.1f), out(8 * 128, -1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    kvflash_quantize(p.k_type, x.data(), 128, k.data() + r * k_row);
    kvflash_quantize(p.v_type, x.data(), 128, v.data() + r * v_row);
  }
  kvflash_tensors t{};
  t.q = q.data();
  t.out = out.data();
  kvflash_kv_tensor_contiguous(k.data(), p.k_type, 128, p.n_kv_heads, p.kv_capacity, &t.k);
  kvflash_kv_tensor_contiguous(v.data(), p.v_type, 128, p.n_kv_heads, p.kv_capacity, &t.v);
  kvflash_options o = kvflash_options_default();
  if (kvflash_attention(&p, &t, &o) != KVFLASH_OK) {
    std::fprintf(stderr, "kvflash: %s\n", kvflash_last_error());
    return 1;
  }
  // Every V row is 0.25 (exact in f16): the output is 0.25 whatever the weights.
  for (float y : out) {
    if (std::fabs(y - 0.25f) > 1e-5f) {
      std::fprintf(stderr, "out = %g, expected 0.25\n", y);
      return 1;
    }
  }
  std::printf("kvflash %s (C++17, C API): ok\n", kvflash_version());
  return 0;
}
