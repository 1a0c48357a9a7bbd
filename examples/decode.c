/* kvflash from C: one decode step over a q8_0/q4_0 KV cache, on the CPU and, where a CUDA device
 * is present, on the GPU through the device KV cache, with the plan/run split an engine uses.
 *
 *   cc -std=c11 decode.c $(pkg-config --cflags --libs kvflash) -o decode && ./decode
 *
 * Prints the kernel that served each path and how far the two outputs are apart. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvflash/kvflash.h"

enum { N_Q_HEADS = 32, N_KV_HEADS = 8, HEAD_DIM = 128, CAPACITY = 4096 };

#define CHECK(call)                                                                 \
  do {                                                                              \
    int status_ = (call);                                                           \
    if (status_ != KVFLASH_OK) {                                                    \
      fprintf(stderr, "%s failed: %s: %s\n", #call, kvflash_status_string(status_), \
              kvflash_last_error());                                                \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

/* Gaussian-ish values from a fixed-seed generator (sum of uniforms). */
static float next_value(unsigned long long* state) {
  float sum = 0.0f;
  for (int i = 0; i < 4; ++i) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    sum += (float)(*state >> 40) / (float)(1ULL << 24) - 0.5f;
  }
  return sum * 1.7f;
}

static float* random_floats(size_t n, unsigned long long seed) {
  float* x = malloc(n * sizeof(float));
  if (x == NULL) exit(1);
  for (size_t i = 0; i < n; ++i) x[i] = next_value(&seed);
  return x;
}

/* Quantizes rows of HEAD_DIM floats, row after row, into a host cache of `type`. */
static void* quantize_cache(kvflash_type type, const float* rows, size_t n_rows) {
  const size_t row_bytes = kvflash_row_size(type, HEAD_DIM);
  unsigned char* cache = malloc(n_rows * row_bytes);
  if (cache == NULL) exit(1);
  for (size_t r = 0; r < n_rows; ++r)
    CHECK(kvflash_quantize(type, rows + r * HEAD_DIM, HEAD_DIM, cache + r * row_bytes));
  return cache;
}

int main(void) {
  kvflash_problem p = kvflash_problem_default();
  p.n_q_heads = N_Q_HEADS;
  p.n_kv_heads = N_KV_HEADS;
  p.head_dim.k = p.head_dim.v = HEAD_DIM;
  p.k_type = KVFLASH_TYPE_Q8_0;
  p.v_type = KVFLASH_TYPE_Q4_0;
  p.kv_capacity = CAPACITY;

  /* K and V of one sequence, (token, head, dim), and one query token. */
  const size_t n_rows = (size_t)CAPACITY * N_KV_HEADS;
  float* k_rows = random_floats(n_rows * HEAD_DIM, 1);
  float* v_rows = random_floats(n_rows * HEAD_DIM, 2);
  float* q = random_floats((size_t)N_Q_HEADS * HEAD_DIM, 3);
  float* out_cpu = calloc((size_t)N_Q_HEADS * HEAD_DIM, sizeof(float));
  float* out_gpu = calloc((size_t)N_Q_HEADS * HEAD_DIM, sizeof(float));
  if (out_cpu == NULL || out_gpu == NULL) return 1;

  /* ---- CPU: host buffers, a plan made once, run per step. */
  void* k_cache = quantize_cache(p.k_type, k_rows, n_rows);
  void* v_cache = quantize_cache(p.v_type, v_rows, n_rows);
  kvflash_tensors t;
  memset(&t, 0, sizeof t);
  t.q = q;
  t.out = out_cpu;
  CHECK(kvflash_kv_tensor_contiguous(k_cache, p.k_type, HEAD_DIM, N_KV_HEADS, CAPACITY, &t.k));
  CHECK(kvflash_kv_tensor_contiguous(v_cache, p.v_type, HEAD_DIM, N_KV_HEADS, CAPACITY, &t.v));

  kvflash_options cpu = kvflash_options_default();
  cpu.backend = KVFLASH_BACKEND_CPU;
  kvflash_plan* plan = NULL;
  CHECK(kvflash_plan_create(&p, &cpu, &plan));
  void* workspace = malloc(kvflash_plan_workspace_size(plan) + 1);
  CHECK(kvflash_run(plan, &t, workspace, NULL));
  printf("cpu:  %-22s out[0..2] = %+.5f %+.5f %+.5f\n", kvflash_plan_kernel_name(plan), out_cpu[0],
         out_cpu[1], out_cpu[2]);
  kvflash_plan_destroy(plan);
  free(workspace);

  /* ---- CUDA: the device KV cache, rows appended and quantized on the device. */
  if (kvflash_cuda_device_count() == 0) {
    printf("cuda: no device (or a build without CUDA): skipped\n");
  } else {
    void* stream = NULL;
    CHECK(kvflash_cuda_stream_create(&stream));
    const kvflash_type k_types[1] = {KVFLASH_TYPE_Q8_0}, v_types[1] = {KVFLASH_TYPE_Q4_0};
    kvflash_kv_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_seqs = 1;
    cfg.n_kv_heads = N_KV_HEADS;
    cfg.head_dim = p.head_dim;
    cfg.n_layers = 1;
    cfg.k_types = k_types;
    cfg.v_types = v_types;
    cfg.capacity = CAPACITY;
    kvflash_kv_cache* cache = NULL;
    CHECK(kvflash_kv_cache_create(&cfg, stream, &cache));

    const size_t kv_bytes = n_rows * HEAD_DIM * sizeof(float);
    const size_t q_bytes = (size_t)N_Q_HEADS * HEAD_DIM * sizeof(float);
    float *d_k = NULL, *d_v = NULL, *d_q = NULL, *d_out = NULL;
    CHECK(kvflash_cuda_malloc((void**)&d_k, kv_bytes));
    CHECK(kvflash_cuda_malloc((void**)&d_v, kv_bytes));
    CHECK(kvflash_cuda_malloc((void**)&d_q, q_bytes));
    CHECK(kvflash_cuda_malloc((void**)&d_out, q_bytes));
    CHECK(kvflash_cuda_copy(d_k, k_rows, kv_bytes, stream));
    CHECK(kvflash_cuda_copy(d_v, v_rows, kv_bytes, stream));
    CHECK(kvflash_cuda_copy(d_q, q, q_bytes, stream));

    /* The whole prompt as one step; a decode loop appends 1 token per step the same way. */
    CHECK(kvflash_kv_cache_begin_step(cache, CAPACITY, stream));
    CHECK(kvflash_kv_cache_append(cache, 0, d_k, d_v, CAPACITY, stream));

    kvflash_problem dp;
    CHECK(kvflash_kv_cache_problem(cache, 0, N_Q_HEADS, 1, &dp));
    kvflash_options gpu = kvflash_options_default();
    gpu.backend = KVFLASH_BACKEND_CUDA;
    CHECK(kvflash_plan_create(&dp, &gpu, &plan));
    void* d_workspace = NULL;
    if (kvflash_plan_workspace_size(plan) > 0)
      CHECK(kvflash_cuda_malloc(&d_workspace, kvflash_plan_workspace_size(plan)));
    kvflash_tensors dt;
    CHECK(kvflash_kv_cache_tensors(cache, 0, d_q, d_out, &dt));
    CHECK(kvflash_run(plan, &dt, d_workspace, stream)); /* enqueued: graph-safe */
    CHECK(kvflash_cuda_copy(out_gpu, d_out, q_bytes, stream));
    CHECK(kvflash_cuda_stream_synchronize(stream));

    double max_diff = 0.0;
    for (int i = 0; i < N_Q_HEADS * HEAD_DIM; ++i) {
      const double d = fabs((double)out_gpu[i] - (double)out_cpu[i]);
      if (!(d <= max_diff)) max_diff = d; /* NaN-safe: a NaN becomes the maximum */
    }
    printf("cuda: %-22s out[0..2] = %+.5f %+.5f %+.5f  max |gpu - cpu| = %.2e\n",
           kvflash_plan_kernel_name(plan), out_gpu[0], out_gpu[1], out_gpu[2], max_diff);
    if (!(max_diff < 1e-2)) {
      fprintf(stderr, "the GPU and CPU outputs differ by %.3e\n", max_diff);
      return 1;
    }
    kvflash_plan_destroy(plan);
    CHECK(kvflash_cuda_free(d_workspace));
    CHECK(kvflash_cuda_free(d_out));
    CHECK(kvflash_cuda_free(d_q));
    CHECK(kvflash_cuda_free(d_v));
    CHECK(kvflash_cuda_free(d_k));
    kvflash_kv_cache_destroy(cache);
    CHECK(kvflash_cuda_stream_destroy(stream));
  }

  free(k_cache);
  free(v_cache);
  free(k_rows);
  free(v_rows);
  free(q);
  free(out_cpu);
  free(out_gpu);
  return 0;
}
