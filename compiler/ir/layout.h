// CuTe-style layouts (compiler/README.md, "Layouts"): a Layout is (Shape, Stride), a function from
// a coordinate (or its colexicographic linear index) to an index. Modes are flat: a nested CuTe
// layout and its flattening are the same function of the linear index, so the algebra keeps
// them flat. One printed notation, `(4,8):(8,1)`, in printers, errors and tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tilerun::compiler {

struct Layout {
  std::vector<int64_t> shape, stride;

  int64_t size() const;    // product of the shape
  int64_t cosize() const;  // 1 + the largest index reached (0 for an empty layout)
  int rank() const { return static_cast<int>(shape.size()); }
  // The index of linear coordinate `i` in [0, size()), colexicographic (mode 0 fastest).
  int64_t operator()(int64_t i) const;
  // The index of a natural coordinate, one entry per mode.
  int64_t operator()(const std::vector<int64_t>& coord) const;
  bool operator==(const Layout&) const = default;
};

Layout make_layout(std::vector<int64_t> shape, std::vector<int64_t> stride);
// Column-major compact strides (mode 0 fastest), CuTe's default; row-major: last mode fastest.
Layout compact_col_major(std::vector<int64_t> shape);
Layout compact_row_major(std::vector<int64_t> shape);

// `(s0,s1):(d0,d1)`; a rank-1 layout prints `s:d`.
std::string to_string(const Layout& l);

// Drops size-1 modes and merges modes i, i+1 when stride[i+1] == shape[i] * stride[i].
// Post-condition: coalesce(l)(i) == l(i) for all i in [0, size).
Layout coalesce(const Layout& l);

// Post-condition: composition(a, b)(i) == a(b(i)) for all i in [0, b.size()). Throws
// tilerun::Error (naming both layouts) when b's strides/shapes do not divide a's modes, the
// admissibility condition CuTe states.
Layout composition(const Layout& a, const Layout& b);

// The layout of the indices `a` does not reach, up to `cosize_target`: ordered by stride, each
// mode fills the gap below the next mode of `a`. Post-condition (a injective): the
// concatenation (a, complement(a, M)) is injective, and a bijection onto [0, M) when a's
// cosize divides M as CuTe requires.
Layout complement(const Layout& a, int64_t cosize_target);

// The modes of a followed by the modes of b (CuTe's make_layout(a, b)).
Layout concat(const Layout& a, const Layout& b);

// CuTe's Swizzle<B, M, S>: x ^ ((x & (((1<<B)-1) << (M+S))) >> S), a bijection on indices;
// composed with a layout as `swizzle(layout(i))`, never a new kind of layout.
struct Swizzle {
  int bits = 0, base = 0, shift = 0;
  int64_t operator()(int64_t x) const;
  bool none() const { return bits == 0; }  // Sw<0,*,*> is the identity
  bool operator==(const Swizzle&) const = default;
};
std::string to_string(const Swizzle& s);  // "Sw<3,4,3>"

// A swizzled layout: the function i → swizzle(layout(i)); prints "Sw<3,4,3> o (8,64):(64,1)".
struct ComposedLayout {
  Swizzle swizzle;
  Layout layout;
  int64_t operator()(int64_t i) const { return swizzle(layout(i)); }
};
std::string to_string(const ComposedLayout& c);

// Whether i -> c(i) maps [0, size) one to one onto [0, size): checked point by point, which for
// a finite tile is a proof (tiles have at most a few hundred thousand elements).
bool is_bijection(const ComposedLayout& c, int64_t size);

// The tensor core's shared-memory swizzle for a K-major tile whose rows are `row_bytes` long
// (128, 64 or 32: the 128B/64B/32B swizzles) of `elem_bytes`-byte elements, on element
// offsets: the 16-byte chunk index within a row XORed with the address's 128-byte line index
// (modulo the chunks per row), so 8 rows of 128 bytes form one atom. 128B with 2-byte elements
// is Sw<3,3,3>.
Swizzle tensor_core_swizzle(int row_bytes, int elem_bytes);

// The Hopper wgmma accumulator as a thread-value layout of an m x n f32 tile (row-major
// element i*n + j), for `threads` = 128·W threads (W warpgroups, m a multiple of 64·W):
// thread modes (lane%4, lane/4, warp%4, warpgroup), then value modes (pair, half, n/8 column
// groups, m/(64·W) row blocks), i.e. ((4,8,4,W),(2,2,n/8,MI)):((2,n,16n,64n),(1,8n,8,64Wn)).
// Value v of a thread is register v of its wgmma fragment (row block v / (n/2)).
Layout wgmma_accumulator_layout(int64_t m, int64_t n, int64_t threads);

// Whether a thread-value layout over `threads` threads (thread modes first, sizes multiplying
// to `threads`, then value modes) deals each thread its values in pairs of consecutive elements
// starting at an even one: the first value mode is (2):(1) and every other stride is even, so
// values 2u and 2u+1 are elements e and e+1 with e even. wgmma's accumulator is such a layout
// for any n (a multiple of 8); lower_parallel then moves a pair as one 2-lane vector.
bool value_pairs(const Layout& tv, int64_t threads);

// The thread mapping lower_parallel uses for a Parallel of `numel` elements at `width` (ir.h's
// ParallelLayout), as a fragment layout: (thread, local index) → the row-major linear element.
// Width 1: (threads, ceil(numel/threads)):(1, threads). Width W: the local index splits into
// (lane, round), flat modes (threads, W, R):(W, 1, threads·W), R = ceil(numel/(threads·W)).
Layout fragment_layout(int64_t numel, int64_t threads, int64_t width = 1);

// One round of a Parallel's thread mapping, the "thread-value" layout lowering follows: modes
// over the thread index first (their sizes multiply to `threads`), then modes over the values
// one thread holds per round (multiplying to `width`), mapped to the element offset inside the
// round's tile of threads·width elements; round r covers [r·size, (r+1)·size). Width 1 is
// (T):(1), width W is (T,W):(W,1): thread t holds the W consecutive elements t·W + v.
Layout thread_value_layout(int64_t threads, int64_t width);

// True when the layout is a bijection onto [0, size()) whose strides are the running products
// of its shapes taken in increasing stride order (row-major, column-major, thread-value layouts;
// not swizzled or strided ones). Such a layout evaluates as a Horner chain (layout_index.h).
bool is_compact(const Layout& l);

}  // namespace tilerun::compiler
