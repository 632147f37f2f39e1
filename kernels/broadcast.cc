#include "kernels/broadcast.h"

#include <algorithm>

#include "kernels/expand_util.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/whole_or_guarded.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// `shape` with leading 1s up to `rank` axes.
std::vector<int64_t> aligned(const std::vector<int64_t>& shape, size_t rank) {
  std::vector<int64_t> out(rank - shape.size(), 1);
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// The output's axes after dropping extent-1 axes and merging neighbours along which every
// operand varies (or is broadcast) alike; varies[i][d]: operand i moves along axis d.
struct Coalesced {
  std::vector<int64_t> extents;
  std::vector<std::vector<bool>> varies;
};

Coalesced coalesce(const std::vector<TensorType>& in, const std::vector<int64_t>& out) {
  Coalesced c;
  c.varies.resize(in.size());
  std::vector<std::vector<int64_t>> shapes;
  for (const TensorType& t : in) shapes.push_back(aligned(t.shape, out.size()));
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    std::vector<bool> v;
    for (const auto& s : shapes) v.push_back(s[d] != 1);
    bool merge = !c.extents.empty();
    for (size_t i = 0; i < in.size() && merge; ++i) merge = c.varies[i].back() == v[i];
    if (merge) {
      c.extents.back() *= out[d];
      continue;
    }
    c.extents.push_back(out[d]);
    for (size_t i = 0; i < in.size(); ++i) c.varies[i].push_back(v[i]);
  }
  if (c.extents.empty()) {  // every extent 1: one element
    c.extents = {1};
    for (auto& v : c.varies) v = {false};
  }
  return c;
}

// "_bc_11_01": per operand, 1 where it moves along a coalesced axis, 0 where it is broadcast.
std::string pattern_name(const Coalesced& c) {
  std::string s = "_bc";
  for (const auto& v : c.varies) {
    s += "_";
    for (bool b : v) s += b ? '1' : '0';
  }
  return s;
}

// 256 threads, 1 element per thread below 2^16 elements and 4 above, as the flat map kernel.
constexpr int kThreads = 256;
constexpr int64_t kMaxGridX = 2147483647, kMaxGridY = 65535;
int64_t per_thread(int64_t n) { return n < (int64_t{1} << 16) ? 1 : 4; }

// The operands in0.. as inputs, each over the coalesced axes it moves along (dims[d] for axis d).
std::vector<cc::Buf> declare_inputs(cc::KernelBuilder& kb, const Coalesced& c,
                                    const std::vector<DType>& in_dtypes,
                                    const std::vector<cc::Val>& dims) {
  std::vector<cc::Buf> in;
  for (size_t i = 0; i < in_dtypes.size(); ++i) {
    std::vector<cc::Val> shape;
    for (size_t d = 0; d < dims.size(); ++d)
      if (c.varies[i][d]) shape.push_back(dims[d]);
    if (shape.empty()) shape.push_back(cc::Val(1));
    in.push_back(kb.input("in" + std::to_string(i), in_dtypes[i], shape));
  }
  return in;
}

// Each operand's element at output coordinates `coord` (its own axes only).
std::vector<cc::Val> operand_values(cc::Scope& s, const Coalesced& c,
                                    const std::vector<cc::Buf>& in,
                                    const std::vector<cc::Val>& coord) {
  std::vector<cc::Val> v;
  for (size_t k = 0; k < in.size(); ++k) {
    std::vector<cc::Val> idx;
    for (size_t d = 0; d < coord.size(); ++d)
      if (c.varies[k][d]) idx.push_back(coord[d]);
    if (idx.empty()) idx.push_back(cc::Val(0));
    v.push_back(s.let(in[k].at(idx), "v"));
  }
  return v;
}

// out[e] = fn(in0[idx0(e)], ...) with e's coordinates over the coalesced axes D0.. and each
// operand indexed by the coordinates of the axes it moves along. Parameters: in0.., out;
// D0..D(r-1); scalars.
// `rows`: the same with a block per (row, run of per_block elements along the last axis), grid
// {rows, ceil(D_last / per_block)}: the outer coordinates come from
// the block's row (the same for all its elements) and the last one is the block's offset plus
// the thread's, so no element divides by a dim (three 64-bit divisions an element kept V4-mini's
// broadcast multiplies at a fifth of their memory floor on the H200, T = 4096).
cc::Kernel build_broadcast(const MapOp& op, const Coalesced& c, const std::vector<DType>& in_dtypes,
                           DType out_dtype, int64_t ept, const std::string& name, bool rows) {
  cc::KernelBuilder kb(name);
  const size_t rank = c.extents.size();
  std::vector<cc::Val> dims;
  for (size_t d = 0; d < rank; ++d) dims.push_back(kb.dim("D" + std::to_string(d)));
  const std::vector<cc::Buf> in = declare_inputs(kb, c, in_dtypes, dims);
  cc::Val total = dims[0];
  for (size_t d = 1; d < rank; ++d) total = total * dims[d];
  cc::Buf out = kb.output("out", out_dtype, {total});
  std::vector<cc::Val> scalars;
  for (const std::string& a : op.scalar_attrs) scalars.push_back(kb.scalar_f32(a));
  const int64_t per_block = kThreads * ept;
  cc::Val outer = cc::Val(1);
  for (size_t d = 0; d + 1 < rank; ++d) outer = outer * dims[d];
  const cc::Val& last = dims[rank - 1];
  // Rows on grid x (up to 2^31 - 1), the runs along the last axis on y.
  std::vector<cc::Val> grid = rows ? std::vector<cc::Val>{outer, cc::ceildiv(last, per_block)}
                                   : std::vector<cc::Val>{cc::ceildiv(total, per_block)};
  kb.body(grid, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(rows ? 1 : 0) * per_block;
    cc::Idx row = rows ? s.block_idx(0) : cc::Idx(0);
    s.parallel(per_block, [&](cc::Idx i) {
      cc::Idx col = base + i;
      cc::Val e = rows ? s.let(row * last + col, "e") : cc::Val(col);
      s.if_then(rows ? col < last : col < total, [&] {
        // Coordinates from the last axis inward; every one taken modulo its extent, so its
        // range is evident to the bounds analysis. By rows, the last is the column and the
        // others come from the row.
        std::vector<cc::Val> coord(rank);
        if (rows) coord[rank - 1] = col;
        const cc::Val flat = rows ? cc::Val(row) : e;
        cc::Val stride = cc::Val(1);
        for (size_t d = rows ? rank - 1 : rank; d-- > 0;) {
          coord[d] = s.let((flat / stride) % dims[d], "c" + std::to_string(d));
          stride = stride * dims[d];
        }
        out(e) = op.fn(s, operand_values(s, c, in, coord), scalars);
      });
    });
  });
  return kb.build();
}

// The rows kernel with the last extent L a constant multiple of 8 (at most kMaxVectorRow):
// `rows` whole rows a block (about 2048 elements), 8 consecutive elements a thread, so that the
// operands moving along the last axis load and the output stores as vectors, and a row's outer
// coordinates are divided out once per 8 elements. The element-a-thread rows kernel left half
// its threads idle on rows of 512 (a block per 1024 elements) and moved every element alone:
// V4-mini's route-weight multiply ([T·6, 512] by [T·6, 1]) ran at a quarter of its memory floor
// on the H200, issue-bound (44 -> 13.5 us at T = 4096 with this kernel). For operands of at most
// 2 bytes (narrow_elements). Parameters: in0.., out; D0..D(r-2); scalars.
constexpr int64_t kMaxVectorRow = 16384;

int64_t vector_rows(int64_t last) { return std::max<int64_t>(1, 2048 / last); }

cc::Kernel build_broadcast_vectors(const MapOp& op, const Coalesced& c,
                                   const std::vector<DType>& in_dtypes, DType out_dtype,
                                   const std::string& name) {
  cc::KernelBuilder kb(name);
  const size_t rank = c.extents.size();
  const int64_t last = c.extents.back(), rows = vector_rows(last);
  std::vector<cc::Val> dims;
  for (size_t d = 0; d + 1 < rank; ++d) dims.push_back(kb.dim("D" + std::to_string(d)));
  dims.push_back(cc::Val(last));
  const std::vector<cc::Buf> in = declare_inputs(kb, c, in_dtypes, dims);
  cc::Val outer = dims[0];
  for (size_t d = 1; d + 1 < rank; ++d) outer = outer * dims[d];
  cc::Buf out = kb.output("out", out_dtype, {outer * last});
  std::vector<cc::Val> scalars;
  for (const std::string& a : op.scalar_attrs) scalars.push_back(kb.scalar_f32(a));
  kb.body({cc::ceildiv(outer, rows)}, kThreads, [&](cc::Scope& s) {
    cc::Idx r0 = s.let(s.block_idx(0) * rows, "r0");
    // Whole blocks of rows unguarded (the accesses go as vectors), the last one guarded.
    whole_or_guarded(s, r0 + rows <= outer, [&](bool guarded) {
      s.annotate_layout(8);
      s.parallel(rows, last, [&](cc::Idx r, cc::Idx col) {
        guard_if(s, guarded, r0 + r < outer, [&] {
          cc::Val row = s.let(r0 + r, "row");
          // The row's coordinates from the last outer axis inward, each modulo its extent.
          std::vector<cc::Val> coord(rank);
          coord[rank - 1] = col;
          cc::Val stride = cc::Val(1);
          for (size_t d = rank - 1; d-- > 0;) {
            coord[d] = s.let((row / stride) % dims[d], "c" + std::to_string(d));
            stride = stride * dims[d];
          }
          out(row * last + col) = op.fn(s, operand_values(s, c, in, coord), scalars);
        });
      });
    });
  });
  return kb.build();
}

}  // namespace

std::vector<int64_t> broadcast_shape(const std::vector<TensorType>& in,
                                     const std::vector<std::string>& slots) {
  size_t rank = 0;
  for (const TensorType& t : in) rank = std::max(rank, t.shape.size());
  std::vector<int64_t> out(rank, 1);
  std::vector<int> from(rank, -1);  // which operand set out[d] (for the message)
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<int64_t> s = aligned(in[i].shape, rank);
    for (size_t d = 0; d < rank; ++d) {
      if (s[d] == 1 || s[d] == out[d]) continue;
      if (out[d] != 1) {
        const int j = from[d];
        throw ShapeError("inputs '" + slots[j] + "' " + shape_text(in[j].shape) + " and '" +
                         slots[i] + "' " + shape_text(in[i].shape) + " do not broadcast: axis " +
                         std::to_string(static_cast<int64_t>(d) - static_cast<int64_t>(rank)) +
                         " is " + std::to_string(out[d]) + " against " + std::to_string(s[d]) +
                         " (expected equal extents or 1, NumPy rules)");
      }
      out[d] = s[d];
      from[d] = static_cast<int>(i);
    }
  }
  return out;
}

std::vector<TensorType> infer_broadcast(const std::vector<TensorType>& in,
                                        const std::vector<std::string>& slots, bool i32) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!(i32 && in[i].dtype == DType::I32)) expect_float(in[i], slots[i]);
    if (in[i].dtype != in[0].dtype)
      throw ShapeError("input '" + slots[i] + "' is " + to_string(in[i]) + ", expected dtype " +
                       std::string(dtype_name(in[0].dtype)) + " like '" + slots[0] + "'");
  }
  return {{in[0].dtype, broadcast_shape(in, slots)}};
}

bool broadcasts_to(const std::vector<int64_t>& shape, const std::vector<int64_t>& target) {
  if (shape.size() > target.size()) return false;
  std::vector<int64_t> s = aligned(shape, target.size());
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] != 1 && s[d] != target[d]) return false;
  return true;
}

std::vector<RefTensor> ref_broadcast(const std::vector<RefTensor>& in,
                                     const std::function<double(const double*)>& f) {
  std::vector<TensorType> types;
  std::vector<std::string> slots;
  for (const RefTensor& t : in) types.push_back({DType::F32, t.shape}), slots.push_back("x");
  std::vector<int64_t> shape = broadcast_shape(types, slots);
  const size_t rank = shape.size();
  // strides[i][d]: operand i's step along output axis d (0 where it is broadcast).
  std::vector<std::vector<int64_t>> strides(in.size(), std::vector<int64_t>(rank, 0));
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<int64_t> s = aligned(in[i].shape, rank);
    int64_t step = 1;
    for (size_t d = rank; d-- > 0;) {
      strides[i][d] = s[d] == 1 ? 0 : step;
      step *= s[d];
    }
  }
  RefTensor out = ref_zeros(shape);
  std::vector<int64_t> coord(rank, 0), offset(in.size(), 0);
  double args[3] = {0, 0, 0};
  for (int64_t e = 0; e < out.numel(); ++e) {
    for (size_t i = 0; i < in.size(); ++i) args[i] = in[i].data[offset[i]];
    out.data[e] = f(args);
    for (size_t d = rank; d-- > 0;) {  // the next coordinate, last axis fastest
      for (size_t i = 0; i < in.size(); ++i) offset[i] += strides[i][d];
      if (++coord[d] < shape[d]) break;
      for (size_t i = 0; i < in.size(); ++i) offset[i] -= strides[i][d] * shape[d];
      coord[d] = 0;
    }
  }
  return {out};
}

ExpandFn expand_broadcast_map(std::shared_ptr<KernelCache> cache, MapOp op) {
  ExpandFn flat = expand_map(cache, op);
  return [cache, op, flat](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                           const Attrs& attrs) {
    bool same = true;
    for (const TensorType& t : in) same = same && t.shape == out[0].shape;
    if (same) return flat(in, out, attrs);
    Coalesced c = coalesce(in, out[0].shape);
    std::vector<DType> in_dtypes;
    for (const TensorType& t : in) in_dtypes.push_back(t.dtype);
    const int64_t last = c.extents.back();
    if (c.extents.size() > 1 && last % 8 == 0 && last <= kMaxVectorRow &&
        narrow_elements(in, out[0].dtype)) {
      const std::string name = op.name + "_v8_l" + std::to_string(last) + pattern_name(c) +
                               dtypes_suffix(in, out[0].dtype);
      KernelCall call{
          .kernel = cache->get(
              name, [&] { return build_broadcast_vectors(op, c, in_dtypes, out[0].dtype, name); }),
          .dims = std::vector<int64_t>(c.extents.begin(), c.extents.end() - 1)};
      for (int i = 0; i < op.arity; ++i) call.buffers.push_back(input_slot(i));
      call.buffers.push_back(output_slot(0));
      for (const std::string& a : op.scalar_attrs) call.scalars.push_back(attr_float(attrs, a));
      return OpExpansion{.calls = {call}};
    }
    int64_t ept = per_thread(numel(out[0]));
    // A block per row when the last axis fills at least half a block and the grid holds it.
    int64_t outer = 1;
    for (size_t d = 0; d + 1 < c.extents.size(); ++d) outer *= c.extents[d];
    const bool rows = c.extents.size() > 1 && c.extents.back() * 2 >= kThreads * ept &&
                      c.extents.back() <= kMaxGridY * kThreads * ept && outer <= kMaxGridX;
    const std::string name = op.name + (ept == 1 ? "" : "_x" + std::to_string(ept)) +
                             (rows ? "_rows" : "") + pattern_name(c) +
                             dtypes_suffix(in, out[0].dtype);
    KernelCall call{
        .kernel = cache->get(
            name, [&] { return build_broadcast(op, c, in_dtypes, out[0].dtype, ept, name, rows); }),
        .dims = c.extents};
    for (int i = 0; i < op.arity; ++i) call.buffers.push_back(input_slot(i));
    call.buffers.push_back(output_slot(0));
    for (const std::string& a : op.scalar_attrs) call.scalars.push_back(attr_float(attrs, a));
    return OpExpansion{.calls = {call}};
  };
}

GradOp sum_to_shape(const std::string& value, const std::string& dx,
                    const std::vector<int64_t>& operand_shape,
                    const std::vector<int64_t>& out_shape) {
  if (operand_shape == out_shape) return {"alias", {value}, {dx}, {}};
  return {"sum_to", {value}, {dx}, {{"shape", operand_shape}}};
}

}  // namespace tilerun::kernels
