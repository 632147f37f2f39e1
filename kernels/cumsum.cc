// cumsum: running sums along one axis (inclusive; `reverse` sums from the end), for floats and
// i32. Its gradient is the reverse cumsum of dy. Accumulation in f32 for floats (each output
// rounded once on store), i32 for i32. Nothing is atomic and every output's sum has one fixed
// order chosen by the axis's length and stride alone (never by the other dims, so a line's bits
// do not depend on the batch). Two kernels, by the shape:
//
// Lines along the last axis of at least kLongLine elements (R = 1, K >= kLongLine): a
// device-wide scan, reduce-then-scan over chunks of kChunk = kScanThreads x kItems elements
// (decoupled look-back would make the association depend on timing). Each chunk is staged
// through shared memory with coalesced loads, each thread owns kItems consecutive elements:
//   1. chunk_sums: the chunk's total (the threads' serial sums, then block_scan_sum's order);
//   2. chunk_offsets: per line, an exclusive block scan over its chunk totals, kScanThreads at a
//      time with a running carry;
//   3. chunks: y = ((offset + the thread's exclusive prefix) + its first item) + ... in item
//      order; a line of one chunk skips 1 and 2 and starts from the prefix alone.
// Other shapes (x seen as [P, K, R]): one thread per (p, r) line adds its K elements in order.
#include <algorithm>

#include "compiler/ir/builder.h"
#include "kernels/block_scan.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/shape_attrs.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;
constexpr int kScanThreads = 256;
constexpr int kItems = 16;
constexpr int64_t kChunk = kScanThreads * kItems;
constexpr int64_t kLongLine = 512;

const std::vector<DType> kCumsumTypes = {DType::F32, DType::BF16, DType::F16, DType::I32};

std::vector<TensorType> infer_cumsum(const std::vector<TensorType>& in, const Attrs& attrs) {
  if (std::find(kCumsumTypes.begin(), kCumsumTypes.end(), in[0].dtype) == kCumsumTypes.end())
    throw ShapeError("input 'x' is " + to_string(in[0]) + ", expected f32, bf16, f16 or i32");
  axis_lines(in[0], attrs);
  return {in[0]};
}

std::vector<RefTensor> ref_cumsum(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor& x = in[0];
  const AxisLines l = axis_lines(TensorType{DType::F32, x.shape}, attrs);
  const bool reverse = attr_bool(attrs, "reverse");
  RefTensor y = ref_zeros(x.shape);
  for (int64_t p = 0; p < l.outer; ++p)
    for (int64_t r = 0; r < l.inner; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < l.extent; ++j) {
        const int64_t k = reverse ? l.extent - 1 - j : j;
        const int64_t at = (p * l.extent + k) * l.inner + r;
        sum += x.data[at];
        y.data[at] = sum;
      }
    }
  return {y};
}

// dx = cumsum of dy in the other direction.
std::vector<GradOp> grad_cumsum(const std::vector<TensorType>&, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"cumsum",
           {"dy0"},
           {"dx0"},
           {{"axis", attr_int(attrs, "axis")}, {"reverse", !attr_bool(attrs, "reverse")}}}};
}

cc::Kernel build_cumsum(DType dtype, bool reverse) {
  const bool is_int = dtype == DType::I32;
  cc::KernelBuilder kb(std::string(reverse ? "cumsum_rev_" : "cumsum_") +
                       std::string(dtype_name(dtype)));
  cc::Dim n = kb.dim("N"), p = kb.dim("P"), k = kb.dim("K"), r = kb.dim("R");
  cc::Buf x = kb.input("x", dtype, {p, k, r});
  cc::Buf y = kb.output("y", dtype, {p, k, r});
  kb.body({cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", is_int ? DType::I32 : DType::F32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx e = base + t;
      s.if_then(e < n, [&] {
        cc::Val line = s.let(e / r, "line"), col = s.let(e % r, "col");
        acc(t) = is_int ? cc::to_i32(cc::Val(0)) : cc::Val(0.0f);
        s.serial(k, [&](cc::Idx j) {
          cc::Idx at = s.let(reverse ? k - 1 - j : j, "at");
          acc(t) = acc(t) + x(line, at, col);
          y(line, at, col) = acc(t);
        });
      });
    });
  });
  return kb.build();
}

// ---- The device-wide scan (lines along the last axis of at least kLongLine) -------------------

DType accumulator_of(DType dtype) { return dtype == DType::I32 ? DType::I32 : DType::F32; }

cc::Val zero_of(DType acc) { return acc == DType::I32 ? cc::to_i32(cc::Val(0)) : cc::Val(0.0f); }

// The block's chunk of line `line` (in scan order: reversed lines read from the end) into
// tile [kScanThreads, kItems + 1] (a padded row per thread: its serial reads meet no bank
// conflict), zeros past the line's end; then sum(t) = tile(t, 0) + ... + tile(t, kItems - 1).
void stage_chunk(cc::Scope& s, const cc::Buf& x, const cc::Val& k, bool reverse,
                 const cc::Val& line, const cc::Val& chunk, const cc::Buf& tile, const cc::Buf& sum,
                 DType acc) {
  s.parallel(kChunk, [&](cc::Idx i) {
    cc::Val pos = s.let(chunk * kChunk + i, "pos");
    s.if_then_else(
        pos < k, [&] { tile(i / kItems, i % kItems) = x(line, reverse ? k - 1 - pos : pos); },
        [&] { tile(i / kItems, i % kItems) = zero_of(acc); });
  });
  s.barrier();
  s.parallel(kScanThreads, [&](cc::Idx t) {
    sum(t) = zero_of(acc);
    s.serial(kItems, [&](cc::Idx j) { sum(t) = sum(t) + tile(t, j); });
  });
}

std::string scan_name(const std::string& step, DType dtype, bool reverse) {
  return "cumsum_" + step + (reverse ? "_rev_" : "_") + std::string(dtype_name(dtype));
}

// The common start of kernels 1 and 3, a block of grid {C, P}: chunk `chunk` of line `line`
// staged in `tile`, sum(t) thread t's serial total of its items, exclusive(t) the sum of the
// threads before it and total(t) the chunk's (block_scan_sum).
struct ScannedChunk {
  cc::Val chunk, line;
  cc::Buf tile, sum, exclusive, total;
};

ScannedChunk scan_chunk(cc::Scope& s, const cc::Buf& x, const cc::Val& k, bool reverse, DType acc) {
  ScannedChunk c{.chunk = s.let(s.block_idx(0), "chunk"),
                 .line = s.let(s.block_idx(1), "line"),
                 .tile = s.alloc_shared("tile", acc, {kScanThreads, kItems + 1}),
                 .sum = s.alloc_fragment("sum", acc, {kScanThreads}),
                 .exclusive = s.alloc_fragment("exclusive", acc, {kScanThreads}),
                 .total = s.alloc_fragment("total", acc, {kScanThreads})};
  stage_chunk(s, x, k, reverse, c.line, c.chunk, c.tile, c.sum, acc);
  block_scan_sum(s, "scan", kScanThreads, c.sum, c.exclusive, c.total);
  return c;
}

// 1. sums[p, c] = the total of chunk c of line p.
cc::Kernel build_chunk_sums(DType dtype, bool reverse) {
  const DType acc = accumulator_of(dtype);
  cc::KernelBuilder kb(scan_name("chunk_sums", dtype, reverse));
  cc::Dim p = kb.dim("P"), k = kb.dim("K"), c = kb.dim("C");
  cc::Buf x = kb.input("x", dtype, {p, k});
  cc::Buf sums = kb.output("sums", acc, {p, c});
  kb.body({c, p}, kScanThreads, [&](cc::Scope& s) {
    const ScannedChunk chunk = scan_chunk(s, x, k, reverse, acc);
    s.parallel(kScanThreads, [&](cc::Idx t) {
      s.if_then(t == 0, [&] { sums(chunk.line, chunk.chunk) = chunk.total(t); });
    });
  });
  return kb.build();
}

// 2. offsets[p, c] = sums[p, 0] + ... + sums[p, c - 1], one block a line.
cc::Kernel build_chunk_offsets(DType acc) {
  cc::KernelBuilder kb("cumsum_chunk_offsets_" + std::string(dtype_name(acc)));
  cc::Dim p = kb.dim("P"), c = kb.dim("C");
  cc::Buf sums = kb.input("sums", acc, {p, c});
  cc::Buf offsets = kb.output("offsets", acc, {p, c});
  kb.body({p}, kScanThreads, [&](cc::Scope& s) {
    cc::Val line = s.let(s.block_idx(0), "line");
    cc::Buf value = s.alloc_fragment("value", acc, {kScanThreads});
    cc::Buf exclusive = s.alloc_fragment("exclusive", acc, {kScanThreads});
    cc::Buf total = s.alloc_fragment("total", acc, {kScanThreads});
    cc::Buf carry = s.alloc_fragment("carry", acc, {kScanThreads});
    s.parallel(kScanThreads, [&](cc::Idx t) { carry(t) = zero_of(acc); });
    s.serial(cc::ceildiv(c, cc::Val(int64_t{kScanThreads})), [&](cc::Idx round) {
      s.parallel(kScanThreads, [&](cc::Idx t) {
        cc::Val at = s.let(round * kScanThreads + t, "at");
        s.if_then_else(
            at < c, [&] { value(t) = sums(line, at); }, [&] { value(t) = zero_of(acc); });
      });
      block_scan_sum(s, "scan", kScanThreads, value, exclusive, total);
      s.parallel(kScanThreads, [&](cc::Idx t) {
        cc::Val at = s.let(round * kScanThreads + t, "at");
        s.if_then(at < c, [&] { offsets(line, at) = carry(t) + exclusive(t); });
        carry(t) = carry(t) + total(t);
      });
    });
  });
  return kb.build();
}

// 3. y over chunk c of line p: the running sums from offsets[p, c] (0 without offsets).
cc::Kernel build_chunks(DType dtype, bool reverse, bool with_offsets) {
  const DType acc = accumulator_of(dtype);
  cc::KernelBuilder kb(scan_name(with_offsets ? "chunks" : "chunk", dtype, reverse));
  cc::Dim p = kb.dim("P"), k = kb.dim("K"), c = kb.dim("C");
  cc::Buf x = kb.input("x", dtype, {p, k});
  cc::Buf offsets;
  if (with_offsets) offsets = kb.input("offsets", acc, {p, c});
  cc::Buf y = kb.output("y", dtype, {p, k});
  kb.body({c, p}, kScanThreads, [&](cc::Scope& s) {
    const ScannedChunk scanned = scan_chunk(s, x, k, reverse, acc);
    const cc::Val &chunk = scanned.chunk, &line = scanned.line;
    const cc::Buf &tile = scanned.tile, &sum = scanned.sum, &exclusive = scanned.exclusive;
    s.parallel(kScanThreads, [&](cc::Idx t) {
      sum(t) = with_offsets ? offsets(line, chunk) + exclusive(t) : exclusive(t);
      s.serial(kItems, [&](cc::Idx j) {
        sum(t) = sum(t) + tile(t, j);
        tile(t, j) = sum(t);
      });
    });
    s.barrier();
    s.parallel(kChunk, [&](cc::Idx i) {
      cc::Val pos = s.let(chunk * kChunk + i, "pos");
      s.if_then(pos < k,
                [&] { y(line, reverse ? k - 1 - pos : pos) = tile(i / kItems, i % kItems); });
    });
  });
  return kb.build();
}

ExpandFn expand_cumsum(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const DType dt = in[0].dtype;
    const bool reverse = attr_bool(attrs, "reverse");
    const AxisLines l = axis_lines(in[0], attrs);
    if (l.inner == 1 && l.extent >= kLongLine) {
      const DType acc = accumulator_of(dt);
      const int64_t chunks = (l.extent + kChunk - 1) / kChunk;
      const std::vector<int64_t> dims = {l.outer, l.extent, chunks};
      auto chunks_kernel = [&](bool with_offsets) {
        const std::string name = scan_name(with_offsets ? "chunks" : "chunk", dt, reverse);
        return cache->get(name, [&] { return build_chunks(dt, reverse, with_offsets); });
      };
      auto call = [](std::shared_ptr<const cc::Kernel> kernel, std::vector<KernelArg> buffers,
                     std::vector<int64_t> call_dims) {
        return KernelCall{.kernel = std::move(kernel),
                          .buffers = std::move(buffers),
                          .dims = std::move(call_dims),
                          .scalars = {}};
      };
      if (chunks == 1)
        return OpExpansion{
            .scratch = {},
            .calls = {call(chunks_kernel(false), {input_slot(0), output_slot(0)}, dims)}};
      const std::string sums_name = scan_name("chunk_sums", dt, reverse);
      const std::string offsets_name = "cumsum_chunk_offsets_" + std::string(dtype_name(acc));
      return OpExpansion{
          .scratch = {{acc, {l.outer, chunks}}, {acc, {l.outer, chunks}}},
          .calls = {
              call(cache->get(sums_name, [&] { return build_chunk_sums(dt, reverse); }),
                   {input_slot(0), scratch_slot(0)}, dims),
              call(cache->get(offsets_name, [&] { return build_chunk_offsets(acc); }),
                   {scratch_slot(0), scratch_slot(1)}, {l.outer, chunks}),
              call(chunks_kernel(true), {input_slot(0), scratch_slot(1), output_slot(0)}, dims)}};
    }
    KernelCall call{.kernel = cache->get(kernel_key(reverse ? "cumsum_rev" : "cumsum", dt),
                                         [&] { return build_cumsum(dt, reverse); }),
                    .buffers = {input_slot(0), output_slot(0)},
                    .dims = {l.outer * l.inner, l.outer, l.extent, l.inner}};
    return OpExpansion{.calls = {call}};
  };
}

}  // namespace

void register_cumsum(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const AttrValue rev = AttrValue{true};
  registry.add(
      {.name = "cumsum",
       .doc = "y[.., k, ..] = x[.., 0, ..] + ... + x[.., k, ..] along axis (reverse: x[.., k, ..] "
              "+ ... + x[.., K-1, ..]), in a fixed order set by the axis alone: index order, or "
              "for a last axis of 512 or more a chunked block scan (kernels/cumsum.cc); f32 "
              "accumulation for floats, each output rounded once; gradient: the cumsum of dy in "
              "the other direction",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {int_attr("axis", -1, "the axis summed along; negative counts from the end"),
                 {.name = "reverse",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "sum from the end of the axis"}},
       .dtypes = kCumsumTypes,
       .infer = infer_cumsum,
       .reference = ref_cumsum,
       .gradient = grad_cumsum,
       .expand = expand_cumsum(cache),
       .tests = {.kernel = {{{{1}}},
                            {{{7, 33}}},
                            {{{2, 1000}}, {}, 0, 2},
                            {{{3, 9000}}},
                            {{{1, 70000}}, {{"reverse", rev}}},
                            {{{2, 2, 4096}}, {{"reverse", rev}}},
                            {{{5, 130, 3}}, {{"axis", int64_t{1}}}},
                            {{{33, 7}}, {{"axis", int64_t{0}}, {"reverse", rev}}},
                            {{{4, 3, 5}}, {{"axis", int64_t{-1}}, {"reverse", rev}}}},
                 .gradient = {{{{3, 4}}}, {{{2, 3, 2}}, {{"axis", int64_t{1}}, {"reverse", rev}}}},
                 .examples = {{.inputs = {{{3}, {1, 2, 3}}}, .outputs = {{{3}, {1, 3, 6}}}},
                              {.inputs = {{{2, 2}, {1, 2, 3, 4}}},
                               .attrs = {{"axis", int64_t{0}}, {"reverse", rev}},
                               .outputs = {{{2, 2}, {4, 6, 3, 4}}}}}}});
}

}  // namespace tilerun::kernels
