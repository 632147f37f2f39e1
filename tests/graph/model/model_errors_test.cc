// Models that must be refused: each case checks the exact "file:line:col: error:" prefix (the
// offending node) and the phrase that says what was wrong. Most cases change one line of a
// small valid model, so the expected line is that line's number.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "graph/model/yaml_util.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

// Line numbers are fixed: tests below replace one of these lines.
const std::vector<std::string> kBase = {
    "model: m",                                   // 1
    "dims: {T: 4, D: 8}",                         // 2
    "inputs:",                                    // 3
    "  x: {shape: [T, D]}",                       // 4
    "layers:",                                    // 5
    "  - name: b",                                // 6
    "    weights:",                               // 7
    "      g: {shape: [D]}",                      // 8
    "    ops:",                                   // 9
    "      - {op: rmsnorm, in: [x, g], out: h}",  // 10
    "      - {op: add, in: [x, h], out: y}",      // 11
    "outputs: [b.y]",                             // 12
};

// The base model with line `line` (1-based) replaced by `text` (which may hold several lines).
std::string with_line(int line, const std::string& text) {
  std::string out;
  for (size_t i = 0; i < kBase.size(); ++i)
    out += (static_cast<int>(i) + 1 == line ? text : kBase[i]) + "\n";
  return out;
}

std::string base() { return with_line(0, ""); }

// Parsing `text` must throw tilerun::Error starting with `prefix` and containing `phrase`.
void expect_error(const std::string& text, const std::string& prefix, const std::string& phrase) {
  try {
    Model m = parse_model(text, "m.yaml");
    ADD_FAILURE() << "parsed without error; expected " << prefix << " ..." << phrase;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.substr(0, prefix.size()), prefix) << what;
    EXPECT_NE(what.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << what;
    EXPECT_EQ(e.exit_code(), 2);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a tilerun::Error: " << e.what();
  }
}

TEST(ModelErrorsTest, BaseModelIsValid) { EXPECT_NO_THROW(parse_model(base(), "m.yaml")); }

TEST(ModelErrorsTest, UnknownPrecision) {
  expect_error(with_line(2, "precision: fp16\ndims: {T: 4, D: 8}"),
               "m.yaml:2:12: error:", "'precision' is 'fp16', expected strict or tf32");
}

TEST(ModelErrorsTest, MalformedYaml) {
  expect_error(with_line(2, "dims: T: 4"), "m.yaml:2:8: error:", "malformed YAML");
  expect_error(with_line(4, "  x: {shape: [T, D]"), "m.yaml:", "malformed YAML");
}

TEST(ModelErrorsTest, EmptyFile) {
  expect_error("", "m.yaml:1:1: error:", "the model file is empty");
  expect_error("# nothing\n", "m.yaml:1:1: error:", "the model file is empty");
}

TEST(ModelErrorsTest, SecondDocument) {
  expect_error(base() + "---\nmodel: n\n", "m.yaml:13:1: error:", "a second YAML document");
}

TEST(ModelErrorsTest, WrongNodeType) {
  expect_error(with_line(2, "dims: [4, 8]"),
               "m.yaml:2:7: error:", "expected a mapping for 'dims', found a sequence");
  expect_error("- model: m\n",
               "m.yaml:1:1: error:", "expected a mapping for the model, found a sequence");
  expect_error(with_line(4, "  x: {shape: T}"),
               "m.yaml:4:14: error:", "expected a sequence for the shape of 'x', found 'T'");
  expect_error(with_line(4, "  x: [T, D]"),
               "m.yaml:4:6: error:", "expected a mapping for input 'x', found a sequence");
}

TEST(ModelErrorsTest, UnknownKey) {
  expect_error(with_line(2, "dim: {T: 4, D: 8}"), "m.yaml:2:1: error:",
               "unknown key 'dim' in the model; did you mean 'dims'? (allowed keys: model, dtype, "
               "precision, dims, inputs, layers, outputs, loss, optimizer)");
  expect_error(with_line(4, "  x: {shape: [T, D], dtyp: f32}"),
               "m.yaml:4:22: error:", "unknown key 'dtyp' in input 'x'; did you mean 'dtype'?");
  expect_error(with_line(7, "    weight:"),
               "m.yaml:7:5: error:", "unknown key 'weight' in layer 0; did you mean 'weights'?");
}

TEST(ModelErrorsTest, MissingRequiredKey) {
  expect_error(with_line(1, "# no name"),
               "m.yaml:2:1: error:", "missing required key 'model' in the model");
  expect_error(with_line(4, "  x: {dtype: f32}"),
               "m.yaml:4:6: error:", "missing required key 'shape' in input 'x'");
  expect_error(with_line(11, "      - {op: add, in: [x, h]}"),
               "m.yaml:11:9: error:", "missing required key 'out' in op 1 (add) of layer 'b'");
  expect_error(with_line(12, ""), "m.yaml:1:1: error:", "missing required key 'outputs'");
}

TEST(ModelErrorsTest, UnknownOp) {
  expect_error(with_line(10, "      - {op: rmsnorn, in: [x, g], out: h}"),
               "m.yaml:10:14: error:", "unknown op 'rmsnorn'; did you mean 'rmsnorm'?");
}

TEST(ModelErrorsTest, UnknownAttribute) {
  expect_error(
      with_line(10, "      - {op: rmsnorm, in: [x, g], out: h, epsilon: 1.0e-6}"),
      "m.yaml:10:43: error:", "unknown attribute 'epsilon' for op 'rmsnorm'; did you mean 'eps'?");
}

TEST(ModelErrorsTest, AttributeOfWrongType) {
  expect_error(with_line(10, "      - {op: rmsnorm, in: [x, g], out: h, eps: [1]}"),
               "m.yaml:10:48: error:",
               "attribute 'eps' of op 'rmsnorm' expects a number (a dim name is also accepted), "
               "found a sequence");
  expect_error(with_line(10, "      - {op: rmsnorm, in: [x, g], out: h, eps: \"1\"}"),
               "m.yaml:10:48: error:", "expects a number (a dim name is also accepted), found '1'");
  expect_error(with_line(11, "      - {op: matmul, in: [x, h], out: y, transpose_b: 1}"),
               "m.yaml:11:55: error:",
               "attribute 'transpose_b' of op 'matmul' expects a boolean, found '1'");
}

TEST(ModelErrorsTest, MissingRequiredAttribute) {
  expect_error(with_line(11, "      - {op: scale, in: h, out: y}"), "m.yaml:11:9: error:",
               "missing required attribute 'alpha' (number) of op 1 (scale)");
}

TEST(ModelErrorsTest, UnknownDim) {
  expect_error(with_line(4, "  x: {shape: [T, E]}"),
               "m.yaml:4:18: error:", "unknown dim 'E' in the shape of 'x' (declared dims: T, D)");
}

TEST(ModelErrorsTest, DimNotPositiveInteger) {
  expect_error(with_line(2, "dims: {T: 0, D: 8}"),
               "m.yaml:2:11: error:", "dim 'T' is 0; expected a positive integer");
  expect_error(with_line(2, "dims: {T: 2.5, D: 8}"),
               "m.yaml:2:11: error:", "expected a positive integer for dim 'T', found '2.5'");
  expect_error(with_line(2, "dims: {T: 4, D: 99999999999999999999}"),
               "m.yaml:2:17: error:", "out of range");
  expect_error(with_line(4, "  x: {shape: [-1, D]}"),
               "m.yaml:4:15: error:", "size -1 in the shape of 'x' is not positive");
}

TEST(ModelErrorsTest, ElementCountOverflow) {
  expect_error(with_line(2, "dims: {T: 4000000000, D: 4000000000}"),
               "m.yaml:4:18: error:", "the element count of 'x' overflows int64");
}

TEST(ModelErrorsTest, ShapeMismatch) {
  expect_error(with_line(8, "      g: {shape: [T]}"), "m.yaml:10:9: error:",
               "op 0 (rmsnorm) of layer 'b': input 'gamma' is f32[4], expected f32[8]");
  expect_error(with_line(8, "      g: {shape: [T]}"), "m.yaml:10:9: error:", "gamma = b.g f32[4]");
}

TEST(ModelErrorsTest, DtypeMismatch) {
  expect_error(with_line(8, "      g: {shape: [D], dtype: bf16}"),
               "m.yaml:10:9: error:", "input 'gamma' is bf16[8], expected f32[8]");
  expect_error(with_line(2, "dtype: f64\ndims: {T: 4, D: 8}"),
               "m.yaml:2:8: error:", "unknown dtype 'f64' for 'dtype'");
}

TEST(ModelErrorsTest, UsedBeforeProduced) {
  expect_error(with_line(10, "      - {op: rmsnorm, in: [y, g], out: h}"), "m.yaml:10:28: error:",
               "tensor 'y' (input 0 of op 0 (rmsnorm) of layer 'b') is used before it is "
               "produced by op 1 (add) at 11:36");
  // A later layer's tensor.
  std::string text = with_line(
      11, std::string(kBase[10]) + "\n  - name: c\n    ops:\n      - {op: silu, in: b.y, out: y}");
  text.replace(text.find("in: [x, g]"), 10, "in: [c.y, g]");
  expect_error(
      text, "m.yaml:10:28: error:", "used before it is produced: layer 'c' comes later (at 12:11)");
}

TEST(ModelErrorsTest, UnknownTensor) {
  expect_error(with_line(11, "      - {op: add, in: [x, hh], out: y}"), "m.yaml:11:27: error:",
               "unknown tensor 'hh' (input 1 of op 1 (add) of layer 'b'); did you mean 'h'?");
}

TEST(ModelErrorsTest, DuplicateName) {
  expect_error(with_line(11, "      - {op: add, in: [x, h], out: h}"),
               "m.yaml:11:36: error:", "duplicate name 'h': already the output of op 0 (rmsnorm)");
  expect_error(with_line(8, "      x: {shape: [D]}"),
               "m.yaml:8:7: error:", "duplicate name 'x': already a model input (at 4:3)");
  expect_error(with_line(2, "dims: {T: 4, T: 8}"),
               "m.yaml:2:14: error:", "duplicate key 'T' (first given at 2:8)");
  expect_error(with_line(12, "outputs: [b.y, b.y]"),
               "m.yaml:12:16: error:", "duplicate output 'b.y'");
  expect_error(with_line(11, "      - {op: add, in: [x, h], out: y}\n  - name: b\n    ops: []"),
               "m.yaml:12:11: error:", "duplicate layer name 'b' (first at 6:11)");
}

TEST(ModelErrorsTest, NameNotAnIdentifier) {
  expect_error(with_line(8, "      2g: {shape: [D]}"), "m.yaml:8:7: error:",
               "'2g' is not a valid name for a weight; expected an identifier");
  expect_error(with_line(11, "      - {op: add, in: [x, h], out: y-1}"),
               "m.yaml:11:36: error:", "'y-1' is not a valid name for an output of op 1 (add)");
  expect_error(with_line(1, "model: my model"),
               "m.yaml:1:8: error:", "'my model' is not a valid name for 'model'");
  expect_error(with_line(6, "  - name: b.c"), "m.yaml:6:11: error:", "not a valid name");
}

TEST(ModelErrorsTest, WrongNumberOfInputsOrOutputs) {
  expect_error(with_line(11, "      - {op: add, in: [x], out: y}"),
               "m.yaml:11:23: error:", "op 'add' takes 2 inputs (a, b), found 1");
  expect_error(with_line(11, "      - {op: add, in: [x, h], out: [y, z]}"),
               "m.yaml:11:36: error:", "op 'add' produces 1 output (out), found 2");
}

TEST(ModelErrorsTest, CarryNamingUnknownTensors) {
  std::string layer_head = "  - name: b\n    repeat: 2\n";
  expect_error(with_line(6, layer_head + "    carry: {q: y}"),
               "m.yaml:8:13: error:", "unknown tensor 'q' (the carry of layer 'b')");
  expect_error(with_line(6, layer_head + "    carry: {x: z}"),
               "m.yaml:8:16: error:", "carry value 'z' is not an op output of layer 'b'");
  expect_error(with_line(6, layer_head + "    carry: {g: y}"),
               "m.yaml:8:13: error:", "carry key 'g' is a weight of layer 'b'");
  // y = h^T x is [8,8] where x is [4,8]: repetition 1 could not read it as x.
  std::string text = with_line(6, layer_head + "    carry: {x: y}");
  text.replace(text.find("{op: add, in: [x, h], out: y}"), 29,
               "{op: matmul, in: [h, x], out: y, transpose_a: true}");
  expect_error(text, "m.yaml:8:16: error:",
               "carry 'x: y' of layer 'b' changes the type: 'x' is f32[4,8] but 'y' is f32[8,8]");
  EXPECT_NO_THROW(parse_model(with_line(6, layer_head + "    carry: {x: y}"), "m.yaml"));
}

TEST(ModelErrorsTest, OutputsNamingUnknownTensors) {
  expect_error(with_line(12, "outputs: [b.z]"), "m.yaml:12:11: error:",
               "unknown tensor 'b.z' (in 'outputs'): layer 'b' has no tensor 'z'");
  expect_error(with_line(12, "outputs: [c.y]"), "m.yaml:12:11: error:", "there is no layer 'c'");
  expect_error(with_line(12, "outputs: [y]"),
               "m.yaml:12:11: error:", "unknown tensor 'y' (in 'outputs'); did you mean 'b.y'?");
  expect_error(with_line(12, "outputs: [x]"), "m.yaml:12:11: error:",
               "output 'x' is a model input; expected a tensor produced by an op");
  expect_error(with_line(12, "outputs: [b.1.y]"),
               "m.yaml:12:11: error:", "layer 'b' has no tensor '1.y'");
}

TEST(ModelErrorsTest, RepeatNotPositiveInteger) {
  expect_error(with_line(6, "  - name: b\n    repeat: 0"),
               "m.yaml:7:13: error:", "repeat of layer 'b' is '0'; expected a positive integer");
  expect_error(with_line(6, "  - name: b\n    repeat: two"),
               "m.yaml:7:13: error:", "expected a positive integer");
  expect_error(with_line(6, "  - name: b\n    repeat: 1000000000"),
               "m.yaml:7:13: error:", "expected at most 10000");
}

TEST(ModelErrorsTest, RepetitionOutOfRange) {
  std::string text = with_line(6, "  - name: b\n    repeat: 2");
  text.replace(text.find("outputs: [b.y]"), 14, "outputs: [b.2.y]");
  expect_error(text, "m.yaml:13:11: error:", "names repetition 2 of layer 'b'; expected 0 to 1");
}

TEST(ModelErrorsTest, BadInitialiser) {
  expect_error(with_line(8, "      g: {shape: [D], init: one}"),
               "m.yaml:8:29: error:", "unknown initializer 'one' for 'b.g'; did you mean 'ones'?");
  expect_error(with_line(8, "      g: {shape: [D], init: {uniform: {low: 1, high: 0}}}"),
               "m.yaml:8:39: error:", "expected low < high");
  expect_error(with_line(8, "      g: {shape: [D], init: {normal: {sd: 1}}}"),
               "m.yaml:8:39: error:", "unknown key 'sd' in the normal initializer of 'b.g'");
}

TEST(ModelErrorsTest, UnknownLoss) {
  expect_error(base() + "loss: half_sum_square\n", "m.yaml:13:7: error:",
               "unknown loss 'half_sum_square'; did you mean 'half_sum_squares'? (known losses: "
               "cross_entropy, half_sum_squares");
}

TEST(ModelErrorsTest, AnchorsAndAliasesRefused) {
  expect_error(with_line(2, "dims: &d {T: 4, D: 8}"),
               "m.yaml:2:7: error:", "YAML anchors and aliases (&name, *name) are not supported");
}

// The classic "billion laughs": nine levels of ten aliases each would expand to 10^9 nodes.
TEST(ModelErrorsTest, AliasBombRefusedQuickly) {
  std::string text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) text += (j ? ", " : "") + prev;
    text += "]\n";
  }
  auto start = std::chrono::steady_clock::now();
  expect_error(text, "m.yaml:1:5: error:", "anchors and aliases");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(ModelErrorsTest, DeepNestingRefused) {
  const int depth = 10000;
  std::string text = "model: " + std::string(depth, '[') + std::string(depth, ']') + "\n";
  // The root mapping is level 1, so the 64th '[' (column 7 + 64) is level 65.
  expect_error(text, "m.yaml:1:71: error:", "nesting deeper than 64 levels");

  std::string block;  // the same in block style: "a:\n b:\n  c: ..."
  for (int i = 0; i < 100; ++i) block += std::string(i, ' ') + "k" + std::to_string(i) + ":\n";
  expect_error(block, "m.yaml:65:65: error:", "nesting deeper than 64 levels");
}

// yaml-cpp queues a token per '[' until the matching ']' (each may start a key), so a million
// of them would cost gigabytes before the first event: the look-ahead bound cuts it short.
TEST(ModelErrorsTest, HugeNestingRefusedQuickly) {
  const int depth = 1000000;
  std::string text = "model: " + std::string(depth, '[') + std::string(depth, ']') + "\n";
  auto start = std::chrono::steady_clock::now();
  // Reported at the first '[', where the value that could not be finished starts.
  expect_error(text, "m.yaml:1:8: error:", "more than 65536 bytes of look-ahead after this point");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // Quoted "]" cannot hide the nesting from the bound.
  std::string sneaky = "model: ";
  for (int i = 0; i < 200000; ++i) sneaky += "[ \"]\" ";
  expect_error(sneaky, "m.yaml:1:8: error:", "look-ahead");
}

TEST(ModelErrorsTest, OversizedTextRefused) {
  std::string text = base() + "# " + std::string(size_t{16} << 20, 'x') + "\n";
  expect_error(text, "m.yaml: error:", "expected at most 16777216 bytes");
}

TEST(ModelErrorsTest, NodeCountBounded) {
  graph::YamlLimits limits;
  limits.max_nodes = 10;
  try {
    graph::parse_yaml("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]", "n.yaml", limits);
    FAIL() << "a document over the node limit was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "n.yaml:1:29: error: the document has more than 10 YAML "
              "nodes; expected a smaller model file");
  }
}

TEST(ModelErrorsTest, ExplicitTagsRefused) {
  expect_error(with_line(2, "dims: {T: !!int 4, D: 8}"),
               "m.yaml:2:11: error:", "explicit YAML tag");
}

TEST(ModelErrorsTest, AttributeValuesOutOfTheirDomain) {
  for (const char* eps : {".nan", "-1.0e-6", "0", ".inf"})
    expect_error(
        with_line(10, std::string("      - {op: rmsnorm, in: [x, g], out: h, eps: ") + eps + "}"),
        "m.yaml:10:48: error:", "attribute 'eps' of op 'rmsnorm' is");
  expect_error(with_line(10, "      - {op: rmsnorm, in: [x, g], out: h, eps: -1.0e-6}"),
               "m.yaml:10:48: error:", "expected a positive number");
  // A factor no f32 can hold (the kernels take scalars as f32) is refused, not turned into inf.
  expect_error(with_line(11, "      - {op: scale, in: h, out: y, alpha: 1.0e300}"),
               "m.yaml:11:43: error:", "expected a finite number within f32 range");
  EXPECT_NO_THROW(parse_model(
      with_line(10, "      - {op: rmsnorm, in: [x, g], out: h, eps: 1.0e-5}"), "m.yaml"));
}

TEST(ModelErrorsTest, InitialValuesBeyondTheDtypesRange) {
  expect_error(with_line(8, "      g: {shape: [D], init: {constant: 1.0e300}}"),
               "m.yaml:8:29: error:",
               "the constant 1e+300 in the init of 'b.g' is beyond the range "
               "of f32");
  expect_error(with_line(8, "      g: {shape: [D], init: {uniform: {low: -1.0e39, high: 0}}}"),
               "m.yaml:8:29: error:", "low -1e+39 in the init of 'b.g' is beyond the range of f32");
  expect_error(
      with_line(8, "      g: {shape: [D], dtype: bf16, init: {normal: {mean: 0, std: 1.0e39}}}"),
      "m.yaml:8:42: error:", "std 1e+39 in the init of 'b.g' is beyond the range of bf16");
  expect_error(with_line(4, "  x: {shape: [T, D], dtype: f16, init: {constant: 70000}}"),
               "m.yaml:4:40: error:", "beyond the range of f16");
  EXPECT_NO_THROW(
      parse_model(with_line(8, "      g: {shape: [D], init: {constant: 3.0e38}}"), "m.yaml"));
}

TEST(ModelErrorsTest, CarryWithoutRepeat) {
  expect_error(with_line(6, "  - name: b\n    carry: {x: y}"),
               "m.yaml:7:12: error:", "carry of layer 'b' without 'repeat'");
}

// A name is echoed with its control characters escaped: a NUL must not cut the message, an
// escape sequence must not reach the terminal.
TEST(ModelErrorsTest, ControlCharactersInNamesAreEscaped) {
  try {
    parse_model(with_line(1, "model: \"a\\0b\\e[31mc\\x07\""), "m.yaml");
    FAIL() << "a name with control characters was accepted";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(std::strlen(e.what()), what.size()) << "a NUL in the message";
    EXPECT_NE(what.find("'a\\x00b\\x1b[31mc\\x07' is not a valid name for 'model'"),
              std::string::npos)
        << what;
    for (char c : what) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\n') << what;
  }
}

// Comments between two YAML events are not look-ahead: an 80 KB licence block parses.
TEST(ModelErrorsTest, LongCommentBlockParses) {
  std::string comment;
  for (int i = 0; i < 1100; ++i) comment += "# " + std::string(78, 'c') + "\n";
  ASSERT_GT(comment.size(), size_t{80} << 10);
  Model m = parse_model(with_line(9, comment + "    ops:"), "m.yaml");
  EXPECT_EQ(m.layers.at(0).ops.size(), 2u);
  Model top = parse_model(comment + base(), "m.yaml");
  EXPECT_EQ(top.name, "m");
}

// "Did you mean" stays cheap whatever the names: 200 candidates of 60 KB and an unknown 60 KB
// word were an hour of edit distances; short typos are still found.
TEST(ModelErrorsTest, DidYouMeanIsBounded) {
  std::vector<std::string> long_names;
  for (int i = 0; i < 200; ++i) long_names.push_back(std::string(60000, 'a' + i % 26) + "x");
  EXPECT_EQ(graph::did_you_mean(std::string(60000, '_'), long_names), "");
  // A long candidate that the word starts with is still offered.
  EXPECT_NE(graph::did_you_mean(long_names[3] + "yz", long_names), "");
  EXPECT_EQ(graph::did_you_mean("epsilon", {"eps", "alpha"}), "; did you mean 'eps'?");
  EXPECT_EQ(graph::did_you_mean("wieght", {"weight", "x"}), "; did you mean 'weight'?");
  EXPECT_EQ(graph::did_you_mean("zzzzzz", {"weight", "x"}), "");
  // The unknown-tensor path of the parser with many inputs and a 60 KB name.
  std::string text = "model: m\ndims: {T: 4}\ninputs:\n";
  for (int i = 0; i < 200; ++i)
    text += "  in" + std::to_string(i) + "_" + std::string(200, 'n') + ": {shape: [T]}\n";
  text += "layers:\n  - name: b\n    ops:\n      - {op: scale, in: " + std::string(60000, 'z') +
          ", out: y, alpha: 2.0}\noutputs: [b.y]\n";
  expect_error(text, "m.yaml:207:25: error:", "unknown tensor 'zzzz");
}

TEST(ModelErrorsTest, MissingFile) {
  try {
    load_model("/nonexistent/model.yaml");
    FAIL() << "a missing file loaded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "/nonexistent/model.yaml: error: cannot open the model "
              "file: No such file or directory");
  }
}

}  // namespace
}  // namespace tilerun
