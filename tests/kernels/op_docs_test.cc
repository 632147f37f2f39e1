// The op table of docs/model-format.md (between its "op-table" marker comments) and the output of
// `tilerun --list-ops` say what the registry says: every op, its inputs, outputs, attributes with
// their defaults, dtypes and what it computes.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/op_catalog.h"
#include "tests/tools/cli_run.h"
#include "tilerun/ops.h"

namespace tilerun::kernels {
namespace {

std::string trim(std::string s) {
  std::string out;
  for (char c : s)
    if (c != '`') out += c;
  size_t b = out.find_first_not_of(" \t"), e = out.find_last_not_of(" \t");
  return b == std::string::npos ? "" : out.substr(b, e - b + 1);
}

// The table's rows as cells, keyed by op; the header row and the |---| line are skipped.
std::map<std::string, std::vector<std::string>> doc_table(std::string* error) {
  std::ifstream in(std::string(TILERUN_SOURCE_DIR) + "/docs/model-format.md");
  std::string line;
  bool inside = false, header = true;
  std::map<std::string, std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line.find("<!-- op-table:begin") != std::string::npos) inside = true;
    if (line.find("<!-- op-table:end") != std::string::npos) return rows;
    if (!inside || line.empty() || line[0] != '|') continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string cell; std::getline(ss, cell, '|');) cells.push_back(trim(cell));
    if (header || line.rfind("|---", 0) == 0) {
      header = false;
      continue;
    }
    if (rows.count(cells[0])) *error += "op " + cells[0] + " has two rows\n";
    rows[cells[0]] = cells;
  }
  *error += "no op table between <!-- op-table:begin --> and <!-- op-table:end -->\n";
  return rows;
}

std::string markdown_row(const OpCatalogRow& r) {
  return "| `" + r.op + "` | " + r.inputs + " | " + r.outputs + " | " + r.attrs + " | " + r.dtypes +
         " | " + r.doc + " |";
}

TEST(OpDocs, ModelFormatTableMatchesTheRegistry) {
  std::string error;
  std::map<std::string, std::vector<std::string>> doc = doc_table(&error);
  ASSERT_EQ(error, "");
  const std::vector<std::string> columns = {"op",         "inputs", "outputs",
                                            "attributes", "dtypes", "computes"};
  std::vector<OpCatalogRow> rows = op_catalog(op_registry());
  for (const OpCatalogRow& r : rows) {
    auto it = doc.find(r.op);
    if (it == doc.end()) {
      ADD_FAILURE() << "docs/model-format.md has no row for " << r.op << "; add\n"
                    << markdown_row(r);
      continue;
    }
    std::vector<std::string> want = {r.op, r.inputs, r.outputs, r.attrs, r.dtypes, r.doc};
    const std::vector<std::string>& got = it->second;
    EXPECT_EQ(got.size(), want.size()) << r.op << ": a row has " << want.size() << " cells";
    for (size_t i = 0; i < want.size() && i < got.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << r.op << ", column " << columns[i] << "; the row should read\n"
                                 << markdown_row(r);
    doc.erase(it);
  }
  for (const auto& [op, cells] : doc)
    ADD_FAILURE() << "docs/model-format.md lists " << op << ", which no family registers";
}

// Runs the CLI (tests/tools/cli_run.h) and returns what it printed (stdout and stderr), and its
// exit status.
std::string run_cli(const std::string& args, int* status) {
  tilerun::testing::CliResult r = tilerun::testing::run_cli(args);
  *status = r.exit_code;
  return r.out;
}

TEST(OpDocs, ListOpsPrintsEveryOpInNameOrder) {
  TILERUN_REQUIRE_CLI();
  int status = -1;
  std::string out = run_cli("--list-ops", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, op_catalog_text());
  std::vector<OpCatalogRow> rows = op_catalog(op_registry());
  EXPECT_EQ(out.rfind(std::to_string(rows.size()) + " ops", 0), 0u) << out;
  size_t pos = 0;
  for (const OpCatalogRow& r : rows) {
    size_t at = out.find("\n" + r.op + ": " + r.doc + "\n", pos);
    ASSERT_NE(at, std::string::npos) << r.op << " missing or out of order in\n" << out;
    size_t next = out.find("\n\n", at + 1);
    std::string block =
        out.substr(at, next == std::string::npos ? std::string::npos : next + 1 - at);
    EXPECT_NE(block.find("  inputs:     " + r.inputs + "\n"), std::string::npos) << block;
    EXPECT_NE(block.find("  outputs:    " + r.outputs + "\n"), std::string::npos) << block;
    EXPECT_NE(block.find("  dtypes:     " + r.dtypes + "\n"), std::string::npos) << block;
    for (const AttrSpec& a : op_registry().find(r.op)->attrs)
      EXPECT_NE(
          block.find(a.name + ": " + std::string(attr_kind_name(a.kind)) +
                     (a.default_value ? " = " + attr_value_text(*a.default_value) : " (required)")),
          std::string::npos)
          << r.op << " attribute " << a.name << " in\n"
          << block;
    pos = at + 1;
  }
}

// What the catalog cells are made of: defaults as a model writes them, optional inputs marked.
TEST(OpDocs, CatalogCellsSpellValuesAsAModelWould) {
  EXPECT_EQ(attr_value_text(AttrValue{1e-6}), "1e-06");
  EXPECT_EQ(attr_value_text(AttrValue{0.5}), "0.5");
  EXPECT_EQ(attr_value_text(AttrValue{int64_t{3}}), "3");
  EXPECT_EQ(attr_value_text(AttrValue{true}), "true");
  EXPECT_EQ(attr_value_text(AttrValue{std::string("x")}), "\"x\"");
  EXPECT_EQ(attr_value_text(AttrValue{std::vector<int64_t>{1, 2}}), "[1, 2]");
  OpRegistry r;
  r.add({.name = "toy",
         .doc = "d",
         .inputs = {"x", "bias"},
         .optional_inputs = 1,
         .outputs = {"y"},
         .attrs = {{.name = "k", .kind = AttrKind::Int}},
         .dtypes = {DType::F32},
         .infer = [](const std::vector<TensorType>& in, const Attrs&) { return in; }});
  std::vector<OpCatalogRow> rows = op_catalog(r);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].inputs, "x, bias?");
  EXPECT_EQ(rows[0].attrs, "k: integer");
  EXPECT_EQ(rows[0].dtypes, "f32");
}

}  // namespace
}  // namespace tilerun::kernels
