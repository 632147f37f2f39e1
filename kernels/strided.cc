// strided_copy: one element per thread, 256 threads per block, over the flat output; a coordinate
// comes from the flat index by division and remainder, innermost axis first. strided_rows: the
// same copy a row of the last axis per grid y, for up to 65535 rows (no per-element division).
// strided_transpose: a rank-2 view whose first axis runs along memory, through a shared tile.
// Every store is to the thread's own element (or its own element of one region), so uniqueness
// is a mixed radix.
#include "kernels/strided.h"

#include <functional>

#include "compiler/base/check.h"
#include "compiler/ir/builder.h"
#include "kernels/whole_or_guarded.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 256;

std::string key(const std::string& name, DType dtype) { return kernel_key(name, dtype); }

// Σ_j c_j · stride_j for the coordinates c of flat index `e` over `dims` (row-major).
cc::Val strided_index(cc::Val e, const std::vector<cc::Dim>& dims,
                      const std::vector<cc::Dim>& strides) {
  cc::Val index = 0;
  for (size_t j = dims.size(); j-- > 0;) {
    cc::Val c = j == 0 ? e : e % dims[j];
    index = index + c * strides[j];
    if (j > 0) e = e / dims[j];
  }
  return index;
}

// The index, which the expansion keeps in [0, XN), clamped there for the analysis: proving a
// chain of divisions and remainders by symbolic dims in bounds can keep Z3 busy past its
// wall-clock backstop, while the clamped index is in bounds by linear reasoning alone (two
// integer operations per load).
cc::Val in_x(const cc::Val& index, const cc::Val& xn) {
  return cc::max(cc::min(index, xn - 1), cc::Val(0));
}

// Declares D0.., S0.. (sizes at least 1, strides at least 0) for a rank-`rank` map.
void declare_axes(cc::KernelBuilder& kb, const std::string& d, const std::string& s, size_t rank,
                  std::vector<cc::Dim>* dims, std::vector<cc::Dim>* strides) {
  for (size_t j = 0; j < rank; ++j) dims->push_back(kb.dim(d + std::to_string(j)));
  for (size_t j = 0; j < rank; ++j) strides->push_back(kb.dim(s + std::to_string(j), {.min = 0}));
}

cc::Kernel build_strided_copy(DType dtype, size_t rank) {
  cc::KernelBuilder kb("strided_copy_r" + std::to_string(rank) + "_" +
                       std::string(dtype_name(dtype)));
  cc::Dim n = kb.dim("N"), xn = kb.dim("XN");
  std::vector<cc::Dim> dims, strides;
  declare_axes(kb, "D", "S", rank, &dims, &strides);
  cc::Dim off = kb.dim("OFF", {.min = 0});
  cc::Buf x = kb.input("x", dtype, {xn});
  cc::Buf out = kb.output("out", dtype, {n});
  kb.body({cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads;
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx e = base + i;
      s.if_then(e < n, [&] { out(e) = x(in_x(off + strided_index(e, dims, strides), xn)); });
    });
  });
  return kb.build();
}

std::string rows_name(size_t rank, int64_t per) {
  return "strided_rows_r" + std::to_string(rank) + (per > 1 ? "_x" + std::to_string(per) : "");
}

// The same copy with out viewed as [ROWS, D_last] (ROWS the product of the outer sizes, at most
// 65535): a block per (256 of the last axis, row), the row's coordinates taken apart once per
// block, so no element pays a 64-bit division by a run-time size (strided_copy's per-element
// division and remainder put it 8x off its floor). `per` elements a thread, 256 apart (its loads
// in flight together): one element a thread left a block of 256 threads 512 bytes to move, and
// the copy bound by the blocks' latency, not by bandwidth; and they are loaded before any is
// stored. Parameters x [XN], out [ROWS, D_last]; XN, D0.., S0.., OFF, ROWS.
cc::Kernel build_strided_rows(DType dtype, size_t rank, int64_t per) {
  TR_CHECK(rank >= 2, "the rows kernel copies rank 2 and more");
  cc::KernelBuilder kb(rows_name(rank, per) + "_" + std::string(dtype_name(dtype)));
  cc::Dim xn = kb.dim("XN");
  std::vector<cc::Dim> dims, strides;
  declare_axes(kb, "D", "S", rank, &dims, &strides);
  cc::Dim off = kb.dim("OFF", {.min = 0}), rows = kb.dim("ROWS", {.min = 1, .max = 65535});
  const cc::Dim& last = dims.back();
  cc::Buf x = kb.input("x", dtype, {xn});
  cc::Buf out = kb.output("out", dtype, {rows, last});
  const std::vector<cc::Dim> outer_dims(dims.begin(), dims.end() - 1),
      outer_strides(strides.begin(), strides.end() - 1);
  const int64_t chunk = kThreads * per;
  kb.body({cc::ceildiv(last, chunk), rows}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(1), c0 = s.block_idx(0) * chunk;
    cc::Val row_at = s.let(off + strided_index(row, outer_dims, outer_strides), "row_at");
    // All of a thread's loads before its stores (a load after a store waits for it: the input
    // may alias the output, as far as the hardware knows); the chunk wholly inside the row
    // without guards.
    cc::Buf held = s.alloc_fragment("held", dtype, {chunk});
    auto copy = [&](bool guarded) {
      auto each = [&](const cc::Idx& c, const std::function<void()>& body) {
        if (guarded)
          s.if_then(c < last, body);
        else
          body();
      };
      s.parallel(chunk, [&](cc::Idx i) {
        cc::Idx c = c0 + i;
        each(c, [&] { held(i) = x(in_x(row_at + c * strides.back(), xn)); });
      });
      s.parallel(chunk, [&](cc::Idx i) {
        cc::Idx c = c0 + i;
        each(c, [&] { out(row, c) = held(i); });
      });
    };
    s.if_then_else(
        c0 + chunk <= last, [&] { copy(false); }, [&] { copy(true); });
  });
  return kb.build();
}

// A transpose: out [D0, D1] with out[r, c] = x[OFF + r + c·S1] (the view's first axis has
// stride 1, its last S1). Through a shared tile of kTile x kTile (16 elements a thread), so that
// both the loads (along r) and the stores (along c) run along memory: strided_rows read such a view
// one element every S1 (56 us for V4-mini's 34 MB einsum-gradient transpose at T = 1024, a 7 us
// floor). Parameters x [XN], out [D0, D1]; XN, D0, D1, S1, OFF. Grid (D1 / kTile, D0 / kTile), up
// to 65535 rows of tiles.
constexpr int64_t kTile = 64;

cc::Kernel build_strided_transpose(DType dtype) {
  cc::KernelBuilder kb("strided_transpose_r2_" + std::string(dtype_name(dtype)));
  cc::Dim xn = kb.dim("XN"), d0 = kb.dim("D0", {.min = 1, .max = 65535 * kTile}), d1 = kb.dim("D1");
  cc::Dim s1 = kb.dim("S1", {.min = 0}), off = kb.dim("OFF", {.min = 0});
  cc::Buf x = kb.input("x", dtype, {xn});
  cc::Buf out = kb.output("out", dtype, {d0, d1});
  kb.body({cc::ceildiv(d1, kTile), cc::ceildiv(d0, kTile)}, kThreads, [&](cc::Scope& s) {
    cc::Idx c0 = s.let(s.block_idx(0) * kTile, "c0"), r0 = s.let(s.block_idx(1) * kTile, "r0");
    cc::Buf tile = s.alloc_shared("tile", DType::F32, {kTile, kTile + 1});  // [c][r], padded
    // A whole tile (all but the ragged edges') moves without guards, its loads back to back.
    cc::Val whole = s.let(r0 + kTile <= d0 && c0 + kTile <= d1, "whole");
    auto both = [&](const std::function<void(bool)>& part) {
      s.if_then_else(
          whole, [&] { part(false); }, [&] { part(true); });
    };
    auto at = [&](bool guarded, const cc::Idx& r, const cc::Idx& c,
                  const std::function<void()>& body) {
      if (guarded)
        s.if_then(r0 + r < d0 && c0 + c < d1, body);
      else
        body();
    };
    both([&](bool guarded) {
      s.parallel(kTile, kTile, [&](cc::Idx c, cc::Idx r) {
        at(guarded, r, c, [&] { tile(c, r) = x(in_x(off + (r0 + r) + (c0 + c) * s1, xn)); });
      });
    });
    s.barrier();
    both([&](bool guarded) {
      s.parallel(kTile, kTile, [&](cc::Idx r, cc::Idx c) {
        at(guarded, r, c, [&] { out(r0 + r, c0 + c) = tile(c, r); });
      });
    });
  });
  return kb.build();
}

// Parameters x [O, A·R], out [O, AO·R]; O, A, R, AO, OFF. Grid (A·R / 256, O).
cc::Kernel build_place(DType dtype) {
  cc::KernelBuilder kb("concat_place_" + std::string(dtype_name(dtype)));
  cc::Dim o = kb.dim("O"), a = kb.dim("A"), r = kb.dim("R"), ao = kb.dim("AO");
  cc::Dim off = kb.dim("OFF", {.min = 0});
  cc::Buf x = kb.input("x", dtype, {o, a * r});
  cc::Buf out = kb.output("out", dtype, {o, ao * r});
  kb.body({cc::ceildiv(a * r, kThreads), o}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads, row = s.block_idx(1);
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx e = base + i;
      // The second condition holds whenever OFF + A <= AO (the expansion's case); stated, it
      // lets the analysis prove the rows' regions disjoint.
      s.if_then(e < a * r && off * r + e < ao * r, [&] { out(row, off * r + e) = x(row, e); });
    });
  });
  return kb.build();
}

// build_place where every length is a whole number of 8-element vectors, the row lengths
// constants of the kernel: x [O, n·8] into out [O, m·8] at column off·8 (n, off, m counted in
// vectors, off + n <= m). A block moves `rows` rows of `chunk` vectors (rows > 1: whole rows;
// long rows: chunks of 256), 8 consecutive elements a thread (one 16-byte access of bf16), no
// guard but in the last blocks. The element-a-thread kernel gave a block to each 256 columns of
// a row: a row of 448 or 64 was one or two mostly idle blocks, ~10.7 us for 4096 rows on the
// H200 where the bytes take 2.
constexpr int64_t kPlaceVectors = 256;  // vectors a block (2048 elements)

std::string place_vectors_name(int64_t n, int64_t off, int64_t m) {
  return "concat_place_v8_n" + std::to_string(n) + "_at" + std::to_string(off) + "_of" +
         std::to_string(m);
}

int64_t place_rows(int64_t n) {
  int64_t rows = 1;
  while (rows < 64 && 2 * rows * n <= kPlaceVectors) rows *= 2;
  return rows;
}

cc::Kernel build_place_vectors(DType dtype, int64_t n, int64_t off, int64_t m) {
  const int64_t rows = place_rows(n), chunk = std::min(n, kPlaceVectors);
  cc::KernelBuilder kb(place_vectors_name(n, off, m) + "_" + std::string(dtype_name(dtype)));
  cc::Dim o = kb.dim("O");
  cc::Buf x = kb.input("x", dtype, {o, cc::Val(n * 8)});
  cc::Buf out = kb.output("out", dtype, {o, cc::Val(m * 8)});
  kb.body({cc::ceildiv(o, rows), cc::Val((n + chunk - 1) / chunk)}, kThreads, [&](cc::Scope& s) {
    cc::Idx r0 = s.let(s.block_idx(0) * rows, "r0"), c0 = s.let(s.block_idx(1) * chunk * 8, "c0");
    whole_or_guarded(s, r0 + rows <= o && c0 + chunk * 8 <= n * 8, [&](bool guarded) {
      s.annotate_layout(8);
      s.parallel(rows, chunk * 8, [&](cc::Idx r, cc::Idx e) {
        guard_if(s, guarded, r0 + r < o && c0 + e < n * 8,
                 [&] { out(r0 + r, off * 8 + c0 + e) = x(r0 + r, c0 + e); });
      });
    });
  });
  return kb.build();
}

// Every part of a concat (or a split) in one kernel, where every part's row is a whole number of
// 8-element vectors: part i, n_i vectors a row, sits at column at_i = Σ_{j<i} n_j (vectors) of the
// wide rows [O, m·8]. The grid is the parts' grids one after another, each part's blocks as
// build_place_vectors's (rows of `place_rows(n_i)`, chunks of 256 vectors); a block finds its
// part by its index (a block-uniform branch). One launch where a two-part concat took two: the
// V4 layer's concats and splits are mostly two parts of a few hundred columns.
std::string parts_name(bool split, const std::vector<int64_t>& n) {
  std::string name = split ? "split_v8_p" : "concat_v8_p";
  for (size_t i = 0; i < n.size(); ++i) name += (i ? "_" : "") + std::to_string(n[i]);
  return name;
}

int64_t part_chunk(int64_t n) { return std::min(n, kPlaceVectors); }
int64_t part_chunks(int64_t n) { return (n + part_chunk(n) - 1) / part_chunk(n); }

cc::Kernel build_parts(DType dtype, bool split, const std::vector<int64_t>& n) {
  int64_t m = 0;
  for (int64_t v : n) m += v;
  cc::KernelBuilder kb(parts_name(split, n) + "_" + std::string(dtype_name(dtype)));
  cc::Dim o = kb.dim("O");
  std::vector<cc::Buf> narrow;
  cc::Buf wide;
  if (split) wide = kb.input("x", dtype, {o, cc::Val(m * 8)});
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string name = (split ? "out" : "x") + std::to_string(i);
    const std::vector<cc::Val> shape{o, cc::Val(n[i] * 8)};
    narrow.push_back(split ? kb.output(name, dtype, shape) : kb.input(name, dtype, shape));
  }
  if (!split) wide = kb.output("out", dtype, {o, cc::Val(m * 8)});
  std::vector<cc::Val> blocks;
  cc::Val total = 0;
  for (int64_t v : n) {
    blocks.push_back(cc::ceildiv(o, place_rows(v)) * part_chunks(v));
    total = total + blocks.back();
  }
  kb.body({total}, kThreads, [&](cc::Scope& s) {
    cc::Val first = 0;  // the part's first block
    int64_t at = 0;     // the part's first vector along the wide rows
    for (size_t i = 0; i < n.size(); ++i) {
      const int64_t rows = place_rows(n[i]), chunk = part_chunk(n[i]), chunks = part_chunks(n[i]);
      const int64_t len = n[i] * 8, off = at * 8;
      s.if_then(s.block_idx(0) >= first && s.block_idx(0) < first + blocks[i], [&] {
        cc::Idx b = s.let(s.block_idx(0) - first, "b");
        cc::Idx r0 = s.let(b / chunks * rows, "r0"), c0 = s.let(b % chunks * chunk * 8, "c0");
        whole_or_guarded(s, r0 + rows <= o && c0 + chunk * 8 <= len, [&](bool guarded) {
          s.annotate_layout(8);
          s.parallel(rows, chunk * 8, [&](cc::Idx r, cc::Idx e) {
            guard_if(s, guarded, r0 + r < o && c0 + e < len, [&] {
              if (split)
                narrow[i](r0 + r, c0 + e) = wide(r0 + r, off + c0 + e);
              else
                wide(r0 + r, off + c0 + e) = narrow[i](r0 + r, c0 + e);
            });
          });
        });
      });
      first = first + blocks[i];
      at += n[i];
    }
  });
  return kb.build();
}

// Parameters dy [O, L·R], dx [O, A·R]; O, A, R, L, START, STEP. Grid (A·R / 256, O).
cc::Kernel build_unslice(DType dtype) {
  cc::KernelBuilder kb("slice_grad_" + std::string(dtype_name(dtype)));
  cc::Dim o = kb.dim("O"), a = kb.dim("A"), r = kb.dim("R"), l = kb.dim("L");
  cc::Dim start = kb.dim("START", {.min = 0}), step = kb.dim("STEP");
  cc::Buf dy = kb.input("dy", dtype, {o, l * r});
  cc::Buf dx = kb.output("dx", dtype, {o, a * r});
  kb.body({cc::ceildiv(a * r, kThreads), o}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads, row = s.block_idx(1);
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx e = base + i;
      s.if_then(e < a * r, [&] {
        cc::Val t = s.let(e / r - start, "t");
        cc::Val j = s.let(t / step, "j");
        s.if_then_else(
            t >= 0 && t % step == 0 && j < l,
            [&] { dx(row, e) = dy(row, in_x(j * r + e % r, l * r)); }, [&] { dx(row, e) = 0.0f; });
      });
    });
  });
  return kb.build();
}

}  // namespace

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t j = shape.size(); j-- > 1;) s[j - 1] = s[j] * shape[j];
  return s;
}

StridedView broadcast_view(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& shape) {
  const std::vector<int64_t> xs = row_major_strides(x_shape);
  const size_t lead = shape.size() - x_shape.size();
  StridedView v{.shape = shape, .strides = std::vector<int64_t>(shape.size(), 0)};
  for (size_t j = 0; j < x_shape.size(); ++j)
    if (x_shape[j] == shape[lead + j]) v.strides[lead + j] = xs[j];
  return v;
}

StridedView simplify(StridedView v) {
  TR_CHECK(v.shape.size() == v.strides.size(), "a stride per axis");
  StridedView out{.offset = v.offset};
  for (size_t j = 0; j < v.shape.size(); ++j) {
    if (v.shape[j] == 1) continue;
    if (!out.shape.empty() && out.strides.back() == v.strides[j] * v.shape[j]) {
      out.shape.back() *= v.shape[j];
      out.strides.back() = v.strides[j];
      continue;
    }
    out.shape.push_back(v.shape[j]);
    out.strides.push_back(v.strides[j]);
  }
  if (out.shape.empty()) out.shape = {1}, out.strides = {1};
  return out;
}

KernelCall strided_copy_call(KernelCache& cache, DType dtype, int64_t x_numel,
                             const StridedView& view, KernelArg x, KernelArg out) {
  StridedView v = simplify(view);
  const size_t rank = v.shape.size();
  int64_t n = 1;
  for (int64_t d : v.shape) n *= d;
  const int64_t rows = n / v.shape.back();
  // A transpose of tiles at least half full: the tiled kernel.
  if (rank == 2 && v.strides[0] == 1 && v.strides[1] != 1 && v.shape[0] >= kTile / 2 &&
      v.shape[1] >= kTile / 2 && (v.shape[0] + kTile - 1) / kTile <= 65535)
    return {.kernel = cache.get(key("strided_transpose_r2", dtype),
                                [&] { return build_strided_transpose(dtype); }),
            .buffers = {x, out},
            .dims = {x_numel, v.shape[0], v.shape[1], v.strides[1], v.offset}};
  if (rank >= 2 && rows <= 65535) {
    // Up to 8 elements a thread, as many as the row fills (256 threads a block).
    int64_t per = 1;
    while (per < 8 && 2 * per * kThreads <= v.shape.back()) per *= 2;
    KernelCall call{.kernel = cache.get(key(rows_name(rank, per), dtype),
                                        [&] { return build_strided_rows(dtype, rank, per); }),
                    .buffers = {x, out},
                    .dims = {x_numel}};
    call.dims.insert(call.dims.end(), v.shape.begin(), v.shape.end());
    call.dims.insert(call.dims.end(), v.strides.begin(), v.strides.end());
    call.dims.push_back(v.offset);
    call.dims.push_back(rows);
    return call;
  }
  KernelCall call{.kernel = cache.get(key("strided_copy_r" + std::to_string(rank), dtype),
                                      [&] { return build_strided_copy(dtype, rank); }),
                  .buffers = {x, out},
                  .dims = {n, x_numel}};
  call.dims.insert(call.dims.end(), v.shape.begin(), v.shape.end());
  call.dims.insert(call.dims.end(), v.strides.begin(), v.strides.end());
  call.dims.push_back(v.offset);
  return call;
}

KernelCall place_call(KernelCache& cache, DType dtype, int64_t outer, int64_t len, int64_t inner,
                      int64_t out_len, int64_t offset, KernelArg x, KernelArg out) {
  if ((len * inner) % 8 == 0 && (out_len * inner) % 8 == 0 && (offset * inner) % 8 == 0 &&
      offset + len <= out_len && len * inner / 8 <= 65535 * kPlaceVectors) {
    const int64_t n = len * inner / 8, off = offset * inner / 8, m = out_len * inner / 8;
    return {.kernel = cache.get(key(place_vectors_name(n, off, m), dtype),
                                [&] { return build_place_vectors(dtype, n, off, m); }),
            .buffers = {x, out},
            .dims = {outer}};
  }
  return {.kernel = cache.get(key("concat_place", dtype), [&] { return build_place(dtype); }),
          .buffers = {x, out},
          .dims = {outer, len, inner, out_len, offset}};
}

std::optional<KernelCall> parts_call(KernelCache& cache, DType dtype, bool split, int64_t outer,
                                     const std::vector<int64_t>& lens, int64_t inner,
                                     std::vector<KernelArg> buffers) {
  std::vector<int64_t> n;
  int64_t blocks = 0;
  for (int64_t len : lens) {
    if (len * inner % 8 != 0 || len == 0) return std::nullopt;
    n.push_back(len * inner / 8);
    blocks += (outer + place_rows(n.back()) - 1) / place_rows(n.back()) * part_chunks(n.back());
  }
  if (n.size() < 2 || blocks > (int64_t{1} << 31) - 1) return std::nullopt;
  return KernelCall{.kernel = cache.get(key(parts_name(split, n), dtype),
                                        [&] { return build_parts(dtype, split, n); }),
                    .buffers = std::move(buffers),
                    .dims = {outer}};
}

KernelCall unslice_call(KernelCache& cache, DType dtype, int64_t outer, int64_t size, int64_t inner,
                        int64_t len, int64_t start, int64_t step, KernelArg dy, KernelArg dx) {
  return {.kernel = cache.get(key("slice_grad", dtype), [&] { return build_unslice(dtype); }),
          .buffers = {dy, dx},
          .dims = {outer, size, inner, len, start, step}};
}

}  // namespace tilerun::kernels
