// The seeded initialiser of weights and inputs, and loading them from .safetensors.
//
// THE GENERATOR (documented; changing anything here changes every seeded run's numbers).
// Each value is a pure function of (seed, tensor name, element index), so the bytes depend on
// neither the machine, nor the order tensors are visited, nor the threads that fill them. All
// integer arithmetic is on uint64 modulo 2^64:
//
//   mix(z)  = SplitMix64's finaliser:  z ^= z >> 30;  z *= 0xBF58476D1CE4E5B9;
//                                      z ^= z >> 27;  z *= 0x94D049BB133111EB;  z ^= z >> 31
//   h       = FNV-1a 64 of the name's bytes: h = 0xCBF29CE484222325, then for each byte c
//             h = (h ^ c) * 0x100000001B3
//   key     = mix(mix(seed) ^ h)
//   bits(c) = mix(key + (c + 1) * 0x9E3779B97F4A7C15)   (the (c+1)-th output of SplitMix64
//                                                         seeded with key)
//   u(c)    = (bits(c) >> 11) * 2^-53                   (an exact double in [0, 1))
//
// Element i (the row-major element index; for fp4e2m1 the element, not the byte) is, with
// Initializer {kind, a, b}, computed in IEEE double with each operation rounded on its own
// (never fused into an fma), in exactly this order:
//
//   Zeros     0                      Ones      1                  Constant  a
//   Uniform   a + ((b - a) * u(i))
//   Normal    a + (b * (s - 6)),  s = ((u(12i) + u(12i+1)) + u(12i+2)) + ... + u(12i+11)
//             (Irwin–Hall: the sum of 12 uniforms minus 6 has mean 0 and variance 1, range
//             [-6, 6); no libm function is involved, so no platform's exp/log can differ)
//
// and is then rounded once to the tensor's dtype as graph/model/numeric_convert.h defines (nearest,
// ties to even; f8e4m3 and fp4e2m1 saturate; integers round to nearest even and saturate).
#include <map>
#include <set>
#include <string_view>

#include "graph/model/numeric_convert.h"
#include "graph/model/safetensors.h"
#include "graph/model/yaml_util.h"
#include "tilerun/error.h"
#include "tilerun/model.h"

namespace tilerun {

namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h;
}

// The stream of one tensor: u(c) above.
class Stream {
 public:
  Stream(uint64_t seed, std::string_view name) : key_(mix(mix(seed) ^ fnv1a(name))) {}
  double uniform(uint64_t c) const {
    return static_cast<double>(mix(key_ + (c + 1) * 0x9E3779B97F4A7C15ull) >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t key_;
};

// x * y rounded to double on its own. Passing through a volatile keeps the compiler from fusing
// it with the add that follows into an fma (C++ allows that contraction, and GCC does it by
// default where the target has fma), which would change last bits on some machines only.
double product(double x, double y) {
  volatile double p = x * y;
  return p;
}

double value_at(const Initializer& init, const Stream& stream, uint64_t i) {
  switch (init.kind) {
    case Initializer::Kind::Zeros:
      return 0.0;
    case Initializer::Kind::Ones:
      return 1.0;
    case Initializer::Kind::Constant:
      return init.a;
    case Initializer::Kind::Uniform:
      return init.a + product(init.b - init.a, stream.uniform(i));
    case Initializer::Kind::Normal: {
      double s = 0.0;
      for (uint64_t j = 0; j < 12; ++j) s += stream.uniform(12 * i + j);
      return init.a + product(init.b, s - 6.0);
    }
  }
  return 0.0;
}

std::string type_str(DType dtype, const std::vector<int64_t>& shape) {
  return std::string(dtype_name(dtype)) + " " + shape_str(shape);
}

}  // namespace

HostTensor initialize_tensor(const TensorDecl& decl, uint64_t seed) {
  HostTensor t;
  t.dtype = decl.dtype;
  t.shape = decl.shape;
  int64_t numel = 0;
  try {
    numel = shape_numel(decl.shape);
  } catch (const Error& e) {
    throw Error(decl.loc, "tensor '" + decl.name + "': " + e.message());
  }
  t.data.assign(static_cast<size_t>(dtype_bytes(decl.dtype, numel)), 0);
  Stream stream(seed, decl.name);
  for (int64_t i = 0; i < numel; ++i)
    graph::store_element(decl.dtype, t.data.data(), i,
                         value_at(decl.init, stream, static_cast<uint64_t>(i)));
  return t;
}

TensorMap initialize_tensors(const Model& model, uint64_t seed) {
  TensorMap out;
  for (const TensorDecl& decl : model.tensors)
    if (decl.role != TensorRole::Activation) out.emplace(decl.name, initialize_tensor(decl, seed));
  return out;
}

TensorMap load_tensors(const Model& model, const std::string& safetensors_path, uint64_t seed,
                       MissingTensors missing) {
  const SourceLoc file_loc{safetensors_path};
  std::map<std::string, const TensorDecl*> decls;
  for (const TensorDecl& decl : model.tensors) decls.emplace(decl.name, &decl);

  // The header against the model before any data is read: a file whose header promises
  // gigabytes for a tensor the model declares small is refused at the cost of its header.
  auto check_header = [&](const std::vector<graph::SafetensorsEntry>& entries) {
    // A misspelt name must not pass silently, its tensor quietly replaced by random values.
    std::string unknown;
    for (const graph::SafetensorsEntry& e : entries) {
      auto it = decls.find(e.name);
      if (it != decls.end() && it->second->role != TensorRole::Activation) continue;
      unknown += (unknown.empty() ? "'" : ", '") + graph::escape_text(e.name) + "'";
      if (it != decls.end()) unknown += " (an activation, computed by the model)";
    }
    if (!unknown.empty())
      throw Error(file_loc, "the file has tensors that are not inputs or weights of model '" +
                                model.name + "': " + unknown);
    for (const graph::SafetensorsEntry& e : entries) {
      const TensorDecl& decl = *decls.at(e.name);
      if (e.dtype == decl.dtype && e.shape == decl.shape) continue;
      std::string where = decl.loc.file.empty() ? "" : " (" + decl.loc.str() + ")";
      throw Error(file_loc, "tensor '" + decl.name + "' is " + type_str(e.dtype, e.shape) +
                                " in the file, but the model declares it " +
                                type_str(decl.dtype, decl.shape) + where);
    }
    // Missing tensors, also before any data is read.
    if (missing == MissingTensors::Refuse) {
      std::set<std::string> present;
      for (const graph::SafetensorsEntry& e : entries) present.insert(e.name);
      std::string absent;
      for (const TensorDecl& decl : model.tensors)
        if (decl.role != TensorRole::Activation && !present.contains(decl.name))
          absent += (absent.empty() ? "'" : ", '") + graph::escape_text(decl.name) + "'";
      if (!absent.empty())
        throw Error(file_loc,
                    "the file lacks inputs or weights of model '" + model.name + "': " + absent);
    }
  };
  TensorMap file = graph::read_safetensors_checked(safetensors_path, nullptr, check_header);

  TensorMap out;
  for (const TensorDecl& decl : model.tensors) {
    if (decl.role == TensorRole::Activation) continue;
    auto it = file.find(decl.name);
    if (it == file.end()) {
      out.emplace(decl.name, initialize_tensor(decl, seed));
      continue;
    }
    out.emplace(decl.name, std::move(it->second));
  }
  return out;
}

}  // namespace tilerun
