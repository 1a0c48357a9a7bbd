/* The C API from C11: version, formats, attention on host buffers (CPU kernels), errors. Exits 0
 * when every check passes; also built by hand with pkg-config (tests/install/). */
#include <kvflash/kvflash.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", KVFLASH_VERSION_MAJOR, KVFLASH_VERSION_MINOR,
           KVFLASH_VERSION_PATCH);
  if (strcmp(version, kvflash_version()) != 0) {
    fprintf(stderr, "header version %s, library version %s\n", version, kvflash_version());
    return 1;
  }
  kvflash_problem p = kvflash_problem_default(); /* 32/8 heads, head dim 128, causal */
  p.k_type = KVFLASH_TYPE_Q8_0;
  p.v_type = KVFLASH_TYPE_TURBO4;
  p.kv_capacity = 256;
  const int64_t rows = p.kv_capacity * p.n_kv_heads;
  const size_t k_row = kvflash_row_size(p.k_type, 128), v_row = kvflash_row_size(p.v_type, 128);
  char* k = malloc((size_t)rows * k_row);
  char* v = malloc((size_t)rows * v_row);
  static float x[128], q[32 * 128], out[32 * 128];
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < 128; ++i) x[i] = (float)((r * 31 + i * 7) % 17) / 17.0f - 0.5f;
    kvflash_quantize(p.k_type, x, 128, k + r * (int64_t)k_row);
    kvflash_quantize(p.v_type, x, 128, v + r * (int64_t)v_row);
  }
  for (int i = 0; i < 32 * 128; ++i) q[i] = (float)(i % 13) / 13.0f - 0.5f;
  kvflash_tensors t;
  memset(&t, 0, sizeof t);
  t.q = q;
  t.out = out;
  kvflash_kv_tensor_contiguous(k, p.k_type, 128, p.n_kv_heads, p.kv_capacity, &t.k);
  kvflash_kv_tensor_contiguous(v, p.v_type, 128, p.n_kv_heads, p.kv_capacity, &t.v);
  kvflash_options o = kvflash_options_default();
  o.backend = KVFLASH_BACKEND_CPU;
  if (kvflash_attention(&p, &t, &o) != KVFLASH_OK) {
    fprintf(stderr, "kvflash: %s\n", kvflash_last_error());
    return 1;
  }
  for (int i = 0; i < 32 * 128; ++i) {
    if (!isfinite(out[i]) || fabsf(out[i]) > 1.0f) {
      fprintf(stderr, "out[%d] = %g: not a mean of values near [-0.5, 0.5]\n", i, out[i]);
      return 1;
    }
  }
  /* Errors are values with a message naming the field. */
  p.n_kv_heads = 7;
  if (kvflash_attention(&p, &t, &o) != KVFLASH_ERROR_INVALID_ARGUMENT ||
      strstr(kvflash_last_error(), "n_kv_heads") == NULL) {
    fprintf(stderr, "expected an invalid_argument error naming n_kv_heads, got \"%s\"\n",
            kvflash_last_error());
    return 1;
  }
  printf("kvflash %s (C): out[0] = %.4f\n", kvflash_version(), out[0]);
  free(k);
  free(v);
  return 0;
}
