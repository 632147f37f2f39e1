// Index contracts (kernels::IndexContract): the graph checks embedding's ids with check_index
// before the gather; an id outside [0, V) fails the step with a tilerun::Error naming the op's
// line, the tensor, the element and the value (exit 1 from the CLI), never an out-of-table read;
// the gather kernel given the check's status has its bound check proved from the contract.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "compiler/lower.h"
#include "graph/autodiff.h"
#include "graph/model/numeric_convert.h"
#include "graph/runtime/cuda_driver.h"
#include "kernels/op_registry.h"
#include "tests/tools/cli_run.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

// ids [B, T] into a table [V, D]; `init` is the ids' YAML init.
std::string lm_yaml(const std::string& init) {
  return "model: lm\ndims: {B: 3, T: 5, V: 20, D: 24}\n"
         "inputs:\n  ids: {shape: [B, T], dtype: i32, init: " +
         init +
         "}\n"
         "layers:\n  - name: lm\n    weights:\n      table: {shape: [V, D]}\n    ops:\n"
         "      - {op: embedding, in: [table, ids], out: x}\n"
         "      - {op: embedding, in: [table, ids], out: x2}\n"
         "      - {op: add, in: [x, x2], out: y}\n"
         "outputs: [lm.y]\n";
}

// An i32 tensor of `shape` holding v.
HostTensor i32_tensor(std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  HostTensor t{.dtype = DType::I32, .shape = std::move(shape), .data = {}};
  t.data.resize(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) graph::store_element(DType::I32, t.data.data(), i, v[i]);
  return t;
}

HostTensor ids_tensor(const std::vector<int32_t>& v) { return i32_tensor({3, 5}, v); }

// One check_index per checked tensor, before the first op that indexes with it; both embeddings
// read its status as their third input.
TEST(IndexContract, GraphChecksEachIndexTensorOnceBeforeItsFirstUse) {
  const Model model = parse_model(lm_yaml("{uniform: {low: -0.5, high: 19.5}}"), "lm.yaml");
  const graph::OpGraph g = graph::build_forward(model);
  ASSERT_EQ(g.index_checks.size(), 1u);
  const graph::GraphIndexCheck& c = g.index_checks[0];
  EXPECT_EQ(g.tensors[c.ids].name, "ids");
  EXPECT_EQ(c.bound, 20);
  EXPECT_EQ(g.ops[c.op].type, "embedding");
  int checks = 0, first_embedding = -1;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].type == "check_index") {
      ++checks;
      EXPECT_EQ(first_embedding, -1) << "the check runs before the first gather";
    }
    if (g.ops[i].type == "embedding") {
      if (first_embedding < 0) first_embedding = static_cast<int>(i);
      ASSERT_EQ(g.ops[i].inputs.size(), 3u);
      EXPECT_EQ(g.ops[i].inputs[2], c.status);
    }
  }
  EXPECT_EQ(checks, 1);
}

// In range: the step runs, and y's rows are twice the table rows the ids name; with the table's
// gradient (embedding_grad) summing dy rows per id.
TEST(IndexContract, IdsInRangeGatherTheirRows) {
  const Model model = parse_model(lm_yaml("{uniform: {low: -0.5, high: 19.5}}"), "lm.yaml");
  Session s(model, {.device = Device::Cpu, .seed = 7});
  std::mt19937 rng(std::random_device{}());
  std::vector<int32_t> ids(15);
  for (int32_t& v : ids) v = std::uniform_int_distribution<int32_t>(0, 19)(rng);
  ids[3] = ids[4] = 19;  // repeated, and the last row
  ids[0] = 0;
  s.set_tensor("ids", ids_tensor(ids));
  s.forward();
  s.backward();
  const HostTensor table = s.tensor("lm.table"), y = s.tensor("lm.y");
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t j = 0; j < 24; ++j)
      ASSERT_EQ(graph::load_element(DType::F32, y.data.data(), n * 24 + j),
                2 * graph::load_element(DType::F32, table.data.data(), ids[n] * 24 + j))
          << "token " << n << " column " << j;
  EXPECT_TRUE(s.check().ok);
}

// Out of range: forward() fails naming the op's line, the tensor, the first bad element (as a
// row-major index) and its value.
TEST(IndexContract, AnIdOutsideTheTableFailsTheStepNamingTheElement) {
  const Model model = parse_model(lm_yaml("{uniform: {low: -0.5, high: 19.5}}"), "lm.yaml");
  Session s(model, {.device = Device::Cpu, .seed = 7});
  for (auto [bad, at, text] : {std::tuple{20, 7, "[1, 2] is 20"}, std::tuple{-1, 0, "[0, 0] is -1"},
                               std::tuple{1 << 30, 14, "[2, 4] is 1073741824"}}) {
    std::vector<int32_t> ids(15, 3);
    ids[at] = bad;
    if (at + 1 < 15) ids[at + 1] = 99;  // a later bad id is not the one reported
    s.set_tensor("ids", ids_tensor(ids));
    try {
      s.forward();
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::Runtime);
      EXPECT_NE(m.find("lm.yaml:10:"), std::string::npos) << m;
      EXPECT_NE(m.find("embedding: index tensor 'ids'"), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("element ") + text), std::string::npos) << m;
      EXPECT_NE(m.find("outside [0, 20) (the rows of input 'table')"), std::string::npos) << m;
    }
  }
  // A good step afterwards runs.
  s.set_tensor("ids", ids_tensor(std::vector<int32_t>(15, 19)));
  EXPECT_NO_THROW(s.forward());
}

// On the GPU, replayed as a CUDA graph or launched kernel by kernel: the same error, then a good
// step gives the CPU's bits. Skips without a device.
TEST(IndexContract, OnTheGpuAnIdOutsideTheTableFailsTheStepToo) {
  std::string why;
  if (!graph::cuda_driver(&why)) GTEST_SKIP() << why;
  const Model model = parse_model(lm_yaml("{uniform: {low: -0.5, high: 19.5}}"), "lm.yaml");
  std::vector<int32_t> good(15, 4), bad(15, 4);
  good[7] = 19;
  bad[9] = 20;
  Session cpu(model, {.device = Device::Cpu, .seed = 3});
  cpu.set_tensor("ids", ids_tensor(good));
  cpu.forward();
  for (LaunchMode mode : {LaunchMode::Graph, LaunchMode::Launch}) {
    Session gpu(model, {.device = Device::Cuda, .mode = mode, .seed = 3});
    gpu.set_tensor("ids", ids_tensor(bad));
    try {
      gpu.forward();
      ADD_FAILURE() << "no error on the GPU";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("element [1, 4] is 20"), std::string::npos) << e.what();
    }
    gpu.set_tensor("ids", ids_tensor(good));
    gpu.forward();
    EXPECT_EQ(gpu.tensor("lm.y").data, cpu.tensor("lm.y").data);
  }
}

// The CLI exits 1 with the error on stderr. The binary is found as every CLI test finds it
// (tests/tools/cli_run.h: $TILERUN_BIN, beside this test, the build tree); none, a skip.
TEST(IndexContract, TheCliExitsOneOnAnIdOutsideTheTable) {
  const std::string cli = tilerun::testing::cli_path();
  if (cli.empty()) GTEST_SKIP() << tilerun::testing::where_cli_was_looked_for();
  const std::string path =
      ::testing::TempDir() + "index_contract_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << lm_yaml("{uniform: {low: 19.5, high: 25.5}}");  // every id >= 20
  const std::string err = path + ".err";
  const std::string cmd = "'" + cli + "' '" + path + "' --device cpu 2>'" + err + "' >/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("index tensor 'ids'"), std::string::npos) << text;
  EXPECT_NE(text.find("element [0, 0] is 2"), std::string::npos) << text;
  std::remove(path.c_str());
  std::remove(err.c_str());
}

// The gather given the check's status: the analysis proves the in-range guard from the contract
// and removes it (in the kernel's unguarded whole-tile copy and its guarded ragged one); without
// the status (no contract) the guard is kept.
TEST(IndexContract, TheContractProvesTheGathersBoundCheck) {
  const kernels::OpSchema* schema = kernels::op_registry().find("embedding");
  ASSERT_NE(schema, nullptr);
  const kernels::TensorType table{DType::F32, {20, 24}}, ids{DType::I32, {15}},
      status{DType::I32, {2}}, y{DType::F32, {15, 24}};
  for (bool checked : {false, true}) {
    std::vector<kernels::TensorType> in = {table, ids};
    if (checked) in.push_back(status);
    kernels::OpExpansion e = schema->expand(in, {y}, {});
    ASSERT_EQ(e.calls.size(), 1u);
    compiler::AnalysisReport report;
    compiler::lower(*e.calls[0].kernel, {.report = &report});
    int guards = 0;
    for (const compiler::AccessVerdict& v : report.verdicts) {
      if (v.question != "guard" || v.access.find("in_range") == std::string::npos) continue;
      ++guards;
      EXPECT_EQ(v.note, checked ? "guard removed" : "guard kept") << v.access;
    }
    EXPECT_EQ(guards, 2) << report.text();  // the whole-tile copy's and the ragged edge's
  }
}

// grouped_matmul's offsets from outside the graph (a model input): the sorted contract is
// checked at run time. Starts that go down, or run past R, fail the step naming the element;
// good ones run, bf16 on the aligned kernel, every row its own expert's product. On the GPU (when
// there is one) the same error, and a good step gives the CPU's bits.
std::string grouped_yaml() {
  return "model: moe\ndtype: bf16\ndims: {R: 300, K: 16, N: 24, E: 4}\n"
         "inputs:\n  x: {shape: [R, K]}\n  offsets: {shape: [E], dtype: i32, init: zeros}\n"
         "layers:\n  - name: moe\n    weights:\n      w: {shape: [E, N, K]}\n    ops:\n"
         "      - {op: grouped_matmul, in: [x, w, offsets], out: y, transpose_b: true}\n"
         "outputs: [moe.y]\n";
}

HostTensor offsets_tensor(const std::vector<int32_t>& v) {
  return i32_tensor({static_cast<int64_t>(v.size())}, v);
}

TEST(IndexContract, GroupedOffsetsMustBeSortedSegmentStarts) {
  const Model model = parse_model(grouped_yaml(), "moe.yaml");
  const graph::OpGraph g = graph::build_forward(model);
  ASSERT_EQ(g.index_checks.size(), 1u);
  EXPECT_TRUE(g.index_checks[0].sorted);
  EXPECT_EQ(g.index_checks[0].bound, 301);
  std::vector<Device> devices = {Device::Cpu};
  std::string why;
  if (graph::cuda_driver(&why)) devices.push_back(Device::Cuda);
  std::vector<uint8_t> cpu_y;
  for (Device device : devices) {
    Session s(model, {.device = device, .seed = 5});
    for (auto [offsets, text] : {std::pair{std::vector<int32_t>{0, 130, 129, 200},
                                           "element [2] is 129, below the element before it"},
                                 std::pair{std::vector<int32_t>{0, 20, 301, 302},
                                           "element [2] is 301, outside [0, 301)"}}) {
      s.set_tensor("offsets", offsets_tensor(offsets));
      try {
        s.forward();
        ADD_FAILURE() << "no error for " << text;
      } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_EQ(e.kind(), ErrorKind::Runtime);
        EXPECT_NE(m.find("moe.yaml:12:"), std::string::npos) << m;
        EXPECT_NE(m.find("grouped_matmul: index tensor 'offsets'"), std::string::npos) << m;
        EXPECT_NE(m.find(text), std::string::npos) << m;
      }
    }
    // Rows [0, 5) in no segment (zeros), expert 0 empty, 1 [5, 140), 2 [140, 141), 3 to R.
    const std::vector<int32_t> good = {5, 5, 140, 141};
    s.set_tensor("offsets", offsets_tensor(good));
    s.forward();
    const HostTensor x = s.tensor("x"), w = s.tensor("moe.w"), y = s.tensor("moe.y");
    if (device == Device::Cpu)
      cpu_y = y.data;
    else
      EXPECT_EQ(y.data, cpu_y) << "the GPU's bits differ from the CPU's";
    for (int64_t r = 0; r < 300; ++r) {
      int64_t e = -1;
      for (int64_t c = 0; c < 4; ++c)
        if (good[c] <= r && r < (c + 1 < 4 ? good[c + 1] : 300)) e = c;
      for (int64_t j = 0; j < 24; ++j) {
        double want = 0;
        for (int64_t k = 0; e >= 0 && k < 16; ++k)
          want += graph::load_element(DType::BF16, x.data.data(), r * 16 + k) *
                  graph::load_element(DType::BF16, w.data.data(), (e * 24 + j) * 16 + k);
        const double got = graph::load_element(DType::BF16, y.data.data(), r * 24 + j);
        ASSERT_NEAR(got, want, 0.02 * (1 + std::abs(want))) << "row " << r << " column " << j;
        if (e < 0) ASSERT_EQ(got, 0.0) << "row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace tilerun
