// GGUF, the file format of llama.cpp's models (version 3, little-endian), read and written: the
// header, the metadata (typed key/value pairs, arrays included), the tensor table and where each
// tensor's bytes lie. The reader checks everything it reads against the bytes it has (counts,
// string and array lengths, dimensions, element-count overflow, tensor extents inside the data
// section, alignment, overlaps) and answers a malformed or truncated file with an error naming
// what is wrong and where, never a crash or an allocation the file's size cannot back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvflash/status.hpp"

namespace kvflash::tools::run {

// Metadata value types, as numbered in the file.
enum class GgufValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
const char* to_string(GgufValueType t);

// One metadata value: a scalar (integers in i or u by signedness, floats in f, bool in u), a
// string, or an array of scalars or strings (element type in elem_type).
struct GgufValue {
  GgufValueType type = GgufValueType::u32;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  std::string s;
  GgufValueType elem_type = GgufValueType::u32;
  std::vector<GgufValue> array;

  // The value as an integer (any integer type, or bool) / a float (f32, f64 or an integer).
  std::optional<int64_t> as_int() const;
  std::optional<double> as_float() const;

  static GgufValue of_u32(uint32_t v);
  static GgufValue of_i32(int32_t v);
  static GgufValue of_u64(uint64_t v);
  static GgufValue of_f32(float v);
  static GgufValue of_bool(bool v);
  static GgufValue of_string(std::string v);
  static GgufValue of_array(GgufValueType elem_type, std::vector<GgufValue> items);
};

// ggml tensor types (the ones this reader knows the block size of; a file holding another type
// is refused by name and number).
enum class GgmlType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  bf16 = 30,
};
const char* to_string(GgmlType t);
// Values per block and bytes per block of a type; nullopt for a type this reader does not know.
struct GgmlBlock {
  int64_t values, bytes;
};
std::optional<GgmlBlock> ggml_block(uint32_t type);

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] first: the fastest-varying dimension
  GgmlType type = GgmlType::f32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
  const uint8_t* data = nullptr;  // inside the file's bytes
  int64_t elements() const;
};

inline constexpr uint32_t kGgufMagic = 0x46554747u;  // "GGUF"
inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// A parsed file. Tensor data points into the bytes it was parsed from (owned by the file when
// opened from a path: a read-only memory map).
class GgufFile {
 public:
  uint32_t version = kGgufVersion;
  uint64_t alignment = kGgufDefaultAlignment;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::vector<GgufTensor> tensors;                          // in file order

  const GgufValue* find(const std::string& key) const;
  const GgufTensor* tensor(const std::string& name) const;

 private:
  friend Expected<GgufFile> open_gguf(const std::string& path);
  std::shared_ptr<const void> storage_;  // the mapping, when opened from a path
};

// Parses a whole file held in memory (the bytes must outlive the result: tensor data points into
// them, so a temporary buffer is refused at compile time).
Expected<GgufFile> parse_gguf(std::span<const uint8_t> bytes);
Expected<GgufFile> parse_gguf(std::vector<uint8_t>&& bytes) = delete;
// Maps a file read-only and parses it.
Expected<GgufFile> open_gguf(const std::string& path);

// Writes a GGUF version 3 file: the metadata in the given order, then each tensor's table entry
// and its bytes, aligned to `alignment` (written as general.alignment when not 32).
struct GgufTensorData {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] first
  GgmlType type = GgmlType::f32;
  std::vector<uint8_t> bytes;
};
struct GgufWriter {
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensorData> tensors;
  uint64_t alignment = kGgufDefaultAlignment;
};
Expected<std::vector<uint8_t>> write_gguf(const GgufWriter& w);

}  // namespace kvflash::tools::run
