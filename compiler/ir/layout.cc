#include "compiler/ir/layout.h"

#include <algorithm>
#include <numeric>

#include "compiler/base/check.h"
#include "tilerun/error.h"

namespace tilerun::compiler {

int64_t Layout::size() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t Layout::cosize() const {
  if (size() == 0) return 0;
  int64_t hi = 0;
  for (size_t i = 0; i < shape.size(); ++i) hi += (shape[i] - 1) * std::abs(stride[i]);
  return hi + 1;
}

int64_t Layout::operator()(int64_t i) const {
  int64_t out = 0;
  for (size_t m = 0; m < shape.size(); ++m) {
    out += (i % shape[m]) * stride[m];
    i /= shape[m];
  }
  return out;
}

int64_t Layout::operator()(const std::vector<int64_t>& coord) const {
  TR_CHECK(coord.size() == shape.size(), "coordinate rank");
  int64_t out = 0;
  for (size_t m = 0; m < shape.size(); ++m) out += coord[m] * stride[m];
  return out;
}

Layout make_layout(std::vector<int64_t> shape, std::vector<int64_t> stride) {
  TR_CHECK(shape.size() == stride.size(), "shape and stride ranks differ");
  for (int64_t s : shape) TR_CHECK(s >= 1, "layout shapes are positive");
  return {std::move(shape), std::move(stride)};
}

Layout compact_col_major(std::vector<int64_t> shape) {
  std::vector<int64_t> stride;
  int64_t s = 1;
  for (int64_t e : shape) {
    stride.push_back(s);
    s *= e;
  }
  return make_layout(std::move(shape), std::move(stride));
}

Layout compact_row_major(std::vector<int64_t> shape) {
  std::vector<int64_t> stride(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride[i] = s;
    s *= shape[i];
  }
  return make_layout(std::move(shape), std::move(stride));
}

std::string to_string(const Layout& l) {
  auto tuple = [&](const std::vector<int64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return v.size() == 1 ? s : "(" + s + ")";
  };
  return tuple(l.shape) + ":" + tuple(l.stride);
}

Layout coalesce(const Layout& l) {
  Layout out;
  for (size_t i = 0; i < l.shape.size(); ++i) {
    if (l.shape[i] == 1) continue;
    if (!out.shape.empty() && l.stride[i] == out.shape.back() * out.stride.back()) {
      out.shape.back() *= l.shape[i];
    } else {
      out.shape.push_back(l.shape[i]);
      out.stride.push_back(l.stride[i]);
    }
  }
  if (out.shape.empty()) return make_layout({1}, {0});
  return out;
}

Layout composition(const Layout& a_in, const Layout& b_in) {
  Layout a = coalesce(a_in), b = coalesce(b_in);
  auto fail = [&](const std::string& why) -> Error {
    return Error("layout composition " + to_string(a_in) + " o " + to_string(b_in) + ": " + why);
  };
  Layout out;
  for (size_t bm = 0; bm < b.shape.size(); ++bm) {
    int64_t rest_shape = b.shape[bm], rest_stride = b.stride[bm];
    if (rest_stride == 0) {
      out.shape.push_back(rest_shape);
      out.stride.push_back(0);
      continue;
    }
    if (rest_stride < 0) throw fail("negative strides are not composable");
    // Divide out rest_stride: skip the first rest_stride elements of a, colexicographically.
    std::vector<int64_t> sh, st;
    size_t m = 0;
    for (; m + 1 < a.shape.size(); ++m) {
      int64_t n = a.shape[m];
      if (rest_stride % n == 0) {
        rest_stride /= n;
        continue;
      }
      if (n % rest_stride != 0) throw fail("stride does not divide the shape");
      sh.push_back(n / rest_stride);
      st.push_back(a.stride[m] * rest_stride);
      rest_stride = 1;
      ++m;
      break;
    }
    for (; m < a.shape.size(); ++m) {
      if (m + 1 == a.shape.size()) {  // the last mode extends without bound
        sh.push_back(0);
        st.push_back(a.stride[m] * rest_stride);
      } else {
        sh.push_back(a.shape[m]);
        st.push_back(a.stride[m]);
      }
    }
    // Keep the first rest_shape elements.
    for (size_t j = 0; j < sh.size() && rest_shape > 1; ++j) {
      bool last = j + 1 == sh.size();
      if (last || sh[j] >= rest_shape) {
        if (!last && sh[j] % rest_shape != 0) throw fail("shape does not divide the mode");
        out.shape.push_back(rest_shape);
        out.stride.push_back(st[j]);
        rest_shape = 1;
      } else {
        if (rest_shape % sh[j] != 0) throw fail("shape does not divide the mode");
        out.shape.push_back(sh[j]);
        out.stride.push_back(st[j]);
        rest_shape /= sh[j];
      }
    }
    if (b.shape[bm] == 1) {
      out.shape.push_back(1);
      out.stride.push_back(0);
    }
  }
  return coalesce(out);
}

Layout complement(const Layout& a_in, int64_t cosize_target) {
  std::vector<std::pair<int64_t, int64_t>> modes;  // (stride, shape)
  for (size_t i = 0; i < a_in.shape.size(); ++i)
    if (a_in.shape[i] > 1 && a_in.stride[i] != 0) modes.push_back({a_in.stride[i], a_in.shape[i]});
  std::sort(modes.begin(), modes.end());
  Layout out;
  int64_t cur = 1;
  for (auto [stride, shape] : modes) {
    if (stride % cur != 0)
      throw Error("layout complement of " + to_string(a_in) + ": strides do not nest");
    if (stride / cur > 1) {
      out.shape.push_back(stride / cur);
      out.stride.push_back(cur);
    }
    cur = stride * shape;
  }
  int64_t last = (cosize_target + cur - 1) / cur;
  out.shape.push_back(std::max<int64_t>(last, 1));
  out.stride.push_back(cur);
  return coalesce(out);
}

Layout concat(const Layout& a, const Layout& b) {
  Layout out = a;
  out.shape.insert(out.shape.end(), b.shape.begin(), b.shape.end());
  out.stride.insert(out.stride.end(), b.stride.begin(), b.stride.end());
  return out;
}

int64_t Swizzle::operator()(int64_t x) const {
  int64_t mask = ((int64_t{1} << bits) - 1) << (base + shift);
  return x ^ ((x & mask) >> shift);
}

std::string to_string(const Swizzle& s) {
  return "Sw<" + std::to_string(s.bits) + "," + std::to_string(s.base) + "," +
         std::to_string(s.shift) + ">";
}

std::string to_string(const ComposedLayout& c) {
  return to_string(c.swizzle) + " o " + to_string(c.layout);
}

Layout fragment_layout(int64_t numel, int64_t threads, int64_t width) {
  if (width <= 1) return make_layout({threads, (numel + threads - 1) / threads}, {1, threads});
  const int64_t block = threads * width;
  return make_layout({threads, width, (numel + block - 1) / block}, {width, 1, block});
}

Layout thread_value_layout(int64_t threads, int64_t width) {
  if (width <= 1) return make_layout({threads}, {1});
  return make_layout({threads, width}, {width, 1});
}

bool is_compact(const Layout& l) {
  std::vector<size_t> order(l.shape.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return l.stride[a] < l.stride[b]; });
  int64_t expect = 1;
  for (size_t m : order) {
    if (l.shape[m] == 1) continue;  // a size-1 mode reaches only offset 0: any stride will do
    if (l.stride[m] != expect) return false;
    expect *= l.shape[m];
  }
  return true;
}

}  // namespace tilerun::compiler

namespace tilerun::compiler {

bool is_bijection(const ComposedLayout& c, int64_t size) {
  std::vector<bool> seen(static_cast<size_t>(size), false);
  for (int64_t i = 0; i < size; ++i) {
    int64_t x = c(i);
    if (x < 0 || x >= size || seen[static_cast<size_t>(x)]) return false;
    seen[static_cast<size_t>(x)] = true;
  }
  return true;
}

Swizzle tensor_core_swizzle(int row_bytes, int elem_bytes) {
  int chunks = row_bytes / 16;  // 16-byte chunks per row: 8, 4 or 2
  int bits = chunks == 8 ? 3 : chunks == 4 ? 2 : 1;
  int base = elem_bytes == 1 ? 4 : elem_bytes == 2 ? 3 : 2;  // log2(elements per chunk)
  // The hardware's patterns (CUTLASS's Swizzle<B,4,3> on byte addresses) XOR the chunk index
  // with the address bits 7 and up, i.e. 8 chunks further: the shift is always 3 chunks.
  return Swizzle{bits, base, 3};
}

Layout wgmma_accumulator_layout(int64_t m, int64_t n, int64_t threads) {
  const int64_t w = threads / 128, mi = m / (64 * w);
  return make_layout({4, 8, 4, w, 2, 2, n / 8, mi},
                     {2, n, 16 * n, 64 * n, 1, 8 * n, 8, 64 * w * n});
}

bool value_pairs(const Layout& tv, int64_t threads) {
  int m = 0;
  for (int64_t t = 1; m < tv.rank() && t < threads; ++m) t *= tv.shape[m];
  while (m < tv.rank() && tv.shape[m] == 1) ++m;  // a mode of one (wgmma's single warpgroup)
  if (m >= tv.rank() || tv.shape[m] != 2 || tv.stride[m] != 1) return false;
  for (int i = 0; i < tv.rank(); ++i)
    if (i != m && tv.shape[i] > 1 && tv.stride[i] % 2 != 0) return false;
  return true;
}

}  // namespace tilerun::compiler
