#include "compiler/codegen/launch_abi.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "compiler/analysis/index_eval.h"
#include "compiler/analysis/launch_geometry.h"
#include "compiler/ir/ir_visitor.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

size_t param_size(Type t) { return t == Type::F32 || t == Type::I32 ? 4 : 8; }

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

void check_launch_args(const KernelSignature& sig, const KernelArgs& args) {
  auto fail = [&](const std::string& msg) {
    throw Error("kernel '" + sig.name + "': " + msg, ErrorKind::Runtime);
  };
  auto count = [&](size_t got, size_t want, const char* what) {
    if (got != want)
      fail("launched with " + std::to_string(got) + " " + what + ", expected " +
           std::to_string(want));
  };
  count(args.buffers.size(), sig.buffers.size(), "buffers");
  count(args.dims.size(), sig.dims.size(), "dims");
  count(args.scalars.size(), sig.scalars.size(), "scalars");
  check_dims(sig, args.dims);
  for (size_t i = 0; i < sig.buffers.size(); ++i) {
    const BufferParam& b = sig.buffers[i];
    uint64_t address = reinterpret_cast<uintptr_t>(args.buffers[i]);
    if (address == 0) fail("buffer '" + b.name + "' is null");
    uint64_t align = static_cast<uint64_t>(std::max<int64_t>(dtype_bytes(b.dtype, 1), 1));
    if (address % align != 0)
      fail("buffer '" + b.name + "' at " + hex(address) + " is not aligned to its " +
           std::to_string(align) + "-byte elements");
  }
  for (size_t i = 0; i < sig.scalars.size(); ++i) {
    const ScalarParam& s = sig.scalars[i];
    if (s.type == Type::F32) continue;
    double d = args.scalars[i];
    const double limit = s.type == Type::I32 ? 2147483648.0 : 9223372036854775808.0;
    if (!(d == std::trunc(d) && d >= -limit && d < limit))
      fail("scalar '" + s.name + "' = " + std::to_string(d) + " is not a whole " +
           type_name(s.type) + " value");
  }
}

TensorMapParam tensor_map_param(const KernelSignature& sig, const TmaCopy& op) {
  TensorMapParam m;
  for (size_t i = 0; i < sig.buffers.size(); ++i)
    if (sig.buffers[i].name == op.src) m.buffer = static_cast<int>(i);
  m.dtype = sig.buffers[static_cast<size_t>(m.buffer)].dtype;
  m.box = op.box;
  m.swizzle_bytes = static_cast<int>(op.box.back() * dtype_bytes(m.dtype, 1));
  return m;
}

std::vector<TensorMapParam> tensor_map_params(const SimtKernel& kernel) {
  struct Collect : IRVisitor {
    const SimtKernel* k;
    std::vector<TensorMapParam> maps;
    void visit_stmt(const TmaCopy* op) override {
      const TensorMapParam m = tensor_map_param(k->sig, *op);
      if (std::find(maps.begin(), maps.end(), m) == maps.end()) maps.push_back(m);
    }
  } c;
  c.k = &kernel;
  if (kernel.body.defined()) c.visit(kernel.body);
  return c.maps;
}

CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args) {
  return pack_cuda_params(sig, args, {}, nullptr);
}

CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args,
                            const std::vector<TensorMapParam>& maps,
                            const TensorMapEncoder& encode) {
  check_launch_args(sig, args);
  CudaParams p;
  size_t offset = 0;
  auto place = [&](const std::string& name, size_t size) {
    const size_t align = std::min<size_t>(size, 64);
    offset = (offset + align - 1) / align * align;
    p.slots_.push_back({name, offset, size});
    offset += size;
  };
  for (const BufferParam& b : sig.buffers) place(b.name, 8);
  for (const DimParam& d : sig.dims) place(d.name, 8);
  for (const ScalarParam& s : sig.scalars) place(s.name, param_size(s.type));
  for (size_t i = 0; i < maps.size(); ++i) place("tensor map " + std::to_string(i), 128);
  p.size_ = offset;
  p.storage_ = std::make_unique<std::byte[]>(std::max<size_t>(offset, 8));  // new[]: 16-aligned

  size_t slot = 0;
  auto put = [&](const void* value) {
    const CudaParams::Slot& s = p.slots_[slot++];
    std::memcpy(p.storage_.get() + s.offset, value, s.size);
  };
  for (size_t i = 0; i < sig.buffers.size(); ++i) {
    uint64_t address = reinterpret_cast<uintptr_t>(args.buffers[i]);
    put(&address);
  }
  for (size_t i = 0; i < sig.dims.size(); ++i) put(&args.dims[i]);
  for (size_t i = 0; i < sig.scalars.size(); ++i) {
    const ScalarParam& s = sig.scalars[i];
    double d = args.scalars[i];
    if (s.type == Type::F32) {
      float f = static_cast<float>(d);  // round to nearest even, as the CPU backend's fptrunc
      put(&f);
    } else if (s.type == Type::I32) {
      int32_t v = static_cast<int32_t>(d);
      put(&v);
    } else {
      int64_t v = static_cast<int64_t>(d);
      put(&v);
    }
  }
  std::map<std::string, int64_t> dims;
  for (size_t i = 0; i < sig.dims.size(); ++i) dims[sig.dims[i].name] = args.dims[i];
  for (const TensorMapParam& m : maps) {
    if (!encode)
      throw Error("kernel '" + sig.name + "' takes tensor maps and its launcher encodes none",
                  ErrorKind::Runtime);
    std::vector<int64_t> shape;
    for (const Expr& e : sig.buffers[static_cast<size_t>(m.buffer)].shape)
      shape.push_back(eval_index(e, dims));
    const TensorMapBytes bytes = encode(m, args.buffers[static_cast<size_t>(m.buffer)], shape);
    const CudaParams::Slot& s = p.slots_[slot++];
    std::memcpy(p.storage_.get() + s.offset, bytes.data(), bytes.size());
  }
  for (const CudaParams::Slot& s : p.slots_) p.pointers_.push_back(p.storage_.get() + s.offset);
  return p;
}

}  // namespace tilerun::compiler
