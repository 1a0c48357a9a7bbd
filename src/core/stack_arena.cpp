#include "kvflash/stack_arena.hpp"

#include <string>
#include <utility>

namespace kvflash {
namespace {

bool is_power_of_two(size_t x) {
  return x != 0 && (x & (x - 1)) == 0;
}

std::string call(const char* name, const char* fn, size_t bytes, size_t alignment) {
  return std::string(name) + "::" + fn + "(" + std::to_string(bytes) + " bytes, alignment " +
         std::to_string(alignment) + ")";
}

}  // namespace

StackArena::StackArena(void* base, size_t capacity, size_t max_blocks, const char* name)
    : base_(reinterpret_cast<uintptr_t>(base)),
      // Without a base there is nothing to hand out: every allocation fails, naming capacity 0.
      capacity_(base == nullptr ? 0 : capacity),
      blocks_(max_blocks),
      name_(name) {}

StackArena::StackArena(StackArena&& o) noexcept
    : base_(std::exchange(o.base_, 0)),
      capacity_(std::exchange(o.capacity_, 0)),
      top_(std::exchange(o.top_, 0)),
      high_water_(std::exchange(o.high_water_, 0)),
      depth_(std::exchange(o.depth_, 0)),
      blocks_(std::move(o.blocks_)),
      name_(o.name_),
      broken_(std::exchange(o.broken_, std::nullopt)) {
  o.blocks_.clear();
}

StackArena& StackArena::operator=(StackArena&& o) noexcept {
  if (this != &o) {
    StackArena moved(std::move(o));
    std::swap(base_, moved.base_);
    std::swap(capacity_, moved.capacity_);
    std::swap(top_, moved.top_);
    std::swap(high_water_, moved.high_water_);
    std::swap(depth_, moved.depth_);
    std::swap(blocks_, moved.blocks_);
    std::swap(name_, moved.name_);
    std::swap(broken_, moved.broken_);
  }
  return *this;
}

void StackArena::mark_broken(Error e) {
  if (broken_) return;
  e.message =
      std::string(name_) + " is unusable: an ArenaScope could not rewind at its end: " + e.message;
  broken_ = std::move(e);
}

Expected<void*> StackArena::allocate(size_t bytes, size_t alignment) {
  if (broken_) return *broken_;
  if (!is_power_of_two(alignment))
    return invalid_argument(call(name_, "allocate", bytes, alignment) +
                            ": alignment must be a power of two");
  auto no_fit = [&](const std::string& why) {
    return Error{ErrorCode::out_of_memory, call(name_, "allocate", bytes, alignment) + ": " + why +
                                               ": " + std::to_string(free_bytes()) + " of " +
                                               std::to_string(capacity_) + " bytes free (" +
                                               std::to_string(top_) + " in use by " +
                                               std::to_string(depth_) + " live blocks)"};
  };
  // Aligned in absolute address, not in offset: the base need not be aligned to `alignment`.
  const uintptr_t addr = base_ + top_;
  const uintptr_t mask = static_cast<uintptr_t>(alignment) - 1;
  if (addr > UINTPTR_MAX - mask) return no_fit("does not fit");
  const size_t start = static_cast<size_t>(((addr + mask) & ~mask) - base_);
  if (start > capacity_ || bytes > capacity_ - start) return no_fit("does not fit");
  if (depth_ == blocks_.size())
    return no_fit("the table of live blocks is full (" + std::to_string(blocks_.size()) +
                  " blocks; release some or create the pool with a larger max_blocks)");
  blocks_[depth_++] = Block{start, top_};
  top_ = start + bytes;
  if (top_ > high_water_) high_water_ = top_;
  return reinterpret_cast<void*>(base_ + start);
}

Status StackArena::release(void* block) {
  if (broken_) return *broken_;
  if (depth_ == 0)
    return invalid_argument(std::string(name_) +
                            "::release: no live block (every block was released)");
  const uintptr_t want = base_ + blocks_[depth_ - 1].start;
  if (reinterpret_cast<uintptr_t>(block) != want) {
    std::string msg = std::string(name_) +
                      "::release: blocks must be released in reverse order of allocation; the most "
                      "recent live block starts at offset " +
                      std::to_string(blocks_[depth_ - 1].start);
    const uintptr_t a = reinterpret_cast<uintptr_t>(block);
    if (a >= base_ && a - base_ <= capacity_)
      msg += ", the one given at offset " + std::to_string(a - base_);
    else
      msg += ", the address given is outside this pool";
    return invalid_argument(std::move(msg));
  }
  top_ = blocks_[--depth_].prev_top;
  return {};
}

Status StackArena::rewind(ArenaMark m) {
  if (broken_) return *broken_;
  // A mark is a point of the current stack when the block that followed it (if any) is still
  // live and started from the mark's top. A mark of blocks since released is stale.
  const bool valid = m.blocks < depth_    ? blocks_[m.blocks].prev_top == m.top
                     : m.blocks == depth_ ? m.top == top_
                                          : false;
  if (!valid)
    return invalid_argument(std::string(name_) + "::rewind: the mark (" + std::to_string(m.blocks) +
                            " blocks, top " + std::to_string(m.top) +
                            ") is not a point of the current stack (" + std::to_string(depth_) +
                            " blocks, top " + std::to_string(top_) +
                            "): it was rewound past or released below, so scopes did not nest");
  depth_ = m.blocks;
  top_ = m.top;
  return {};
}

ArenaScope::~ArenaScope() {
  if (arena_ == nullptr) return;
  if (Status s = arena_->rewind(mark_); !s) arena_->mark_broken(s.error());
}

Status ArenaScope::close() {
  StackArena* a = std::exchange(arena_, nullptr);
  if (a == nullptr) return invalid_argument("ArenaScope::close: already closed");
  return a->rewind(mark_);
}

}  // namespace kvflash
