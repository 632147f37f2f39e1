// einsum for the contractions models write ("bhtd,bhsd->bhts"): two operands, every index in
// exactly two of the three operands or in all three (batch). It lowers onto batched matmul:
// a as [batch, m, k] and b as [batch, k, n] (read in place, with matmul's transpose flags when
// an operand is [batch, k, m] or [batch, n, k]; otherwise permuted into scratch by the strided
// copy), then c from [batch, m, n] (in place, or permuted into the output; a c laid out [batch, n,
// m] is written in place as b^T a^T, the operands exchanged). On the tensor cores
// an operand or c with the batch between its matrix's axes ([m, batch, k]: a grouped projection's
// "tgk,gko->tgo") is read or written in place too: one kernel, no copies, the same bits. Its
// gradient is two einsums with the operands' roles exchanged.
#include <map>
#include <optional>

#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/matmul_batch.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"
#include "kernels/strided.h"
#include "kernels/sub_expansion.h"

namespace tilerun::kernels {

namespace {

using Ints = std::vector<int64_t>;

struct Einsum {
  std::string a, b, c;           // index letters per operand, in axis order
  std::string batch, m, n, k;    // batch, m, n in c's order; k in a's order
  std::map<char, int64_t> size;  // per index
  int64_t count(const std::string& letters) const {
    int64_t p = 1;
    for (char l : letters) p *= size.at(l);
    return p;
  }
};

Einsum parse_einsum(const std::string& eq, const TensorType& a, const TensorType& b) {
  auto bad = [&](const std::string& why) {
    return ShapeError("attribute 'equation' \"" + eq + "\": " + why +
                      "; expected two operands and a result of lowercase letters, "
                      "e.g. \"bhtd,bhsd->bhts\"");
  };
  Einsum e;
  const size_t comma = eq.find(','), arrow = eq.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    throw bad("not of the form A,B->C");
  e.a = eq.substr(0, comma);
  e.b = eq.substr(comma + 1, arrow - comma - 1);
  e.c = eq.substr(arrow + 2);
  for (const auto& [letters, t, slot] :
       {std::tuple{&e.a, &a, "a"}, std::tuple{&e.b, &b, "b"},
        std::tuple{&e.c, static_cast<const TensorType*>(nullptr), "c"}}) {
    for (size_t i = 0; i < letters->size(); ++i) {
      char l = (*letters)[i];
      if (l < 'a' || l > 'z') throw bad(std::string("'") + l + "' is not a lowercase letter");
      if (letters->find(l) != i) throw bad(std::string("index '") + l + "' repeats in " + slot);
    }
    if (t == nullptr) continue;
    if (t->shape.size() != letters->size())
      throw ShapeError("input '" + std::string(slot) + "' is " + to_string(*t) +
                       ", expected rank " + std::to_string(letters->size()) + " for \"" + *letters +
                       "\" of \"" + eq + "\"");
    for (size_t i = 0; i < letters->size(); ++i) {
      char l = (*letters)[i];
      if (e.size.count(l) && e.size[l] != t->shape[i])
        throw ShapeError("input '" + std::string(slot) + "' is " + to_string(*t) +
                         ", expected size " + std::to_string(e.size[l]) + " for index '" + l +
                         "' as in 'a' " + to_string(a));
      e.size[l] = t->shape[i];
    }
  }
  auto in = [](const std::string& s, char l) { return s.find(l) != std::string::npos; };
  for (char l : e.c) {
    if (!e.size.count(l)) throw bad(std::string("result index '") + l + "' is in neither operand");
    if (in(e.a, l) && in(e.b, l))
      e.batch += l;
    else if (in(e.a, l))
      e.m += l;
    else
      e.n += l;
  }
  for (char l : e.a)
    if (!in(e.c, l)) {
      if (!in(e.b, l))
        throw bad(std::string("index '") + l + "' appears in 'a' only (a sum within one operand)");
      e.k += l;
    }
  for (char l : e.b)
    if (!in(e.c, l) && !in(e.a, l))
      throw bad(std::string("index '") + l + "' appears in 'b' only (a sum within one operand)");
  return e;
}

std::vector<TensorType> infer_einsum(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "a");
  expect_float(in[1], "b");
  if (in[1].dtype != in[0].dtype)
    throw ShapeError("input 'b' is " + to_string(in[1]) + ", expected the dtype of 'a' " +
                     to_string(in[0]));
  Einsum e = parse_einsum(attr_string(attrs, "equation"), in[0], in[1]);
  Ints shape;
  for (char l : e.c) shape.push_back(e.size[l]);
  return {{in[0].dtype, shape}};
}

// Every index combination, in double.
std::vector<RefTensor> ref_einsum(const std::vector<RefTensor>& in, const Attrs& attrs) {
  Einsum e = parse_einsum(attr_string(attrs, "equation"), {DType::F32, in[0].shape},
                          {DType::F32, in[1].shape});
  std::string all = e.c + e.k;
  Ints shape;
  for (char l : e.c) shape.push_back(e.size[l]);
  RefTensor c = ref_zeros(shape);
  auto offset = [&](const std::string& letters, const std::map<char, int64_t>& at) {
    int64_t o = 0;
    for (char l : letters) o = o * e.size[l] + at.at(l);
    return o;
  };
  std::map<char, int64_t> at;
  for (char l : all) at[l] = 0;
  for (int64_t step = 0, total = e.count(all); step < total; ++step) {
    int64_t rest = step;
    for (size_t i = all.size(); i-- > 0;) {
      at[all[i]] = rest % e.size[all[i]];
      rest /= e.size[all[i]];
    }
    c.data[offset(e.c, at)] += in[0].data[offset(e.a, at)] * in[1].data[offset(e.b, at)];
  }
  return {c};
}

// dA = einsum(C,B->A)(dC, B), dB = einsum(A,C->B)(A, dC): every index still lies in two of the
// three operands or in all three.
std::vector<GradOp> grad_einsum(const std::vector<TensorType>& in, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  Einsum e = parse_einsum(attr_string(attrs, "equation"), in[0], in[1]);
  std::vector<GradOp> ops;
  if (needs[0])
    ops.push_back({"einsum", {"dy0", "x1"}, {"dx0"}, {{"equation", e.c + "," + e.b + "->" + e.a}}});
  if (needs[1])
    ops.push_back({"einsum", {"x0", "dy0"}, {"dx1"}, {{"equation", e.a + "," + e.c + "->" + e.b}}});
  return ops;
}

// `letters` (an operand, in axis order) read in the order `want`: the operand's strides.
StridedView reorder(const std::string& letters, const std::string& want, const Einsum& e) {
  Ints shape;
  for (char l : letters) shape.push_back(e.size.at(l));
  const Ints strides = row_major_strides(shape);
  StridedView v;
  for (char l : want) {
    v.shape.push_back(e.size.at(l));
    v.strides.push_back(strides[letters.find(l)]);
  }
  return v;
}

// How an operand with index letters `letters` is read as [batch, p, q]: its batch axes leading
// or between the matrix's (mid), the matrix [p, q] or transposed ([q, p]: flip); none when
// the letters interleave otherwise.
struct Placement {
  bool mid = false, flip = false;
};
std::optional<Placement> place(const std::string& letters, const Einsum& e, const std::string& p,
                               const std::string& q) {
  if (letters == e.batch + p + q) return Placement{};
  if (letters == e.batch + q + p) return Placement{.flip = true};
  if (e.batch.empty()) return std::nullopt;
  if (letters == p + e.batch + q) return Placement{.mid = true};
  if (letters == q + e.batch + p) return Placement{.mid = true, .flip = true};
  return std::nullopt;
}

// The whole contraction as one batched tensor-core kernel reading both operands and writing c
// in place, when one of them has its batch axes in the middle ("tgk,gko->tgo": group g of each
// token) and the product takes the tensor cores; none otherwise (then the strided copies).
std::optional<KernelCall> in_place_tc_call(KernelCache& cache, DType dt, const Einsum& e,
                                           int slot_a, int slot_b) {
  const auto pa = place(e.a, e, e.m, e.k), pb = place(e.b, e, e.k, e.n);
  const auto pc = place(e.c, e, e.m, e.n);
  if (!pa || !pb || !pc || pc->flip || !(pa->mid || pb->mid || pc->mid)) return std::nullopt;
  const int64_t nb = e.count(e.batch), m = e.count(e.m), n = e.count(e.n), k = e.count(e.k);
  if (!tc_batch_fits(dt, pa->flip, pb->flip, m, n, k)) return std::nullopt;
  return tc_batch_call(cache, dt, pa->flip, pb->flip, true, true,
                       {.a = pa->mid, .b = pb->mid, .c = pc->mid}, m, n, k, nb, input_slot(slot_a),
                       input_slot(slot_b), output_slot(0));
}

// c laid out with n before m ([batch, n, m]: a weight gradient's "thd,ths->sd"): c^T = b^T a^T,
// the same sums in the same K order, so with the operands exchanged c is written in place.
// Returns whether it exchanged them.
bool put_c_in_order(Einsum& e) {
  const auto pc = place(e.c, e, e.m, e.n);
  if (!pc || !pc->flip) return false;
  std::swap(e.a, e.b);
  std::swap(e.m, e.n);
  e.k.clear();  // in the new a's order
  for (char l : e.a)
    if (e.c.find(l) == std::string::npos) e.k += l;
  return true;
}

ExpandFn expand_einsum(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    Einsum e = parse_einsum(attr_string(attrs, "equation"), in[0], in[1]);
    const DType dt = in[0].dtype;
    const int sa = put_c_in_order(e) ? 1 : 0, sb = 1 - sa;  // the input slots of a and b
    if (auto call = in_place_tc_call(*cache, dt, e, sa, sb)) return OpExpansion{.calls = {*call}};
    const int64_t nb = e.count(e.batch), m = e.count(e.m), n = e.count(e.n), k = e.count(e.k);
    OpExpansion ex;
    auto scratch = [&](Ints shape) {
      ex.scratch.push_back({dt, std::move(shape)});
      return scratch_slot(static_cast<int>(ex.scratch.size()) - 1);
    };
    // An operand as [batch, p, q] (flag false) or [batch, q, p] (flag true) in place, else
    // permuted into scratch as [batch, p, q].
    auto operand = [&](int slot, const std::string& letters, const std::string& p,
                       const std::string& q, bool* flag) {
      *flag = false;
      if (letters == e.batch + p + q) return input_slot(slot);
      if (letters == e.batch + q + p) return *flag = true, input_slot(slot);
      KernelArg s = scratch({nb, e.count(p), e.count(q)});
      ex.calls.push_back(strided_copy_call(
          *cache, dt, numel(in[slot]), reorder(letters, e.batch + p + q, e), input_slot(slot), s));
      return s;
    };
    bool ta = false, tb = false;
    const KernelArg a = operand(sa, e.a, e.m, e.k, &ta), b = operand(sb, e.b, e.k, e.n, &tb);
    const bool c_in_place = e.c == e.batch + e.m + e.n;
    const KernelArg c = c_in_place ? output_slot(0) : scratch({nb, m, n});
    // The batched matmul's own expansion, its slots mapped onto this op's.
    const OpSchema* matmul = op_registry().find("matmul");
    std::vector<TensorType> mm_in = {{dt, ta ? Ints{nb, k, m} : Ints{nb, m, k}},
                                     {dt, tb ? Ints{nb, n, k} : Ints{nb, k, n}}};
    const Attrs mm_attrs = {{"transpose_a", ta}, {"transpose_b", tb}};
    append_expansion(ex, matmul->expand(mm_in, matmul->infer(mm_in, mm_attrs), mm_attrs), {a, b},
                     {c});
    if (!c_in_place)
      ex.calls.push_back(strided_copy_call(
          *cache, dt, numel(out[0]), reorder(e.batch + e.m + e.n, e.c, e), c, output_slot(0)));
    return ex;
  };
}

}  // namespace

void register_einsum(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  auto eq = [](const char* s) { return Attrs{{"equation", std::string(s)}}; };
  registry.add(
      {.name = "einsum",
       .doc = "c = the contraction the equation names (\"bhtd,bhsd->bhts\"): each index in two "
              "operands (summed when not in c) or in all three (batch); batched matmul, with "
              "copies only for operands not laid out as [batch, m, k] / [batch, k, n]",
       .inputs = {"a", "b"},
       .outputs = {"c"},
       .attrs = {{.name = "equation",
                  .kind = AttrKind::String,
                  .doc = "A,B->C over lowercase index letters"}},
       .infer = infer_einsum,
       .reference = ref_einsum,
       .gradient = grad_einsum,
       .expand = expand_einsum(cache),
       .tests = {.kernel = {{{{2, 3, 7, 5}, {2, 3, 9, 5}}, eq("bhtd,bhsd->bhts")},
                            {{{2, 3, 7, 9}, {2, 3, 9, 5}}, eq("bhts,bhsd->bhtd")},
                            {{{2, 7, 3, 5}, {2, 9, 3, 5}}, eq("bthd,bshd->bhts")},
                            {{{33, 70}, {70, 130}}, eq("ik,kj->ji")},  // c^T = b^T a^T
                            {{{5, 3, 40}, {5, 3, 24}}, eq("thd,ths->sd")},
                            // the batch between the matrix's axes (in place on the tensor cores)
                            {{{37, 2, 24}, {2, 24, 16}}, eq("tgk,gko->tgo")},
                            {{{40, 2, 24}, {40, 2, 16}}, eq("tgk,tgo->gko")}},
                 .gradient = {{{{2, 3, 4}, {2, 5, 4}}, eq("btd,bsd->bts")},
                              {{{3, 2, 4}, {2, 4, 5}}, eq("tbd,bde->bte")}},
                 .examples = {{.inputs = {{{2, 2}, {1, 2, 3, 4}}, {{2, 1}, {5, 6}}},
                               .attrs = eq("ik,kj->ij"),
                               .outputs = {{{2, 1}, {17, 39}}}}}}});
}

}  // namespace tilerun::kernels
