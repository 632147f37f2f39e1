#include "compiler/codegen/launch_abi.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "compiler/analysis/launch_geometry.h"
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

CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args) {
  check_launch_args(sig, args);
  CudaParams p;
  size_t offset = 0;
  auto place = [&](const std::string& name, size_t size) {
    offset = (offset + size - 1) / size * size;
    p.slots_.push_back({name, offset, size});
    offset += size;
  };
  for (const BufferParam& b : sig.buffers) place(b.name, 8);
  for (const DimParam& d : sig.dims) place(d.name, 8);
  for (const ScalarParam& s : sig.scalars) place(s.name, param_size(s.type));
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
  for (const CudaParams::Slot& s : p.slots_) p.pointers_.push_back(p.storage_.get() + s.offset);
  return p;
}

}  // namespace tilerun::compiler
