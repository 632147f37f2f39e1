// The step as ops over tensors, forward and backward: what graph/autodiff builds from a Model
// and graph/expand turns into kernels. Ids are indices into the vectors, assigned in order of
// creation, so everything derived from an OpGraph is deterministic.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/op_registry.h"
#include "tilerun/model.h"

namespace tilerun::graph {

// Update: the optimiser step after backward (models with `optimizer:`), run by
// Session::update().
enum class Direction { Forward, Backward, Update };
const char* direction_name(Direction d);

enum class TensorKind {
  Input,       // bound from outside each step
  Weight,      // bound from outside, persistent
  Activation,  // produced by a forward op
  Gradient,    // produced by a backward op
};

struct GraphTensor {
  std::string name;
  kernels::TensorType type;
  TensorKind kind = TensorKind::Activation;
  int producer = -1;  // the op that writes it; -1 for inputs, weights and zero gradients
};

struct GraphOp {
  std::string type;
  std::vector<int> inputs;
  std::vector<int> outputs;
  Attrs attrs;
  int layer = 0;  // index into Model::layers
  Direction direction = Direction::Forward;
  SourceLoc loc;  // the forward op's YAML location (backward ops inherit it)
};

// A term of the model's loss in the graph: its forward op and value (an f32 scalar that outlives
// the step, read after forward()).
struct GraphLossTerm {
  std::string name;
  double weight = 1.0;
  int op = -1;
  int value = -1;
};

// How an index contract (kernels::IndexContract) is established: at run time, check_index's
// status tensor (read after forward()), or by construction, the op that produced the indices
// declaring their range (kernels::IndexOutput), with index_established's constant status; the
// index tensor, its bound, and the op (and its input slot) whose contract it is, for the error
// and the dump.
struct GraphIndexCheck {
  int status = -1;
  int producer = -1;  // >= 0: established by construction by this op (nothing to read back)
  int ids = -1;
  int64_t bound = 0;
  int op = -1;
  int slot = 0;
  std::string indexes;  // what the indices select: "the rows of input 'table'"
  bool sorted = false;  // the values must also not decrease (kernels::IndexContract::sorted)
};

struct OpGraph {
  std::vector<GraphTensor> tensors;
  std::vector<GraphOp> ops;         // in execution order: forward ops, then backward ops
  std::vector<int> outputs;         // the model's outputs
  std::vector<GraphLossTerm> loss;  // computed by the last forward ops, in the model's order
  std::vector<GraphIndexCheck> index_checks;  // forward, before the ops they guard
  // The float inputs of ops that choose (chooses_from_inputs: topk's, argmax's: a router's
  // logits), in op order. A NaN there changes only which indices are chosen, so no output need
  // show it; and the double reference, choosing from its own values, may break a near tie the
  // other way (Session::check gives those ops the run's values). They are kept to the end of the
  // step (persistent) for the caller to look at.
  std::vector<int> selection_inputs;
  std::map<int, int> grad;  // tensor id -> the id of its gradient (inputs and weights after
                            // autodiff; intermediates too while it runs)

  int find(const std::string& name) const;  // -1 when there is none; O(log n)
  int add_tensor(GraphTensor t);            // the name must be new
  // `base`, or `base` with a "'" suffix repeated until no tensor has that name.
  std::string unique_name(std::string base) const;

 private:
  std::map<std::string, int, std::less<>> index_;  // name -> id, kept by add_tensor
};

// Whether `op` chooses from its float inputs' values: it writes indices (OpSchema::index_outputs:
// topk, counting_sort, moe_route) or only integer outputs (argmax, argmin), from at least one
// float input. A near tie in those values may fall either way between two computations of them.
bool chooses_from_inputs(const OpGraph& g, const GraphOp& op);

}  // namespace tilerun::graph
