// .safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data buffer, offsets relative to its start. Types safetensors has no code for travel
// as bytes: packed FP4 is "U8" with the last dim halved, and "tilerun.dtype.<name>": "fp4e2m1" in
// the metadata restores it. E8M0 uses the format's own "F8_E8M0" (torch.float8_e8m0fnu); "U8" with
// "tilerun.dtype.<name>": "e8m0" is read as well.
//
// The reader trusts nothing in the file: every count is checked before it sizes an allocation,
// so any input gives either tensors or a tilerun::Error naming the file and the tensor.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include <nlohmann/json.hpp>

#include "compiler/base/atomic_file.h"
#include "compiler/base/check.h"
#include "graph/model/safetensors.h"
#include "tilerun/error.h"
#include "tilerun/tensor.h"

namespace tilerun {

namespace {

using nlohmann::json;

// The reference implementation's limit; a real header is kilobytes to a few megabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kReservedPrefix = "tilerun.";
constexpr std::string_view kDTypeKeyPrefix = "tilerun.dtype.";

struct FileCode {
  DType dtype;
  std::string_view code;
};
// FP4E2M1 has no code of its own: it is stored as U8.
constexpr std::array<FileCode, 10> kFileCodes = {{
    {DType::F32, "F32"},
    {DType::BF16, "BF16"},
    {DType::F16, "F16"},
    {DType::F8E4M3, "F8_E4M3"},
    {DType::F8E5M2, "F8_E5M2"},
    {DType::I32, "I32"},
    {DType::I64, "I64"},
    {DType::U8, "U8"},
    {DType::E8M0, "F8_E8M0"},
    {DType::Bool, "BOOL"},
}};

std::optional<DType> parse_file_code(std::string_view code) {
  for (const FileCode& c : kFileCodes)
    if (c.code == code) return c.dtype;
  return std::nullopt;
}

std::string_view file_code(DType t) {
  for (const FileCode& c : kFileCodes)
    if (c.dtype == t) return c.code;
  TR_CHECK(false, "dtype without a safetensors code");
  return {};
}

std::string supported_codes() {
  std::string s;
  for (const FileCode& c : kFileCodes) s += (s.empty() ? "" : ", ") + std::string(c.code);
  return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& message,
                       ErrorKind kind = ErrorKind::Usage) {
  throw Error(SourceLoc{path}, message, kind);
}

std::string tensor_label(const std::string& name) { return "tensor '" + name + "'"; }

std::string range_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// ---------------------------------------------------------------------------------------------
// Reading

// One header entry, checked against the buffer.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A first pass over the header's JSON that only checks its structure: duplicate keys at any level
// (JSON leaves them undefined and nlohmann would silently keep the last one, so "w" given twice
// would hide a mistake) and the nesting depth (a real header nests three levels; the limit keeps
// "[[[[..." from costing gigabytes). A SAX pass is O(n log n); nlohmann's parser callback, which
// did this before, rescans the open object for every key (quadratic: 40k entries took 10 s).
class HeaderShapeCheck : public nlohmann::json_sax<json> {
 public:
  static constexpr int kMaxDepth = 8;

  std::string error;  // empty: the structure is fine

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return deeper();
  }
  bool key(string_t& k) override {
    if (keys_.back().insert(k).second) return true;
    error = "header has the key '" + k + "' twice";
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return deeper(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = std::string("header is not valid JSON: ") + e.what();
    return false;
  }

 private:
  bool deeper() {
    if (++depth_ <= kMaxDepth + 1) return true;
    error = "header nests deeper than " + std::to_string(kMaxDepth) + " levels";
    return false;
  }

  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;
};

// Parses the header once its structure passed HeaderShapeCheck.
json parse_header(const std::string& path, const std::string& text) {
  HeaderShapeCheck check;
  if (!json::sax_parse(text, &check) || !check.error.empty())
    fail(path, check.error.empty() ? "header is not valid JSON" : check.error);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  return header;
}

// A JSON integer as int64, or nullopt when it is not an integer or does not fit.
std::optional<int64_t> as_int64(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

Entry parse_entry(const std::string& path, const std::string& name, const json& v,
                  uint64_t buffer_bytes) {
  auto bad = [&](const std::string& message) { fail(path, tensor_label(name) + ": " + message); };
  if (!v.is_object()) bad("entry must be an object with dtype, shape and data_offsets");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) bad(std::string("missing '") + field + "'");

  Entry e;
  e.name = name;
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) bad("'dtype' must be a string");
  std::optional<DType> t = parse_file_code(dtype.get<std::string>());
  if (!t)
    bad("unsupported dtype '" + dtype.get<std::string>() + "' (supported: " + supported_codes() +
        ")");
  e.dtype = *t;

  const json& shape = v["shape"];
  if (!shape.is_array()) bad("'shape' must be an array of integers");
  for (const json& d : shape) {
    if (d.is_number_unsigned() && !as_int64(d))
      bad("dimension " + d.dump() + " in 'shape' overflows int64");
    if (!d.is_number_integer()) bad("'shape' must be an array of integers, found " + d.dump());
    e.shape.push_back(d.get<int64_t>());
  }
  int64_t numel = 0;
  try {
    numel = shape_numel(e.shape);
  } catch (const Error& err) {
    bad(err.message());
  }

  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad("'data_offsets' must be two non-negative integers [begin, end], found " + offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end) bad("data_offsets " + range_str(e.begin, e.end) + ": begin is after end");
  if (e.end > buffer_bytes)
    bad("data_offsets " + range_str(e.begin, e.end) + " lie outside the data buffer of " +
        std::to_string(buffer_bytes) + " bytes (file truncated, or the header is wrong)");
  // dtype_bytes multiplies by at most 64 bits; a count too large for that cannot match anyway.
  uint64_t have = e.end - e.begin;
  bool fits = numel <= std::numeric_limits<int64_t>::max() / 64;
  uint64_t need = static_cast<uint64_t>(dtype_bytes(e.dtype, fits ? numel : 0));
  if (!fits || have != need)
    bad("data_offsets " + range_str(e.begin, e.end) + " hold " + std::to_string(have) +
        " bytes, but shape " + shape_str(e.shape) + " of " + dtype.get<std::string>() + " needs " +
        (fits ? std::to_string(need) : "over 2^57") + " (the header does not match the data)");
  return e;
}

// Applies "tilerun.dtype.<name>" metadata: the true dtype of a tensor stored as bytes.
void restore_dtype(const std::string& path, const std::string& name, const std::string& value,
                   std::vector<Entry>& entries, const std::map<std::string, size_t>& index) {
  auto found = index.find(name);
  std::string key = std::string(kDTypeKeyPrefix) + name;
  if (found == index.end()) fail(path, "metadata '" + key + "' names no tensor in the file");
  auto it = entries.begin() + static_cast<std::ptrdiff_t>(found->second);
  auto bad = [&](const std::string& message) {
    fail(path, tensor_label(name) + ": metadata '" + key + "' = '" + value + "': " + message);
  };
  if (it->dtype != DType::U8) bad("the tensor must be stored as U8");
  if (value == "fp4e2m1") {
    if (it->shape.empty()) bad("a packed fp4 tensor needs at least one dimension");
    if (it->shape.back() > std::numeric_limits<int64_t>::max() / 2)
      bad("the last dimension overflows when unpacked");
    it->shape.back() *= 2;
    it->dtype = DType::FP4E2M1;
  } else if (value == "e8m0") {
    it->dtype = DType::E8M0;
  } else {
    bad("expected 'fp4e2m1' or 'e8m0'");
  }
}

// Refuses tensors whose byte ranges share a byte (empty ranges share nothing).
void check_overlaps(const std::string& path, std::vector<Entry> entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const Entry* furthest = nullptr;  // the non-empty range reaching furthest so far
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;
    if (furthest && e.begin < furthest->end)
      fail(path, "tensors '" + furthest->name + "' " + range_str(furthest->begin, furthest->end) +
                     " and '" + e.name + "' " + range_str(e.begin, e.end) + " overlap");
    if (!furthest || e.end > furthest->end) furthest = &e;
  }
}

std::string errno_text() { return errno ? std::strerror(errno) : "unknown error"; }

}  // namespace

namespace graph {

TensorMap read_safetensors_checked(
    const std::string& path, std::map<std::string, std::string>* metadata,
    const std::function<void(const std::vector<SafetensorsEntry>&)>& check_header) {
  std::error_code ec;
  errno = 0;
  // Before opening: opening a FIFO would block until a writer comes.
  if (!std::filesystem::exists(path, ec)) fail(path, "cannot open file: no such file");
  if (!std::filesystem::is_regular_file(path, ec)) fail(path, "cannot read: not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file: " + errno_text());
  uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read file size: " + ec.message());

  if (file_bytes < 8)
    fail(path, "file is shorter than 8 bytes (" + std::to_string(file_bytes) +
                   "): not a .safetensors file");
  std::array<unsigned char, 8> len_bytes;
  if (!in.read(reinterpret_cast<char*>(len_bytes.data()), 8))
    fail(path, "cannot read the header length: " + errno_text());
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len_bytes[i];
  if (header_bytes > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(header_bytes) +
                   " is absurd (over the 100 MB limit): not a .safetensors file, or corrupt");
  if (header_bytes > file_bytes - 8)
    fail(path, "header length " + std::to_string(header_bytes) + " is larger than the file (" +
                   std::to_string(file_bytes) + " bytes)");
  std::string text(header_bytes, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(header_bytes)))
    fail(path, "file truncated while reading the header");
  json header = parse_header(path, text);
  uint64_t buffer_start = 8 + header_bytes;
  uint64_t buffer_bytes = file_bytes - buffer_start;

  std::vector<Entry> entries;
  std::map<std::string, std::string> user_metadata;
  std::vector<std::pair<std::string, std::string>> dtype_overrides;
  for (const auto& [key, value] : header.items()) {
    if (key != "__metadata__") {
      entries.push_back(parse_entry(path, key, value, buffer_bytes));
      continue;
    }
    if (!value.is_object()) fail(path, "'__metadata__' must be an object of strings");
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string())
        fail(path, "'__metadata__' must map strings to strings; '" + k + "' is " + v.dump());
      if (k.starts_with(kDTypeKeyPrefix))
        dtype_overrides.emplace_back(k.substr(kDTypeKeyPrefix.size()), v.get<std::string>());
      else if (!k.starts_with(kReservedPrefix))
        user_metadata[k] = v.get<std::string>();
    }
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < entries.size(); ++i) index.emplace(entries[i].name, i);
  for (const auto& [name, value] : dtype_overrides)
    restore_dtype(path, name, value, entries, index);
  check_overlaps(path, entries);
  if (check_header) {
    std::vector<SafetensorsEntry> found;
    found.reserve(entries.size());
    for (const Entry& e : entries) found.push_back({e.name, e.dtype, e.shape});
    check_header(found);  // before a byte of tensor data is allocated or read
  }

  // Read in file order, so the file is scanned once front to back.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  TensorMap tensors;
  uint64_t at = buffer_start;  // where the stream is; a seek drops its buffer, so only on a gap
  in.seekg(static_cast<std::streamoff>(at));
  for (Entry& e : entries) {
    HostTensor t;
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data.resize(e.end - e.begin);
    if (at != buffer_start + e.begin) in.seekg(static_cast<std::streamoff>(buffer_start + e.begin));
    at = buffer_start + e.end;
    if (!in.read(reinterpret_cast<char*>(t.data.data()),
                 static_cast<std::streamsize>(t.data.size())))
      fail(path, tensor_label(e.name) + ": data truncated (the file shrank while being read?)");
    tensors.emplace_hint(tensors.end(), e.name, std::move(t));
  }
  if (metadata) *metadata = std::move(user_metadata);
  return tensors;
}

}  // namespace graph

TensorMap read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  return graph::read_safetensors_checked(path, metadata, nullptr);
}

TensorMap read_safetensors(const std::string& path) { return read_safetensors(path, nullptr); }

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json meta = json::object();
  for (const auto& [k, v] : metadata) {
    if (k.starts_with(kReservedPrefix))
      fail(path, "metadata key '" + k + "' is reserved for tilerun");
    meta[k] = v;
  }
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto bad = [&](const std::string& message) { fail(path, tensor_label(name) + ": " + message); };
    if (name == "__metadata__") bad("the name is reserved by the format");
    int64_t numel = 0;
    try {
      numel = t.numel();
    } catch (const Error& e) {
      bad(e.message());
    }
    if (t.nbytes() != dtype_bytes(t.dtype, numel))
      bad("holds " + std::to_string(t.nbytes()) + " bytes, but shape " + shape_str(t.shape) +
          " of " + std::string(dtype_name(t.dtype)) + " needs " +
          std::to_string(dtype_bytes(t.dtype, numel)));
    std::vector<int64_t> shape = t.shape;
    std::string_view code;
    if (t.dtype == DType::FP4E2M1) {
      if (shape.empty() || shape.back() % 2 != 0)
        bad("fp4e2m1 shape " + shape_str(shape) +
            " cannot be stored: its last dimension must be even to pack two values per byte");
      shape.back() /= 2;
      code = file_code(DType::U8);
      meta[std::string(kDTypeKeyPrefix) + name] = "fp4e2m1";
    } else {
      code = file_code(t.dtype);
    }
    uint64_t end = offset + static_cast<uint64_t>(t.nbytes());
    header[name] = {{"dtype", code}, {"shape", shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!meta.empty()) header["__metadata__"] = std::move(meta);

  // Keys come out sorted (json objects are std::maps) and compact, so the bytes are a function
  // of the input alone. Padding makes the buffer start 8-byte aligned, as the format asks.
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    fail(path, std::string("a tensor name or metadata string is not valid UTF-8: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::array<char, 8> len_bytes;
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>(uint64_t{text.size()} >> (8 * i));
  std::vector<std::string_view> pieces = {std::string_view(len_bytes.data(), 8), text};
  for (const auto& [name, t] : tensors)
    pieces.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  // A failed write (disk full, a size limit) must not leave a torn file or destroy a good one.
  compiler::write_file_atomically(path, pieces);
}

}  // namespace tilerun
