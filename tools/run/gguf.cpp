#include "run/gguf.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

namespace kvflash::tools::run {

namespace {

constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS

// Bytes of one scalar value type in the file; 0 for string and array.
size_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::u16:
    case GgufValueType::i16:
      return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64:
      return 8;
    case GgufValueType::string:
    case GgufValueType::array:
      return 0;
  }
  return 0;
}

bool known_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufValueType::f64);
}

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

// Reads the file front to back; the first failure is kept and every later read fails, so the
// parser needs no check after each read and never reads past the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}

  bool ok() const { return !error_.has_value(); }
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  const std::string& error() const { return *error_; }

  bool fail(std::string msg) {
    if (!error_) error_ = std::move(msg);
    return false;
  }

  template <class T>
  T read(const char* what) {
    T v{};
    if (!ok()) return v;
    if (left() < sizeof(T)) {
      fail(fmt::format("truncated at byte {} reading {} ({} bytes needed, {} left)", pos_, what,
                       sizeof(T), left()));
      return v;
    }
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string string(const std::string& what) {
    const uint64_t n = read<uint64_t>(what.c_str());
    if (!ok()) return {};
    if (n > left()) {
      fail(fmt::format("truncated at byte {}: {} says {} bytes, {} left", pos_, what, n, left()));
      return {};
    }
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  std::optional<std::string> error_;
};

GgufValue read_scalar(Reader& r, GgufValueType t, const std::string& what) {
  GgufValue v;
  v.type = t;
  const char* w = what.c_str();
  switch (t) {
    case GgufValueType::u8:
      v.u = r.read<uint8_t>(w);
      break;
    case GgufValueType::i8:
      v.i = r.read<int8_t>(w);
      break;
    case GgufValueType::u16:
      v.u = r.read<uint16_t>(w);
      break;
    case GgufValueType::i16:
      v.i = r.read<int16_t>(w);
      break;
    case GgufValueType::u32:
      v.u = r.read<uint32_t>(w);
      break;
    case GgufValueType::i32:
      v.i = r.read<int32_t>(w);
      break;
    case GgufValueType::u64:
      v.u = r.read<uint64_t>(w);
      break;
    case GgufValueType::i64:
      v.i = r.read<int64_t>(w);
      break;
    case GgufValueType::f32:
      v.f = r.read<float>(w);
      break;
    case GgufValueType::f64:
      v.f = r.read<double>(w);
      break;
    case GgufValueType::boolean: {
      const uint8_t b = r.read<uint8_t>(w);
      if (r.ok() && b > 1) r.fail(fmt::format("{}: bool byte {} is neither 0 nor 1", what, b));
      v.u = b;
      break;
    }
    case GgufValueType::string:
      v.s = r.string(what);
      break;
    case GgufValueType::array:
      r.fail(fmt::format("{}: arrays of arrays are not supported", what));
      break;
  }
  return v;
}

GgufValue read_value(Reader& r, uint32_t type, const std::string& key) {
  if (!known_value_type(type)) {
    r.fail(fmt::format("metadata '{}': unknown value type {}", key, type));
    return {};
  }
  const auto t = static_cast<GgufValueType>(type);
  if (t != GgufValueType::array) return read_scalar(r, t, fmt::format("metadata '{}'", key));
  GgufValue v;
  v.type = GgufValueType::array;
  const uint32_t et = r.read<uint32_t>("an array's element type");
  const uint64_t n = r.read<uint64_t>("an array's length");
  if (!r.ok()) return v;
  if (!known_value_type(et) || et == static_cast<uint32_t>(GgufValueType::array)) {
    r.fail(fmt::format("metadata '{}': array element type {} is not a scalar or string type", key,
                       et));
    return v;
  }
  v.elem_type = static_cast<GgufValueType>(et);
  // Every element takes at least its scalar size (a string: its 8-byte length).
  const size_t min_bytes = v.elem_type == GgufValueType::string ? 8 : scalar_bytes(v.elem_type);
  if (n > r.left() / min_bytes) {
    r.fail(fmt::format("metadata '{}': array of {} elements of {} cannot fit the {} bytes left",
                       key, n, to_string(v.elem_type), r.left()));
    return v;
  }
  v.array.reserve(static_cast<size_t>(n));
  for (uint64_t k = 0; k < n && r.ok(); ++k)
    v.array.push_back(read_scalar(r, v.elem_type, fmt::format("metadata '{}'[{}]", key, k)));
  return v;
}

Error gguf_error(const std::string& msg) {
  return invalid_argument("gguf: " + msg);
}

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <class T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

void put_scalar(std::vector<uint8_t>& out, const GgufValue& v, GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::boolean:
      put<uint8_t>(out, static_cast<uint8_t>(v.u));
      break;
    case GgufValueType::i8:
      put<int8_t>(out, static_cast<int8_t>(v.i));
      break;
    case GgufValueType::u16:
      put<uint16_t>(out, static_cast<uint16_t>(v.u));
      break;
    case GgufValueType::i16:
      put<int16_t>(out, static_cast<int16_t>(v.i));
      break;
    case GgufValueType::u32:
      put<uint32_t>(out, static_cast<uint32_t>(v.u));
      break;
    case GgufValueType::i32:
      put<int32_t>(out, static_cast<int32_t>(v.i));
      break;
    case GgufValueType::u64:
      put<uint64_t>(out, v.u);
      break;
    case GgufValueType::i64:
      put<int64_t>(out, v.i);
      break;
    case GgufValueType::f32:
      put<float>(out, static_cast<float>(v.f));
      break;
    case GgufValueType::f64:
      put<double>(out, v.f);
      break;
    case GgufValueType::string:
      put_string(out, v.s);
      break;
    case GgufValueType::array:
      break;
  }
}

}  // namespace

const char* to_string(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
      return "u8";
    case GgufValueType::i8:
      return "i8";
    case GgufValueType::u16:
      return "u16";
    case GgufValueType::i16:
      return "i16";
    case GgufValueType::u32:
      return "u32";
    case GgufValueType::i32:
      return "i32";
    case GgufValueType::f32:
      return "f32";
    case GgufValueType::boolean:
      return "bool";
    case GgufValueType::string:
      return "string";
    case GgufValueType::array:
      return "array";
    case GgufValueType::u64:
      return "u64";
    case GgufValueType::i64:
      return "i64";
    case GgufValueType::f64:
      return "f64";
  }
  return "?";
}

std::optional<int64_t> GgufValue::as_int() const {
  switch (type) {
    case GgufValueType::u8:
    case GgufValueType::u16:
    case GgufValueType::u32:
    case GgufValueType::boolean:
      return static_cast<int64_t>(u);
    case GgufValueType::u64:
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    case GgufValueType::i8:
    case GgufValueType::i16:
    case GgufValueType::i32:
    case GgufValueType::i64:
      return i;
    default:
      return std::nullopt;
  }
}

std::optional<double> GgufValue::as_float() const {
  if (type == GgufValueType::f32 || type == GgufValueType::f64) return f;
  if (type == GgufValueType::boolean) return std::nullopt;
  if (auto v = as_int()) return static_cast<double>(*v);
  return std::nullopt;
}

GgufValue GgufValue::of_u32(uint32_t v) {
  GgufValue x;
  x.type = GgufValueType::u32;
  x.u = v;
  return x;
}
GgufValue GgufValue::of_i32(int32_t v) {
  GgufValue x;
  x.type = GgufValueType::i32;
  x.i = v;
  return x;
}
GgufValue GgufValue::of_u64(uint64_t v) {
  GgufValue x;
  x.type = GgufValueType::u64;
  x.u = v;
  return x;
}
GgufValue GgufValue::of_f32(float v) {
  GgufValue x;
  x.type = GgufValueType::f32;
  x.f = v;
  return x;
}
GgufValue GgufValue::of_bool(bool v) {
  GgufValue x;
  x.type = GgufValueType::boolean;
  x.u = v ? 1 : 0;
  return x;
}
GgufValue GgufValue::of_string(std::string v) {
  GgufValue x;
  x.type = GgufValueType::string;
  x.s = std::move(v);
  return x;
}
GgufValue GgufValue::of_array(GgufValueType elem_type, std::vector<GgufValue> items) {
  GgufValue x;
  x.type = GgufValueType::array;
  x.elem_type = elem_type;
  x.array = std::move(items);
  return x;
}

const char* to_string(GgmlType t) {
  switch (t) {
    case GgmlType::f32:
      return "f32";
    case GgmlType::f16:
      return "f16";
    case GgmlType::q4_0:
      return "q4_0";
    case GgmlType::q4_1:
      return "q4_1";
    case GgmlType::q5_0:
      return "q5_0";
    case GgmlType::q5_1:
      return "q5_1";
    case GgmlType::q8_0:
      return "q8_0";
    case GgmlType::q8_1:
      return "q8_1";
    case GgmlType::q2_k:
      return "q2_K";
    case GgmlType::q3_k:
      return "q3_K";
    case GgmlType::q4_k:
      return "q4_K";
    case GgmlType::q5_k:
      return "q5_K";
    case GgmlType::q6_k:
      return "q6_K";
    case GgmlType::q8_k:
      return "q8_K";
    case GgmlType::i8:
      return "i8";
    case GgmlType::i16:
      return "i16";
    case GgmlType::i32:
      return "i32";
    case GgmlType::i64:
      return "i64";
    case GgmlType::f64:
      return "f64";
    case GgmlType::bf16:
      return "bf16";
  }
  return "?";
}

std::optional<GgmlBlock> ggml_block(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32:
    case GgmlType::i32:
      return GgmlBlock{1, 4};
    case GgmlType::f16:
    case GgmlType::bf16:
    case GgmlType::i16:
      return GgmlBlock{1, 2};
    case GgmlType::i8:
      return GgmlBlock{1, 1};
    case GgmlType::i64:
    case GgmlType::f64:
      return GgmlBlock{1, 8};
    case GgmlType::q4_0:
      return GgmlBlock{32, 18};
    case GgmlType::q4_1:
      return GgmlBlock{32, 20};
    case GgmlType::q5_0:
      return GgmlBlock{32, 22};
    case GgmlType::q5_1:
      return GgmlBlock{32, 24};
    case GgmlType::q8_0:
      return GgmlBlock{32, 34};
    case GgmlType::q8_1:
      return GgmlBlock{32, 36};
    case GgmlType::q2_k:
      return GgmlBlock{256, 84};
    case GgmlType::q3_k:
      return GgmlBlock{256, 110};
    case GgmlType::q4_k:
      return GgmlBlock{256, 144};
    case GgmlType::q5_k:
      return GgmlBlock{256, 176};
    case GgmlType::q6_k:
      return GgmlBlock{256, 210};
    case GgmlType::q8_k:
      return GgmlBlock{256, 292};
  }
  return std::nullopt;
}

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  for (const GgufTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Expected<GgufFile> parse_gguf(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  GgufFile f;
  const uint32_t magic = r.read<uint32_t>("the magic");
  if (r.ok() && magic != kGgufMagic)
    return gguf_error(fmt::format("not a GGUF file (magic 0x{:08x}, expected 0x{:08x} \"GGUF\")",
                                  magic, kGgufMagic));
  f.version = r.read<uint32_t>("the version");
  if (r.ok() && f.version != 2 && f.version != 3)
    return gguf_error(fmt::format("version {} is not supported (2 and 3 are)", f.version));
  const uint64_t n_tensors = r.read<uint64_t>("the tensor count");
  const uint64_t n_kv = r.read<uint64_t>("the metadata count");
  if (!r.ok()) return gguf_error(r.error());
  // Each metadata entry takes at least 13 bytes (key length, type, one byte), each tensor entry
  // 24 (name length, dim count, type, offset; no dims): counts the file cannot hold are refused
  // before anything is allocated for them.
  if (n_kv > r.left() / 13)
    return gguf_error(
        fmt::format("{} metadata entries cannot fit the {} bytes left", n_kv, r.left()));
  if (n_tensors > r.left() / 24)
    return gguf_error(fmt::format("{} tensors cannot fit the {} bytes left", n_tensors, r.left()));

  std::set<std::string> keys;
  for (uint64_t k = 0; k < n_kv && r.ok(); ++k) {
    std::string key = r.string(fmt::format("metadata key {}", k));
    const uint32_t type = r.read<uint32_t>("a metadata value type");
    if (!r.ok()) break;
    if (!keys.insert(key).second)
      return gguf_error(fmt::format("metadata '{}' appears twice", key));
    GgufValue v = read_value(r, type, key);
    if (r.ok()) f.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (!r.ok()) return gguf_error(r.error());
  if (const GgufValue* a = f.find("general.alignment")) {
    if (a->type != GgufValueType::u32 || a->u == 0 || (a->u & (a->u - 1)) != 0)
      return gguf_error(
          fmt::format("general.alignment must be a u32 power of two (it is a {} of value {})",
                      to_string(a->type), a->type == GgufValueType::u32 ? a->u : 0));
    f.alignment = a->u;
  }

  std::set<std::string> names;
  f.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors && r.ok(); ++k) {
    GgufTensor t;
    t.name = r.string(fmt::format("tensor {}'s name", k));
    const uint32_t n_dims = r.read<uint32_t>("a tensor's dimension count");
    if (!r.ok()) break;
    if (!names.insert(t.name).second)
      return gguf_error(fmt::format("tensor '{}' appears twice", t.name));
    if (n_dims == 0 || n_dims > kMaxDims)
      return gguf_error(
          fmt::format("tensor '{}': {} dimensions (allowed: 1 .. {})", t.name, n_dims, kMaxDims));
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims && r.ok(); ++d) {
      const uint64_t ne = r.read<uint64_t>("a tensor dimension");
      if (!r.ok()) break;
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (ne != 0 && elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne))
        return gguf_error(fmt::format("tensor '{}': its element count overflows 64 bits", t.name));
      elements *= ne;
      t.dims.push_back(static_cast<int64_t>(ne));
    }
    const uint32_t type = r.read<uint32_t>("a tensor type");
    t.offset = r.read<uint64_t>("a tensor offset");
    if (!r.ok()) break;
    const std::optional<GgmlBlock> blk = ggml_block(type);
    if (!blk)
      return gguf_error(
          fmt::format("tensor '{}': ggml type {} is not one this reader knows", t.name, type));
    t.type = static_cast<GgmlType>(type);
    if (t.dims[0] % blk->values != 0)
      return gguf_error(
          fmt::format("tensor '{}': its first dimension {} is not a multiple of {}'s "
                      "block of {} values",
                      t.name, t.dims[0], to_string(t.type), blk->values));
    const uint64_t blocks = elements / static_cast<uint64_t>(blk->values);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(blk->bytes))
      return gguf_error(fmt::format("tensor '{}': its byte size overflows 64 bits", t.name));
    t.bytes = blocks * static_cast<uint64_t>(blk->bytes);
    if (t.offset % f.alignment != 0)
      return gguf_error(fmt::format("tensor '{}': offset {} is not a multiple of the alignment {}",
                                    t.name, t.offset, f.alignment));
    f.tensors.push_back(std::move(t));
  }
  if (!r.ok()) return gguf_error(r.error());

  // The data section starts at the next multiple of the alignment; every tensor's bytes lie in it,
  // and no two overlap.
  const uint64_t data_start = align_up(r.pos(), f.alignment);
  const uint64_t data_size = bytes.size() > data_start ? bytes.size() - data_start : 0;
  std::vector<std::pair<uint64_t, size_t>> order;
  for (size_t k = 0; k < f.tensors.size(); ++k) {
    GgufTensor& t = f.tensors[k];
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      return gguf_error(fmt::format(
          "tensor '{}': its {} bytes at offset {} of the data section reach past the file's end "
          "(the section holds {} bytes from byte {}; the file may be truncated)",
          t.name, t.bytes, t.offset, data_size, data_start));
    t.data = bytes.data() + data_start + t.offset;
    order.emplace_back(t.offset, k);
  }
  std::sort(order.begin(), order.end());
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& a = f.tensors[order[k - 1].second];
    const GgufTensor& b = f.tensors[order[k].second];
    if (a.offset + a.bytes > b.offset)
      return gguf_error(
          fmt::format("tensors '{}' and '{}' overlap in the data section", a.name, b.name));
  }
  return f;
}

Expected<GgufFile> open_gguf(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return gguf_error(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return gguf_error(fmt::format("cannot stat '{}': {}", path, std::strerror(e)));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return gguf_error(fmt::format("'{}' is empty", path));
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    return gguf_error(fmt::format("cannot map '{}': {}", path, std::strerror(e)));
  std::shared_ptr<const void> mapping(
      p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  Expected<GgufFile> f = parse_gguf({static_cast<const uint8_t*>(p), size});
  if (!f) return Error{f.error().code, f.error().message + fmt::format(" (in '{}')", path)};
  f->storage_ = std::move(mapping);
  return f;
}

Expected<std::vector<uint8_t>> write_gguf(const GgufWriter& w) {
  if (w.alignment == 0 || (w.alignment & (w.alignment - 1)) != 0)
    return gguf_error(fmt::format("alignment {} is not a power of two", w.alignment));
  std::vector<std::pair<std::string, GgufValue>> metadata = w.metadata;
  bool has_alignment = false;
  for (const auto& [k, v] : metadata) {
    if (k != "general.alignment") continue;
    has_alignment = true;
    if (v.type == GgufValueType::u32 && v.u != w.alignment)
      return gguf_error(fmt::format("general.alignment {} differs from the writer's alignment {}",
                                    v.u, w.alignment));
  }
  if (w.alignment != kGgufDefaultAlignment && !has_alignment)
    metadata.emplace_back("general.alignment",
                          GgufValue::of_u32(static_cast<uint32_t>(w.alignment)));

  std::vector<uint8_t> out;
  put<uint32_t>(out, kGgufMagic);
  put<uint32_t>(out, kGgufVersion);
  put<uint64_t>(out, w.tensors.size());
  put<uint64_t>(out, metadata.size());
  for (const auto& [k, v] : metadata) {
    put_string(out, k);
    put<uint32_t>(out, static_cast<uint32_t>(v.type));
    if (v.type == GgufValueType::array) {
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.array.size());
      for (const GgufValue& e : v.array) put_scalar(out, e, v.elem_type);
    } else {
      put_scalar(out, v, v.type);
    }
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  std::set<std::string> names;
  for (const GgufTensorData& t : w.tensors) {
    if (!names.insert(t.name).second)
      return gguf_error(fmt::format("tensor '{}' appears twice", t.name));
    const std::optional<GgmlBlock> blk = ggml_block(static_cast<uint32_t>(t.type));
    int64_t elements = 1;
    for (int64_t d : t.dims) elements *= d;
    if (!blk || t.dims.empty() || t.dims.size() > kMaxDims || t.dims[0] % blk->values != 0 ||
        static_cast<uint64_t>(elements / blk->values * blk->bytes) != t.bytes.size())
      return gguf_error(fmt::format("tensor '{}': {} bytes do not hold a {} tensor of these dims",
                                    t.name, t.bytes.size(), to_string(t.type)));
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset = align_up(offset + t.bytes.size(), w.alignment);
  }
  const uint64_t data_start = align_up(out.size(), w.alignment);
  out.resize(data_start, 0);
  for (size_t k = 0; k < w.tensors.size(); ++k) {
    out.resize(data_start + offsets[k], 0);
    put_bytes(out, w.tensors[k].bytes.data(), w.tensors[k].bytes.size());
  }
  return out;
}

}  // namespace kvflash::tools::run
