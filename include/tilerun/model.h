// A model as written in YAML, parsed and checked: named dims, tensors, layers of ops.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tilerun/dtype.h"
#include "tilerun/error.h"
#include "tilerun/tensor.h"

namespace tilerun {

// An op attribute as written in YAML.
using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                               std::vector<double>, std::vector<std::string>>;
using Attrs = std::map<std::string, AttrValue>;

enum class TensorRole { Input, Weight, Activation };

// How a weight (or an input, when none is supplied) gets its values. The generator is
// counter-based (seed, tensor name, element index) and uses only integer arithmetic and
// correctly rounded float operations, so it gives the same bits on every machine.
struct Initializer {
  enum class Kind { Zeros, Ones, Constant, Uniform, Normal };
  Kind kind = Kind::Normal;
  double a = 0.0;  // Constant: the value; Uniform: low; Normal: mean
  double b = 1.0;  // Uniform: high; Normal: standard deviation
};

struct TensorDecl {
  std::string name;  // unique; tensors of a repeated layer carry "layer.i." prefixes
  TensorRole role = TensorRole::Activation;
  DType dtype = DType::F32;
  std::vector<std::string> dims;  // as written (dim names or literal sizes)
  std::vector<int64_t> shape;     // resolved
  Initializer init;               // weights and inputs
  int layer = -1;                 // index into Model::layers, -1 for model-level tensors
  SourceLoc loc;

  int64_t numel() const;
  int64_t nbytes() const { return dtype_bytes(dtype, numel()); }
};

struct OpDecl {
  std::string type;                  // a registered op, e.g. "matmul"
  std::vector<std::string> inputs;   // tensor names, resolved to TensorDecl::name
  std::vector<std::string> outputs;  // tensor names produced here (each produced once)
  Attrs attrs;                       // validated against the op's schema, defaults filled in
  SourceLoc loc;
};

struct LayerDecl {
  std::string name;         // "block.0", "block.1", ... for a repeated layer
  std::vector<OpDecl> ops;  // in execution order
  SourceLoc loc;
};

// One term of the loss: a loss op (cross_entropy, mse, kl_div, half_sum_squares) over model
// tensors whose one output, the f32 scalar "loss:NAME", is the term's value.
struct LossTerm {
  std::string name;  // unique among the terms: as written, or the op's name
  double weight = 1.0;
  OpDecl op;
};

// The loss is the sum over the terms of weight * value. No terms (no `loss:` key, or
// `loss: half_sum_squares`): 0.5 * sum(out^2) over every float output, one term per output, so
// the gradient seeded into each output is the output itself (an integer output has no term).
struct LossDecl {
  std::vector<LossTerm> terms;
};

// The optimiser step that updates every weight in place after backward (Session::update()).
// sgd: w -= lr * dw. adamw: m = beta1 m + (1 - beta1) dw, v = beta2 v + (1 - beta2) dw^2,
// w -= lr * (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * w), t the
// step count; m, v start at zero.
struct OptimizerDecl {
  enum class Kind { None, Sgd, AdamW };
  Kind kind = Kind::None;
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  SourceLoc loc;
};

struct Model {
  std::string name;
  std::string file;
  std::vector<std::pair<std::string, int64_t>> dims;  // in declaration order
  DType dtype = DType::F32;                           // default dtype
  std::vector<TensorDecl> tensors;                    // inputs, weights, activations
  std::vector<LayerDecl> layers;
  std::vector<std::string> outputs;
  LossDecl loss;
  OptimizerDecl optimizer;

  // nullptr when there is no such tensor.
  const TensorDecl* find_tensor(const std::string& name) const;
  int64_t parameter_count() const;
  int64_t parameter_bytes() const;
};

// What a caller changes in a model file as it is read.
struct ModelOptions {
  // Dims to set, by name (the command line's --dim NAME=N): each must be a dim the file
  // declares, and replaces its value before any shape, attribute or layer is read.
  std::vector<std::pair<std::string, int64_t>> dims;
  // When > 0 (the command line's --layers N): every layer that declares `repeat:` is repeated N
  // times instead, each repetition with its own weights. A model with no such layer is an error.
  int64_t layers = 0;
};

// Parses and checks a model file. Every mistake throws tilerun::Error with the location
// "file:line:col" and what was expected there.
Model load_model(const std::string& path, const ModelOptions& options = {});
// The same from text; `file_name` is used in error locations.
Model parse_model(const std::string& yaml_text, const std::string& file_name,
                  const ModelOptions& options = {});

// A human-readable summary: layers, ops per layer, tensors, parameter count and bytes.
std::string model_summary(const Model& model);

// Values for every weight and input of the model from the documented seeded initialiser.
TensorMap initialize_tensors(const Model& model, uint64_t seed);
// The same for one tensor (any role): its shape, dtype and values from `decl.init`.
HostTensor initialize_tensor(const TensorDecl& decl, uint64_t seed);
// What load_tensors does with an input or weight the file lacks.
enum class MissingTensors {
  Initialize,  // give it values from the initialiser with `seed`
  Refuse,      // throw tilerun::Error naming every missing tensor
};
// Weights (and inputs) by name from a .safetensors file, checked against the model's dtypes and
// shapes; tensors the file lacks are handled as `missing` says.
TensorMap load_tensors(const Model& model, const std::string& safetensors_path, uint64_t seed,
                       MissingTensors missing = MissingTensors::Initialize);

}  // namespace tilerun
