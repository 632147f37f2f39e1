// NumPy broadcasting (kernels/broadcast.h): the output shapes, the errors for shapes that do not
// broadcast (naming both operands and shapes, at the op's position in a model), and sum_to's
// inference.
#include <gtest/gtest.h>

#include "kernels/broadcast.h"
#include "tilerun/error.h"
#include "tilerun/model.h"

namespace tilerun::kernels {
namespace {

TensorType f32(std::vector<int64_t> shape) { return {DType::F32, std::move(shape)}; }

TEST(Broadcast, NumPyShapes) {
  struct Case {
    std::vector<std::vector<int64_t>> in;
    std::vector<int64_t> out;
  };
  for (const Case& c : std::vector<Case>{{{{4, 3}, {3}}, {4, 3}},
                                         {{{4, 1}, {3}}, {4, 3}},
                                         {{{2, 1, 5}, {3, 1}}, {2, 3, 5}},
                                         {{{}, {7}}, {7}},
                                         {{{}, {}}, {}},
                                         {{{1}, {1, 1, 1}}, {1, 1, 1}},
                                         {{{5, 1, 7}, {1, 6, 1}, {7}}, {5, 6, 7}}}) {
    std::vector<TensorType> in;
    std::vector<std::string> slots;
    for (const auto& s : c.in)
      in.push_back(f32(s)), slots.push_back("s" + std::to_string(slots.size()));
    EXPECT_EQ(broadcast_shape(in, slots), c.out);
  }
}

TEST(Broadcast, MismatchNamesBothOperandsAndShapes) {
  try {
    broadcast_shape({f32({4, 3}), f32({4})}, {"a", "b"});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(),
                 "inputs 'a' [4,3] and 'b' [4] do not broadcast: axis -1 is 3 against 4 "
                 "(expected equal extents or 1, NumPy rules)");
  }
  // The third operand against the shape the first two agreed on.
  EXPECT_THROW(broadcast_shape({f32({2, 1}), f32({1, 5}), f32({3, 1})}, {"m", "a", "b"}),
               ShapeError);
  // Mixed dtypes are refused.
  EXPECT_THROW(infer_broadcast({f32({3}), {DType::BF16, {3}}}, {"a", "b"}), ShapeError);
}

TEST(Broadcast, BroadcastsTo) {
  EXPECT_TRUE(broadcasts_to({3}, {4, 3}));
  EXPECT_TRUE(broadcasts_to({}, {4, 3}));
  EXPECT_TRUE(broadcasts_to({4, 1}, {4, 3}));
  EXPECT_FALSE(broadcasts_to({4}, {4, 3}));
  EXPECT_FALSE(broadcasts_to({1, 4, 3}, {4, 3}));  // more axes than the target
}

TEST(Broadcast, SumToRefusesAShapeThatDoesNotBroadcast) {
  const OpSchema& s = *op_registry().find("sum_to");
  EXPECT_EQ(s.infer({f32({4, 3})}, {{"shape", std::vector<int64_t>{1, 3}}}),
            (std::vector<TensorType>{f32({1, 3})}));
  EXPECT_THROW(s.infer({f32({4, 3})}, {{"shape", std::vector<int64_t>{4}}}), ShapeError);
  EXPECT_THROW(s.infer({f32({4, 3})}, {{"shape", std::vector<int64_t>{0, 3}}}), ShapeError);
}

// In a model the error carries the op's position and its inputs.
TEST(Broadcast, ModelErrorAtTheOp) {
  const char* yaml = R"(model: m
dtype: f32
inputs:
  x: {shape: [4, 3]}
  y: {shape: [4]}
layers:
  - name: l
    ops:
      - {op: sub, in: [x, y], out: z}
outputs: [l.z]
)";
  try {
    parse_model(yaml, "m.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("m.yaml:9:9: error: op 0 (sub) of layer 'l': inputs 'a' [4,3] and 'b' [4] "
                       "do not broadcast"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("(inputs: a = x f32[4,3], b = y f32[4])"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tilerun::kernels
