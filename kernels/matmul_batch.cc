#include "kernels/matmul_batch.h"

#include "kernels/shape_attrs.h"
#include "kernels/strided.h"

namespace tilerun::kernels {

namespace {

using Ints = std::vector<int64_t>;

int64_t count_of(const Ints& dims) { return product(dims, 0, dims.size()); }

// Renames a rule's values: each name found in `names` becomes its mapped name.
GradOp renamed(GradOp op, const std::map<std::string, std::string>& names) {
  for (std::string& n : op.inputs)
    if (names.count(n)) n = names.at(n);
  for (std::string& n : op.outputs)
    if (names.count(n)) n = names.at(n);
  return op;
}

Ints with_matrix(Ints batch, const Ints& shape) {
  batch.push_back(shape[shape.size() - 2]);
  batch.push_back(shape.back());
  return batch;
}

}  // namespace

MatmulBatch matmul_batch(const TensorType& a, const TensorType& b) {
  for (const auto& [t, slot] : {std::pair{&a, "a"}, std::pair{&b, "b"}})
    if (t->shape.size() < 2)
      throw ShapeError("input '" + std::string(slot) + "' is " + to_string(*t) +
                       ", expected rank >= 2 (a matrix, or a batch of them)");
  MatmulBatch mb;
  mb.a.assign(a.shape.begin(), a.shape.end() - 2);
  mb.b.assign(b.shape.begin(), b.shape.end() - 2);
  const size_t rank = std::max(mb.a.size(), mb.b.size());
  mb.c.assign(rank, 1);
  for (size_t j = 0; j < rank; ++j) {
    const int64_t x = j + mb.a.size() >= rank ? mb.a[j + mb.a.size() - rank] : 1;
    const int64_t y = j + mb.b.size() >= rank ? mb.b[j + mb.b.size() - rank] : 1;
    if (x != y && x != 1 && y != 1)
      throw ShapeError("input 'b' is " + to_string(b) +
                       ", expected batch dims that broadcast with " + shape_text(mb.a) +
                       " of 'a' " + to_string(a) +
                       " (NumPy rules: aligned from the last, each size 1 or equal)");
    mb.c[j] = x == 1 ? y : x;
  }
  mb.count = count_of(mb.c);
  return mb;
}

int64_t batch_source(const Ints& src, const Ints& c, int64_t z) {
  int64_t index = 0, stride = 1;
  for (size_t j = c.size(); j-- > 0;) {
    const int64_t coord = z % c[j];
    z /= c[j];
    const size_t lead = c.size() - src.size();
    if (j >= lead) {
      const int64_t size = src[j - lead];
      index += (size == 1 ? 0 : coord) * stride;
      stride *= size;
    }
  }
  return index;
}

bool folds_into_rows(const MatmulBatch& mb, bool transpose_a) {
  return !transpose_a && mb.b.empty() && mb.count > 1;
}

std::vector<GradOp> batched_gradient(const decltype(OpSchema::gradient)& rank2_rule,
                                     const std::vector<TensorType>& in, const Attrs& attrs,
                                     const std::vector<bool>& needs) {
  const MatmulBatch mb = matmul_batch(in[0], in[1]);
  if (!needs[0] && !needs[1]) return {};
  if (mb.a.empty() && mb.b.empty()) return rank2_rule(in, attrs, needs);
  const bool ta = std::get<bool>(attrs.at("transpose_a"));
  std::vector<GradOp> ops;
  if (folds_into_rows(mb, ta)) {
    // a [.., M, K] as [batch·M, K] and dy [.., M, N] as [batch·M, N]: views, no kernels.
    const int64_t rows = mb.count * in[0].shape[in[0].shape.size() - 2];
    const int64_t n = in[1].shape[std::get<bool>(attrs.at("transpose_b")) ? 0 : 1];
    if (needs[1])  // only dx1 reads a
      ops.push_back({"reshape", {"x0"}, {"x0.rows"}, {{"shape", Ints{rows, in[0].shape.back()}}}});
    ops.push_back({"reshape", {"dy0"}, {"dy0.rows"}, {{"shape", Ints{rows, n}}}});
    const std::map<std::string, std::string> names = {
        {"x0", "x0.rows"}, {"dy0", "dy0.rows"}, {"dx0", "dx0.rows"}};
    TensorType a_rows{in[0].dtype, {rows, in[0].shape.back()}};
    for (const GradOp& op : rank2_rule({a_rows, in[1]}, attrs, needs))
      ops.push_back(renamed(op, names));
    if (needs[0]) ops.push_back({"reshape", {"dx0.rows"}, {"dx0"}, {{"shape", in[0].shape}}});
    return ops;
  }
  // The rule's batched matmuls give each gradient c's batch dims; sum the broadcast ones away.
  std::map<std::string, std::string> names;
  std::vector<GradOp> sums;
  for (int i = 0; i < 2; ++i) {
    if (!needs[i] || with_matrix(mb.c, in[i].shape) == in[i].shape) continue;
    const std::string dx = "dx" + std::to_string(i);
    names[dx] = dx + ".batched";
    sums.push_back({"broadcast_to_grad", {dx + ".batched"}, {dx}, {{"shape", in[i].shape}}});
  }
  for (const GradOp& op : rank2_rule(in, attrs, needs)) ops.push_back(renamed(op, names));
  ops.insert(ops.end(), sums.begin(), sums.end());
  return ops;
}

BatchOperand prepare_operand(KernelCache& cache, DType dtype, const Ints& batch, const Ints& matrix,
                             const MatmulBatch& mb, int slot, OpExpansion& ex) {
  const int64_t n = count_of(batch);
  if (n == 1) return {.batched = false, .arg = input_slot(slot)};
  if (n == mb.count) return {.batched = true, .arg = input_slot(slot)};
  Ints x_shape = batch, full = mb.c;
  x_shape.insert(x_shape.end(), matrix.begin(), matrix.end());
  full.insert(full.end(), matrix.begin(), matrix.end());
  const int scratch = static_cast<int>(ex.scratch.size());
  ex.scratch.push_back({dtype, full});
  ex.calls.push_back(strided_copy_call(cache, dtype, count_of(x_shape),
                                       broadcast_view(x_shape, full), input_slot(slot),
                                       scratch_slot(scratch)));
  return {.batched = true, .arg = scratch_slot(scratch)};
}

}  // namespace tilerun::kernels
