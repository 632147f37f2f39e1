// Parsing well-formed models: the shipped tiny config, the naming rules, and a V4-style layer
// written against a registry of stand-in V4 ops (the format must express what V4 needs before
// the real op families exist).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/model/model_parser.h"
#include "kernels/op_registry.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

using kernels::AttrKind;
using kernels::OpRegistry;
using kernels::ShapeError;
using kernels::TensorType;

std::vector<std::string> tensor_names(const Model& m) {
  std::vector<std::string> names;
  for (const TensorDecl& t : m.tensors) names.push_back(t.name);
  return names;
}

const TensorDecl& tensor(const Model& m, const std::string& name) {
  const TensorDecl* t = m.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  static const TensorDecl kNone;
  return t ? *t : kNone;
}

TEST(ModelTest, TinyConfig) {
  Model m = load_model(TILERUN_SOURCE_DIR "/configs/tiny.yaml");
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(m.dtype, DType::F32);
  std::vector<std::pair<std::string, int64_t>> dims = {{"T", 128}, {"D", 256}, {"F", 1024}};
  EXPECT_EQ(m.dims, dims);

  ASSERT_EQ(m.layers.size(), 2u);
  EXPECT_EQ(m.layers[0].name, "block.0");
  EXPECT_EQ(m.layers[1].name, "block.1");
  for (const LayerDecl& layer : m.layers) {
    std::vector<std::string> types;
    for (const OpDecl& op : layer.ops) types.push_back(op.type);
    EXPECT_EQ(types, (std::vector<std::string>{"rmsnorm", "matmul", "silu", "matmul", "add"}));
  }

  std::vector<std::string> expected_names = {"x"};
  for (std::string l : {"block.0.", "block.1."})
    for (std::string n : {"g", "w1", "w2", "h", "a", "s", "m", "y"})
      expected_names.push_back(l + n);
  EXPECT_EQ(tensor_names(m), expected_names);

  const int64_t T = 128, D = 256, F = 1024;
  EXPECT_EQ(tensor(m, "x").role, TensorRole::Input);
  EXPECT_EQ(tensor(m, "x").shape, (std::vector<int64_t>{T, D}));
  EXPECT_EQ(tensor(m, "x").dims, (std::vector<std::string>{"T", "D"}));
  EXPECT_EQ(tensor(m, "x").layer, -1);
  EXPECT_EQ(tensor(m, "x").init.kind, Initializer::Kind::Normal);  // the default
  EXPECT_EQ(tensor(m, "x").init.a, 0.0);
  EXPECT_EQ(tensor(m, "x").init.b, 1.0);
  EXPECT_EQ(tensor(m, "block.1.g").role, TensorRole::Weight);
  EXPECT_EQ(tensor(m, "block.1.g").layer, 1);
  EXPECT_EQ(tensor(m, "block.1.g").init.kind, Initializer::Kind::Ones);
  EXPECT_EQ(tensor(m, "block.0.w1").shape, (std::vector<int64_t>{D, F}));
  EXPECT_EQ(tensor(m, "block.0.w1").init.kind, Initializer::Kind::Normal);
  EXPECT_EQ(tensor(m, "block.0.w1").init.b, 0.02);
  EXPECT_EQ(tensor(m, "block.0.w2").shape, (std::vector<int64_t>{F, D}));
  EXPECT_EQ(tensor(m, "block.0.a").role, TensorRole::Activation);
  EXPECT_EQ(tensor(m, "block.0.a").shape, (std::vector<int64_t>{T, F}));
  EXPECT_EQ(tensor(m, "block.1.y").shape, (std::vector<int64_t>{T, D}));
  for (const TensorDecl& t : m.tensors) EXPECT_EQ(t.dtype, DType::F32) << t.name;
  EXPECT_EQ(tensor(m, "block.0.h").loc.line, 19);  // the `out: h` of the rmsnorm entry

  // Names in ops are full names; the carry makes block.1 read block.0's y where it says x.
  const OpDecl& norm0 = m.layers[0].ops[0];
  EXPECT_EQ(norm0.inputs, (std::vector<std::string>{"x", "block.0.g"}));
  EXPECT_EQ(norm0.outputs, (std::vector<std::string>{"block.0.h"}));
  EXPECT_EQ(std::get<double>(norm0.attrs.at("eps")), 1e-6);
  EXPECT_EQ(m.layers[1].ops[0].inputs, (std::vector<std::string>{"block.0.y", "block.1.g"}));
  EXPECT_EQ(m.layers[1].ops[4].inputs, (std::vector<std::string>{"block.0.y", "block.1.m"}));
  // Defaults are filled in.
  EXPECT_EQ(std::get<bool>(m.layers[0].ops[1].attrs.at("transpose_a")), false);
  EXPECT_EQ(std::get<bool>(m.layers[0].ops[1].attrs.at("transpose_b")), false);

  EXPECT_EQ(m.outputs, (std::vector<std::string>{"block.1.y"}));
  EXPECT_TRUE(m.loss.terms.empty());  // the default: half_sum_squares of every output
  EXPECT_EQ(m.optimizer.kind, OptimizerDecl::Kind::None);
  EXPECT_EQ(m.find_tensor("block.y"), nullptr);

  const int64_t params_per_layer = D + D * F + F * D;
  EXPECT_EQ(m.parameter_count(), 2 * params_per_layer);
  EXPECT_EQ(m.parameter_bytes(), 4 * 2 * params_per_layer);
}

// The model's `precision` is the default of every matmul's own: configs/tf32.yaml sets it once;
// an op that says `precision: strict` keeps it; ops without the attribute are untouched.
TEST(ModelTest, ModelPrecisionIsTheMatmulsDefault) {
  Model m = load_model(TILERUN_SOURCE_DIR "/configs/tf32.yaml");
  int matmuls = 0;
  for (const LayerDecl& l : m.layers)
    for (const OpDecl& op : l.ops) {
      if (op.type != "matmul") {
        EXPECT_EQ(op.attrs.count("precision"), 0u) << op.type;
        continue;
      }
      ++matmuls;
      EXPECT_EQ(std::get<std::string>(op.attrs.at("precision")), "tf32");
    }
  EXPECT_EQ(matmuls, 4);
  const std::string text =
      "model: m\nprecision: tf32\ninputs:\n  x: {shape: [4, 4]}\nlayers:\n  - name: b\n"
      "    ops:\n      - {op: matmul, in: [x, x], out: y, precision: strict}\n"
      "      - {op: matmul, in: [y, x], out: z}\noutputs: [b.z]\n";
  Model p = parse_model(text, "m.yaml");
  EXPECT_EQ(std::get<std::string>(p.layers[0].ops[0].attrs.at("precision")), "strict");
  EXPECT_EQ(std::get<std::string>(p.layers[0].ops[1].attrs.at("precision")), "tf32");
  Model none = load_model(TILERUN_SOURCE_DIR "/configs/tiny.yaml");
  EXPECT_EQ(std::get<std::string>(none.layers[0].ops[1].attrs.at("precision")), "strict");
}

TEST(ModelTest, TinySummary) {
  std::string s = model_summary(load_model(TILERUN_SOURCE_DIR "/configs/tiny.yaml"));
  for (const char* line : {"model: tiny", "dims: T=128 D=256 F=1024", "layers: 2",
                           "  block.0: 5 ops (rmsnorm, matmul x2, silu, add)",
                           "  block.1: 5 ops (rmsnorm, matmul x2, silu, add)",
                           "tensors: 17 (1 input, 6 weights, 10 activations)",
                           "parameters: 1,049,088 (4,196,352 bytes, 4.00 MiB)",
                           "  block.1.y: f32[128,256]", "loss: half_sum_squares"})
    EXPECT_NE(s.find(line), std::string::npos) << "missing '" << line << "' in\n" << s;
}

// Unrepeated layers, qualified references across layers, every attribute form, scalar `in`
// and `outputs`, per-tensor dtypes and initialisers.
TEST(ModelTest, NamesAttributesAndInitialisers) {
  Model m = parse_model(R"(
model: names
dtype: bf16
dims: {T: 8, D: 16}
inputs:
  x: {shape: [T, D], dtype: f32, init: zeros}
layers:
  - name: first
    repeat: 3
    carry: {x: y}
    weights:
      w: {shape: [D, D], dtype: f32, init: {uniform: {low: -0.5, high: 0.5}}}
    ops:
      - {op: matmul, in: [x, w], out: h, transpose_b: true}
      - {op: add, in: [x, h], out: y}
  - name: second
    weights:
      c: {shape: [16, 16], dtype: f32, init: {constant: 3}}
    ops:
      - {op: scale, in: first.y, out: s, alpha: 2}
      - {op: add, in: [s, first.0.y], out: t}
      - {op: matmul, in: [t, c], out: u}
outputs: second.u
)",
                        "names.yaml");
  EXPECT_EQ(m.file, "names.yaml");
  ASSERT_EQ(m.layers.size(), 4u);
  EXPECT_EQ(m.layers[3].name, "second");
  EXPECT_EQ(tensor(m, "second.c").init.kind, Initializer::Kind::Constant);
  EXPECT_EQ(tensor(m, "second.c").init.a, 3.0);
  EXPECT_EQ(tensor(m, "second.c").dims, (std::vector<std::string>{"16", "16"}));
  EXPECT_EQ(tensor(m, "first.2.w").init.kind, Initializer::Kind::Uniform);
  EXPECT_EQ(tensor(m, "first.2.w").init.a, -0.5);
  EXPECT_EQ(tensor(m, "x").init.kind, Initializer::Kind::Zeros);
  EXPECT_EQ(tensor(m, "x").dtype, DType::F32);
  EXPECT_EQ(m.dtype, DType::BF16);
  EXPECT_EQ(m.layers[2].ops[0].inputs, (std::vector<std::string>{"first.1.y", "first.2.w"}));
  EXPECT_EQ(std::get<bool>(m.layers[0].ops[0].attrs.at("transpose_b")), true);
  const OpDecl& scale = m.layers[3].ops[0];
  EXPECT_EQ(scale.inputs, (std::vector<std::string>{"first.2.y"}));  // first.y: the last one
  EXPECT_EQ(std::get<double>(scale.attrs.at("alpha")), 2.0);         // an int for a float attr
  EXPECT_EQ(m.layers[3].ops[1].inputs, (std::vector<std::string>{"second.s", "first.0.y"}));
  EXPECT_EQ(m.outputs, (std::vector<std::string>{"second.u"}));
  EXPECT_EQ(m.parameter_count(), 3 * 16 * 16 + 16 * 16);
}

// ---- A V4-style layer against stand-in ops -------------------------------------------------

TensorType type(DType t, std::vector<int64_t> shape) { return TensorType{t, std::move(shape)}; }

void expect(const TensorType& got, DType dtype, size_t rank, const std::string& slot) {
  if (got.dtype != dtype || got.shape.size() != rank)
    throw ShapeError("input '" + slot + "' is " + kernels::to_string(got) + ", expected " +
                     std::string(dtype_name(dtype)) + " of rank " + std::to_string(rank));
}

// The shapes these ops check are the V4-style layer's (issue 16); the op names are stand-ins.
OpRegistry v4_registry() {
  OpRegistry r;
  // mHC pre: streams [T,n,D] → mixed input [T,D], post weights [T,n], combination [T,n,n].
  r.add({.name = "hc_pre",
         .inputs = {"streams", "fn"},
         .outputs = {"x", "post", "comb"},
         .attrs = {{.name = "sinkhorn_iters",
                    .kind = AttrKind::Int,
                    .default_value = AttrValue{int64_t{20}}},
                   {.name = "eps", .kind = AttrKind::Float, .default_value = AttrValue{1e-6}}},
         .infer = [](const std::vector<TensorType>& in, const Attrs&) {
           expect(in[0], DType::BF16, 3, "streams");
           int64_t t = in[0].shape[0], n = in[0].shape[1], d = in[0].shape[2];
           if (in[1] != type(DType::F32, {n * d, n * (n + 2)}))
             throw ShapeError("input 'fn' is " + kernels::to_string(in[1]) + ", expected f32[" +
                              std::to_string(n * d) + "," + std::to_string(n * (n + 2)) + "]");
           return std::vector<TensorType>{type(DType::BF16, {t, d}), type(DType::F32, {t, n}),
                                          type(DType::F32, {t, n, n})};
         }});
  // mHC post: x' = post * f + comb^T streams.
  r.add({.name = "hc_post",
         .inputs = {"f", "streams", "post", "comb"},
         .outputs = {"out"},
         .infer = [](const std::vector<TensorType>& in, const Attrs&) {
           return std::vector<TensorType>{in[1]};
         }});
  r.add({.name = "rmsnorm",
         .inputs = {"x", "gamma"},
         .outputs = {"y"},
         .infer = [](const std::vector<TensorType>& in, const Attrs&) {
           return std::vector<TensorType>{in[0]};
         }});
  // FP8 activation quantisation, one f32 scale per `block` values: two outputs.
  r.add(
      {.name = "act_quant",
       .inputs = {"x"},
       .outputs = {"q", "scale"},
       .attrs = {{.name = "block",
                  .kind = AttrKind::Int,
                  .default_value = AttrValue{int64_t{128}}}},
       .infer = [](const std::vector<TensorType>& in, const Attrs& a) {
         expect(in[0], DType::BF16, 2, "x");
         int64_t block = kernels::attr_int(a, "block");
         if (block <= 0 || in[0].shape[1] % block != 0)
           throw ShapeError("input 'x' is " + kernels::to_string(in[0]) +
                            ", expected the last dim divisible by block " + std::to_string(block));
         return std::vector<TensorType>{type(DType::F8E4M3, in[0].shape),
                                        type(DType::F32, {in[0].shape[0], in[0].shape[1] / block})};
       }});
  // Dequant + GEMM: FP8 activations with their scales times FP4 weights with E8M0 scales (one
  // per 32 values along K).
  r.add({.name = "fp4_matmul",
         .inputs = {"x", "x_scale", "w", "w_scale"},
         .outputs = {"y"},
         .infer = [](const std::vector<TensorType>& in, const Attrs&) {
           expect(in[0], DType::F8E4M3, 2, "x");
           expect(in[1], DType::F32, 2, "x_scale");
           expect(in[2], DType::FP4E2M1, 2, "w");
           int64_t n = in[2].shape[0], k = in[2].shape[1];
           if (in[3] != type(DType::E8M0, {n, k / 32}))
             throw ShapeError("input 'w_scale' is " + kernels::to_string(in[3]) +
                              ", expected e8m0[" + std::to_string(n) + "," +
                              std::to_string(k / 32) + "]");
           return std::vector<TensorType>{type(DType::BF16, {in[0].shape[0], n})};
         }});
  // Mixture of experts with FP4 expert weights: output, chosen experts, tokens per expert.
  r.add(
      {.name = "moe",
       .inputs = {"x", "router", "w13", "w13_scale", "w2", "w2_scale", "bias"},
       .optional_inputs = 1,
       .outputs = {"y", "topk_idx", "counts"},
       .attrs = {{.name = "topk", .kind = AttrKind::Int},
                 {.name = "route_scale", .kind = AttrKind::Float, .default_value = AttrValue{1.0}},
                 {.name = "score_func",
                  .kind = AttrKind::String,
                  .default_value = AttrValue{std::string("sqrtsoftplus")}},
                 {.name = "swiglu_limit",
                  .kind = AttrKind::FloatList,
                  .default_value = AttrValue{std::vector<double>{}}},
                 {.name = "expert_groups",
                  .kind = AttrKind::IntList,
                  .default_value = AttrValue{std::vector<int64_t>{}}},
                 {.name = "activations",
                  .kind = AttrKind::StringList,
                  .default_value = AttrValue{std::vector<std::string>{"silu"}}}},
       .infer = [](const std::vector<TensorType>& in, const Attrs& a) {
         expect(in[0], DType::BF16, 2, "x");
         expect(in[2], DType::FP4E2M1, 3, "w13");
         expect(in[3], DType::E8M0, 3, "w13_scale");
         int64_t t = in[0].shape[0], e = in[1].shape[0];
         return std::vector<TensorType>{in[0], type(DType::I32, {t, kernels::attr_int(a, "topk")}),
                                        type(DType::I32, {e})};
       }});
  return r;
}

constexpr const char* kV4Layer = R"(
model: v4_sample
dtype: bf16
dims: {T: 256, D: 1024, NHC: 4, HCD: 4096, MIX: 24, Q: 256, E: 8, I2: 1024, I: 512, TOPK: 2}
inputs:
  streams: {shape: [T, NHC, D]}
layers:
  - name: layer
    repeat: 2
    carry: {streams: out}
    weights:
      hc_fn:     {shape: [HCD, MIX], dtype: f32, init: {normal: {std: 0.01}}}
      norm:      {shape: [D], init: ones}
      wq:        {shape: [Q, D], dtype: fp4e2m1}
      wq_scale:  {shape: [Q, 32], dtype: e8m0, init: {constant: 1}}
      router:    {shape: [E, D], dtype: f32}
      bias:      {shape: [E], dtype: f32, init: zeros}
      w13:       {shape: [E, I2, D], dtype: fp4e2m1}
      w13_scale: {shape: [E, I2, 32], dtype: e8m0}
      w2:        {shape: [E, D, I], dtype: fp4e2m1}
      w2_scale:  {shape: [E, D, 16], dtype: e8m0}
    ops:
      - {op: hc_pre, in: [streams, hc_fn], out: [x, post, comb]}
      - {op: rmsnorm, in: [x, norm], out: xn}
      - {op: act_quant, in: xn, out: [xq, xs], block: 128}
      - {op: fp4_matmul, in: [xq, xs, wq, wq_scale], out: q}
      - op: moe
        in: [xn, router, w13, w13_scale, w2, w2_scale, bias]
        out: [y, topk_idx, counts]
        topk: TOPK
        route_scale: 2
        swiglu_limit: [-10, 10.5]
        score_func: sigmoid
        expert_groups: [4, E]
        activations: [swiglu, clamp]
      - {op: hc_post, in: [y, streams, post, comb], out: out}
outputs: [layer.out, layer.1.counts]
)";

TEST(ModelTest, V4StyleLayer) {
  OpRegistry registry = v4_registry();
  Model m = graph::parse_model(kV4Layer, "v4.yaml", registry);
  ASSERT_EQ(m.layers.size(), 2u);
  EXPECT_EQ(m.layers[1].ops.size(), 6u);
  EXPECT_EQ(tensor(m, "layer.0.wq").dtype, DType::FP4E2M1);
  EXPECT_EQ(tensor(m, "layer.0.wq").nbytes(), 256 * 1024 / 2);
  EXPECT_EQ(tensor(m, "layer.0.wq_scale").dtype, DType::E8M0);
  EXPECT_EQ(tensor(m, "layer.1.xq").dtype, DType::F8E4M3);
  EXPECT_EQ(tensor(m, "layer.1.xs").shape, (std::vector<int64_t>{256, 8}));
  EXPECT_EQ(tensor(m, "layer.0.comb").shape, (std::vector<int64_t>{256, 4, 4}));
  EXPECT_EQ(tensor(m, "layer.0.topk_idx").dtype, DType::I32);
  EXPECT_EQ(tensor(m, "layer.0.topk_idx").shape, (std::vector<int64_t>{256, 2}));
  EXPECT_EQ(tensor(m, "layer.0.hc_fn").init.b, 0.01);

  const OpDecl& moe = m.layers[1].ops[4];
  EXPECT_EQ(moe.inputs.size(), 7u);
  EXPECT_EQ(moe.inputs[0], "layer.1.xn");
  EXPECT_EQ(moe.outputs,
            (std::vector<std::string>{"layer.1.y", "layer.1.topk_idx", "layer.1.counts"}));
  EXPECT_EQ(std::get<int64_t>(moe.attrs.at("topk")), 2);  // from the dim TOPK
  EXPECT_EQ(std::get<double>(moe.attrs.at("route_scale")), 2.0);
  EXPECT_EQ(std::get<std::string>(moe.attrs.at("score_func")), "sigmoid");
  EXPECT_EQ(std::get<std::vector<int64_t>>(moe.attrs.at("expert_groups")),
            (std::vector<int64_t>{4, 8}));  // E is a dim
  EXPECT_EQ(std::get<std::vector<std::string>>(moe.attrs.at("activations")),
            (std::vector<std::string>{"swiglu", "clamp"}));
  EXPECT_EQ(std::get<std::vector<double>>(moe.attrs.at("swiglu_limit")),
            (std::vector<double>{-10.0, 10.5}));
  EXPECT_EQ(std::get<int64_t>(m.layers[0].ops[0].attrs.at("sinkhorn_iters")), 20);
  EXPECT_EQ(m.layers[1].ops[0].inputs[0], "layer.0.out");  // the carried residual streams
  EXPECT_EQ(m.outputs, (std::vector<std::string>{"layer.1.out", "layer.1.counts"}));

  // FP4 weights count one parameter per value and half a byte each.
  int64_t fp4 = 256 * 1024 + 8 * 1024 * 1024 + 8 * 1024 * 512;
  int64_t e8m0 = 256 * 32 + 8 * 1024 * 32 + 8 * 1024 * 16;
  int64_t f32 = 4096 * 24 + 8 * 1024 + 8;
  int64_t bf16 = 1024;
  EXPECT_EQ(m.parameter_count(), 2 * (fp4 + e8m0 + f32 + bf16));
  EXPECT_EQ(m.parameter_bytes(), 2 * (fp4 / 2 + e8m0 + 4 * f32 + 2 * bf16));
}

TEST(ModelTest, V4StyleLayerOptionalInputLeftOut) {
  std::string text = kV4Layer;
  std::string all = "w2, w2_scale, bias]";
  text.replace(text.find(all), all.size(), "w2, w2_scale]");
  text.replace(text.find("        activations: [swiglu, clamp]\n"), 37, "");
  OpRegistry registry = v4_registry();
  Model m = graph::parse_model(text, "v4.yaml", registry);
  const OpDecl& moe = m.layers[0].ops[4];
  EXPECT_EQ(moe.inputs.size(), 6u);
  EXPECT_EQ(moe.inputs.back(), "layer.0.w2_scale");
  // Defaults are filled for attributes left out.
  EXPECT_EQ(std::get<std::vector<std::string>>(moe.attrs.at("activations")),
            (std::vector<std::string>{"silu"}));
  EXPECT_EQ(std::get<int64_t>(m.layers[0].ops[2].attrs.at("block")), 128);
}

// A number attribute may name a dim too (a position offset equal to a size: iota's start), and
// a name that is not a dim is still refused at its position.
TEST(ModelTest, NumberAttributeFromADim) {
  const std::string text = R"(model: m
dims: {T: 12, W: 5}
layers:
  - name: tables
    ops:
      - {op: iota, out: pos, shape: [T, W], axis: 1, start: T, step: -1}
outputs: [tables.pos]
)";
  Model m = parse_model(text, "m.yaml");
  EXPECT_EQ(std::get<double>(m.layers[0].ops[0].attrs.at("start")), 12.0);
  std::string wrong = text;
  wrong.replace(wrong.find("start: T"), 8, "start: X");
  try {
    parse_model(wrong, "m.yaml");
    FAIL() << "an unknown name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.yaml:6:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a dim name is also accepted"), std::string::npos)
        << e.what();
  }
}

TEST(ModelTest, V4StyleLayerChecksScaleDtypes) {
  std::string text = kV4Layer;
  std::string good = "wq_scale:  {shape: [Q, 32], dtype: e8m0";
  text.replace(text.find(good), good.size(), "wq_scale:  {shape: [Q, 32], dtype: f32 ");
  OpRegistry registry = v4_registry();
  try {
    graph::parse_model(text, "v4.yaml", registry);
    FAIL() << "an f32 scale for an fp4 weight was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("v4.yaml:26:9: error: op 3 (fp4_matmul) of layer "
                                          "'layer.0': input 'w_scale' is f32[256,32]",
                                          0),
              0u)
        << e.what();
  }
}

}  // namespace
}  // namespace tilerun
