// stop_gradient: y = x, and no gradient flows back through it. A training target computed from
// the model (the attention map V4's indexer is trained towards) or an input a loss term alone
// should train (the indexer's) goes through it. Always a view: the output is x's bytes, no
// kernel runs; its copy expansion exists for the shared kernel suites, as the views' do.
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/schema_util.h"
#include "kernels/strided.h"

namespace tilerun::kernels {

namespace {

std::vector<TensorType> infer_identity(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  return {in[0]};
}

// "zeros": contributes nothing to x's gradient and costs no kernel. With `detaches`, graph/autodiff
// gives y no gradient, so neither what is computed from y alone nor what feeds x through this
// path alone gets backward ops.
std::vector<GradOp> grad_stop_gradient(const std::vector<TensorType>&, const Attrs&,
                                       const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"zeros", {"x0"}, {"dx0"}, {}}};
}

}  // namespace

void register_stop_gradient(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "stop_gradient",
       .doc = "y = x, a view of x with no kernel; no gradient flows back through it to x (a "
              "detached training target)",
       .inputs = {"x"},
       .outputs = {"y"},
       .infer = infer_identity,
       .reference = [](const std::vector<RefTensor>& in, const Attrs&) { return in; },
       .gradient = grad_stop_gradient,
       .detaches = true,
       .expand =
           [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                   const Attrs&) {
             const int64_t n = numel(in[0]);
             return OpExpansion{.calls = {strided_copy_call(*cache, in[0].dtype, n, {{n}, {1}, 0},
                                                            input_slot(0), output_slot(0))}};
           },
       .view =
           [](const std::vector<TensorType>&, const std::vector<TensorType>&, const Attrs&) {
             return std::optional<std::vector<ViewOf>>{{{0, 0}}};
           },
       .tests = {.kernel = {{{{3, 5}}}, {{{130}}}},
                 .examples = {{.inputs = {{{2}, {1, -2}}}, .outputs = {{{2}, {1, -2}}}}}}});
}

}  // namespace tilerun::kernels
