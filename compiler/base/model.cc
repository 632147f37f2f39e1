// Model queries and the human-readable summary printed by `tilerun MODEL.yaml`.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tilerun/model.h"

namespace tilerun {

namespace {

std::string type_text(const TensorDecl& t) {
  std::string s = std::string(dtype_name(t.dtype)) + "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "]";
}

// 1049088 → "1,049,088": parameter counts are read by people comparing model sizes.
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

// "rmsnorm, matmul x2, silu, add": op types in first-use order, with counts.
std::string op_types(const LayerDecl& layer) {
  std::vector<std::pair<std::string, int>> counts;
  for (const OpDecl& op : layer.ops) {
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& c) { return c.first == op.type; });
    if (it == counts.end())
      counts.emplace_back(op.type, 1);
    else
      ++it->second;
  }
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) {
    s += (i ? ", " : "") + counts[i].first;
    if (counts[i].second > 1) s += " x" + std::to_string(counts[i].second);
  }
  return s;
}

}  // namespace

int64_t TensorDecl::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // the parser bounds every shape, so this cannot overflow
  return n;
}

const TensorDecl* Model::find_tensor(const std::string& name) const {
  for (const TensorDecl& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const TensorDecl& t : tensors)
    if (t.role == TensorRole::Weight) n += t.numel();
  return n;
}

int64_t Model::parameter_bytes() const {
  int64_t n = 0;
  for (const TensorDecl& t : tensors)
    if (t.role == TensorRole::Weight) n += t.nbytes();
  return n;
}

std::string model_summary(const Model& model) {
  std::ostringstream os;
  os << "model: " << model.name;
  if (!model.file.empty()) os << " (" << model.file << ")";
  os << "\ndtype: " << dtype_name(model.dtype) << "\ndims:";
  if (model.dims.empty()) os << " (none)";
  for (const auto& [name, size] : model.dims) os << " " << name << "=" << size;

  os << "\nlayers: " << model.layers.size() << "\n";
  for (const LayerDecl& layer : model.layers)
    os << "  " << layer.name << ": " << layer.ops.size() << (layer.ops.size() == 1 ? " op" : " ops")
       << " (" << op_types(layer) << ")\n";

  int counts[3] = {0, 0, 0};
  for (const TensorDecl& t : model.tensors) ++counts[static_cast<int>(t.role)];
  auto plural = [](int n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  os << "tensors: " << model.tensors.size() << " ("
     << plural(counts[static_cast<int>(TensorRole::Input)], "input", "inputs") << ", "
     << plural(counts[static_cast<int>(TensorRole::Weight)], "weight", "weights") << ", "
     << plural(counts[static_cast<int>(TensorRole::Activation)], "activation", "activations")
     << ")\n";
  int64_t bytes = model.parameter_bytes();
  os << "parameters: " << grouped(model.parameter_count()) << " (" << grouped(bytes) << " bytes, "
     << human_bytes(bytes) << ")\n";

  os << "inputs:" << (counts[static_cast<int>(TensorRole::Input)] == 0 ? " (none)\n" : "\n");
  for (const TensorDecl& t : model.tensors)
    if (t.role == TensorRole::Input) os << "  " << t.name << ": " << type_text(t) << "\n";
  os << "outputs:\n";
  for (const std::string& name : model.outputs) {
    const TensorDecl* t = model.find_tensor(name);
    os << "  " << name << ": " << (t ? type_text(*t) : "?") << "\n";
  }
  if (model.loss.terms.empty()) os << "loss: half_sum_squares\n";
  if (!model.loss.terms.empty()) os << "loss:\n";
  for (const LossTerm& t : model.loss.terms) {
    os << "  " << t.name << ": " << t.op.type << "(";
    for (size_t i = 0; i < t.op.inputs.size(); ++i) os << (i ? ", " : "") << t.op.inputs[i];
    os << ")";
    if (t.weight != 1.0) os << " * " << t.weight;
    os << "\n";
  }
  switch (model.optimizer.kind) {
    case OptimizerDecl::Kind::None:
      break;
    case OptimizerDecl::Kind::Sgd:
      os << "optimizer: sgd (lr " << model.optimizer.lr << ")\n";
      break;
    case OptimizerDecl::Kind::AdamW:
      os << "optimizer: adamw (lr " << model.optimizer.lr << ", beta1 " << model.optimizer.beta1
         << ", beta2 " << model.optimizer.beta2 << ", eps " << model.optimizer.eps
         << ", weight_decay " << model.optimizer.weight_decay << ")\n";
      break;
  }
  return os.str();
}

}  // namespace tilerun
