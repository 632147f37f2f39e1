// moe_route: a mixture of experts' router after its GEMM (DeepSeek-V4's Gate), one kernel
// forward and one backward where the composed form (softplus, sqrt, add, topk, take_along_axis,
// reduce_sum, div, scale) took nine forward and eleven backward. From logits [.., E] and a
// per-expert bias [E]:
//
//   score  = sqrt(softplus(logit)) (score: sqrt_softplus, V4) or sigmoid(logit) (sigmoid, V3),
//   expert = the k largest of score + bias, descending, i32 [.., k]: the bias steers the choice
//            only; topk's order (a NaN above every number, ties to the lower index),
//   weight = score[expert] / Σⱼ score[expert[j]] (normalize; the sum in rank order) · scale.
//
// f32 inside whatever the dtype, one rounding at the store; for f32 logits every value is the
// composed ops' bit for bit (the same f32 operations in the same order), which
// tests/graph/runtime/session_test.cc holds. The expert ids lie in [0, E) by construction (the
// kernel writes positions from its own loop), which the op declares. A NaN logit wins its row's
// first place (as topk) and makes the row's weights NaN; graph/ keeps the logits of an op that
// writes indices for the caller's NaN check (OpGraph::selection_inputs).
//
// Kernels: `moe_route` a warp per row, each lane holding experts lane, lane + 32, ... as topk's
// sort keys; k rounds of a warp max by shuffles pick them in order (the winner's key is
// retired). `moe_route_grad` a thread per (row, expert): it recomputes the row's k chosen
// scores, their sum and the normalisation's gradient, then its own logit's (zero where not
// chosen, also where the composed form's 0/0 at a score of 0 would give NaN).
#include <cmath>
#include <numeric>

#include "compiler/ir/builder.h"
#include "kernels/bitonic_sort.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"
#include "kernels/unary_math.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kWarp = 32;
constexpr int kThreads = 128;  // four rows a block forward
constexpr int64_t kMaxExperts = 8 * kWarp;
constexpr int64_t kMaxK = 16;

// ---- Shapes and attributes -------------------------------------------------------------------

bool sigmoid_score(const Attrs& attrs) {
  const std::string& score = attr_string(attrs, "score");
  if (score != "sqrt_softplus" && score != "sigmoid")
    throw ShapeError("attribute 'score' is '" + score + "', expected sqrt_softplus or sigmoid");
  return score == "sigmoid";
}

// logits [.., E] -> (rows, E), checking the bias [E] and k.
std::pair<int64_t, int64_t> route_shape(const TensorType& logits, const TensorType& bias,
                                        const Attrs& attrs) {
  expect_float(logits, "logits");
  if (logits.shape.empty()) throw ShapeError("input 'logits' is a scalar, expected [.., E]");
  const auto [rows, e] = rows_cols(logits.shape);
  if (e > kMaxExperts)
    throw ShapeError("input 'logits' " + to_string(logits) + " has " + std::to_string(e) +
                     " experts, more than " + std::to_string(kMaxExperts) +
                     " (a warp holds a row's scores in registers)");
  expect_same(bias, "bias", {logits.dtype, {e}}, "one per expert");
  const int64_t k = attr_int(attrs, "k");
  if (k > e || k > kMaxK)
    throw ShapeError("attribute 'k' = " + std::to_string(k) + " exceeds " +
                     (k > e ? "the experts of input 'logits' " + to_string(logits)
                            : std::to_string(kMaxK) + " (the rounds of the warp's selection)"));
  sigmoid_score(attrs);
  return {rows, e};
}

// The weights' dtype: `to`, or the logits' when it is empty.
DType weight_dtype(const TensorType& logits, const Attrs& attrs) {
  // (Tolerant of a rule's attributes before defaults.)
  return !attrs.count("to") || attr_string(attrs, "to").empty() ? logits.dtype
                                                                : float_dtype_attr(attrs, "to");
}

std::vector<TensorType> infer_route(const std::vector<TensorType>& in, const Attrs& attrs) {
  route_shape(in[0], in[1], attrs);
  std::vector<int64_t> shape = in[0].shape;
  shape.back() = attr_int(attrs, "k");
  return {TensorType{weight_dtype(in[0], attrs), shape}, TensorType{DType::I32, shape}};
}

// (logits, bias, expert, dweight) -> dlogits.
std::vector<TensorType> infer_route_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  route_shape(in[0], in[1], attrs);
  std::vector<int64_t> shape = in[0].shape;
  shape.back() = attr_int(attrs, "k");
  expect_same(in[2], "expert", {DType::I32, shape}, "moe_route's expert output");
  expect_same(in[3], "dweight", {weight_dtype(in[0], attrs), shape}, "moe_route's weight output");
  return {in[0]};
}

// ---- References (double) ---------------------------------------------------------------------

double ref_score(double logit, bool sigmoid) {
  return sigmoid ? ref_sigmoid(logit) : std::sqrt(ref_softplus(logit));
}
// d score / d logit.
double ref_score_slope(double logit, bool sigmoid) {
  const double s = ref_sigmoid(logit);
  return sigmoid ? s * (1 - s) : 0.5 / std::sqrt(ref_softplus(logit)) * s;
}

// Row r's experts in topk's order of score + bias.
std::vector<int64_t> ref_choice(const RefTensor& logits, const RefTensor& bias, int64_t r,
                                int64_t e, int64_t k, bool sigmoid) {
  std::vector<double> key(e);
  for (int64_t i = 0; i < e; ++i)
    key[i] = ref_score(logits.data[r * e + i], sigmoid) + bias.data[i];
  std::vector<int64_t> order(e);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return ref_topk_before(key[a], a, key[b], b); });
  order.resize(k);
  return order;
}

std::vector<RefTensor> ref_route(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const auto [rows, e] = rows_cols(in[0].shape);
  const int64_t k = attr_int(attrs, "k");
  const bool sigmoid = sigmoid_score(attrs), normalize = attr_bool(attrs, "normalize");
  const double scale = attr_float(attrs, "scale");
  std::vector<int64_t> shape = in[0].shape;
  shape.back() = k;
  RefTensor weight = ref_zeros(shape), expert = ref_zeros(shape);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<int64_t> chosen = ref_choice(in[0], in[1], r, e, k, sigmoid);
    double sum = 0;
    for (int64_t i : chosen) sum += ref_score(in[0].data[r * e + i], sigmoid);
    for (int64_t j = 0; j < k; ++j) {
      const double s = ref_score(in[0].data[r * e + chosen[j]], sigmoid);
      weight.data[r * k + j] = (normalize ? s / sum : s) * scale;
      expert.data[r * k + j] = static_cast<double>(chosen[j]);
    }
  }
  return {weight, expert};
}

// dscore[j] = scale·(dw[j] − Σᵢ dw[i]·w̃[i]) / sum with w̃ = score / sum (normalize), scale·dw[j]
// otherwise; dlogit = dscore · score'(logit) at the chosen experts, 0 elsewhere.
std::vector<RefTensor> ref_route_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const auto [rows, e] = rows_cols(in[0].shape);
  const int64_t k = attr_int(attrs, "k");
  const bool sigmoid = sigmoid_score(attrs), normalize = attr_bool(attrs, "normalize");
  const double scale = attr_float(attrs, "scale");
  RefTensor dlogits = ref_zeros(in[0].shape);
  for (int64_t r = 0; r < rows; ++r) {
    auto at = [&](int64_t j) { return static_cast<int64_t>(in[2].data[r * k + j]); };
    double sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) sum += ref_score(in[0].data[r * e + at(j)], sigmoid);
    for (int64_t j = 0; j < k; ++j)
      dot += in[3].data[r * k + j] * ref_score(in[0].data[r * e + at(j)], sigmoid) / sum;
    for (int64_t j = 0; j < k; ++j) {
      const double dw = in[3].data[r * k + j], logit = in[0].data[r * e + at(j)];
      const double dscore = scale * (normalize ? (dw - dot) / sum : dw);
      dlogits.data[r * e + at(j)] += dscore * ref_score_slope(logit, sigmoid);
    }
  }
  return {dlogits};
}

std::vector<GradOp> grad_route(const std::vector<TensorType>&, const Attrs& attrs,
                               const std::vector<bool>& needs) {
  std::vector<GradOp> ops;
  if (needs[0]) ops.push_back({"moe_route_grad", {"x0", "x1", "y1", "dy0"}, {"dx0"}, attrs});
  // The bias steers the choice only: no gradient (V4 moves it by load, not by the loss).
  if (needs[1]) ops.push_back({"zeros", {"x1"}, {"dx1"}, {}});
  return ops;
}

// ---- Kernels -------------------------------------------------------------------------------

// The score of an f32 logit, as the unary kernels compute it: sqrt of softplus or sigmoid.
cc::Val score_of(cc::Scope& s, const cc::Val& logit, bool sigmoid) {
  if (sigmoid) return cc::sigmoid(logit);
  return cc::sqrt(softplus_of(s, logit));
}

// "moe_route_s2_k6_sqrt_softplus_f32" (with "_raw" when not normalised, and the weights' dtype
// after the logits' when `to` differs).
std::string route_name(const char* base, int64_t slots, int64_t k, const Attrs& attrs, DType dt,
                       DType wdt) {
  return std::string(base) + "_s" + std::to_string(slots) + "_k" + std::to_string(k) +
         (sigmoid_score(attrs) ? "_sigmoid" : "_sqrt_softplus") +
         (attr_bool(attrs, "normalize") ? "" : "_raw") + "_" + std::string(dtype_name(dt)) +
         (wdt == dt ? "" : "_" + std::string(dtype_name(wdt)));
}

// Parameters logits [R, E], bias [E], weight [R, K] (of dtype wdt), expert [R, K] (i32); dims
// R, E; scalar scale. Grid R / 4 blocks of four warps, a warp a row; lane l holds experts
// l + 32·j, j < slots.
cc::Kernel build_route(DType dt, DType wdt, int64_t slots, int64_t k, const Attrs& attrs) {
  const bool sigmoid = sigmoid_score(attrs), normalize = attr_bool(attrs, "normalize");
  cc::KernelBuilder kb(route_name("moe_route", slots, k, attrs, dt, wdt));
  cc::Dim r = kb.dim("R"), e = kb.dim("E", {.min = 1, .max = slots * kWarp});
  cc::Buf logits = kb.input("logits", dt, {r, e});
  cc::Buf bias = kb.input("bias", dt, {e});
  cc::Buf weight = kb.output("weight", wdt, {r, cc::Val(k)});
  cc::Buf expert = kb.output("expert", DType::I32, {r, cc::Val(k)});
  cc::Val scale = kb.scalar_f32("scale");
  constexpr int64_t rows_per_block = kThreads / kWarp;
  kb.body({cc::ceildiv(r, rows_per_block)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row0 = s.let(s.block_idx(0) * rows_per_block, "row0");
    auto fragment = [&](const std::string& name, DType type) {
      return s.alloc_fragment(name, type, {kThreads});
    };
    std::vector<cc::Buf> key, score;
    for (int64_t j = 0; j < slots; ++j) {
      key.push_back(fragment("key" + std::to_string(j), DType::I64));
      score.push_back(fragment("score" + std::to_string(j), DType::F32));
    }
    // Rows past R compute row R - 1's choice again (the shuffles take every lane) and store
    // nothing.
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx row = s.let(cc::min(row0 + t / kWarp, r - 1), "row");
      for (int64_t j = 0; j < slots; ++j) {
        cc::Idx x = s.let(t % kWarp + j * kWarp, "x");
        cc::Idx at = s.let(cc::min(x, e - 1), "at");
        cc::Val sc = s.let(score_of(s, cc::to_f32(logits(row, at)), sigmoid), "sc");
        score[j](t) = sc;
        key[j](t) = cc::select(x < e, sort_key(sc + cc::to_f32(bias(at)), x), padding_key());
      }
    });
    cc::Buf best = fragment("best", DType::I64), best_score = fragment("best_score", DType::F32);
    cc::Buf other = fragment("other", DType::I64),
            other_score = fragment("other_score", DType::F32);
    std::vector<cc::Buf> pick, pick_score;
    for (int64_t round = 0; round < k; ++round) {
      // The lane's best key (its slots in order), then the warp's by a shuffle tree.
      s.parallel(kThreads, [&](cc::Idx t) {
        best(t) = key[0](t);
        best_score(t) = score[0](t);
        for (int64_t j = 1; j < slots; ++j) {
          cc::Val take = s.let(key[j](t) > best(t), "take");
          best(t) = cc::select(take, key[j](t), best(t));
          best_score(t) = cc::select(take, score[j](t), best_score(t));
        }
      });
      for (int lane_xor = kWarp / 2; lane_xor >= 1; lane_xor /= 2) {
        s.shuffle_xor(other, best, lane_xor);
        s.shuffle_xor(other_score, best_score, lane_xor);
        s.parallel(kThreads, [&](cc::Idx t) {
          cc::Val take = s.let(other(t) > best(t), "take");
          best(t) = cc::select(take, other(t), best(t));
          best_score(t) = cc::select(take, other_score(t), best_score(t));
        });
      }
      pick.push_back(fragment("pick" + std::to_string(round), DType::I64));
      pick_score.push_back(fragment("pick_score" + std::to_string(round), DType::F32));
      s.parallel(kThreads, [&](cc::Idx t) {
        pick[round](t) = best(t);
        pick_score[round](t) = best_score(t);
        // Keys are distinct: only the winner's slot matches.
        for (int64_t j = 0; j < slots; ++j)
          key[j](t) = cc::select(key[j](t) == best(t), padding_key(), key[j](t));
      });
    }
    // Lane 0 of each warp writes its row: the sum in rank order, as reduce_sum folds six.
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx row = s.let(row0 + t / kWarp, "out_row");
      s.if_then(t % kWarp == 0 && row < r, [&] {
        cc::Val sum = pick_score[0](t);
        for (int64_t j = 1; j < k; ++j) sum = sum + pick_score[j](t);
        cc::Val total = s.let(sum, "total");
        for (int64_t j = 0; j < k; ++j) {
          expert(row, j) = cc::to_i32(sort_key_index(pick[j](t)));
          weight(row, j) = scale * (normalize ? pick_score[j](t) / total : pick_score[j](t));
        }
      });
    });
  });
  return kb.build();
}

// Parameters logits [R, E], expert [R, K] (i32), dweight [R, K] (of dtype wdt), dlogits [R, E];
// dims R, E; scalar scale. A block of 128 threads over (row, expert) pairs, each recomputing its
// row's chosen scores (k loads of the logits at the chosen ids, clamped into [0, E): in range
// whatever the ids hold).
cc::Kernel build_route_grad(DType dt, DType wdt, int64_t k, const Attrs& attrs) {
  const bool sigmoid = sigmoid_score(attrs), normalize = attr_bool(attrs, "normalize");
  cc::KernelBuilder kb(route_name("moe_route_grad", 0, k, attrs, dt, wdt));
  cc::Dim r = kb.dim("R"), e = kb.dim("E");
  cc::Buf logits = kb.input("logits", dt, {r, e});
  cc::Buf expert = kb.input("expert", DType::I32, {r, cc::Val(k)});
  cc::Buf dweight = kb.input("dweight", wdt, {r, cc::Val(k)});
  cc::Buf dlogits = kb.output("dlogits", dt, {r, e});
  cc::Val scale = kb.scalar_f32("scale");
  kb.body({r, cc::ceildiv(e, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.let(s.block_idx(0), "row");
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx x = s.let(s.block_idx(1) * kThreads + t, "x");
      s.if_then(x < e, [&] {
        std::vector<cc::Val> id, sc, dn;
        for (int64_t j = 0; j < k; ++j) {
          id.push_back(s.let(cc::to_i64(expert(row, j)), "id"));
          cc::Idx at = s.let(cc::min(cc::max(id[j], cc::Val(int64_t{0})), e - 1), "at");
          sc.push_back(s.let(score_of(s, cc::to_f32(logits(row, at)), sigmoid), "sc"));
          // scale's gradient (alpha · dy), as the composed form's first backward op.
          dn.push_back(s.let(scale * cc::to_f32(dweight(row, j)), "dn"));
        }
        // div's gradients: dn / sum to the score, -(dn·(score / sum) / sum) to the sum,
        // summed over the row in rank order and added back to every chosen score.
        cc::Val dscore = cc::Val(0.0f), sum;
        if (normalize) {
          cc::Val total = sc[0];
          for (int64_t j = 1; j < k; ++j) total = total + sc[j];
          sum = s.let(total, "sum");
          cc::Val ds = -(dn[0] * (sc[0] / sum) / sum);
          for (int64_t j = 1; j < k; ++j) ds = ds + -(dn[j] * (sc[j] / sum) / sum);
          dscore = s.let(ds, "ds");
        }
        // Expert x's rank among the chosen (they are distinct: at most one hit).
        cc::Val d = cc::Val(0.0f), mine = cc::Val(1.0f), any = cc::Val(cc::make_bool(false));
        for (int64_t j = 0; j < k; ++j) {
          cc::Val hit = s.let(id[j] == x, "hit");
          d = cc::select(hit, normalize ? dn[j] / sum + dscore : dn[j], d);
          mine = cc::select(hit, sc[j], mine);
          any = any || hit;
        }
        cc::Val dsc = s.let(d, "dsc"), own = s.let(mine, "own");
        cc::Val chosen = s.let(any, "chosen");
        cc::Val l = s.let(cc::to_f32(logits(row, x)), "l");
        // sqrt's gradient (0.5·dy / y), then softplus's (dy·sigmoid(x)); or sigmoid's
        // (dy·y·(1 - y)); 0 where not chosen.
        cc::Val grad = sigmoid ? dsc * own * (1.0f - own) : ((0.5f * dsc) / own) * cc::sigmoid(l);
        dlogits(row, x) = cc::select(chosen, grad, cc::Val(0.0f));
      });
    });
  });
  return kb.build();
}

int64_t slots_of(int64_t experts) { return (experts + kWarp - 1) / kWarp; }

ExpandFn expand_route(std::shared_ptr<KernelCache> cache, bool backward) {
  return [cache, backward](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                           const Attrs& attrs) {
    const DType dt = in[0].dtype, wdt = weight_dtype(in[0], attrs);
    const auto [rows, e] = route_shape(in[0], in[1], attrs);
    const int64_t k = attr_int(attrs, "k"), slots = slots_of(e);
    KernelCall call{.dims = {rows, e}, .scalars = {attr_float(attrs, "scale")}};
    if (backward) {
      call.kernel = cache->get(route_name("moe_route_grad", 0, k, attrs, dt, wdt),
                               [&] { return build_route_grad(dt, wdt, k, attrs); });
      call.buffers = {input_slot(0), input_slot(2), input_slot(3), output_slot(0)};
    } else {
      call.kernel = cache->get(route_name("moe_route", slots, k, attrs, dt, wdt),
                               [&] { return build_route(dt, wdt, slots, k, attrs); });
      call.buffers = {input_slot(0), input_slot(1), output_slot(0), output_slot(1)};
    }
    return OpExpansion{.calls = {call}};
  };
}

std::vector<AttrSpec> route_attrs() {
  return {int_attr("k", std::nullopt, "how many experts each row chooses", true),
          {.name = "scale",
           .kind = AttrKind::Float,
           .default_value = 1.0,
           .doc = "route_scale: the weights' factor"},
          {.name = "score",
           .kind = AttrKind::String,
           .default_value = std::string("sqrt_softplus"),
           .doc = "sqrt_softplus (V4) or sigmoid (V3): the score of a logit"},
          {.name = "normalize",
           .kind = AttrKind::Bool,
           .default_value = true,
           .doc = "the chosen scores divided by their sum"},
          {.name = "to",
           .kind = AttrKind::String,
           .default_value = std::string(),
           .doc = "the weights' dtype (f32, bf16 or f16), rounded as stored; empty: the logits'"}};
}

Attrs route(int64_t k, double scale = 1.0, const std::string& score = "sqrt_softplus",
            bool normalize = true) {
  return {{"k", k}, {"scale", scale}, {"score", score}, {"normalize", normalize}};
}

// A gradient case's expert ids: moe_route's own choice from the drawn logits and bias (distinct
// in each row, as the op's are).
OpTestCase grad_case(std::vector<std::vector<int64_t>> shapes, Attrs attrs) {
  return {.shapes = std::move(shapes),
          .attrs = attrs,
          .int_hi = 1,
          .derive = [attrs](std::vector<RefTensor>& in) {
            in[2] = ref_route({in[0], in[1]}, attrs)[1];
          }};
}

// Rows of logits on a coarse grid with the bias: equal keys tie exactly (the lower index first)
// and distinct ones are far apart, whatever the arithmetic's last bits.
OpTestCase grid_case(std::vector<std::vector<int64_t>> shapes, Attrs attrs) {
  return {.shapes = std::move(shapes), .attrs = std::move(attrs), .lo = -4, .hi = 4, .step = 0.5};
}

}  // namespace

void register_moe_route(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "moe_route",
       .doc = "weight, expert = a router's top-k (V4's Gate): score = sqrt(softplus(logit)) (or "
              "sigmoid), expert = the k largest of score + bias (the bias steers the choice only; "
              "topk's order), i32 in [0, E) by construction; weight = the chosen scores divided by "
              "their sum (normalize) times scale; gradient moe_route_grad (none to the bias)",
       .inputs = {"logits", "bias"},
       .outputs = {"weight", "expert"},
       .attrs = route_attrs(),
       .output_dtypes = {{1, DType::I32}},
       .infer = infer_route,
       .reference = ref_route,
       .gradient = grad_route,
       .expand = expand_route(cache, false),
       .index_outputs = {{.slot = 1,
                          .bound = [](const std::vector<TensorType>& in,
                                      const Attrs&) { return in[0].shape.back(); }}},
       .tests = {.kernel = {grid_case({{37, 64}, {64}}, route(6, 2.5)),
                            grid_case({{5, 3, 256}, {256}}, route(8)),
                            grid_case({{9, 7}, {7}}, route(7, 1.0, "sigmoid")),
                            grid_case({{4, 40}, {40}}, route(3, 1.5, "sigmoid", false)),
                            {.shapes = {{70, 64}, {64}}, .attrs = route(6, 1.5)},
                            {.shapes = {{1, 1}, {1}}, .attrs = route(1)}},
                 .gradient = {{.shapes = {{3, 9}, {9}}, .attrs = route(3, 1.5)},
                              {.shapes = {{2, 6}, {6}}, .attrs = route(2, 1.0, "sigmoid", false)},
                              {.shapes = {{2, 5}, {5}}, .attrs = route(4, 2.0, "sigmoid")}},
                 // Scores sqrt(softplus(0)) = sqrt(ln 2) at experts 0 and 2; the bias puts 2
                 // first; the weights are then 1/2 each (times scale 3).
                 .examples = {{.inputs = {{{1, 3}, {0, -30, 0}}, {{3}, {0, 0, 1}}},
                               .attrs = route(2, 3.0),
                               .outputs = {{{1, 2}, {1.5, 1.5}}, {{1, 2}, {2, 0}}}},
                              // A NaN logit wins first place and its row's weights are NaN.
                              {.inputs = {{{1, 3}, {1, kNaN(), 2}}, {{3}, {0, 0, 0}}},
                               .attrs = route(2),
                               .outputs = {{{1, 2}, {kNaN(), kNaN()}}, {{1, 2}, {1, 2}}}}}}});
  registry.add(
      {.name = "moe_route_grad",
       .doc = "dlogits of moe_route from the gradient of its weights: at each chosen expert "
              "scale·(dw − Σ dw·weight/scale)/sum (normalize) times the score's slope, 0 elsewhere "
              "(the backward op of moe_route)",
       .inputs = {"logits", "bias", "expert", "dweight"},
       .outputs = {"dlogits"},
       .attrs = route_attrs(),
       .input_dtypes = {{2, DType::I32}},
       .infer = infer_route_grad,
       .reference = ref_route_grad,
       .expand = expand_route(cache, true),
       .tests = {
           .kernel = {grad_case({{37, 64}, {64}, {37, 6}, {37, 6}}, route(6, 2.5)),
                      grad_case({{5, 3, 200}, {200}, {5, 3, 8}, {5, 3, 8}},
                                route(8, 1.0, "sigmoid")),
                      grad_case({{4, 9}, {9}, {4, 3}, {4, 3}}, route(3, 1.0, "sigmoid", false))},
           // Two chosen experts of equal score (weights 1/2 each, sum 2·sqrt(ln 2)): dw =
           // (1, 0) gives dscore = (1 - 1/2)/sum and -(1/2)/sum; the slope at 0 is
           // 0.5/sqrt(ln 2)·1/2.
           .examples = {
               {.inputs =
                    {{{1, 3}, {0, 5, 0}}, {{3}, {0, 0, 0}}, {{1, 2}, {0, 2}}, {{1, 2}, {1, 0}}},
                .attrs = route(2),
                .outputs = {
                    {{1, 3},
                     {0.5 / (2 * std::sqrt(std::log(2.0))) * 0.25 / std::sqrt(std::log(2.0)), 0,
                      -0.5 / (2 * std::sqrt(std::log(2.0))) * 0.25 /
                          std::sqrt(std::log(2.0))}}}}}}});
}

}  // namespace tilerun::kernels
