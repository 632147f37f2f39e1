// Runs an op's kernel expansion through the CPU JIT the way the executor does: each distinct
// kernel compiled once, every call launched in order with its buffers bound to the op's inputs,
// outputs and scratch tensors. Outputs and scratch start poisoned, so an element no kernel
// writes stays visible.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/analysis/index_eval.h"
#include "compiler/codegen/cpu_backend.h"
#include "graph/model/numeric_convert.h"
#include "kernels/op_registry.h"
#include "tests/kernels/test_util.h"

namespace tilerun::kernels::testing {

// A tensor's raw little-endian elements.
struct Bytes {
  DType dtype = DType::F32;
  std::vector<uint8_t> data;
  int64_t size() const { return static_cast<int64_t>(data.size()) * 8 / dtype_bits(dtype); }
};

inline Bytes encode(DType dtype, const std::vector<double>& values) {
  Bytes b{dtype, std::vector<uint8_t>(dtype_bytes(dtype, values.size()))};
  for (size_t i = 0; i < values.size(); ++i)
    graph::store_element(dtype, b.data.data(), i, values[i]);
  return b;
}

inline std::vector<double> decode(const Bytes& b) {
  std::vector<double> v(b.size());
  for (int64_t i = 0; i < b.size(); ++i) v[i] = graph::load_element(b.dtype, b.data.data(), i);
  return v;
}

// `values` rounded to `dtype`: what a kernel reading them sees.
inline RefTensor rounded(DType dtype, RefTensor t) {
  t.data = decode(encode(dtype, t.data));
  return t;
}

class KernelRunner {
 public:
  // The compiled kernel, JIT-compiled on first use (its compile time goes to the test log).
  const compiler::CpuKernel& compiled(const std::shared_ptr<const compiler::Kernel>& k) {
    auto it = compiled_.find(k.get());
    if (it != compiled_.end()) return *it->second.cpu;
    std::unique_ptr<compiler::CpuKernel> cpu = compiler::compile_cpu(*k);
    std::printf("[ jit      ] %-28s %8.1f ms\n", k->sig.name.c_str(), cpu->compile_ms());
    const compiler::CpuKernel& ref = *cpu;
    compiled_[k.get()] = {k, std::move(cpu)};
    return ref;
  }

  // Expands `op` for inputs of `dtype` (slots of a fixed dtype keep theirs) and runs its kernels;
  // returns the outputs' bytes. Every output and scratch element starts as `poison`.
  std::vector<Bytes> run(const std::string& op, const std::vector<RefTensor>& inputs,
                         const Attrs& attrs_in, DType dtype, double poison,
                         const std::map<int, DType>& input_dtypes = {}) {
    const OpSchema& schema = schema_of(op);
    Attrs attrs = with_defaults(schema, attrs_in);
    std::vector<TensorType> in_types = input_types(schema, inputs, dtype, input_dtypes);
    std::vector<TensorType> out_types = schema.infer(in_types, attrs);
    EXPECT_TRUE(schema.expand) << op << " has no kernels";
    if (!schema.expand) return {};
    OpExpansion ex = schema.expand(in_types, out_types, attrs);

    std::vector<Bytes> in, out, scratch;
    for (size_t i = 0; i < inputs.size(); ++i)
      in.push_back(encode(in_types[i].dtype, inputs[i].data));
    for (const TensorType& t : out_types)
      out.push_back(encode(t.dtype, std::vector<double>(count(t), poison)));
    for (const TensorType& t : ex.scratch)
      scratch.push_back(encode(t.dtype, std::vector<double>(count(t), poison)));

    for (const KernelCall& call : ex.calls) {
      const compiler::KernelSignature& sig = call.kernel->sig;
      EXPECT_EQ(call.buffers.size(), sig.buffers.size()) << sig.name;
      if (call.buffers.size() != sig.buffers.size()) return {};
      std::map<std::string, int64_t> dims;
      for (size_t d = 0; d < sig.dims.size() && d < call.dims.size(); ++d)
        dims[sig.dims[d].name] = call.dims[d];
      compiler::KernelArgs args{.dims = call.dims, .scalars = call.scalars};
      for (size_t b = 0; b < call.buffers.size(); ++b) {
        const KernelArg& a = call.buffers[b];
        Bytes& t = a.kind == KernelArg::Kind::Input    ? in.at(a.index)
                   : a.kind == KernelArg::Kind::Output ? out.at(a.index)
                                                       : scratch.at(a.index);
        const compiler::BufferParam& p = sig.buffers[b];
        // The binding must fit the parameter: an input slot only read, dtypes and sizes equal (a
        // packed fp4e2m1 tensor may be seen as its bytes: u8, half as many elements).
        EXPECT_FALSE(a.kind == KernelArg::Kind::Input && p.is_output)
            << sig.name << " writes input slot " << a.index << " through " << p.name;
        const bool fp4_bytes = t.dtype == DType::FP4E2M1 && p.dtype == DType::U8;
        EXPECT_TRUE(p.dtype == t.dtype || fp4_bytes) << sig.name << " parameter " << p.name;
        int64_t n = 1;
        for (const compiler::Expr& e : p.shape) n *= compiler::eval_index(e, dims);
        EXPECT_EQ(n, fp4_bytes ? (t.size() + 1) / 2 : t.size())
            << sig.name << " parameter " << p.name;
        args.buffers.push_back(t.data.data());
      }
      compiled(call.kernel).launch(args);
    }
    return out;
  }

 private:
  static size_t count(const TensorType& t) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    return static_cast<size_t>(n);
  }

  struct Entry {
    std::shared_ptr<const compiler::Kernel> kernel;  // keeps the key alive
    std::unique_ptr<compiler::CpuKernel> cpu;
  };
  std::map<const compiler::Kernel*, Entry> compiled_;
};

// One runner for a test binary (its compiled kernels kept for the binary's life).
inline KernelRunner& shared_runner() {
  static KernelRunner* r = new KernelRunner;
  return *r;
}

}  // namespace tilerun::kernels::testing
