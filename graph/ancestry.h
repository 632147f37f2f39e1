// Which kernel nodes are ancestors of which through read-after-write edges, in bounded memory:
// the memory plan asks it whether a buffer's bytes may be handed to another (reuse.h).
#pragma once

#include <cstdint>
#include <vector>

namespace tilerun::graph {

// Which nodes are ancestors of which, through read-after-write edges, in O(n · kWindow / 64):
// exactly for the kWindow nodes before each node (a bit set), and beyond that through `floor`,
// the longest prefix of the program that is entirely among a node's ancestors. An older
// ancestor outside both is missed, which only makes the memory plan reuse less, never wrongly.
class Ancestry {
 public:
  static constexpr int kWindowWords = 32;  // 2048 nodes

  explicit Ancestry(const std::vector<std::vector<int>>& preds)
      : floor_(preds.size(), -1), bits_(preds.size() * kWindowWords, 0) {
    for (size_t j = 0; j < preds.size(); ++j) {
      const int v = static_cast<int>(j);
      int floor = -1;
      for (int p : preds[j]) {
        if (p >= v) continue;
        set(v, p);
        // p's own ancestors, word by word where the windows overlap.
        const int64_t base_v = base_word(v), base_p = base_word(p);
        for (int w = 0; w < kWindowWords; ++w) {
          int64_t word = base_p + w;
          if (word >= base_v && word < base_v + kWindowWords)
            bits_[j * kWindowWords + (word - base_v)] |= bits_[p * kWindowWords + w];
        }
        floor = std::max(floor, floor_[p] == p - 1 ? p : floor_[p]);
      }
      while (floor + 1 < v && in_window(floor + 1, v)) {
        if (!test(floor + 1, v)) break;
        ++floor;
      }
      floor_[j] = floor;
    }
  }

  bool is_ancestor(int u, int v) const {
    if (u >= v) return false;
    if (u <= floor_[v]) return true;
    return in_window(u, v) && test(u, v);
  }

 private:
  // Node v's window: the kWindowWords 64-node words ending with the one holding v - 1.
  static int64_t base_word(int v) { return std::max<int64_t>(0, (v - 1) / 64 - kWindowWords + 1); }
  static bool in_window(int u, int v) { return u >= 0 && u / 64 >= base_word(v); }
  bool test(int u, int v) const {
    return bits_[static_cast<size_t>(v) * kWindowWords + (u / 64 - base_word(v))] >> (u % 64) & 1;
  }
  void set(int v, int u) {
    if (in_window(u, v))
      bits_[static_cast<size_t>(v) * kWindowWords + (u / 64 - base_word(v))] |= uint64_t{1}
                                                                                << (u % 64);
  }

  std::vector<int> floor_;
  std::vector<uint64_t> bits_;
};

}  // namespace tilerun::graph
