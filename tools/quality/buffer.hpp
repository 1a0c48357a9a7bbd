// A large host array, left uninitialized and backed by transparent huge pages where the kernel
// allows. Why: a 1M-token haystack is a gigabyte of f32 plus its quantized copies; zero-filling it
// (std::vector) and faulting it in 4 KiB pages cost more time here than generating it.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

namespace kvflash::quality {

template <class T>
class HugeArray {
 public:
  HugeArray() = default;
  explicit HugeArray(size_t n) : n_(n) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    if (bytes == 0) return;
    data_ = static_cast<T*>(std::aligned_alloc(kHuge, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
    madvise(data_, bytes, MADV_HUGEPAGE);
#endif
  }
  HugeArray(HugeArray&& o) noexcept : data_(o.data_), n_(o.n_) {
    o.data_ = nullptr;
    o.n_ = 0;
  }
  HugeArray& operator=(HugeArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }
  HugeArray(const HugeArray&) = delete;
  HugeArray& operator=(const HugeArray&) = delete;
  ~HugeArray() {
    std::free(data_);
  }

  T* data() {
    return data_;
  }
  const T* data() const {
    return data_;
  }
  size_t size() const {
    return n_;
  }
  T& operator[](size_t i) {
    return data_[i];
  }
  const T& operator[](size_t i) const {
    return data_[i];
  }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace kvflash::quality
