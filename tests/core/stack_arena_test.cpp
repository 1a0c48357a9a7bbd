#include "kvflash/stack_arena.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

namespace kvflash {
namespace {

using ::testing::HasSubstr;

// The arena never touches its range, so any address serves as a base; an odd one shows that
// alignment is of addresses, not offsets.
void* base_at(uintptr_t a) {
  return reinterpret_cast<void*>(a);
}
size_t offset(const StackArena& a, void* p) {
  return static_cast<size_t>(reinterpret_cast<uintptr_t>(p) -
                             reinterpret_cast<uintptr_t>(a.base()));
}

TEST(StackArena, AllocatesAlignedBlocksAndTracksUseAndHighWater) {
  StackArena a(base_at(0x10000), 4096);
  EXPECT_EQ(a.capacity(), 4096u);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.high_water(), 0u);

  Expected<void*> b1 = a.allocate(100);
  ASSERT_TRUE(b1.ok()) << b1.error().message;
  EXPECT_EQ(offset(a, *b1), 0u);
  EXPECT_EQ(a.used(), 100u);

  Expected<void*> b2 = a.allocate(10);  // default alignment 256: padded to offset 256
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(offset(a, *b2), 256u);
  EXPECT_EQ(a.used(), 266u);

  Expected<void*> b3 = a.allocate(8, 8);
  ASSERT_TRUE(b3.ok());
  EXPECT_EQ(offset(a, *b3), 272u);
  EXPECT_EQ(a.used(), 280u);
  EXPECT_EQ(a.live_blocks(), 3u);
  EXPECT_EQ(a.high_water(), 280u);

  ASSERT_TRUE(a.release(*b3).ok());
  EXPECT_EQ(a.used(), 266u);
  ASSERT_TRUE(a.release(*b2).ok());
  EXPECT_EQ(a.used(), 100u);  // the padding before b2 is given back with it
  ASSERT_TRUE(a.release(*b1).ok());
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.high_water(), 280u);  // the mark stays

  // Released space is handed out again from the same addresses.
  Expected<void*> again = a.allocate(100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *b1);
}

TEST(StackArena, AlignmentIsOfAddressesNotOffsets) {
  StackArena a(base_at(0x10010), 1024);  // 16 bytes past a 256-byte boundary
  Expected<void*> b = a.allocate(1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b) % 256, 0u);
  EXPECT_EQ(offset(a, *b), 240u);
  Expected<void*> c = a.allocate(4, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(offset(a, *c), 244u);
}

TEST(StackArena, ExactFitAndZeroBytes) {
  StackArena a(base_at(0x10000), 512);
  Expected<void*> z = a.allocate(0);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.live_blocks(), 1u);  // still a block, released like any other
  Expected<void*> full = a.allocate(512);
  ASSERT_TRUE(full.ok()) << full.error().message;
  EXPECT_EQ(a.free_bytes(), 0u);
  ASSERT_TRUE(a.release(*full).ok());
  ASSERT_TRUE(a.release(*z).ok());
}

TEST(StackArena, TooLargeIsOutOfMemoryNamingRequestFreeAndCapacity) {
  StackArena a(base_at(0x10000), 4096, StackArena::kDefaultMaxBlocks, "gpu::DevicePool");
  ASSERT_TRUE(a.allocate(1000).ok());
  Expected<void*> big = a.allocate(3500);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::out_of_memory);
  EXPECT_EQ(big.error().message,
            "gpu::DevicePool::allocate(3500 bytes, alignment 256): does not fit: 3096 of 4096 "
            "bytes free (1000 in use by 1 live blocks)");
  // It fits by size but not after the alignment padding (1024 + 3096 > 4096).
  EXPECT_FALSE(a.allocate(3096).ok());
  EXPECT_TRUE(a.allocate(3096, 8).ok());
  // A failed request changes nothing.
  EXPECT_EQ(a.live_blocks(), 2u);
  EXPECT_EQ(a.used(), 4096u);

  // Sizes near SIZE_MAX do not wrap around.
  StackArena b(base_at(0x10000), 4096);
  EXPECT_FALSE(b.allocate(SIZE_MAX).ok());
  EXPECT_FALSE(b.allocate(SIZE_MAX - 100, 1).ok());
  EXPECT_EQ(b.used(), 0u);
}

TEST(StackArena, BadAlignmentIsInvalid) {
  StackArena a(base_at(0x10000), 4096);
  for (size_t align : {size_t{0}, size_t{3}, size_t{48}}) {
    Expected<void*> b = a.allocate(16, align);
    ASSERT_FALSE(b.ok()) << align;
    EXPECT_EQ(b.error().code, ErrorCode::invalid_argument);
    EXPECT_THAT(b.error().message, HasSubstr("alignment must be a power of two"));
  }
  EXPECT_EQ(a.live_blocks(), 0u);
}

TEST(StackArena, OutOfOrderReleaseIsAnErrorAndChangesNothing) {
  StackArena a(base_at(0x10000), 4096);
  void* b1 = *a.allocate(100);
  void* b2 = *a.allocate(100);
  const Status s = a.release(b1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(),
            "StackArena::release: blocks must be released in reverse order of allocation; the "
            "most recent live block starts at offset 256, the one given at offset 0");
  EXPECT_EQ(a.live_blocks(), 2u);
  EXPECT_EQ(a.used(), 356u);

  int elsewhere = 0;
  EXPECT_THAT(a.release(&elsewhere).message(), HasSubstr("outside this pool"));
  ASSERT_TRUE(a.release(b2).ok());
  ASSERT_TRUE(a.release(b1).ok());
  const Status none = a.release(b1);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.message(), HasSubstr("no live block"));
}

TEST(StackArena, TableOfLiveBlocksIsBounded) {
  StackArena a(base_at(0x10000), 4096, 2);
  ASSERT_TRUE(a.allocate(1, 1).ok());
  ASSERT_TRUE(a.allocate(1, 1).ok());
  Expected<void*> third = a.allocate(1, 1);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().code, ErrorCode::out_of_memory);
  EXPECT_THAT(third.error().message, HasSubstr("table of live blocks is full (2 blocks"));
}

TEST(StackArena, RewindToAMarkReleasesEverythingAfterIt) {
  StackArena a(base_at(0x10000), 4096);
  void* b1 = *a.allocate(100);
  const ArenaMark m = a.mark();
  ASSERT_TRUE(a.allocate(300).ok());
  ASSERT_TRUE(a.allocate(300).ok());
  EXPECT_EQ(a.live_blocks(), 3u);
  ASSERT_TRUE(a.rewind(m).ok());
  EXPECT_EQ(a.live_blocks(), 1u);
  EXPECT_EQ(a.used(), 100u);
  EXPECT_EQ(a.high_water(), 1068u);  // 768 + 300
  ASSERT_TRUE(a.rewind(m).ok());     // rewinding to where it stands is a no-op
  ASSERT_TRUE(a.release(b1).ok());
}

TEST(StackArena, RewindPastAnOuterMarkMakesTheInnerMarkAnError) {
  StackArena a(base_at(0x10000), 4096);
  const ArenaMark outer = a.mark();
  ASSERT_TRUE(a.allocate(100).ok());
  const ArenaMark inner = a.mark();
  ASSERT_TRUE(a.allocate(100).ok());
  ASSERT_TRUE(a.rewind(outer).ok());
  const Status s = a.rewind(inner);  // its block was released by the outer rewind
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
  EXPECT_THAT(s.message(), HasSubstr("is not a point of the current stack"));
  EXPECT_EQ(a.live_blocks(), 0u);

  // A mark taken above blocks since replaced by other ones at another top is stale too.
  ASSERT_TRUE(a.allocate(100).ok());
  const ArenaMark m = a.mark();  // 1 block, top 100
  ASSERT_TRUE(a.rewind(outer).ok());
  ASSERT_TRUE(a.allocate(50).ok());
  ASSERT_TRUE(a.allocate(50).ok());  // 2 blocks; block 1 starts from top 50, not 100
  EXPECT_FALSE(a.rewind(m).ok());
}

TEST(StackArena, ScopesRewindAtTheirEnd) {
  StackArena a(base_at(0x10000), 4096);
  ASSERT_TRUE(a.allocate(10).ok());
  {
    ArenaScope outer(a);
    ASSERT_TRUE(a.allocate(10).ok());
    {
      ArenaScope inner(a);
      ASSERT_TRUE(a.allocate(10).ok());
      EXPECT_EQ(a.live_blocks(), 3u);
    }
    EXPECT_EQ(a.live_blocks(), 2u);
    ArenaScope closed(a);
    ASSERT_TRUE(a.allocate(10).ok());
    ASSERT_TRUE(closed.close().ok());
    EXPECT_EQ(a.live_blocks(), 2u);
    EXPECT_FALSE(closed.close().ok());  // once only
  }
  EXPECT_EQ(a.live_blocks(), 1u);
  EXPECT_EQ(a.used(), 10u);
  EXPECT_FALSE(a.broken());
}

// A scope whose blocks were released under it cannot report from its destructor: the arena
// becomes unusable, and says so on every later call, instead of carrying on corrupt.
TEST(StackArena, AScopeThatCannotRewindBreaksTheArena) {
  StackArena a(base_at(0x10000), 4096);
  const ArenaMark outer = a.mark();
  void* b = *a.allocate(10);
  {
    ArenaScope scope(a);
    ASSERT_TRUE(a.allocate(10).ok());
    ASSERT_TRUE(a.rewind(outer).ok());  // releases the block the scope stood on
  }
  ASSERT_TRUE(a.broken());
  Expected<void*> next = a.allocate(10);
  ASSERT_FALSE(next.ok());
  EXPECT_THAT(next.error().message,
              HasSubstr("StackArena is unusable: an ArenaScope could not rewind at its end"));
  EXPECT_FALSE(a.release(b).ok());
  EXPECT_FALSE(a.rewind(outer).ok());
}

TEST(StackArena, MovedArenaKeepsItsBlocksAndTheSourceIsEmpty) {
  StackArena a(base_at(0x10000), 4096);
  void* b = *a.allocate(10);
  StackArena moved = std::move(a);
  EXPECT_EQ(moved.live_blocks(), 1u);
  EXPECT_EQ(a.capacity(), 0u);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_FALSE(a.allocate(1).ok());
  ASSERT_TRUE(moved.release(b).ok());

  StackArena empty;  // no base: refuses everything, naming capacity 0
  Expected<void*> e = empty.allocate(1);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.error().message, HasSubstr("of 0 bytes free"));
}

}  // namespace
}  // namespace kvflash
