// Index contracts established by construction (kernels::IndexOutput): indices written by topk or
// counting_sort lie in a declared range, so an op indexing with them under a contract at least
// as wide runs no check_index (its kernels read index_established's constant status instead); a
// narrower contract is still checked at run time. The dump says
// which way each contract was established, topk's sort stores are proved unique (none depends
// on a loaded value), and the selections give the same bits in two processes.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compiler/lower.h"
#include "graph/autodiff.h"
#include "graph/model/numeric_convert.h"
#include "kernels/op_registry.h"
#include "tests/tools/cli_run.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

// topk of scores [T, S] gathers rows of kv [R, D]; R >= S needs no check.
std::string gather_yaml(int s, int r) {
  return "model: sel\ndims: {T: 6, S: " + std::to_string(s) + ", R: " + std::to_string(r) +
         ", D: 4}\n"
         "inputs:\n  scores: {shape: [T, S]}\n"
         "layers:\n  - name: sel\n    weights:\n      kv: {shape: [R, D]}\n    ops:\n"
         "      - {op: topk, in: scores, out: [best, picked], k: 3}\n"
         "      - {op: embedding, in: [kv, picked], out: rows}\n"
         "outputs: [sel.rows, sel.best]\n";
}

int count_ops(const graph::OpGraph& g, const std::string& type) {
  int n = 0;
  for (const graph::GraphOp& op : g.ops) n += op.type == type;
  return n;
}

TEST(IndexRange, TopkIndicesNeedNoCheckWhenTheTableHasTheirRange) {
  const graph::OpGraph g = graph::build_forward(parse_model(gather_yaml(10, 10), "sel.yaml"));
  EXPECT_EQ(count_ops(g, "check_index"), 0);
  EXPECT_EQ(count_ops(g, "index_established"), 1);
  ASSERT_EQ(g.index_checks.size(), 1u);
  const graph::GraphIndexCheck& c = g.index_checks[0];
  ASSERT_GE(c.producer, 0);
  EXPECT_EQ(g.ops[c.producer].type, "topk");
  EXPECT_EQ(g.tensors[c.ids].name, "sel.picked");
  // The gather reads index_established's status, so its kernel assumes the contract.
  ASSERT_GE(c.status, 0);
  EXPECT_EQ(g.ops[g.tensors[c.status].producer].type, "index_established");
  for (const graph::GraphOp& op : g.ops)
    if (op.type == "embedding") {
      ASSERT_EQ(op.inputs.size(), 3u);
      EXPECT_EQ(op.inputs[2], c.status);
    }
}

// Indices in [0, 12) into a table of 10 rows: the range does not cover the contract, so the
// graph checks them, and a step whose top scores sit past row 10 fails.
TEST(IndexRange, AWiderRangeThanTheTableIsCheckedAtRunTime) {
  const Model model = parse_model(gather_yaml(12, 10), "sel.yaml");
  const graph::OpGraph g = graph::build_forward(model);
  EXPECT_EQ(count_ops(g, "check_index"), 1);
  ASSERT_EQ(g.index_checks.size(), 1u);
  EXPECT_EQ(g.index_checks[0].producer, -1);
  Session s(model, {.device = Device::Cpu, .seed = 3});
  HostTensor scores{.dtype = DType::F32, .shape = {6, 12}, .data = {}};
  scores.data.resize(6 * 12 * 4);
  for (int64_t i = 0; i < 6 * 12; ++i)
    graph::store_element(DType::F32, scores.data.data(), i, i % 12 >= 9 ? 5.0 + i % 12 : 0.0);
  s.set_tensor("scores", scores);
  try {
    s.forward();
    FAIL() << "a top index of 11 into 10 rows must fail the step";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sel.picked'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is 11, outside [0, 10)"), std::string::npos) << e.what();
  }
}

// counting_sort's position and row feed gathers without checks; its ids, from topk over E
// router logits, are in [0, E) by construction too.
TEST(IndexRange, CountingSortOutputsAndTopkRoutesNeedNoCheck) {
  const std::string yaml =
      "model: moe\ndims: {T: 5, E: 4, R: 2, TR: 10, D: 3}\n"
      "inputs:\n  router: {shape: [T, E]}\n  h: {shape: [T, D]}\n"
      "layers:\n  - name: moe\n    ops:\n"
      "      - {op: topk, in: router, out: [gate, expert], k: 2}\n"
      "      - {op: counting_sort, in: expert, out: [position, order, row, offsets], bins: 4}\n"
      "      - {op: embedding, in: [h, row], out: xs}\n"
      "      - {op: embedding, in: [xs, position], out: back}\n"
      "outputs: [moe.back, moe.gate]\n";
  const Model model = parse_model(yaml, "moe.yaml");
  const graph::OpGraph g = graph::build_forward(model);
  EXPECT_EQ(count_ops(g, "check_index"), 0);
  EXPECT_EQ(count_ops(g, "index_established"), 1);  // one status, shared
  ASSERT_EQ(g.index_checks.size(), 3u);
  EXPECT_EQ(g.ops[g.index_checks[0].producer].type, "topk");
  EXPECT_EQ(g.ops[g.index_checks[1].producer].type, "counting_sort");
  EXPECT_EQ(g.ops[g.index_checks[2].producer].type, "counting_sort");
  // back[t, r] is h[t] itself: the permutation and its inverse compose to the identity.
  Session s(model, {.device = Device::Cpu, .seed = 11});
  s.forward();
  const HostTensor h = s.tensor("h"), back = s.tensor("moe.back");
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t d = 0; d < 3; ++d)
        EXPECT_EQ(graph::load_element(DType::F32, back.data.data(), (t * 2 + r) * 3 + d),
                  graph::load_element(DType::F32, h.data.data(), t * 3 + d))
            << t << " " << r << " " << d;
}

TEST(IndexRange, TheDumpSaysHowEachContractIsEstablished) {
  const std::string dir = ::testing::TempDir() + "index_range_" + std::to_string(::getpid());
  {
    Session s(parse_model(gather_yaml(10, 10), "sel.yaml"),
              {.device = Device::Cpu, .dump_dir = dir});
  }
  std::ifstream in(dir + "/index_contracts.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("embedding at sel.yaml:"), std::string::npos) << text;
  EXPECT_NE(text.find("'sel.picked' values in [0, 10)"), std::string::npos) << text;
  EXPECT_NE(text.find("established by construction by topk at sel.yaml:"), std::string::npos)
      << text;
  // The gather assumes the contract: its checked kernel, with the in-range test proved.
  bool checked_gather = false;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    checked_gather |= e.path().filename().string().find("embedding_checked") != std::string::npos;
  EXPECT_TRUE(checked_gather);
  std::filesystem::remove_all(dir);
}

// The sort network's stores are at addresses affine in its loop coordinates: every one proved
// unique, none left unknown.
TEST(IndexRange, TopkSortStoresAreProvedAndItsRankStoresGuarded) {
  const kernels::OpSchema* schema = kernels::op_registry().find("topk");
  ASSERT_NE(schema, nullptr);
  // Rows of 100 take the full sort, rows of 17000 the radix select.
  for (int64_t n : {int64_t{100}, int64_t{17000}}) {
    const kernels::OpExpansion e = schema->expand(
        {{DType::F32, {3, n}}}, {{DType::F32, {3, 7}}, {DType::I32, {3, 7}}}, {{"k", int64_t{7}}});
    ASSERT_EQ(e.calls.size(), 1u);
    compiler::AnalysisReport report;
    compiler::lower(*e.calls[0].kernel, {.report = &report});
    // The sort network's and the padding's stores are proved unique; the radix select's
    // compaction stores each chosen key at its rank (a ballot's prefix count, distinct by
    // construction but opaque to Z3), under a guard that keeps it inside the tile: those two
    // are the only stores of keys left unproved, and none is disproved.
    int proved = 0, by_rank = 0;
    for (const compiler::AccessVerdict& v : report.verdicts) {
      if (v.question != "unique" || v.buffer != "keys") continue;
      if (v.result.outcome == compiler::Outcome::Proved) {
        ++proved;
        continue;
      }
      EXPECT_NE(v.result.outcome, compiler::Outcome::Disproved) << v.access;
      EXPECT_NE(v.access.find("rank"), std::string::npos) << v.access;
      ++by_rank;
    }
    EXPECT_GE(proved, 2) << report.text();
    EXPECT_EQ(by_rank, n > 16384 ? 2 : 0) << report.text();
  }
}

// scatter's index must be distinct by construction: argsort's order is (no check_index, the
// established status), counting_sort's row is in range but not distinct (a token per route), and
// a model input is neither; both are refused when the graph is built, at the op, naming where index
// came from.
std::string scatter_yaml(const std::string& index_op) {
  return "model: sc\ndims: {T: 6, E: 4, R: 12, D: 3}\n"
         "inputs:\n  router: {shape: [T, E]}\n  x: {shape: [R, D]}\n"
         "  perm: {shape: [R], dtype: i32}\n"
         "layers:\n  - name: l\n    ops:\n"
         "      - {op: topk, in: router, out: [gate, expert], k: 2}\n"
         "      - {op: counting_sort, in: expert, out: [position, order2, row, offsets], "
         "bins: 4}\n"
         "      - {op: argsort, in: expert, out: order, bins: 4}\n" +
         index_op + "outputs: [l.y]\n";
}

TEST(IndexRange, ScatterTakesOnlyIndicesDistinctByConstruction) {
  const graph::OpGraph g = graph::build_forward(
      parse_model(scatter_yaml("      - {op: scatter, in: [x, order], out: y}\n"), "sc.yaml"));
  EXPECT_EQ(count_ops(g, "check_index"), 0);  // topk's into argsort, argsort's into scatter
  bool found = false;
  for (const graph::GraphIndexCheck& c : g.index_checks)
    if (g.ops[c.op].type == "scatter") {
      found = true;
      ASSERT_GE(c.producer, 0);
      EXPECT_EQ(g.ops[c.producer].type, "argsort");
    }
  EXPECT_TRUE(found);
  struct Bad {
    std::string op, from;
  };
  for (const Bad& b :
       {Bad{"      - {op: scatter, in: [x, perm], out: y}\n",
            "outside the graph (an input or weight)"},
        Bad{"      - {op: scatter, in: [x, row], out: y}\n", "op 'counting_sort'"}}) {
    try {
      graph::build_forward(parse_model(scatter_yaml(b.op), "sc.yaml"));
      ADD_FAILURE() << b.op << " was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("sc.yaml:13:9: error: op 'scatter': input 'index'", 0), 0u) << m;
      EXPECT_NE(m.find("must hold distinct indices"), std::string::npos) << m;
      EXPECT_NE(m.find("it comes from " + b.from), std::string::npos) << m;
    }
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {(std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()};
}

// configs/topk.yaml (topk, take_along_axis, bincount, counting_sort, the gathers and their
// gradients) gives the same bits in two processes; another seed gives others.
TEST(IndexRange, TheSelectionsGiveTheSameBitsInTwoProcesses) {
  TILERUN_REQUIRE_CLI();
  const std::string base = ::testing::TempDir() + "topk_" + std::to_string(::getpid());
  std::vector<std::string> saved;
  for (const char* run : {"a --seed 5", "b --seed 5", "c --seed 6"}) {
    const std::string name(run);
    const std::string path = base + "_" + name.substr(0, 1) + ".safetensors";
    const std::string cmd = "'" + tilerun::testing::cli_path() + "' '" + TILERUN_SOURCE_DIR +
                            "/configs/topk.yaml' --device cpu" + name.substr(1) + " --save '" +
                            path + "' >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    saved.push_back(file_bytes(path));
    std::remove(path.c_str());
  }
  EXPECT_GT(saved[0].size(), 16u * 8 * 24 * 4);  // kv_sel alone
  EXPECT_EQ(saved[0], saved[1]);
  EXPECT_NE(saved[0], saved[2]);
}

}  // namespace
}  // namespace tilerun
