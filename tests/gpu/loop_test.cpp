// A small kvflash-loop run on the device: 33 layers of alternating K/V types, two depths served by
// one graph, memory equal to kvflash-plan's number and held by the device, 0 capture failures.
#include <gtest/gtest.h>

#if defined(KVFLASH_TEST_LOOP)
#include "gpu_test_util.hpp"
#include "loop/loop.hpp"

namespace kvflash::gputest {
namespace {

TEST(GpuLoop, OneGraphServesEveryDepthAndTheMemoryIsThePlans) {
  KVFLASH_REQUIRE_GPU();
  tools::loop::LoopConfig c;
  c.model.name = "test";
  // More layers than a pool holds blocks by default (64 = 32 layers' K and V); 3 under the
  // sanitizers (quick mode: racecheck was killed running 33 layers' eager and graph steps).
  const int32_t layers = quick() ? 3 : 33;
  c.model.layers = layers;
  c.model.q_heads = 32;
  c.model.kv_heads = 8;
  c.model.head_dim = {128, 128};
  for (int l = 0; l < c.model.layers; ++l) {
    c.k_types.push_back(l % 2 ? KvType::f16 : KvType::q8_0);
    c.v_types.push_back(l % 2 ? KvType::f16 : KvType::q4_0);
  }
  c.depths = {1024, 4096};
  c.tokens = 3;
  c.kernel_reps = 1;
  tools::loop::LoopReport r;
  KVFLASH_ASSIGN_OR_FAIL(r, tools::loop::run_loop(c));
  ASSERT_EQ(r.rows.size(), 4u);  // per depth: off, on
  for (const tools::loop::LoopRow& row : r.rows) {
    EXPECT_GT(row.us_per_token, 0.0);
    EXPECT_GT(row.kernel_sum_us, 0.0);
    if (row.graphs) {
      EXPECT_GE(row.kernel_nodes, c.model.layers);  // at least one kernel per layer
    }
  }
  EXPECT_EQ(r.kv_bytes, r.plan_bytes);
  const int64_t even = (layers + 1) / 2, odd = layers / 2;  // q8_0/q4_0 layers, f16 layers
  EXPECT_EQ(r.kv_bytes, int64_t{4096} * 8 * (even * (136 + 72) + odd * (256 + 256)));
  EXPECT_GE(r.device_taken, r.pool_capacity);
  EXPECT_EQ(r.memory.total_bytes(), r.pool_capacity);
  // Two eager steps, one capture, then replays for every timed step of both depths: the second
  // depth reuses the graph (the lengths live on the device).
  EXPECT_EQ(r.counters.captures, 1);
  EXPECT_EQ(r.counters.capture_failures, 0);
  EXPECT_EQ(r.counters.eager_runs, 2);
  EXPECT_EQ(r.counters.replays, 2 * c.tokens);
}

}  // namespace
}  // namespace kvflash::gputest
#endif
