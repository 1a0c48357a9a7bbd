/* Compiles include/kvflash/kvflash.h as strict C11 (no C++ in the public C header):
 *   gcc -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I include
 * tests/capi/c_header_check.c Not linked: it only has to compile. */
#include <stdio.h>

#include "kvflash/kvflash.h"

int kvflash_c_header_check(void);

int kvflash_c_header_check(void) {
  kvflash_problem p = kvflash_problem_default();
  kvflash_options o = kvflash_options_default();
  kvflash_plan* plan = NULL;
  kvflash_tensors t = {0};
  kvflash_kv_tensor k;
  char name[64];
  float row[128] = {0};
  unsigned char packed[256];
  int status;

  o.backend = KVFLASH_BACKEND_CPU;
  o.exclude_kernels = "cpu.decode, cpu.prefill";
  o.ignore_environment = 1;
  p.k_type = kvflash_type_from_name("q8_0");
  p.v_type = KVFLASH_TYPE_TURBO3;
  p.head_dim.k = 128;
  p.head_dim.v = 128;
  p.kv_capacity = 64;
  p.ragged_q = 0;
  t.q_offsets = NULL;
  status = kvflash_validate_problem(&p);
  if (status != KVFLASH_OK) printf("%s: %s\n", kvflash_status_string(status), kvflash_last_error());
  status =
      kvflash_kv_tensor_contiguous(NULL, p.k_type, p.head_dim.k, p.n_kv_heads, p.kv_capacity, &k);
  t.k = k;
  status |= kvflash_quantize(KVFLASH_TYPE_TURBO3, row, 128, packed);
  status |= kvflash_dequantize(KVFLASH_TYPE_TURBO3, packed, 128, row);
  status |= kvflash_select_kernel(&p, &o, name, sizeof name);
  status |= kvflash_attention(&p, &t, NULL);
  status |= kvflash_validate_tensors(&p, &t);
  status |= kvflash_problem_describe(&p, name, sizeof name);
  status |= kvflash_plan_create(&p, &o, &plan);
  status |= kvflash_run(plan, &t, NULL, NULL);
  printf("%zu %d %s\n", kvflash_plan_workspace_size(plan), (int)kvflash_plan_backend(plan),
         kvflash_plan_kernel_name(plan));
  kvflash_plan_destroy(plan);
  status |= kvflash_cuda_device_count() > 0 ? kvflash_cuda_stream_synchronize(NULL) : 0;
  printf("%s %s %zu %d %s\n", kvflash_version(), kvflash_type_name(p.k_type),
         kvflash_row_size(p.k_type, 128), (int)kvflash_kernel_count(), name);
  (void)kvflash_kernel_name(0);
  (void)kvflash_options_default();
  return status;
}
