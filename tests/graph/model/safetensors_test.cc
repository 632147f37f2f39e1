// .safetensors reading and writing: round trips on random data, the writer's bytes checked by an
// independent reader, and every malformed file refused with a message naming file and tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "tilerun/error.h"
#include "tilerun/tensor.h"

namespace tilerun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr DType kAllDTypes[] = {DType::F32,  DType::BF16,   DType::F16, DType::F8E4M3,
                                DType::I32,  DType::I64,    DType::U8,  DType::FP4E2M1,
                                DType::E8M0, DType::F8E5M2, DType::Bool};

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "." + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("tilerun_st_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }

 private:
  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file from its parts; `length` overrides the header length field.
std::string file_bytes(const std::string& header, const std::string& data,
                       std::optional<uint64_t> length = std::nullopt) {
  return le64(length.value_or(header.size())) + header + data;
}

// Fresh random data each run; a failure prints its seed, and TILERUN_TEST_SEED replays it.
uint64_t test_seed() {
  if (const char* s = std::getenv("TILERUN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

class SafetensorsTest : public testing::Test {
 protected:
  SafetensorsTest() : seed_(test_seed()), rng_(seed_) {}
  void SetUp() override { trace_.emplace(__FILE__, __LINE__, "seed " + std::to_string(seed_)); }

  HostTensor random_tensor(DType dtype) {
    HostTensor t;
    t.dtype = dtype;
    int rank = std::uniform_int_distribution<int>(dtype == DType::FP4E2M1 ? 1 : 0, 4)(rng_);
    for (int i = 0; i < rank; ++i)
      t.shape.push_back(std::uniform_int_distribution<int>(0, 6)(rng_));
    if (dtype == DType::FP4E2M1) t.shape.back() *= 2;  // packed pairs along the last dim
    t.data.resize(static_cast<size_t>(dtype_bytes(dtype, t.numel())));
    for (uint8_t& b : t.data) b = static_cast<uint8_t>(rng_());
    return t;
  }

  TensorMap random_tensors() {
    TensorMap m;
    for (DType t : kAllDTypes)
      for (int k = 0; k < 3; ++k)
        m[std::string(dtype_name(t)) + "." + std::to_string(rng_() % 1000)] = random_tensor(t);
    return m;
  }

  uint64_t seed_;
  std::mt19937_64 rng_;
  std::optional<testing::ScopedTrace> trace_;
  TempDir dir_;
};

void expect_same(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const HostTensor& u = b.at(name);
    EXPECT_EQ(t.dtype, u.dtype) << name;
    EXPECT_EQ(t.shape, u.shape) << name;
    EXPECT_EQ(t.data, u.data) << name;
  }
}

TEST_F(SafetensorsTest, RoundTripsEveryDTypeWithMetadata) {
  for (int round = 0; round < 20; ++round) {
    TensorMap tensors = random_tensors();
    std::map<std::string, std::string> meta = {{"format", "pt"},
                                               {"note", "r" + std::to_string(rng_())}};
    write_safetensors(dir_.path("t.safetensors"), tensors, meta);
    std::map<std::string, std::string> meta_back;
    TensorMap back = read_safetensors(dir_.path("t.safetensors"), &meta_back);
    expect_same(tensors, back);
    EXPECT_EQ(meta, meta_back);
  }
}

TEST_F(SafetensorsTest, RoundTripsEmptyFileAndEmptyTensors) {
  write_safetensors(dir_.path("empty.safetensors"), {});
  EXPECT_TRUE(read_safetensors(dir_.path("empty.safetensors")).empty());

  TensorMap tensors;
  tensors["a"] = {DType::F32, {0, 3}, {}};
  tensors["b"] = {DType::BF16, {2}, {1, 2, 3, 4}};
  tensors["c"] = {DType::I64, {4, 0}, {}};
  tensors["s"] = {DType::F32, {}, {0, 0, 128, 63}};  // a scalar
  write_safetensors(dir_.path("t.safetensors"), tensors);
  expect_same(tensors, read_safetensors(dir_.path("t.safetensors")));
}

TEST_F(SafetensorsTest, WriterIsDeterministic) {
  TensorMap tensors = random_tensors();
  write_safetensors(dir_.path("a.safetensors"), tensors, {{"k", "v"}});
  // Built in the opposite insertion order: the bytes must not notice.
  TensorMap reversed;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) reversed.insert(*it);
  write_safetensors(dir_.path("b.safetensors"), reversed, {{"k", "v"}});
  EXPECT_EQ(read_bytes(dir_.path("a.safetensors")), read_bytes(dir_.path("b.safetensors")));
}

// The format's spec, read by hand: this does not share a line with the library's reader.
TEST_F(SafetensorsTest, WriterOutputFollowsTheSpec) {
  TensorMap tensors = random_tensors();
  std::string path = dir_.path("t.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}});
  std::string bytes = read_bytes(path);

  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ(n % 8, 0u) << "the data buffer must start 8-byte aligned";
  std::string header = bytes.substr(8, n);
  size_t close = header.find_last_of('}');
  ASSERT_NE(close, std::string::npos);
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos)
      << "padding must be spaces";
  EXPECT_EQ(header.front(), '{');
  json h = json::parse(header);
  std::string buffer = bytes.substr(8 + n);

  const std::map<DType, std::string> codes = {
      {DType::F32, "F32"},        {DType::BF16, "BF16"},  {DType::F16, "F16"},
      {DType::F8E4M3, "F8_E4M3"}, {DType::I32, "I32"},    {DType::I64, "I64"},
      {DType::U8, "U8"},          {DType::FP4E2M1, "U8"}, {DType::E8M0, "F8_E8M0"},
      {DType::F8E5M2, "F8_E5M2"}, {DType::Bool, "BOOL"}};
  uint64_t expected_begin = 0;
  for (const auto& [name, t] : tensors) {  // name order is layout order
    SCOPED_TRACE(name);
    ASSERT_TRUE(h.contains(name));
    const json& e = h[name];
    EXPECT_EQ(e.size(), 3u);
    EXPECT_EQ(e["dtype"], codes.at(t.dtype));
    std::vector<int64_t> shape = t.shape;
    if (t.dtype == DType::FP4E2M1) shape.back() /= 2;
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), shape);
    uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    EXPECT_EQ(begin, expected_begin);
    EXPECT_EQ(end - begin, t.data.size());
    ASSERT_LE(end, buffer.size());
    EXPECT_EQ(buffer.substr(begin, end - begin), std::string(t.data.begin(), t.data.end()));
    expected_begin = end;
  }
  EXPECT_EQ(expected_begin, buffer.size()) << "the buffer has no holes and no tail";
  json meta = h["__metadata__"];
  EXPECT_EQ(meta["format"], "pt");
  size_t fp4_count = 0;
  for (const auto& [name, t] : tensors)
    if (t.dtype == DType::FP4E2M1) {
      EXPECT_EQ(meta["tilerun.dtype." + name], "fp4e2m1");
      ++fp4_count;
    }
  EXPECT_EQ(meta.size(), 1 + fp4_count);
  EXPECT_EQ(h.size(), tensors.size() + 1);
}

// A header as Python's safetensors writes it (metadata first, fields in its order, padding).
TEST_F(SafetensorsTest, ReadsAFileWrittenByAnotherTool) {
  std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data = std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8) + "\x80\x3f";
  write_bytes(dir_.path("py.safetensors"), file_bytes(header, data));
  std::map<std::string, std::string> meta;
  TensorMap t = read_safetensors(dir_.path("py.safetensors"), &meta);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t["w"].dtype, DType::F32);
  EXPECT_EQ(t["w"].shape, std::vector<int64_t>{2});
  EXPECT_EQ(t["w"].data, (std::vector<uint8_t>{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}));
  EXPECT_EQ(t["b"].dtype, DType::BF16);
  EXPECT_EQ(t["b"].data, (std::vector<uint8_t>{0x80, 0x3f}));
}

TEST_F(SafetensorsTest, ReadsE8M0StoredAsBytesWithMetadata) {
  std::string header =
      R"({"__metadata__":{"tilerun.dtype.s":"e8m0"},"s":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
  write_bytes(dir_.path("s.safetensors"), file_bytes(header, "\x7f\x80\xff"));
  std::map<std::string, std::string> meta;
  TensorMap t = read_safetensors(dir_.path("s.safetensors"), &meta);
  EXPECT_EQ(t["s"].dtype, DType::E8M0);
  EXPECT_EQ(t["s"].shape, std::vector<int64_t>{3});
  EXPECT_TRUE(meta.empty()) << "tilerun's own keys are not user metadata";
}

// Any bytes at all: tensors or a tilerun::Error, never a crash or another exception.
TEST_F(SafetensorsTest, NeverCrashesOnCorruptedFiles) {
  TensorMap tensors = random_tensors();
  std::string good_path = dir_.path("good.safetensors");
  write_safetensors(good_path, tensors, {{"k", "v"}});
  const std::string good = read_bytes(good_path);
  std::string path = dir_.path("bad.safetensors");
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    switch (i % 3) {
      case 0:  // flip a few bytes anywhere, header length included
        for (int k = 0; k < 1 + static_cast<int>(rng_() % 4); ++k)
          bytes[rng_() % bytes.size()] = static_cast<char>(rng_());
        break;
      case 1:  // cut the file short
        bytes.resize(rng_() % bytes.size());
        break;
      case 2: {  // flip bytes inside the header only, where the JSON is
        uint64_t n = std::min<uint64_t>(
            bytes.size() - 8, static_cast<uint8_t>(bytes[0]) | static_cast<uint8_t>(bytes[1]) << 8);
        bytes[8 + rng_() % n] = static_cast<char>(rng_() % 128);
        break;
      }
    }
    write_bytes(path, bytes);
    try {
      read_safetensors(path);
    } catch (const Error& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(refused, 1000);
}

// ----------------------------------------------------------------------------------------------
// Malformed files: one case each, with the phrase the message must contain.

struct BadFile {
  std::string name;    // the test's name
  std::string bytes;   // the whole file
  std::string phrase;  // expected in the message
  std::string tensor;  // the tensor the message must name, if any
};

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  uint64_t begin, uint64_t end) {
  return "\"" + name + R"(":{"dtype":")" + dtype + R"(","shape":)" + shape +
         R"(,"data_offsets":[)" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

std::vector<BadFile> bad_files() {
  const std::string d24(24, '\x01');
  const std::string ok = "{" + entry("w", "F32", "[2,3]", 0, 24) + "}";
  return {
      {"TooShort", std::string("\x05\x00\x00", 3), "shorter than 8 bytes", ""},
      {"HeaderLongerThanFile", file_bytes(ok, d24, 1000), "larger than the file", ""},
      {"HeaderLengthAbsurd", file_bytes(ok, d24, uint64_t{1} << 40), "100 MB", ""},
      {"HeaderLengthMaxU64", file_bytes(ok, d24, ~uint64_t{0}), "100 MB", ""},
      {"NotJson", file_bytes("{\"w\": {dtype", d24), "not valid JSON", ""},
      {"InvalidUtf8", file_bytes("{\"w\xff\":{}}", ""), "not valid JSON", ""},
      {"TooDeep", file_bytes(R"({"w":)" + std::string(20, '[') + std::string(20, ']') + "}", ""),
       "nests deeper than", ""},
      {"NotAnObject", file_bytes("[1, 2, 3]", ""), "not a JSON object", ""},
      {"DuplicateTensor",
       file_bytes("{" + entry("w", "U8", "[1]", 0, 1) + "," + entry("w", "U8", "[1]", 1, 2) + "}",
                  "ab"),
       "'w' twice", ""},
      {"EntryNotObject", file_bytes(R"({"w": 5})", ""), "must be an object", "w"},
      {"MissingDtype", file_bytes(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "a"),
       "missing 'dtype'", "w"},
      {"MissingShape", file_bytes(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "a"),
       "missing 'shape'", "w"},
      {"MissingOffsets", file_bytes(R"({"w":{"dtype":"U8","shape":[1]}})", "a"),
       "missing 'data_offsets'", "w"},
      {"DtypeNotString", file_bytes(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", "a"),
       "'dtype' must be a string", "w"},
      {"ShapeNotArray", file_bytes(R"({"w":{"dtype":"U8","shape":"1","data_offsets":[0,1]}})", "a"),
       "'shape' must be an array of integers", "w"},
      {"ShapeFloat", file_bytes("{" + entry("w", "U8", "[1.5]", 0, 1) + "}", "a"),
       "'shape' must be an array of integers", "w"},
      {"OffsetsNotPair", file_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "a"),
       "'data_offsets' must be two non-negative integers", "w"},
      {"OffsetsNegative",
       file_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "a"),
       "'data_offsets' must be two non-negative integers", "w"},
      {"OffsetsStrings",
       file_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":["0","1"]}})", "a"),
       "'data_offsets' must be two non-negative integers", "w"},
      {"UnknownDtype", file_bytes("{" + entry("w", "F64", "[3]", 0, 24) + "}", d24),
       "unsupported dtype 'F64'", "w"},
      {"NegativeDim", file_bytes("{" + entry("w", "F32", "[-2,3]", 0, 24) + "}", d24),
       "negative dimension", "w"},
      {"ElementCountOverflow",
       file_bytes("{" + entry("w", "U8", "[4294967296,4294967296]", 0, 1) + "}", "a"),
       "more elements than fit in int64", "w"},
      {"DimOverflowsInt64",
       file_bytes("{" + entry("w", "U8", "[18446744073709551615]", 0, 1) + "}", "a"),
       "overflows int64", "w"},
      {"BeginAfterEnd", file_bytes("{" + entry("w", "U8", "[0]", 4, 2) + "}", "abcd"),
       "begin is after end", "w"},
      {"OffsetsOutsideBuffer", file_bytes("{" + entry("w", "F32", "[2,3]", 100, 124) + "}", d24),
       "outside the data buffer", "w"},
      {"HeaderThatLies", file_bytes("{" + entry("w", "F32", "[2,3]", 0, 20) + "}", d24),
       "does not match the data", "w"},
      {"HugeShapeSmallRange",
       file_bytes("{" + entry("w", "F32", "[1000000000000]", 0, 24) + "}", d24),
       "does not match the data", "w"},
      {"Overlap",
       file_bytes(
           "{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}", d24),
       "overlap", "b"},
      {"Truncated", file_bytes(ok, d24).substr(0, 8 + ok.size() + 21), "truncated", "w"},
      {"MetadataNotObject", file_bytes(R"({"__metadata__":[1]})", ""), "'__metadata__'", ""},
      {"MetadataNotStrings", file_bytes(R"({"__metadata__":{"epoch":3}})", ""),
       "must map strings to strings", ""},
      {"DTypeMetadataForMissingTensor",
       file_bytes(R"({"__metadata__":{"tilerun.dtype.q":"fp4e2m1"}})", ""), "names no tensor", ""},
      {"DTypeMetadataOnNonBytes",
       file_bytes(R"({"__metadata__":{"tilerun.dtype.w":"fp4e2m1"},)" +
                      entry("w", "F32", "[2,3]", 0, 24) + "}",
                  d24),
       "must be stored as U8", "w"},
      {"DTypeMetadataUnknownValue",
       file_bytes(
           R"({"__metadata__":{"tilerun.dtype.w":"f64"},)" + entry("w", "U8", "[4]", 0, 4) + "}",
           "abcd"),
       "expected 'fp4e2m1' or 'e8m0'", "w"},
      {"PackedFp4Scalar",
       file_bytes(
           R"({"__metadata__":{"tilerun.dtype.w":"fp4e2m1"},)" + entry("w", "U8", "[]", 0, 1) + "}",
           "a"),
       "at least one dimension", "w"},
  };
}

class MalformedFileTest : public testing::TestWithParam<BadFile> {};

TEST_P(MalformedFileTest, IsRefusedWithAClearMessage) {
  TempDir dir;
  const BadFile& c = GetParam();
  std::string path = dir.path("bad.safetensors");
  write_bytes(path, c.bytes);
  try {
    read_safetensors(path);
    FAIL() << "no error for " << c.name;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(c.phrase), std::string::npos) << what;
    EXPECT_NE(what.find(path), std::string::npos) << "the file is not named: " << what;
    if (!c.tensor.empty()) {
      EXPECT_NE(what.find("'" + c.tensor + "'"), std::string::npos)
          << "the tensor is not named: " << what;
    }
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MalformedFileTest, testing::ValuesIn(bad_files()),
                         [](const testing::TestParamInfo<BadFile>& info) {
                           return info.param.name;
                         });

TEST(SafetensorsFileTest, MissingFileIsRefused) {
  TempDir dir;
  std::string path = dir.path("nope.safetensors");
  try {
    read_safetensors(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": error: cannot open file"), std::string::npos)
        << e.what();
  }
}

TEST(SafetensorsFileTest, DirectoryIsRefused) {
  TempDir dir;
  fs::create_directories(dir.path("d.safetensors"));
  EXPECT_THROW(read_safetensors(dir.path("d.safetensors")), Error);
}

// ----------------------------------------------------------------------------------------------
// What the writer refuses.

void expect_write_error(const std::string& path, const TensorMap& t,
                        const std::map<std::string, std::string>& meta, const std::string& phrase) {
  try {
    write_safetensors(path, t, meta);
    FAIL() << "no error, expected: " << phrase;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(SafetensorsWriterTest, RefusesWhatCannotBeStored) {
  TempDir dir;
  std::string p = dir.path("w.safetensors");
  expect_write_error(p, {{"w", {DType::F32, {2}, {1, 2, 3}}}}, {},
                     "'w': holds 3 bytes, but shape [2] of f32 needs 8");
  expect_write_error(p, {{"q", {DType::FP4E2M1, {3}, {0, 0}}}}, {}, "must be even");
  expect_write_error(p, {{"q", {DType::FP4E2M1, {}, {0}}}}, {}, "must be even");
  expect_write_error(p, {{"w", {DType::F32, {-1}, {}}}}, {}, "negative dimension");
  expect_write_error(p, {{"__metadata__", {DType::U8, {1}, {0}}}}, {}, "reserved");
  expect_write_error(p, {}, {{"tilerun.dtype.w", "fp4e2m1"}}, "reserved for tilerun");
  expect_write_error(p, {{"w\xff", {DType::U8, {1}, {0}}}}, {}, "not valid UTF-8");
  expect_write_error(dir.path("no/such/dir/w.safetensors"), {}, {}, "cannot open for writing");
}

TEST(ShapeTest, NumelChecksSignAndOverflow) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
  EXPECT_EQ(shape_numel({int64_t{1} << 40, int64_t{1} << 40, 0}), 0) << "empty beats overflow";
  EXPECT_THROW(shape_numel({int64_t{1} << 31, int64_t{1} << 31, 2}), Error);
  EXPECT_THROW(shape_numel({3, -1}), Error);
  EXPECT_EQ(shape_str({2, 3}), "[2, 3]");
  EXPECT_EQ(shape_str({}), "[]");
  HostTensor t{DType::F32, {-4}, {}};
  try {
    t.numel();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "shape [-4] has a negative dimension");
  }
}

}  // namespace
}  // namespace tilerun
