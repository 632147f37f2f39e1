// sparse_attention: attention of each token's H query heads over K selected rows of one MQA
// head kv [S, E] (used as key and value, as DeepSeek V4 does), with an additive bias per slot
// and a per-head sink logit in every denominator; and its backward op sparse_attention_grad.
// With z[t, h, j] = scale · q[t, h, :] · kv[idx[t, j], :] + bias[t, j] and
// m = max(max_j z, sink[h]):
//   p[t, h, j] = exp(z - m) / (exp(sink[h] - m) + Σ_j exp(z - m)),  y[t, h, :] = Σ_j p · kv[idx].
// Kernels (sparse_attention_kernel.cc): a block per token for the forward and for the backward's
// dq, dbias, p and ds; dkv owner-computes per key over counting_sort's inverse of idx (the
// gradient rule sorts idx first); dsink a fixed-order sum over tokens. Nothing is atomic.
#include <algorithm>
#include <cmath>

#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"
#include "kernels/sparse_attention_kernel.h"

namespace tilerun::kernels {

namespace {

// ---- Inference -----------------------------------------------------------------------------

void expect_shape(const TensorType& t, const std::string& slot, DType dtype,
                  const std::vector<int64_t>& shape, const std::string& what) {
  if (t.dtype != dtype || t.shape != shape)
    throw ShapeError("input '" + slot + "' is " + to_string(t) + ", expected " +
                     to_string(TensorType{dtype, shape}) + " (" + what + ")");
}

// (q [T, H, E], kv [S, E], idx i32 [T, K - W], bias [T, K], sink [H]) -> the shape; W is the
// `window` attribute (slots before idx's that name keys t - j).
SparseAttentionShape check_inputs(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "q");
  expect_rank(in[0], 3, "q");
  const DType dt = in[0].dtype;
  SparseAttentionShape sh{.t = in[0].shape[0], .h = in[0].shape[1], .e = in[0].shape[2]};
  if (in[1].dtype != dt || in[1].shape.size() != 2 || in[1].shape[1] != sh.e)
    throw ShapeError("input 'kv' is " + to_string(in[1]) + ", expected " +
                     std::string(dtype_name(dt)) + "[S, " + std::to_string(sh.e) +
                     "] (one head of keys and values, as wide as q)");
  sh.s = in[1].shape[0];
  if (in[2].dtype != DType::I32 || in[2].shape.size() != 2 || in[2].shape[0] != sh.t)
    throw ShapeError("input 'idx' is " + to_string(in[2]) + ", expected i32[" +
                     std::to_string(sh.t) + ", K] (each token's selected rows of kv)");
  sh.w = attr_int(attrs, "window");
  sh.off = attrs.count("offset") ? attr_int(attrs, "offset") : 0;
  if (sh.off < 0 || sh.off >= sh.s)
    throw ShapeError("offset is " + std::to_string(sh.off) + ", expected 0 <= offset < " +
                     std::to_string(sh.s) + " (kv " + to_string(in[1]) +
                     "'s rows: idx names rows offset + id)");
  if (in[2].shape[1] < 1)
    throw ShapeError("input 'idx' has no columns, expected each token's selected rows of kv");
  if (sh.w < 0) throw ShapeError("window is " + std::to_string(sh.w) + ", expected 0 or more");
  sh.k = sh.w + in[2].shape[1];
  if (sh.w > 0 && sh.s < sh.t)
    throw ShapeError("window " + std::to_string(sh.w) + " names keys t - j of kv's rows, but kv " +
                     to_string(in[1]) + " has fewer rows than the " + std::to_string(sh.t) +
                     " tokens");
  expect_shape(in[3], "bias", dt, {sh.t, sh.k},
               sh.w > 0 ? "one additive logit per slot: the window's, then idx's"
                        : "one additive logit per selected slot");
  expect_shape(in[4], "sink", dt, {sh.h}, "one sink logit per head");
  if (sh.k > kSparseAttentionMaxK || sh.h * sh.k > kSparseAttentionMaxHK || sh.k < 1)
    throw ShapeError("input 'idx' selects " + std::to_string(sh.k) + " keys for " +
                     std::to_string(sh.h) +
                     " heads; expected 1 <= K <= " + std::to_string(kSparseAttentionMaxK) +
                     " and H·K <= " + std::to_string(kSparseAttentionMaxHK) +
                     " (a token's tiles in shared memory)");
  return sh;
}

// y, and with `mass` the attention's mass per slot [T, K] (Σ_h p, no gradient).
std::vector<TensorType> infer_forward(const std::vector<TensorType>& in, const Attrs& attrs) {
  const SparseAttentionShape sh = check_inputs(in, attrs);
  if (!attr_bool(attrs, "mass")) return {in[0]};
  return {in[0], TensorType{in[0].dtype, {sh.t, sh.k}}};
}

// (q, kv, idx, bias, sink, y, dy, order [T·(K - W)], offsets [S]) -> (dq, dkv, dbias, dsink).
std::vector<TensorType> infer_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  const SparseAttentionShape sh = check_inputs(in, attrs);
  expect_same(in[5], "y", in[0], "q");
  expect_same(in[6], "dy", in[0], "q");
  expect_shape(in[7], "order", DType::I32, {sh.t * sh.selected()}, "counting_sort's order of idx");
  expect_shape(in[8], "offsets", DType::I32, {sh.sorted_keys()},
               "counting_sort's offsets of idx, one per row idx can name");
  return {in[0], in[1], in[3], in[4]};
}

// ---- References ----------------------------------------------------------------------------

struct RefShape {
  int64_t t, h, e, s, k, w, off;
};
RefShape ref_shape(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const int64_t w = attr_int(attrs, "window");
  return {in[0].shape[0],
          in[0].shape[1],
          in[0].shape[2],
          in[1].shape[0],
          w + in[2].shape[1],
          w,
          attrs.count("offset") ? attr_int(attrs, "offset") : 0};
}

int64_t id_at(const RefTensor& idx, int64_t i) {
  return static_cast<int64_t>(std::llround(idx.data[i]));
}

// Slot j of token t: a window slot's key t - j (kEmpty past the first key), else offset + idx's
// id (-1 for a negative id).
constexpr int64_t kEmpty = -2;
int64_t slot_id(const std::vector<RefTensor>& in, const RefShape& n, int64_t t, int64_t j) {
  if (j < n.w) return j <= t ? t - j : kEmpty;
  const int64_t id = id_at(in[2], t * (n.k - n.w) + j - n.w);
  return id < 0 ? -1 : n.off + id;
}

// p [T, H, K] and the sink's probability [T, H]; NaN for a token with an id outside [0, S). An
// empty window slot takes no part: p = 0 whatever its bias.
struct RefProbs {
  std::vector<double> p, sink;
};
RefProbs ref_probs(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const double scale = attr_float(attrs, "scale");
  const RefTensor &q = in[0], &kv = in[1], &bias = in[3], &sink = in[4];
  const RefShape n = ref_shape(in, attrs);
  RefProbs out{std::vector<double>(n.t * n.h * n.k), std::vector<double>(n.t * n.h)};
  for (int64_t t = 0; t < n.t; ++t) {
    bool bad = false;
    for (int64_t j = 0; j < n.k; ++j) {
      const int64_t id = slot_id(in, n, t, j);
      bad |= id != kEmpty && (id < 0 || id >= n.s);
    }
    for (int64_t h = 0; h < n.h; ++h) {
      std::vector<double> z(n.k, -INFINITY);
      double m = sink.data[h];
      for (int64_t j = 0; j < n.k && !bad; ++j) {
        const int64_t id = slot_id(in, n, t, j);
        if (id == kEmpty) continue;
        double dot = 0;
        for (int64_t c = 0; c < n.e; ++c)
          dot += q.data[(t * n.h + h) * n.e + c] * kv.data[id * n.e + c];
        z[j] = scale * dot + bias.data[t * n.k + j];
        m = std::max(m, z[j]);
      }
      double d = std::exp(sink.data[h] - m);
      for (int64_t j = 0; j < n.k; ++j) d += std::exp(z[j] - m);
      for (int64_t j = 0; j < n.k; ++j)
        out.p[(t * n.h + h) * n.k + j] = bad ? kNaN() : std::exp(z[j] - m) / d;
      out.sink[t * n.h + h] = bad ? kNaN() : std::exp(sink.data[h] - m) / d;
    }
  }
  return out;
}

// kv's row for slot (t, j), or nullptr for an empty slot or an id outside [0, S).
const double* key_row(const std::vector<RefTensor>& in, const RefShape& n, int64_t t, int64_t j) {
  const int64_t id = slot_id(in, n, t, j);
  return id >= 0 && id < n.s ? &in[1].data[id * n.e] : nullptr;
}

std::vector<RefTensor> ref_forward(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefShape n = ref_shape(in, attrs);
  const RefProbs pr = ref_probs(in, attrs);
  RefTensor y = ref_zeros(in[0].shape);
  for (int64_t t = 0; t < n.t; ++t)
    for (int64_t h = 0; h < n.h; ++h)
      for (int64_t j = 0; j < n.k; ++j) {
        if (slot_id(in, n, t, j) == kEmpty) continue;
        const double p = pr.p[(t * n.h + h) * n.k + j];
        const double* row = key_row(in, n, t, j);
        for (int64_t c = 0; c < n.e; ++c)
          y.data[(t * n.h + h) * n.e + c] += row ? p * row[c] : kNaN();
      }
  if (!attr_bool(attrs, "mass")) return {y};
  RefTensor mass = ref_zeros({n.t, n.k});
  for (int64_t t = 0; t < n.t; ++t)
    for (int64_t h = 0; h < n.h; ++h)
      for (int64_t j = 0; j < n.k; ++j) mass.data[t * n.k + j] += pr.p[(t * n.h + h) * n.k + j];
  return {y, mass};
}

// The math from idx directly (order and offsets only say how the kernels walk it).
std::vector<RefTensor> ref_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const double scale = attr_float(attrs, "scale");
  const RefShape n = ref_shape(in, attrs);
  const RefTensor &q = in[0], &y = in[5], &dy = in[6];
  const RefProbs pr = ref_probs(in, attrs);
  RefTensor dq = ref_zeros(q.shape), dkv = ref_zeros(in[1].shape), dbias = ref_zeros(in[3].shape),
            dsink = ref_zeros(in[4].shape);
  for (int64_t t = 0; t < n.t; ++t)
    for (int64_t h = 0; h < n.h; ++h) {
      const int64_t row = (t * n.h + h) * n.e;
      double delta = 0;
      for (int64_t c = 0; c < n.e; ++c) delta += y.data[row + c] * dy.data[row + c];
      dsink.data[h] -= pr.sink[t * n.h + h] * delta;
      for (int64_t j = 0; j < n.k; ++j) {
        if (slot_id(in, n, t, j) == kEmpty) continue;  // no part in the softmax: no gradient
        const double p = pr.p[(t * n.h + h) * n.k + j];
        const double* kr = key_row(in, n, t, j);
        double dp = 0;
        for (int64_t c = 0; c < n.e; ++c) dp += dy.data[row + c] * (kr ? kr[c] : kNaN());
        const double ds = p * (dp - delta);
        dbias.data[t * n.k + j] += ds;
        for (int64_t c = 0; c < n.e; ++c) dq.data[row + c] += scale * ds * (kr ? kr[c] : kNaN());
        if (!kr) continue;
        double* g = &dkv.data[slot_id(in, n, t, j) * n.e];
        for (int64_t c = 0; c < n.e; ++c)
          g[c] += scale * ds * q.data[row + c] + p * dy.data[row + c];
      }
    }
  return {dq, dkv, dbias, dsink};
}

// ---- Gradient rule -------------------------------------------------------------------------

// idx sorted by key (counting_sort: order and offsets), then one backward op for all four
// gradients (the ones not needed get temporary names).
std::vector<GradOp> grad_sparse_attention(const std::vector<TensorType>& in, const Attrs& attrs,
                                          const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1] && !needs[3] && !needs[4]) return {};
  auto name = [&](int i) { return needs[i] ? dx_name(i) : "unused_dx" + std::to_string(i); };
  const int64_t off = attrs.count("offset") ? attr_int(attrs, "offset") : 0;
  return {{"counting_sort",
           {"x2"},
           {"sa_position", "sa_order", "sa_row", "sa_offsets"},
           {{"bins", in[1].shape[0] - off}}},
          {"sparse_attention_grad",
           {"x0", "x1", "x2", "x3", "x4", "y0", "dy0", "sa_order", "sa_offsets"},
           {name(0), name(1), name(3), name(4)},
           attrs}};
}

// ---- Expansions ----------------------------------------------------------------------------

// The graph may append idx's check status after the declared inputs: the kernels do not read it
// (an id outside [0, S) gives NaN rows, and the check fails the step).
ExpandFn expand(std::shared_ptr<KernelCache> cache, bool grad) {
  return [cache, grad](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                       const Attrs& attrs) {
    const SparseAttentionShape sh = check_inputs(in, attrs);
    const double scale = attr_float(attrs, "scale");
    return grad ? sparse_attention_grad_expansion(*cache, in[0].dtype, sh, scale)
                : sparse_attention_expansion(*cache, in[0].dtype, sh, scale,
                                             attr_bool(attrs, "mass"));
  };
}

// ---- Test cases ----------------------------------------------------------------------------

// K counts every slot: the first w are the window's, idx has K - w columns.
std::vector<std::vector<int64_t>> input_shapes(int64_t t, int64_t h, int64_t e, int64_t s,
                                               int64_t k, int64_t w) {
  return {{t, h, e}, {s, e}, {t, k - w}, {t, k}, {h}};
}

OpTestCase forward_case(int64_t t, int64_t h, int64_t e, int64_t s, int64_t k, double scale,
                        int64_t w = 0, int64_t off = 0) {
  OpTestCase c{.shapes = input_shapes(t, h, e, s, k, w),
               .attrs = {{"scale", scale}},
               .int_lo = 0,
               .int_hi = s - off};
  if (w > 0) c.attrs["window"] = w;
  if (off > 0) c.attrs["offset"] = off;
  return c;
}

// order and offsets as counting_sort makes them from idx (input 2) over the S - off ids it can
// hold (offsets has input 8's length): the slots in id order, ties in slot order, and where each
// id's run starts.
void sort_slots(std::vector<RefTensor>& in) {
  const RefTensor& idx = in[2];
  const int64_t s = in[8].numel(), n = idx.numel();
  in[7] = ref_zeros({n});
  in[8] = ref_zeros({s});
  int64_t q = 0;
  for (int64_t key = 0; key < s; ++key) {
    in[8].data[key] = static_cast<double>(q);
    for (int64_t i = 0; i < n; ++i)
      if (id_at(idx, i) == key) in[7].data[q++] = static_cast<double>(i);
  }
}

OpTestCase with_mass(OpTestCase c) {
  c.attrs["mass"] = true;
  return c;
}

OpTestCase grad_case(int64_t t, int64_t h, int64_t e, int64_t s, int64_t k, double scale,
                     int64_t w = 0, int64_t off = 0) {
  OpTestCase c = forward_case(t, h, e, s, k, scale, w, off);
  c.shapes.push_back({t, h, e});
  c.shapes.push_back({t, h, e});
  c.shapes.push_back({t * (k - w)});
  c.shapes.push_back({s - off});
  c.derive = sort_slots;
  return c;
}

OpTests forward_tests() {
  // Token 0 picks row 1 twice (z = 0, 0 beside a sink of 0: p = 1/3 each, y = 2·(1/3)·2);
  // token 1's slots are masked by -1e9: only the sink is left, y = 0.
  const OpExample masked{.inputs = {{{2, 1, 1}, {1, 3}},
                                    {{2, 1}, {5, 2}},
                                    {{2, 2}, {1, 1, 0, 1}},
                                    {{2, 2}, {-2, -2, -1e9, -1e9}},
                                    {{1}, {0}}},
                         .attrs = {{"scale", 1.0}},
                         .outputs = {{{2, 1, 1}, {4.0 / 3.0, 0}}}};
  // The last two take the tensor-core kernels in 16-bit dtypes (H a multiple of 8, K of 64),
  // with a ragged last step of E and slots naming the same row more than once.
  return {
      .kernel = {forward_case(3, 1, 8, 5, 1, 0.5), forward_case(7, 2, 64, 20, 5, 0.125),
                 forward_case(24, 3, 70, 40, 16, 0.125), forward_case(5, 2, 8, 3, 16, 0.35),
                 forward_case(6, 8, 72, 100, 64, 0.125), forward_case(3, 16, 136, 90, 128, 0.09),
                 with_mass(forward_case(7, 2, 64, 20, 5, 0.125)),
                 with_mass(forward_case(6, 8, 72, 100, 64, 0.125)),
                 // A window of 4 (then 64, on the tensor cores) before idx's slots: the first
                 // tokens' last window slots are empty.
                 with_mass(forward_case(9, 2, 16, 12, 6, 0.3, 4)),
                 with_mass(forward_case(70, 8, 72, 90, 128, 0.125, 64)),
                 // idx naming the rows after an offset (V4's compressed keys after the tokens'):
                 // alone, after a window, and on the tensor cores.
                 forward_case(7, 2, 64, 20, 5, 0.125, 0, 12),
                 with_mass(forward_case(9, 2, 16, 12, 6, 0.3, 4, 9)),
                 with_mass(forward_case(70, 8, 72, 90, 128, 0.125, 64, 70))},
      // Repeated ids (K = 4 slots over S = 2 rows), and three heads over distinct ones.
      .gradient = {forward_case(2, 1, 3, 2, 4, 0.7), forward_case(3, 3, 4, 6, 2, 0.5),
                   forward_case(4, 2, 3, 5, 4, 0.6, 2), forward_case(4, 2, 3, 7, 4, 0.6, 2, 4)},
      .examples = {masked}};
}

OpTests grad_tests() {
  // One slot, z = 1·1·2 - 2 = 0 beside a sink of 0: p = p_sink = 1/2; with y = 1, dy = 3:
  // delta = 3, dp = 6, ds = 1.5: dq = ds·kv = 3, dkv = ds·q + p·dy = 3, dbias = 1.5,
  // dsink = -p_sink·delta = -1.5.
  const OpExample one{.inputs = {{{1, 1, 1}, {1}},
                                 {{1, 1}, {2}},
                                 {{1, 1}, {0}},
                                 {{1, 1}, {-2}},
                                 {{1}, {0}},
                                 {{1, 1, 1}, {1}},
                                 {{1, 1, 1}, {3}},
                                 {{1}, {0}},
                                 {{1}, {0}}},
                      .attrs = {{"scale", 1.0}},
                      .outputs = {{{1, 1, 1}, {3}}, {{1, 1}, {3}}, {{1, 1}, {1.5}}, {{1}, {-1.5}}}};
  // The last four take the tensor-core kernels in 16-bit dtypes; the last three give keys runs
  // across several of kernel B's 128-position windows (3 keys over 512 slots; 2 over 2560), and
  // the last E = 520: kernel B's columns as one whole 512-wide block and a ragged one.
  return {
      .kernel = {grad_case(3, 1, 8, 5, 1, 0.5), grad_case(7, 2, 64, 20, 5, 0.125),
                 grad_case(24, 3, 70, 40, 16, 0.125), grad_case(5, 2, 8, 3, 16, 0.35),
                 grad_case(6, 8, 72, 100, 64, 0.125), grad_case(3, 16, 136, 90, 128, 0.09),
                 grad_case(8, 8, 72, 3, 64, 0.2), grad_case(40, 8, 16, 2, 64, 0.3),
                 grad_case(5, 8, 520, 4, 64, 0.04),
                 // Windows: the SIMT kernel B's band, then the tensor cores' (keys over two
                 // 64-key blocks, E ragged; T below one block).
                 grad_case(9, 2, 16, 12, 6, 0.3, 4), grad_case(70, 8, 72, 90, 128, 0.125, 64),
                 grad_case(20, 16, 64, 30, 128, 0.1, 64),
                 // With an offset: SIMT (kernel B's rows below it take the band alone), then
                 // the tensor cores' key windows and sums.
                 grad_case(7, 2, 64, 20, 5, 0.125, 0, 12), grad_case(9, 2, 16, 12, 6, 0.3, 4, 9),
                 grad_case(70, 8, 72, 90, 128, 0.125, 64, 70),
                 grad_case(20, 16, 64, 30, 128, 0.1, 64, 20)},
      .examples = {one}};
}

const IndexContract kIdxContract{
    .slot = 2,
    .bound =
        [](const std::vector<TensorType>& in, const Attrs& attrs) {
          return in[1].shape[0] - (attrs.count("offset") ? attr_int(attrs, "offset") : 0);
        },
    .indexes = "the rows of input 'kv' from offset on"};

std::vector<AttrSpec> scale_attr() {
  return {
      {.name = "scale",
       .kind = AttrKind::Float,
       .doc = "the factor on q·k before the bias (e.g. 1/sqrt(E))"},
      {.name = "window",
       .kind = AttrKind::Int,
       .default_value = AttrValue{int64_t{0}},
       .doc = "W sliding-window slots before idx's: slot j < W of token t is key t - j, or "
              "empty (no part in the softmax) when j > t; bias and mass cover all W + K "
              "slots. The backward sums the window's key gradients as a band, not "
              "through the sort"},
      {.name = "offset",
       .kind = AttrKind::Int,
       .default_value = AttrValue{int64_t{0}},
       .doc = "added to idx's ids: idx names kv's rows offset + id, so ids lie in [0, S - "
              "offset) (V4's compressed keys after the tokens' own, picked by a top-k over them)"}};
}

std::vector<AttrSpec> forward_attrs() {
  std::vector<AttrSpec> attrs = scale_attr();
  attrs.push_back({.name = "mass",
                   .kind = AttrKind::Bool,
                   .default_value = AttrValue{false},
                   .doc = "also give mass[t, j] = Σ_h p[t, h, j], the attention each selected slot "
                          "gets summed over the heads (no gradient: a statistic, e.g. a "
                          "detached training target)"});
  return attrs;
}

}  // namespace

void register_sparse_attention(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "sparse_attention",
       .doc = "y[t, h, :] = Σ_j p[t, h, j]·kv[idx[t, j], :], p the softmax over j of "
              "scale·q[t, h, :]·kv[idx[t, j], :] + bias[t, j] with sink[h] in the denominator: "
              "q [T, H, E] attending to K selected rows (i32 idx [T, K], checked in [0, S)) of "
              "one head kv [S, E] used as key and value; with window W, W slots before idx's name "
              "keys t - j (none past key 0); with mass, also mass[t, j] = Σ_h p[t, h, j] "
              "(no gradient)",
       .inputs = {"q", "kv", "idx", "bias", "sink"},
       .outputs = {"y", "mass"},
       .optional_outputs = 1,
       .attrs = forward_attrs(),
       .input_dtypes = {{2, DType::I32}},
       .infer = infer_forward,
       .reference = ref_forward,
       .gradient = grad_sparse_attention,
       .detached_outputs = {1},
       .expand = expand(cache, false),
       .index_contracts = {kIdxContract},
       .tests = forward_tests()});
  registry.add(
      {.name = "sparse_attention_grad",
       .doc = "(dq, dkv, dbias, dsink) of sparse_attention from (q, kv, idx, bias, sink, y, dy) "
              "and counting_sort's order and offsets of idx (dkv summed per key in that order, "
              "after the window's band)",
       .inputs = {"q", "kv", "idx", "bias", "sink", "y", "dy", "order", "offsets"},
       .outputs = {"dq", "dkv", "dbias", "dsink"},
       .attrs = scale_attr(),
       .input_dtypes = {{2, DType::I32}, {7, DType::I32}, {8, DType::I32}},
       .infer = infer_grad,
       .reference = ref_grad,
       .expand = expand(cache, true),
       .tests = grad_tests()});
}

}  // namespace tilerun::kernels
