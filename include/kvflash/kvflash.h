/* kvflash C API: a thin, exception-free layer over the C++ library (the kvflash/ .hpp headers), for
 * bindings and other languages. Plain C11; every type is a POD struct or an enum, every integer is
 * fixed-width except sizes (size_t).
 *
 * Conventions
 *  - Functions returning int return a kvflash_status: KVFLASH_OK (0) or an error code. On error,
 *    kvflash_last_error() holds a message naming the first offending field (fields are checked
 *    in declaration order), its value and what is allowed, in one style:
 *    "field=value problem (allowed: ...)" (the same text the C++ API produces).
 *  - Shapes are written (dim0, dim1, ...), row-major, last dimension contiguous. Strides are in
 *    bytes. Floats are IEEE binary32; logits and log-sum-exps are in natural-log units.
 *  - No function throws or aborts on bad input; every pointer argument is checked for NULL.
 *  - All functions are thread-safe; the last-error message is per thread.
 *
 * Positions and the logit formula are those of kvflash/problem.hpp: sequence s holds kv_len[s]
 * tokens at positions 0 .. kv_len[s]-1 and its n_q_tokens queries are the last n_q_tokens of them
 * (query i sits at kv_len[s] - n_q_tokens + i). For query q (head h, position pq) and key k
 * (position pk):
 *   s = scale * dot(q, k)
 *   if softcap > 0:   s = softcap * tanh(s / softcap)
 *   if has_alibi:     s += alibi_slopes[h] * (pk - pq)
 *   if has_mask:      s += mask[seq, i, pk]
 *   if causal:        key hidden when pk > pq
 *   if window > 0:    key hidden when pq - pk >= window
 *   if mask = -inf:   key hidden (whatever its K row holds)
 * out = softmax over the visible keys (and the sink logit sinks[h], which has no value) of s,
 * times V. A hidden key has no effect: whatever its K and V rows hold (NaN and inf included),
 * it never reaches the output (CUDA kernels: a key hidden from every query row of an MMA tile;
 * kvflash/problem.hpp says more). A query that sees no key and has no sink (or a sink of -inf)
 * returns zeros and lse = -inf.
 */
#ifndef KVFLASH_KVFLASH_H_
#define KVFLASH_KVFLASH_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && defined(KVFLASH_SHARED)
#if defined(KVFLASH_BUILDING)
#define KVFLASH_API __declspec(dllexport)
#else
#define KVFLASH_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define KVFLASH_API __attribute__((visibility("default")))
#else
#define KVFLASH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status and errors ------------------------------------------------------------------- */

/* Result of every int-returning function. Mirrors kvflash::ErrorCode (code + 1). */
typedef enum kvflash_status {
  KVFLASH_OK = 0,
  KVFLASH_ERROR_INVALID_ARGUMENT = 1, /* a field is outside its documented range */
  KVFLASH_ERROR_UNSUPPORTED = 2,      /* valid request, but no built kernel serves it */
  KVFLASH_ERROR_OUT_OF_MEMORY = 3,
  KVFLASH_ERROR_BACKEND = 4,           /* the backend runtime reported a failure */
  KVFLASH_ERROR_INTERNAL = 5,          /* a bug in kvflash (an unexpected C++ exception included) */
  KVFLASH_STATUS_MAX_ENUM = 0x7FFFFFFF /* not a status: makes the enum a 32-bit int */
} kvflash_status;

/* Message of the calling thread's last failed kvflash call; "" when none has failed yet.
 * Successful calls do not clear it, so read it only after a call returned an error. The pointer
 * stays valid until the calling thread's next kvflash call. Never NULL. */
KVFLASH_API const char* kvflash_last_error(void);

/* Short static name of a status code ("ok", "invalid_argument", ...); "unknown" for any other
 * value. Never NULL. */
KVFLASH_API const char* kvflash_status_string(int status);

/* Library version, "MAJOR.MINOR.PATCH". Static, never NULL. */
#define KVFLASH_VERSION_MAJOR 0
#define KVFLASH_VERSION_MINOR 1
#define KVFLASH_VERSION_PATCH 0
KVFLASH_API const char* kvflash_version(void);

/* ---- KV formats -------------------------------------------------------------------------- */

/* Storage type of a K or V row (the head_dim values of one token of one KV head). A row is stored
 * as ceil(n / block values) blocks, the last one zero-padded. Values equal kvflash::KvType.
 *
 *  type    block values  block bytes  layout of one block
 *  f32     1             4            IEEE binary32
 *  f16     1             2            IEEE binary16
 *  bf16    1             2            bfloat16
 *  q8_0    32            34           GGUF/ggml block_q8_0
 *  q4_0    32            18           GGUF/ggml block_q4_0
 *  turbo2  128           34           fp16 norm + 2-bit codes of a rotated 128-value group
 *  turbo3  128           50           fp16 norm + 3-bit codes
 *  turbo4  128           66           fp16 norm + 4-bit codes */
typedef enum kvflash_type {
  KVFLASH_TYPE_F32 = 0,
  KVFLASH_TYPE_F16 = 1,
  KVFLASH_TYPE_BF16 = 2,
  KVFLASH_TYPE_Q8_0 = 3,
  KVFLASH_TYPE_Q4_0 = 4,
  KVFLASH_TYPE_TURBO2 = 5,
  KVFLASH_TYPE_TURBO3 = 6,
  KVFLASH_TYPE_TURBO4 = 7,
  KVFLASH_TYPE_INVALID = -1,
  /* Not a type: makes the enum a 32-bit int in every compiler (stable struct layout) and makes
   * any int32_t value a legal kvflash_type, so out-of-range values are reported, not undefined. */
  KVFLASH_TYPE_MAX_ENUM = 0x7FFFFFFF
} kvflash_type;

/* Number of valid types (they are 0 .. KVFLASH_TYPE_COUNT - 1). */
#define KVFLASH_TYPE_COUNT 8

/* Type for a name: "f32", "f16", "bf16", "q8_0", "q4_0", "turbo2", "turbo3", "turbo4".
 * KVFLASH_TYPE_INVALID for any other name or NULL (and kvflash_last_error() says why). */
KVFLASH_API kvflash_type kvflash_type_from_name(const char* name);

/* Static name of a type ("f16", ...); "invalid" for a value that is not a type. Never NULL. */
KVFLASH_API const char* kvflash_type_name(kvflash_type type);

/* Bytes of one row of n_values values, padding included (e.g. q8_0, 128 values: 136 bytes).
 * 0 for an invalid type, n_values <= 0 or a row too large to address. */
KVFLASH_API size_t kvflash_row_size(kvflash_type type, int64_t n_values);

/* Quantizes one row: src holds n_values floats, dst receives kvflash_row_size(type, n_values)
 * bytes. Identical bytes to kvflash::quantize_row. Alignment: src 4 bytes, dst 2 bytes (quantized
 * rows, and every row of a kvflash_kv_tensor, start at even addresses); misaligned pointers give
 * KVFLASH_ERROR_INVALID_ARGUMENT. */
KVFLASH_API int kvflash_quantize(kvflash_type type, const float* src, int64_t n_values, void* dst);

/* Dequantizes one row of kvflash_row_size(type, n_values) bytes back to n_values floats in the
 * original domain (turbo types: inverse-rotated). Identical to kvflash::dequantize_row.
 * Alignment: src 2 bytes, dst 4 bytes; misaligned pointers give KVFLASH_ERROR_INVALID_ARGUMENT. */
KVFLASH_API int kvflash_dequantize(kvflash_type type, const void* src, int64_t n_values,
                                   float* dst);

/* ---- The attention problem --------------------------------------------------------------- */

/* Head dimensions of K (and Q) and of V. Supported pairs (k, v): (64, 64), (80, 80), (96, 96),
 * (112, 112), (128, 128), (192, 128), (256, 256), (512, 512), (576, 512). */
typedef struct kvflash_head_dims {
  int32_t k;
  int32_t v;
} kvflash_head_dims;

/* One attention call, mirroring kvflash::AttentionProblem field for field. Start from
 * kvflash_problem_default() and set what differs. Flags are 0 (off) or nonzero (on). */
typedef struct kvflash_problem {
  int32_t n_seqs;     /* sequences in the batch, 1 .. 65536 */
  int32_t n_q_tokens; /* query tokens per sequence: 1 decode, 2..8 speculative, more prefill */
  int32_t n_q_heads;  /* query heads, 1 .. 1024 */
  int32_t n_kv_heads; /* KV heads; n_q_heads must be a multiple (GQA group n_q_heads/n_kv_heads) */
  kvflash_head_dims head_dim; /* values per Q/K row (k) and per V/out row (v) */
  kvflash_type k_type;        /* storage type of K rows */
  kvflash_type v_type;        /* storage type of V rows */
  int64_t kv_capacity;        /* tokens: the largest kv_len of any sequence, 1 .. 2^32 */
  float scale;                /* logit scale; 0 means 1/sqrt(head_dim.k) */
  int32_t causal;             /* hide keys after the query's position */
  int32_t has_mask;           /* an additive f32 mask is given (kvflash_tensors.mask) */
  int64_t window;             /* sliding window in tokens, 0 = off */
  float softcap;              /* logit soft cap, 0 = off */
  int32_t has_sinks;          /* per-head sink logits are given (kvflash_tensors.sinks) */
  int32_t has_alibi;          /* per-head ALiBi slopes are given (kvflash_tensors.alibi_slopes) */
  int32_t page_size;          /* 0: contiguous K/V; > 0: paged, tokens per page (the tensors'
                                 page_table); read by the CUDA decode kernels and the reference */
  int32_t ragged_q;           /* nonzero: sequence s has its own query count, 0 .. n_q_tokens,
                                 given by kvflash_tensors.q_offsets; q, out and lse are packed */
} kvflash_problem;

/* The defaults of kvflash::AttentionProblem: 1 sequence, 1 query token, 32/8 heads, head_dim
 * 128/128, f16/f16, kv_capacity 1, scale 0 (1/sqrt(head_dim.k)), causal, everything else off. */
KVFLASH_API kvflash_problem kvflash_problem_default(void);

/* KVFLASH_OK when the problem lies in the supported space; otherwise KVFLASH_ERROR_INVALID_ARGUMENT
 * with a message naming the first offending field in declaration order (e.g. "head_dim"). */
KVFLASH_API int kvflash_validate_problem(const kvflash_problem* problem);

/* Writes a one-line description of the problem (e.g. "seqs=1 q=1 heads=32/8 d=128/128 k=q8_0
 * v=q4_0 kv=32768 causal"), NUL-terminated, into text (text_capacity bytes). Fails with
 * KVFLASH_ERROR_INVALID_ARGUMENT when text is NULL or too small (the message gives the size
 * needed). */
KVFLASH_API int kvflash_problem_describe(const kvflash_problem* problem, char* text,
                                         size_t text_capacity);

/* ---- Tensors ----------------------------------------------------------------------------- */

/* A K or V cache: row (seq, token, head) starts at
 *   (const char*)data + seq * stride_seq + token * stride_token + head * stride_head
 * and holds kvflash_row_size(type, head_dim) bytes. Strides are in bytes, any layout (token-major,
 * head-major, ...) within these rules, checked on every dimension of extent > 1 (token:
 * kv_capacity or page_size, head: n_kv_heads, seq: n_seqs, page: n_pages; other strides are
 * never used):
 *  - rows start at multiples of 4 bytes for f32 and of 2 bytes for every other type: data and
 *    every stride are multiples of that;
 *  - strides are >= 0 and every byte offset fits in int64;
 *  - rows do not overlap: sorted by stride, each dimension's stride is at least the span of the
 *    rows of the dimensions before it, starting with one row (a sufficient rule: token-major,
 *    head-major and paged layouts with any padding pass).
 * Mirrors kvflash::KvTensor. */
typedef struct kvflash_kv_tensor {
  const void* data;
  int64_t stride_token;
  int64_t stride_head;
  int64_t stride_seq;
  /* Paged (problem.page_size = P > 0) only, else NULL / 0: token t of sequence s lives in page
   * page_table[s * pages_per_seq + t / P] (0 <= page < n_pages), its row at
   *   (const char*)data + page * stride_page + (t % P) * stride_token + head * stride_head. */
  const int32_t* page_table;
  int32_t pages_per_seq;
  int64_t n_pages;
  int64_t stride_page;
} kvflash_kv_tensor;

/* Fills *tensor for a contiguous (seq, token, head, dim) cache of `capacity` tokens per sequence
 * and n_kv_heads rows of head_dim values of `type` per token. */
KVFLASH_API int kvflash_kv_tensor_contiguous(const void* data, kvflash_type type, int32_t head_dim,
                                             int32_t n_kv_heads, int64_t capacity,
                                             kvflash_kv_tensor* tensor);

/* The buffers of one call, mirroring kvflash::AttentionTensors. Host memory for CPU plans and
 * kvflash_attention, device memory for CUDA plans (kvflash_plan_backend). Optional pointers are
 * NULL when unused. */
typedef struct kvflash_tensors {
  const float* q;            /* (n_seqs, n_q_tokens, n_q_heads, head_dim.k); every float
                                pointer of this struct is 4-byte aligned */
  kvflash_kv_tensor k;       /* head_dim.k values per row, type k_type */
  kvflash_kv_tensor v;       /* head_dim.v values per row, type v_type */
  const int64_t* kv_lens;    /* (n_seqs) tokens in each sequence, <= kv_capacity;
                                NULL: every sequence holds kv_capacity tokens */
  const float* mask;         /* (n_seqs, n_q_tokens, mask_stride) additive, -inf hides; when
                                has_mask */
  int64_t mask_stride;       /* floats between mask rows, >= kv_capacity */
  const float* sinks;        /* (n_q_heads) sink logits; when has_sinks */
  const float* alibi_slopes; /* (n_q_heads); when has_alibi */
  float* out;                /* (n_seqs, n_q_tokens, n_q_heads, head_dim.v), written */
  float* lse; /* optional (n_seqs, n_q_tokens, n_q_heads): log-sum-exp of the logits, sink
                 included, -inf when no key is visible; written when not NULL */
  const int32_t* q_offsets; /* problem.ragged_q only, else NULL: n_seqs + 1 offsets, q_offsets[0]
                               = 0, non-decreasing, each step q_offsets[s + 1] - q_offsets[s] =
                               sequence s's query count q_len(s) in 0 .. n_q_tokens. q, out and lse
                               are then packed: query i of sequence s is row q_offsets[s] + i of q
                               (total, n_q_heads, head_dim.k), out and lse (total =
                               q_offsets[n_seqs]), at position kv_len(s) - q_len(s) + i; the mask
                               stays (n_seqs, n_q_tokens, mask_stride), row i of sequence s */
} kvflash_tensors;

/* KVFLASH_OK when the problem is valid and the tensors fit it: pointers (non-NULL where needed;
 * q, out, lse, mask, sinks, alibi_slopes and q_offsets 4-byte, kv_lens 8-byte aligned), the K/V
 * layout rules above, mask_stride, and (read here: the tensors are host memory) each kv_lens[s]
 * in 0 .. kv_capacity and the q_offsets rules. */
KVFLASH_API int kvflash_validate_tensors(const kvflash_problem* problem,
                                         const kvflash_tensors* tensors);

/* ---- Kernel selection and execution ------------------------------------------------------ */

typedef enum kvflash_backend {
  KVFLASH_BACKEND_AUTO = 0, /* kvflash_select_kernel: any backend; kvflash_attention: CPU */
  KVFLASH_BACKEND_CPU = 1,
  KVFLASH_BACKEND_CUDA = 2,
  KVFLASH_BACKEND_MAX_ENUM = 0x7FFFFFFF /* not a backend: makes the enum a 32-bit int */
} kvflash_backend;

/* One task of a CPU loop (see kvflash_parallel_for_fn). */
typedef void (*kvflash_task_fn)(void* task_ctx, int64_t task, int32_t thread);

/* A caller's parallel-for, on which the CPU kernels run their loops (an engine's own threads).
 * It must call task(task_ctx, i, thread) once for every i in [0, n_tasks), with
 * 0 <= thread < n_threads and no two tasks running at the same time with the same thread value,
 * and return only when every task has returned; running them all on the calling thread in any
 * order is correct. Tasks never block on each other. Called from the thread that called
 * kvflash_run / kvflash_attention, a few times per call. */
typedef void (*kvflash_parallel_for_fn)(void* user, int64_t n_tasks, int32_t n_threads,
                                        kvflash_task_fn task, void* task_ctx);

/* How a kernel is chosen and run. All-zero ({0}) is the default: any backend, no forced or
 * excluded kernel, all hardware threads of the process-wide pool, no spin, KVFLASH_* environment
 * variables honoured (see kvflash/registry.hpp: KVFLASH_FORCE_KERNEL, KVFLASH_EXCLUDE_KERNELS,
 * KVFLASH_LOG_DISPATCH). */
typedef struct kvflash_options {
  kvflash_backend backend;  /* which backend's kernels may be selected */
  const char* force_kernel; /* select this kernel by name (e.g. "cpu.decode.portable"); its guards
                               still apply and it never falls back. NULL or "" = none */
  const char* exclude_kernels; /* comma-separated kernel names never to select, e.g.
                                  "cpu.decode.avx512,cpu.prefill.avx512"; blanks around names are
                                  ignored. NULL or "" = none */
  int32_t n_threads;           /* CPU threads, 0 = every thread the parallel-for offers (the
                                  hardware threads for the process-wide pool), else at most that */
  int32_t ignore_environment;  /* nonzero: ignore the KVFLASH_* environment variables */
  /* CPU: run the kernels' loops on this parallel-for (NULL: kvflash's process-wide pool, whose
   * callers are served one after the other). parallel_for_user is passed to it as `user`;
   * parallel_for_threads is the number of thread slots it offers (>= 1 when parallel_for is set).
   * Both must stay valid while a plan made with these options is used. */
  kvflash_parallel_for_fn parallel_for;
  void* parallel_for_user;
  int32_t parallel_for_threads;
  /* CPU, process-wide pool: microseconds its workers spin after each loop before sleeping, so that
   * a call that follows at once starts without waking them (decode loops); 0 = sleep at once. */
  int32_t spin_us;
} kvflash_options;

/* The all-zero default options. */
KVFLASH_API kvflash_options kvflash_options_default(void);

/* Attention on host buffers in one call: validates, selects a kernel of the CPU backend (backend
 * AUTO or CPU), sizes and allocates its workspace, runs it and frees the workspace; writes out
 * (and lse). Same result, bit for bit, as kvflash::attention with the same options and backend
 * cpu. options may be NULL. For repeated calls, device buffers (KVFLASH_BACKEND_CUDA fails here
 * with KVFLASH_ERROR_UNSUPPORTED) or graph capture, use kvflash_plan_create / kvflash_run. */
KVFLASH_API int kvflash_attention(const kvflash_problem* problem, const kvflash_tensors* tensors,
                                  const kvflash_options* options);

/* The registry query: validates the problem and writes the name of the kernel that would serve
 * it (NUL-terminated, e.g. "cpu.decode.avx512") into name (name_capacity bytes). With name NULL and
 * name_capacity 0 it only answers whether a kernel exists. When none does, returns
 * KVFLASH_ERROR_UNSUPPORTED (or INVALID_ARGUMENT for an invalid problem) and
 * kvflash_last_error() holds the registry's explanation: every candidate and the guard that
 * rejected it. options may be NULL; n_threads is ignored. */
KVFLASH_API int kvflash_select_kernel(const kvflash_problem* problem,
                                      const kvflash_options* options, char* name,
                                      size_t name_capacity);

/* ---- Plan and run: the engine's path (host or device buffers, graph-safe) ------------------ *
 *
 * kvflash_plan_create selects the kernel for a problem and sizes its workspace, once; kvflash_run
 * then only checks pointers and strides and runs (CPU) or enqueues (CUDA) the kernel: it
 * allocates nothing, makes no synchronizing call and reads no device memory on the host, so a
 * CUDA stream running it may be captured into a CUDA graph and replayed (the device KV lengths
 * may grow between replays up to kv_capacity). A plan is immutable: any number of threads may run
 * it at once, each with its own workspace (CPU plans on one parallel-for are served one after the
 * other by kvflash's pool).
 *
 *   kvflash_problem p = kvflash_problem_default();   ... set shape, types, kv_capacity
 *   kvflash_plan* plan;
 *   if (kvflash_plan_create(&p, NULL, &plan) != KVFLASH_OK) puts(kvflash_last_error());
 *   workspace = allocate kvflash_plan_workspace_size(plan) bytes in the plan's memory
 *   per step:  kvflash_run(plan, &tensors, workspace, stream);
 *   kvflash_plan_destroy(plan);
 *
 * The plan's backend (kvflash_plan_backend) says where the buffers live: host memory for CPU,
 * device memory of the current CUDA device for CUDA (q, out, lse, K, V, kv_lens, q_offsets, mask,
 * sinks, alibi slopes and the workspace), with `stream` a cudaStream_t (NULL: the legacy default
 * stream). options.backend picks it (AUTO: the best kernel of any backend: CUDA when built and a
 * kernel serves the problem). examples/decode.c is a complete program. */

typedef struct kvflash_plan kvflash_plan; /* opaque */

/* Makes a plan for the problem (options may be NULL). On success *plan owns it (free it with
 * kvflash_plan_destroy); on failure *plan is NULL and the error says why (an unsupported problem:
 * every candidate and the guard that rejected it). Allocates host memory; not for the hot path. */
KVFLASH_API int kvflash_plan_create(const kvflash_problem* problem, const kvflash_options* options,
                                    kvflash_plan** plan);
/* Frees a plan; NULL is allowed. */
KVFLASH_API void kvflash_plan_destroy(kvflash_plan* plan);
/* Workspace bytes kvflash_run needs (0: pass NULL); 0 for a NULL plan. */
KVFLASH_API size_t kvflash_plan_workspace_size(const kvflash_plan* plan);
/* The backend whose memory the buffers must be in: KVFLASH_BACKEND_CPU or KVFLASH_BACKEND_CUDA
 * (KVFLASH_BACKEND_AUTO for a NULL plan). */
KVFLASH_API kvflash_backend kvflash_plan_backend(const kvflash_plan* plan);
/* Static name of the plan's kernel (e.g. "cuda.decode"); "" for a NULL plan. Valid while the
 * library is loaded. */
KVFLASH_API const char* kvflash_plan_kernel_name(const kvflash_plan* plan);
/* Writes the plan's problem (as created) to *problem. */
KVFLASH_API int kvflash_plan_problem(const kvflash_plan* plan, kvflash_problem* problem);
/* KVFLASH_OK when kvflash_run would accept these tensors: the problem's rules and the kernel's
 * own requirements on pointers and strides (alignment). Reads no tensor memory. */
KVFLASH_API int kvflash_plan_check_tensors(const kvflash_plan* plan,
                                           const kvflash_tensors* tensors);
/* Runs the plan (see above). workspace: kvflash_plan_workspace_size(plan) bytes in the plan's
 * memory, not used by another call at the same time. stream: a cudaStream_t for a CUDA plan,
 * ignored by CPU plans (which return when the output is written). Errors: what
 * kvflash_plan_check_tensors reports, a CPU plan's kv_lens or q_offsets outside their range
 * (read on the host), or a CUDA launch failure (KVFLASH_ERROR_BACKEND). */
KVFLASH_API int kvflash_run(const kvflash_plan* plan, const kvflash_tensors* tensors,
                            void* workspace, void* stream);

/* ---- CUDA device services ------------------------------------------------------------------ *
 * What a C engine needs to drive the CUDA backend without the CUDA headers; an engine that has
 * them may use its own (the library uses the CUDA runtime's current device and its streams as
 * any other runtime user). In a build without CUDA each returns KVFLASH_ERROR_UNSUPPORTED (the
 * message says so) and kvflash_cuda_device_count() returns 0. `stream` is a cudaStream_t, NULL
 * the legacy default stream. */

/* CUDA devices visible: 0 without the CUDA backend, a driver or a device (never an error). */
KVFLASH_API int32_t kvflash_cuda_device_count(void);
/* cudaMalloc / cudaFree on the current device (free of NULL does nothing). */
KVFLASH_API int kvflash_cuda_malloc(void** ptr, size_t bytes);
KVFLASH_API int kvflash_cuda_free(void* ptr);
/* Stream of one's own (non-blocking) and its end. */
KVFLASH_API int kvflash_cuda_stream_create(void** stream);
KVFLASH_API int kvflash_cuda_stream_destroy(void* stream);
KVFLASH_API int kvflash_cuda_stream_synchronize(void* stream);
/* Asynchronous copy (either side host or device) and byte fill on `stream`. */
KVFLASH_API int kvflash_cuda_copy(void* dst, const void* src, size_t bytes, void* stream);
KVFLASH_API int kvflash_cuda_fill(void* dst, int byte_value, size_t bytes, void* stream);
/* kvflash_quantize on the device: n_rows rows of n_values floats at src (device memory, row after
 * row) into dst (device memory, kvflash_row_size(type, n_values) bytes per row), enqueued on
 * `stream`; the host's bytes, bit for bit. Graph-safe. */
KVFLASH_API int kvflash_cuda_quantize_rows(kvflash_type type, const float* src, int64_t n_rows,
                                           int64_t n_values, void* dst, void* stream);

/* ---- The device KV cache ------------------------------------------------------------------- *
 * kvflash::gpu::KvCache (kvflash/kv_cache.hpp) from C: K and V of n_layers layers for n_seqs
 * sequences in device memory, each layer in its own K and V types, contiguous or paged, with the
 * lengths on the device. One decode step, eager or captured into one CUDA graph:
 *   kvflash_kv_cache_begin_step(cache, 1, stream);                  lengths += 1 on the device
 *   for each layer l:
 *     kvflash_kv_cache_append(cache, l, k_new, v_new, 1, stream);   quantized on the device
 *     kvflash_kv_cache_tensors(cache, l, q, out, &t);               pointers only
 *     kvflash_run(plan[l], &t, workspace, stream);
 * begin_step, append and tensors allocate nothing and never synchronize. */

typedef struct kvflash_kv_cache_config {
  int32_t n_seqs;
  int32_t n_kv_heads;
  kvflash_head_dims head_dim;
  int32_t n_layers;
  const kvflash_type* k_types; /* n_layers entries: layer l's K type */
  const kvflash_type* v_types; /* n_layers entries: layer l's V type */
  int64_t capacity;            /* tokens per sequence */
  int32_t page_size;           /* 0: contiguous; > 0: tokens per page */
  int64_t n_pages;             /* paged: pages per layer; 0 = n_seqs * ceil(capacity / page_size) */
} kvflash_kv_cache_config;

typedef struct kvflash_kv_cache kvflash_kv_cache; /* opaque */

/* Device bytes a cache of this config takes (rows, padding and control), before creating it. */
KVFLASH_API int kvflash_kv_cache_bytes(const kvflash_kv_cache_config* config, size_t* bytes);
/* Allocates and initializes the cache (lengths 0) on the current device, then synchronizes
 * `stream`. Not graph-safe. */
KVFLASH_API int kvflash_kv_cache_create(const kvflash_kv_cache_config* config, void* stream,
                                        kvflash_kv_cache** cache);
KVFLASH_API void kvflash_kv_cache_destroy(kvflash_kv_cache* cache); /* NULL is allowed */
/* The attention problem over layer `layer` (its types, dims, capacity, page size; causal; the
 * caller may change the logit options) and the tensors of one call (K, V, lengths and page table
 * from the cache; q and out are the caller's device buffers, the rest NULL). */
KVFLASH_API int kvflash_kv_cache_problem(const kvflash_kv_cache* cache, int32_t layer,
                                         int32_t n_q_heads, int32_t n_q_tokens,
                                         kvflash_problem* problem);
KVFLASH_API int kvflash_kv_cache_tensors(const kvflash_kv_cache* cache, int32_t layer,
                                         const float* q, float* out, kvflash_tensors* tensors);
/* Device pointer to the n_seqs int64 lengths. */
KVFLASH_API const int64_t* kvflash_kv_cache_lengths(const kvflash_kv_cache* cache);
/* lengths[s] += n_new on the device for every sequence with room (the others are marked full). */
KVFLASH_API int kvflash_kv_cache_begin_step(kvflash_kv_cache* cache, int32_t n_new, void* stream);
/* Quantizes n_new tokens per sequence of K and V (device f32, (n_seqs, n_new, n_kv_heads,
 * head_dim) each) into layer `layer` at tokens lengths[s] - n_new .. lengths[s] - 1. */
KVFLASH_API int kvflash_kv_cache_append(kvflash_kv_cache* cache, int32_t layer, const float* k,
                                        const float* v, int32_t n_new, void* stream);
/* Host control, synchronous (not under capture): set the n_seqs lengths (host array); set the
 * page table (host array of n_seqs * pages_per_seq entries, n_entries of them); the sequences a
 * step found full since creation or the last clear (up to `capacity` indices into seqs, their
 * number in *count; -1 alone when an append met a token past the capacity); clear those marks. */
KVFLASH_API int kvflash_kv_cache_set_lengths(kvflash_kv_cache* cache, const int64_t* lengths,
                                             int32_t n_seqs, void* stream);
KVFLASH_API int kvflash_kv_cache_set_page_table(kvflash_kv_cache* cache, const int32_t* table,
                                                int64_t n_entries, void* stream);
KVFLASH_API int kvflash_kv_cache_full_sequences(const kvflash_kv_cache* cache, int32_t* seqs,
                                                int32_t capacity, int32_t* count, void* stream);
KVFLASH_API int kvflash_kv_cache_clear_full(kvflash_kv_cache* cache, void* stream);

/* Number of kernels built into this library (all backends, opt-in ones included). */
KVFLASH_API int32_t kvflash_kernel_count(void);

/* Static name of kernel index (0 .. kvflash_kernel_count() - 1); NULL when out of range. */
KVFLASH_API const char* kvflash_kernel_name(int32_t index);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVFLASH_KVFLASH_H_ */
