// kvflash-run's GGUF reader and writer (issue 41): a written file reads back the same (metadata of
// every value type, arrays, tensors of several types and an alignment of 64), and a malformed or
// truncated file is refused with a message naming what is wrong: every prefix of a valid file,
// a wrong magic or version, counts and lengths past the end, too many dimensions, an element
// count that overflows, an unknown type, a misaligned offset, a tensor past the end, overlapping
// tensors, duplicate names and keys. (tests/fuzz/gguf_fuzz.cpp throws random bytes at it.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "run/gguf.hpp"

namespace kvflash::tools::run {
namespace {

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + 7 * i);
  return b;
}

GgufWriter sample() {
  GgufWriter w;
  w.metadata = {
      {"general.architecture", GgufValue::of_string("llama")},
      {"llama.block_count", GgufValue::of_u32(2)},
      {"llama.rope.freq_base", GgufValue::of_f32(10000.0f)},
      {"test.i32", GgufValue::of_i32(-5)},
      {"test.u64", GgufValue::of_u64(1ull << 40)},
      {"test.flag", GgufValue::of_bool(true)},
      {"test.tokens", GgufValue::of_array(GgufValueType::string,
                                          {GgufValue::of_string("a"), GgufValue::of_string(""),
                                           GgufValue::of_string("ccc")})},
      {"test.scores", GgufValue::of_array(GgufValueType::f32,
                                          {GgufValue::of_f32(0.5f), GgufValue::of_f32(-1.0f)})},
  };
  w.tensors = {
      {"token_embd.weight", {64, 3}, GgmlType::f16, bytes_of(64 * 3 * 2, 1)},
      {"blk.0.attn_q.weight", {64, 2}, GgmlType::q8_0, bytes_of(2 * 2 * 34, 2)},
      {"output_norm.weight", {64}, GgmlType::f32, bytes_of(64 * 4, 3)},
      {"blk.0.ffn_up.weight", {32, 1}, GgmlType::bf16, bytes_of(32 * 2, 4)},
  };
  return w;
}

std::vector<uint8_t> written(const GgufWriter& w) {
  Expected<std::vector<uint8_t>> b = write_gguf(w);
  EXPECT_TRUE(b.ok()) << b.error().message;
  return b.ok() ? *b : std::vector<uint8_t>{};
}

// The error of parsing bytes (the test fails if they parse).
std::string error_of(const std::vector<uint8_t>& b) {
  const Expected<GgufFile> f = parse_gguf(b);
  EXPECT_FALSE(f.ok()) << "parsed";
  return f.ok() ? std::string() : f.error().message;
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

TEST(Gguf, WrittenFileReadsBackTheSame) {
  for (const uint64_t alignment : {uint64_t{32}, uint64_t{64}}) {
    GgufWriter w = sample();
    w.alignment = alignment;
    const std::vector<uint8_t> b = written(w);
    const Expected<GgufFile> f = parse_gguf(b);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->version, kGgufVersion);
    EXPECT_EQ(f->alignment, alignment);
    ASSERT_NE(f->find("general.architecture"), nullptr);
    EXPECT_EQ(f->find("general.architecture")->s, "llama");
    EXPECT_EQ(f->find("llama.block_count")->as_int(), 2);
    EXPECT_EQ(f->find("llama.rope.freq_base")->as_float(), 10000.0);
    EXPECT_EQ(f->find("test.i32")->as_int(), -5);
    EXPECT_EQ(f->find("test.u64")->as_int(), int64_t{1} << 40);
    EXPECT_EQ(f->find("test.flag")->as_int(), 1);
    const GgufValue* tokens = f->find("test.tokens");
    ASSERT_NE(tokens, nullptr);
    ASSERT_EQ(tokens->array.size(), 3u);
    EXPECT_EQ(tokens->array[2].s, "ccc");
    EXPECT_EQ(f->find("test.scores")->array[1].as_float(), -1.0);
    EXPECT_EQ(f->find("missing"), nullptr);
    ASSERT_EQ(f->tensors.size(), w.tensors.size());
    for (const GgufTensorData& want : w.tensors) {
      const GgufTensor* t = f->tensor(want.name);
      ASSERT_NE(t, nullptr) << want.name;
      EXPECT_EQ(t->dims, want.dims);
      EXPECT_EQ(t->type, want.type);
      ASSERT_EQ(t->bytes, want.bytes.size());
      EXPECT_EQ(0, std::memcmp(t->data, want.bytes.data(), want.bytes.size())) << want.name;
      EXPECT_EQ(t->offset % alignment, 0u);
      EXPECT_EQ(static_cast<uint64_t>(t->data - b.data()) % alignment, 0u);
    }
  }
}

TEST(Gguf, OpensAFileFromDisk) {
  const std::vector<uint8_t> b = written(sample());
  const std::string path = ::testing::TempDir() + "kvflash_gguf_test.gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  const Expected<GgufFile> f = open_gguf(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->tensors.size(), 4u);
  EXPECT_EQ(f->tensor("output_norm.weight")->data[0], 3);
  std::remove(path.c_str());
  const Expected<GgufFile> missing = open_gguf(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("cannot open"), std::string::npos);
}

// Every proper prefix of a valid file is refused (truncation anywhere), by a message.
TEST(Gguf, EveryTruncationIsRefused) {
  const std::vector<uint8_t> b = written(sample());
  for (size_t n = 0; n < b.size(); ++n) {
    const std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    const Expected<GgufFile> f = parse_gguf(cut);
    ASSERT_FALSE(f.ok()) << "a prefix of " << n << " of " << b.size() << " bytes parsed";
    EXPECT_EQ(f.error().message.rfind("gguf: ", 0), 0u) << f.error().message;
  }
}

TEST(Gguf, MalformedHeadersNameTheProblem) {
  const std::vector<uint8_t> good = written(sample());
  std::vector<uint8_t> b = good;
  b[0] = 'X';
  EXPECT_NE(error_of(b).find("not a GGUF file"), std::string::npos);
  b = good;
  poke<uint32_t>(b, 4, 7);
  EXPECT_NE(error_of(b).find("version 7"), std::string::npos);
  b = good;
  poke<uint64_t>(b, 8, uint64_t{1} << 60);  // tensor count
  EXPECT_NE(error_of(b).find("tensors cannot fit"), std::string::npos);
  b = good;
  poke<uint64_t>(b, 16, uint64_t{1} << 60);  // metadata count
  EXPECT_NE(error_of(b).find("metadata entries cannot fit"), std::string::npos);
  b = good;
  poke<uint64_t>(b, 24, uint64_t{1} << 50);  // the first key's length
  EXPECT_NE(error_of(b).find("metadata key 0 says"), std::string::npos);
  b = good;
  // The first value's type (after the 20-byte key "general.architecture").
  poke<uint32_t>(b, 24 + 8 + 20, 99);
  EXPECT_NE(error_of(b).find("unknown value type 99"), std::string::npos);
}

// Builds a file by hand from the header on: metadata none, one tensor with the given fields.
std::vector<uint8_t> one_tensor(uint32_t n_dims, std::vector<uint64_t> dims, uint32_t type,
                                uint64_t offset, size_t data_bytes) {
  std::vector<uint8_t> b;
  const auto put = [&](const void* p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  const uint32_t magic = kGgufMagic, version = 3;
  const uint64_t n_tensors = 1, n_kv = 0, name_len = 1;
  put(&magic, 4);
  put(&version, 4);
  put(&n_tensors, 8);
  put(&n_kv, 8);
  put(&name_len, 8);
  put("w", 1);
  put(&n_dims, 4);
  for (uint64_t d : dims) put(&d, 8);
  put(&type, 4);
  put(&offset, 8);
  b.resize((b.size() + 31) / 32 * 32 + data_bytes, 0);
  return b;
}

TEST(Gguf, MalformedTensorsNameTheProblem) {
  EXPECT_NE(error_of(one_tensor(5, {1, 1, 1, 1, 1}, 0, 0, 4)).find("5 dimensions"),
            std::string::npos);
  EXPECT_NE(error_of(one_tensor(0, {}, 0, 0, 4)).find("0 dimensions"), std::string::npos);
  EXPECT_NE(
      error_of(one_tensor(2, {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 4)).find("overflows"),
      std::string::npos);
  EXPECT_NE(error_of(one_tensor(1, {4}, 77, 0, 16)).find("ggml type 77"), std::string::npos);
  EXPECT_NE(error_of(one_tensor(1, {33}, 8, 0, 64)).find("not a multiple of q8_0's block"),
            std::string::npos);
  EXPECT_NE(error_of(one_tensor(1, {4}, 0, 8, 64)).find("not a multiple of the alignment"),
            std::string::npos);
  EXPECT_NE(error_of(one_tensor(1, {64}, 0, 0, 100)).find("past the file's end"),
            std::string::npos);
  // The same tensor, whole: it parses.
  const std::vector<uint8_t> whole = one_tensor(1, {64}, 0, 0, 256);
  EXPECT_TRUE(parse_gguf(whole).ok());
}

TEST(Gguf, DuplicatesAndOverlapsAreRefused) {
  GgufWriter w = sample();
  w.metadata.push_back({"llama.block_count", GgufValue::of_u32(3)});
  const Expected<std::vector<uint8_t>> dup_key = write_gguf(w);
  ASSERT_TRUE(dup_key.ok());
  EXPECT_NE(error_of(*dup_key).find("'llama.block_count' appears twice"), std::string::npos);

  w = sample();
  w.tensors.push_back(w.tensors[0]);
  const Expected<std::vector<uint8_t>> dup_tensor = write_gguf(w);
  ASSERT_FALSE(dup_tensor.ok());
  EXPECT_NE(dup_tensor.error().message.find("appears twice"), std::string::npos);

  // Two tensors at the same offset: patch the second entry's offset to the first's (0).
  w = sample();
  w.tensors.resize(2);
  std::vector<uint8_t> b = written(w);
  const std::string second = "blk.0.attn_q.weight";
  const auto at = std::search(b.begin(), b.end(), second.begin(), second.end()) - b.begin();
  // name, n_dims (4), two dims (16), type (4): then the offset
  poke<uint64_t>(b, static_cast<size_t>(at) + second.size() + 4 + 16 + 4, 0);
  EXPECT_NE(error_of(b).find("overlap"), std::string::npos);

  w = sample();
  w.tensors[1].bytes.pop_back();
  EXPECT_FALSE(write_gguf(w).ok());
  w = sample();
  w.alignment = 48;
  EXPECT_FALSE(write_gguf(w).ok());
}

TEST(Gguf, AlignmentMetadataIsChecked) {
  GgufWriter w = sample();
  w.metadata.push_back({"general.alignment", GgufValue::of_u32(24)});
  const Expected<std::vector<uint8_t>> refused = write_gguf(w);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("differs"), std::string::npos);
  // A file whose general.alignment (written as 64) reads 24.
  w = sample();
  w.alignment = 64;
  std::vector<uint8_t> b = written(w);
  const std::string key = "general.alignment";
  const auto at = std::search(b.begin(), b.end(), key.begin(), key.end()) - b.begin();
  poke<uint32_t>(b, static_cast<size_t>(at) + key.size() + 4, 24);
  EXPECT_NE(error_of(b).find("power of two"), std::string::npos);
}

}  // namespace
}  // namespace kvflash::tools::run
