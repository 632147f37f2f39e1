// The op registry: per op, its attribute schema, shape/dtype inference, a double-precision
// reference, its gradient rule, its tile kernels and the cases the shared test suites run. Each op
// family registers its ops from one explicit function, `register_<family>`, named once in
// kernels/families.def; never from static initialisers, which vanish when a static library is
// linked into another program.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tilerun/model.h"

namespace tilerun::compiler {
struct Kernel;  // a Tile IR kernel (compiler/)
}  // namespace tilerun::compiler

namespace tilerun::kernels {

// The type of a tensor flowing into or out of an op.
struct TensorType {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  bool operator==(const TensorType&) const = default;
};
std::string to_string(const TensorType& t);  // "f32[128,256]"

// A tensor for reference implementations: row-major doubles.
struct RefTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  int64_t numel() const;
};

enum class AttrKind { Int, Float, Bool, String, IntList, FloatList, StringList };
std::string_view attr_kind_name(AttrKind k);

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::Int;
  std::optional<AttrValue> default_value;  // none: the attribute is required
  std::string doc;
  bool positive = false;  // Float/Int: the value must be > 0 (checked at its YAML position)
};

// Thrown by an op's inference for a shape or dtype its inputs may not have. The message names
// the input and what was expected; the caller adds the op's location and name.
class ShapeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One backward op emitted by a gradient rule. Value names: "x0", "x1", ... are the forward op's
// inputs, "y0", ... its outputs, "dy0", ... the gradients of its outputs, "dx0", ... the input
// gradients the rule produces; any other name is a temporary local to the rule. The type "alias"
// (one input, one output) makes the output the same tensor as the input and costs no kernel;
// "zeros" (input: the forward input, output: its dx) says that gradient is zero (a comparison's,
// a mask's) and contributes nothing.
struct GradOp {
  std::string type;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  Attrs attrs;
};

// Which tensor a kernel's buffer parameter is bound to: the op's input or output slot `index`, or
// scratch buffer `index` of the op's expansion (an intermediate between its kernels).
struct KernelArg {
  enum class Kind { Input, Output, Scratch };
  Kind kind = Kind::Input;
  int index = 0;
};

// One kernel launch of an op: the tile kernel (built once per distinct kernel and shared) and its
// bindings, all in the kernel's parameter order.
struct KernelCall {
  std::shared_ptr<const compiler::Kernel> kernel;
  std::vector<KernelArg> buffers;  // one per buffer parameter
  std::vector<int64_t> dims;       // one per dim
  std::vector<double> scalars;     // one per scalar parameter
};

// An output that is the bytes of an input (a view): input slot `input`, from element `offset` on.
struct ViewOf {
  int input = 0;
  int64_t offset = 0;  // in elements of the input's dtype
};

// What an op becomes: its kernels, in order, and the scratch buffers they share.
struct OpExpansion {
  std::vector<TensorType> scratch;
  std::vector<KernelCall> calls;
};

// One case of the shared test suites (tests/kernels/, the GPU identity test): the op's input
// shapes and attributes; the inputs are fresh random values in [lo, hi).
// (Members default to {} so that cases written positionally, `{{{7, 5}}}`, compile without
// -Wmissing-field-initializers noise.)
struct OpTestCase {
  std::vector<std::vector<int64_t>> shapes = {};
  Attrs attrs = {};
  double lo = -2, hi = 2;
  // Random values nearer to zero than this are drawn again: keeps finite differences off a kink
  // at 0 (max(x, 0)) without weakening the check elsewhere.
  double min_abs = 0;
  // Inputs of an integer slot (OpSchema::input_dtypes) are drawn uniformly from [int_lo, int_hi).
  int64_t int_lo = 0, int_hi = 1;
  // Inputs (by index) drawn as random 0/1 masks instead (where's condition).
  std::vector<int> masks = {};
  // Integer inputs (by index) that are the running sums of their draws from [int_lo, int_hi):
  // non-decreasing, like the segment starts of grouped_matmul's offsets.
  std::vector<int> running_sums = {};
  // Integer inputs (by index) that must come from a producer declaring them distinct (scatter's
  // index): models built from the case (the GPU suite's) make each the argsort (bins int_hi) of
  // its draws; `derive` must do the same for the suites that call the kernels directly.
  std::vector<int> permutations = {};
  // > 0: float inputs rounded to multiples of this, so that equal values are common (the ties
  // of argmax, topk, sorts).
  double step = 0;
  // Inputs computed from the drawn ones (a sort's permutation and offsets that must agree with
  // the ids: sparse_attention_grad's order and offsets); run on the inputs after the draw.
  std::function<void(std::vector<RefTensor>&)> derive = {};
  // Inputs (by index) of this dtype in this case, whatever the op's (dequantize's codes and
  // scales); drawn as floats in [lo, hi) and rounded to it.
  std::map<int, DType> input_dtypes = {};
  // The op's dtypes in which the kernel is compared with the double reference (empty: every
  // one). A kernel that quantises a value it rounded to a 16-bit dtype first (a folded fake_quant)
  // can differ from the reference by a quantum where that rounding moves a block's scale or a
  // tie; it is checked in those dtypes against the unfused ops, bit for bit, instead.
  std::vector<DType> reference_dtypes = {};
};

// A worked example: literal inputs and the outputs the reference must give (to 1e-12 relative),
// written out by hand, so a reference is checked against something other than itself.
struct OpExample {
  std::vector<RefTensor> inputs = {};
  Attrs attrs = {};
  std::vector<RefTensor> outputs = {};
  std::map<int, DType> input_dtypes = {};  // as OpTestCase::input_dtypes
};

// What the shared suites run for an op. Kernel cases run once per dtype of the op (CPU JIT
// against the reference, NVRTC to cubin, GPU against CPU bit for bit); gradient cases check the
// gradient rule against finite differences, O(size^2) in double, so they are small.
struct OpTests {
  std::vector<OpTestCase> kernel = {};
  std::vector<OpTestCase> gradient = {};
  std::vector<OpExample> examples = {};
  // The gradient rule is a straight-through estimator (dx = dy through a rounding, fake_quant),
  // not the derivative: no finite-difference cases; the suite checks the rule is dy itself.
  bool straight_through = false;
  // The gradient rule is the derivative of the unrounded op computed through rounded products
  // (linear_fp8's FP8 backward): no finite-difference cases (the roundings are steps); its own
  // test checks the rule against the unrounded derivative within the rounding's error.
  bool fp8_gradient = false;
};

// An input slot of indices into something the op reads (embedding's ids into the table's
// rows): every value must lie in [0, bound). graph/ runs check_index on the indices before the
// op (an index outside fails the step after forward() with an error naming the tensor, the
// element and the value) and appends the check's status (i32[2]) to the op's inputs, after the
// declared ones; the op's expansion, given it, passes it to kernels that declare the indices
// with KernelBuilder::index_input, skip their work when the status reports a bad index, and so
// have their bound checks proved from the contract instead of kept.
struct IndexContract {
  int slot = 0;
  // The exclusive bound, from the op's (declared) input types and attributes.
  std::function<int64_t(const std::vector<TensorType>&, const Attrs&)> bound;
  std::string indexes;  // what the indices select, for errors: "the rows of input 'table'"
  // The values must also be distinct (a scatter's target rows: each written once). No run-time
  // check establishes that: the indices must come from a producer declaring them distinct
  // (IndexOutput::distinct); any other is refused when the model is built, naming the op.
  bool distinct = false;
  // The values must also not decrease along the (1-d) tensor: segment starts, such as
  // counting_sort's offsets, whose segments [v[e], v[e + 1]) a kernel owns row by row. Established
  // by a producer declaring them so (IndexOutput::sorted), else by check_index at run time (the
  // first element below the one before it fails the step).
  bool sorted = false;
};

// An output slot of indices that the op's kernels write only in [0, bound) by construction
// (topk's positions, a counting sort's permutation: values the kernel computes from its own loop
// coordinates, never copies of what it read). An op indexing with that tensor under a contract
// whose bound is at least this one needs no run-time check: graph/ records the contract as
// established by construction (GraphIndexCheck::producer), runs no check_index for it, and
// hands the op index_established's constant status instead, so its kernels assume the contract
// (and have their bound checks proved) exactly as after a check.
struct IndexOutput {
  int slot = 0;
  std::function<int64_t(const std::vector<TensorType>&, const Attrs&)> bound;
  // No two elements hold one value (counting_sort's position and order, argsort's order: each a
  // permutation of [0, N)): what a contract with `distinct` (scatter's) asks of its producer.
  bool distinct = false;
  // The values do not decrease (counting_sort's offsets, an exclusive scan of counts): what a
  // contract with `sorted` (grouped_matmul's) takes without a run-time check.
  bool sorted = false;
};

// The floating-point element types every op of the first families accepts.
inline const std::vector<DType> kFloatTypes = {DType::F32, DType::BF16, DType::F16};

struct OpSchema {
  std::string name;
  std::string doc;
  std::vector<std::string> inputs;  // input slot names, in order
  int optional_inputs = 0;          // how many trailing inputs may be left out
  // >= 0: an optional input (the last) added to output 0 after the op rounded it to its dtype (an
  // add after the op, the same bits): graph/fold_adds.h folds an add of output 0 into the op.
  int addend_input = -1;
  std::vector<std::string> outputs;  // output slot names, in order
  int optional_outputs = 0;          // how many trailing outputs may be left out (split)
  std::vector<AttrSpec> attrs;
  // The element types the op accepts (every input and output has the same one; an op that mixes
  // them, FP4 weights with E8M0 scales, will need one list per slot); inference refuses the
  // others (a test checks that it does).
  std::vector<DType> dtypes = kFloatTypes;
  // Slots whose dtype is fixed whatever the op's dtype (the list above is for the others):
  // integer inputs, such as cross_entropy's targets, are never differentiated; a loss value is f32.
  std::map<int, DType> input_dtypes = {};
  std::map<int, DType> output_dtypes = {};
  // Non-empty: the outputs take the dtype named by this String attribute instead of the inputs'
  // (cast's `to`; fill's and iota's `dtype`, ops without inputs), one of `dtypes`.
  std::string dtype_attr = {};
  // Output slots whose dtype a String attribute names (quantize's codes by `format`, its scales by
  // `scale`); inference checks the name.
  std::map<int, std::string> output_dtype_attrs = {};

  // Output types from input types and (defaults-filled) attributes; throws ShapeError.
  std::function<std::vector<TensorType>(const std::vector<TensorType>&, const Attrs&)> infer;
  // Double-precision reference: outputs from inputs. Empty until the family provides it.
  std::function<std::vector<RefTensor>(const std::vector<RefTensor>&, const Attrs&)> reference;

  // Gradient rule: the backward ops that compute "dx<i>" for every input i with needs_grad[i].
  // Empty: the op is not differentiable.
  std::function<std::vector<GradOp>(const std::vector<TensorType>& inputs, const Attrs&,
                                    const std::vector<bool>& needs_grad)>
      gradient;
  // Its outputs carry no gradient at all (stop_gradient): graph/autodiff treats them like
  // constants, so nothing computed from them alone gets a backward op. The rule, for any input
  // that asks, says "zeros".
  bool detaches = false;
  // Float output slots that carry no gradient (sparse_attention's attention mass, a statistic of
  // the probabilities): autodiff treats them like stop_gradient's outputs, so nothing computed
  // from them alone gets a backward op, and the rule never reads their dy.
  std::vector<int> detached_outputs = {};

  // Kernel expansion for concrete types: the op's kernels with their bindings. Empty: the op has
  // no kernels yet (the model still parses; compiling it is an error naming the op).
  std::function<OpExpansion(const std::vector<TensorType>& inputs,
                            const std::vector<TensorType>& outputs, const Attrs&)>
      expand;

  // For ops whose outputs can alias their inputs (reshape, a contiguous slice): every output as
  // a view of an input, or nullopt when the op must run its kernels for these types (a layout
  // the bytes cannot express, or an offset not 16-byte aligned, which kernels assume). An op
  // whose outputs are views runs no kernel; graph/ plans and orders the views with their base.
  std::function<std::optional<std::vector<ViewOf>>(
      const std::vector<TensorType>& inputs, const std::vector<TensorType>& outputs, const Attrs&)>
      view = {};

  // A single-use fake_quant of output 0 may run in the op's own kernel (graph/fold_quant.h):
  // given the op's types and its attributes with the fake_quant's added (quant::add_row_quant),
  // whether its expansion then quantises in the kernel that writes the output, with the bits of
  // the fake_quant after it. Empty: never.
  std::function<bool(const std::vector<TensorType>& inputs, const std::vector<TensorType>& outputs,
                     const Attrs&)>
      quant_epilogue = {};

  // Index inputs checked at run time (see IndexContract); their statuses follow the inputs.
  std::vector<IndexContract> index_contracts = {};
  // Output slots whose values lie in a range by construction (see IndexOutput).
  std::vector<IndexOutput> index_outputs = {};

  // The cases the shared test suites run (see OpTests); a test requires kernel cases for every
  // op with kernels and gradient cases for every op with a gradient rule.
  OpTests tests;

  const AttrSpec* find_attr(std::string_view attr) const;
};

class OpRegistry {
 public:
  // Adds an op; registering the same name twice is an internal error.
  void add(OpSchema schema);
  const OpSchema* find(std::string_view name) const;  // nullptr when unknown
  std::vector<std::string> names() const;             // sorted

 private:
  std::map<std::string, OpSchema, std::less<>> ops_;
};

// The registry with every family registered (filled once, on first use, thread-safe).
const OpRegistry& op_registry();

// Helpers for inference functions.
int64_t attr_int(const Attrs& attrs, const std::string& name);
double attr_float(const Attrs& attrs, const std::string& name);
bool attr_bool(const Attrs& attrs, const std::string& name);
const std::string& attr_string(const Attrs& attrs, const std::string& name);

}  // namespace tilerun::kernels
