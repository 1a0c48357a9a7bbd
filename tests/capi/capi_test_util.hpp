// Helpers shared by the C API tests.
#pragma once

#include <string>

#include "kvflash/formats.hpp"
#include "kvflash/kvflash.h"
#include "kvflash/problem.hpp"

namespace kvflash::capi_test {

// The C enum value of a C++ type (the values are equal by construction; kvflash_c.cpp asserts it).
inline kvflash_type c_type(KvType t) {
  return static_cast<kvflash_type>(static_cast<int>(t));
}
inline std::string last_error() {
  return kvflash_last_error();
}

// The C structs of C++ values, field for field (the tests' and fuzz targets' one copy).
inline kvflash_problem to_c(const AttentionProblem& p) {
  kvflash_problem c = kvflash_problem_default();
  c.n_seqs = p.n_seqs;
  c.n_q_tokens = p.n_q_tokens;
  c.n_q_heads = p.n_q_heads;
  c.n_kv_heads = p.n_kv_heads;
  c.head_dim = {p.head_dim.k, p.head_dim.v};
  c.k_type = c_type(p.k_type);
  c.v_type = c_type(p.v_type);
  c.kv_capacity = p.kv_capacity;
  c.scale = p.scale;
  c.causal = p.causal;
  c.has_mask = p.has_mask;
  c.window = p.window;
  c.softcap = p.softcap;
  c.has_sinks = p.has_sinks;
  c.has_alibi = p.has_alibi;
  c.page_size = p.page_size;
  c.ragged_q = p.ragged_q;
  return c;
}
inline kvflash_kv_tensor to_c(const KvTensor& t) {
  return {t.data,       t.stride_token,  t.stride_head, t.stride_seq,
          t.page_table, t.pages_per_seq, t.n_pages,     t.stride_page};
}
inline kvflash_tensors to_c(const AttentionTensors& t) {
  kvflash_tensors c{};
  c.q = t.q;
  c.k = to_c(t.k);
  c.v = to_c(t.v);
  c.kv_lens = t.kv_lens;
  c.mask = t.mask;
  c.mask_stride = t.mask_stride;
  c.sinks = t.sinks;
  c.alibi_slopes = t.alibi_slopes;
  c.out = t.out;
  c.lse = t.lse;
  c.q_offsets = t.q_offsets;
  return c;
}

}  // namespace kvflash::capi_test
