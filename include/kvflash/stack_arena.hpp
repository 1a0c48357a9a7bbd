// The bookkeeping of a stack-discipline memory pool, in plain host C++: offsets, alignment, LIFO
// checks and the high-water mark over a range of addresses that this class never touches (device
// memory in gpu::DevicePool, any range in the tests). Blocks come off the top and go back in
// reverse order; the only memory it allocates is its table of live blocks, once, at construction,
// so allocate() and release() cost a few integer operations and never call the allocator or CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kvflash/export.h"
#include "kvflash/status.hpp"

namespace kvflash {

// A point of the stack to rewind to: the number of live blocks and the top offset when it was
// taken. Only meaningful for the arena that made it.
struct ArenaMark {
  size_t blocks = 0;
  size_t top = 0;
};

class KVFLASH_API StackArena {
 public:
  // 256 bytes: what cudaMalloc guarantees, enough for every vector load and for the decode
  // kernel's workspace.
  static constexpr size_t kDefaultAlignment = 256;
  // Live blocks at one time; the table of them is allocated once, here.
  static constexpr size_t kDefaultMaxBlocks = 64;

  StackArena() = default;
  // Manages [base, base + capacity). base may be null only with capacity 0. `name` (a string
  // literal: it is not copied) starts every error message, e.g. "gpu::DevicePool".
  StackArena(void* base, size_t capacity, size_t max_blocks = kDefaultMaxBlocks,
             const char* name = "StackArena");
  // Move-only: two copies would hand out the same addresses. A moved-from arena is empty.
  StackArena(StackArena&& o) noexcept;
  StackArena& operator=(StackArena&& o) noexcept;
  StackArena(const StackArena&) = delete;
  StackArena& operator=(const StackArena&) = delete;

  // A block of `bytes` at the top, its address a multiple of `alignment` (a power of two). Zero
  // bytes is allowed (an aligned address that must still be released). Errors: invalid_argument
  // for a bad alignment; out_of_memory naming the request, the free bytes and the capacity when
  // it does not fit or the block table is full.
  Expected<void*> allocate(size_t bytes, size_t alignment = kDefaultAlignment);
  // Gives back the most recent live block; any other address is an error that names both, and
  // nothing changes.
  Status release(void* block);

  ArenaMark mark() const { return {depth_, top_}; }
  // Releases every block allocated since `m`. An error (nothing changes) when blocks that
  // existed at `m` have been released since, or `m` is not a point of this stack.
  Status rewind(ArenaMark m);

  // Bytes from the base to the end of the top block (alignment padding included).
  size_t used() const { return top_; }
  size_t free_bytes() const { return capacity_ - top_; }
  size_t capacity() const { return capacity_; }
  size_t high_water() const { return high_water_; }
  size_t live_blocks() const { return depth_; }
  size_t max_blocks() const { return blocks_.size(); }
  void* base() const { return reinterpret_cast<void*>(base_); }
  const char* name() const { return name_; }

  // Set by an ArenaScope whose rewind failed in its destructor (where it cannot return the
  // error): every later call fails with it, so a broken stack is never used silently.
  const std::optional<Error>& broken() const { return broken_; }
  void mark_broken(Error e);

 private:
  struct Block {
    size_t start = 0;     // offset of the block
    size_t prev_top = 0;  // top before it (start minus the alignment padding)
  };
  uintptr_t base_ = 0;
  size_t capacity_ = 0;
  size_t top_ = 0;
  size_t high_water_ = 0;
  size_t depth_ = 0;
  std::vector<Block> blocks_;  // sized once; blocks_[0 .. depth_) are live
  const char* name_ = "StackArena";
  std::optional<Error> broken_;
};

// Rewinds the arena to where it stood at construction when it goes out of scope (or at close(),
// which returns the error that a destructor cannot). Scopes must nest, and the arena must not
// move while a scope refers to it.
class KVFLASH_API ArenaScope {
 public:
  explicit ArenaScope(StackArena& arena) : arena_(&arena), mark_(arena.mark()) {}
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;
  ~ArenaScope();
  Status close();

 private:
  StackArena* arena_;
  ArenaMark mark_;
};

}  // namespace kvflash
