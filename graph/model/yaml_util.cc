#include "graph/model/yaml_util.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <charconv>
#include <istream>
#include <limits>
#include <streambuf>
#include <unordered_map>

namespace tilerun::graph {

namespace {

std::string line_col(const SourceLoc& loc) {
  return std::to_string(loc.line) + ":" + std::to_string(loc.col);
}

// Builds the tree from parser events. Every limit is checked as the event arrives, so an
// oversized document is refused after at most `limits` worth of work.
class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(const std::string& file, const YamlLimits& limits) : file_(file), limits_(limits) {}

  YamlNode take_root() { return std::move(root_); }

  // Where the last event started: the scanner's look-ahead is measured from here.
  size_t last_event_pos() const { return last_pos_; }
  const YAML::Mark& last_event_mark() const { return last_mark_; }

  SourceLoc loc(const YAML::Mark& m) const {
    if (m.is_null()) return SourceLoc{file_, 0, 0};
    return SourceLoc{file_, m.line + 1, m.column + 1};
  }

  void OnDocumentStart(const YAML::Mark& mark) override {
    seen(mark);
    if (++documents_ > 1)
      throw Error(loc(mark), "a second YAML document ('---'); expected one model per file");
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    check_node(mark, "", anchor);
    YamlNode n;
    n.loc = loc(mark);
    add(std::move(n));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { refuse_anchor(mark); }
  void OnAnchor(const YAML::Mark& mark, const std::string&) override { refuse_anchor(mark); }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    check_node(mark, tag, anchor);
    YamlNode n;
    n.kind = YamlNode::Kind::Scalar;
    n.text = value;
    n.plain = tag == "?";  // yaml-cpp tags plain scalars "?" and quoted or block ones "!"
    n.loc = loc(mark);
    add(std::move(n));
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, tag, anchor, YamlNode::Kind::Sequence);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, tag, anchor, YamlNode::Kind::Mapping);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    YamlNode node;
    bool have_key = false;
    std::string key;
    SourceLoc key_loc;
    std::unordered_map<std::string, SourceLoc> seen;  // lookups only; order comes from entries
  };

  [[noreturn]] void refuse_anchor(const YAML::Mark& mark) {
    throw Error(loc(mark),
                "YAML anchors and aliases (&name, *name) are not supported; expected every "
                "value written out in place");
  }

  void seen(const YAML::Mark& mark) {
    if (mark.is_null() || mark.pos < 0 || static_cast<size_t>(mark.pos) < last_pos_) return;
    last_pos_ = static_cast<size_t>(mark.pos);
    last_mark_ = mark;
  }

  void check_node(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor) {
    seen(mark);
    if (anchor != YAML::NullAnchor) refuse_anchor(mark);
    if (!tag.empty() && tag != "?" && tag != "!")
      throw Error(loc(mark), "explicit YAML tag " + quote(tag) +
                                 " is not supported; expected plain or quoted values");
    if (++nodes_ > limits_.max_nodes)
      throw Error(loc(mark), "the document has more than " + std::to_string(limits_.max_nodes) +
                                 " YAML nodes; expected a smaller model file");
  }

  void open(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
            YamlNode::Kind kind) {
    check_node(mark, tag, anchor);
    if (static_cast<int>(stack_.size()) >= limits_.max_depth)
      throw Error(loc(mark), "nesting deeper than " + std::to_string(limits_.max_depth) +
                                 " levels; expected a flatter document");
    Frame f;
    f.node.kind = kind;
    f.node.loc = loc(mark);
    stack_.push_back(std::move(f));
  }

  void close() {
    YamlNode n = std::move(stack_.back().node);
    stack_.pop_back();
    add(std::move(n));
  }

  void add(YamlNode n) {
    if (stack_.empty()) {
      root_ = std::move(n);
      return;
    }
    Frame& top = stack_.back();
    if (top.node.is_sequence()) {
      top.node.items.push_back(std::move(n));
      return;
    }
    if (!top.have_key) {
      if (!n.is_scalar())
        throw Error(n.loc, "expected a name as a mapping key, found " + describe(n));
      auto [it, inserted] = top.seen.emplace(n.text, n.loc);
      if (!inserted)
        throw Error(n.loc, "duplicate key " + quote(n.text) + " (first given at " +
                               line_col(it->second) + "); expected each key once");
      top.have_key = true;
      top.key = std::move(n.text);
      top.key_loc = n.loc;
      return;
    }
    // An empty value ("key:" then a newline) is reported by yaml-cpp at the next token; point
    // at the key instead, which is where the reader will look.
    if (n.is_null() && n.loc.line != top.key_loc.line) n.loc = top.key_loc;
    top.node.entries.push_back(YamlEntry{std::move(top.key), top.key_loc, std::move(n)});
    top.have_key = false;
  }

  std::string file_;
  YamlLimits limits_;
  YamlNode root_;
  std::vector<Frame> stack_;
  size_t nodes_ = 0;
  int documents_ = 0;
  size_t last_pos_ = 0;
  YAML::Mark last_mark_;
};

// Hands the text to yaml-cpp a chunk at a time and ends the input early (a clean EOF, no
// exception through yaml-cpp) once its scanner runs more than `max_ahead` bytes past the last
// event. yaml-cpp queues every token while a possible flow key is open, so "[[[[..." costs a few
// hundred bytes of memory per character before the first event arrives; real model files need
// a few dozen bytes of look-ahead. Only bytes that can make tokens count: whitespace and
// whole-line comments queue nothing, and a long comment block between two events (a licence,
// notes) is ordinary in a model file.
class LookaheadGuard : public std::streambuf {
 public:
  LookaheadGuard(const std::string& text, const TreeBuilder& builder, size_t max_ahead)
      : text_(text), builder_(builder), max_ahead_(max_ahead), significant_(text.size() + 1, 0) {
    // significant_[i]: how many of the first i bytes are neither whitespace nor in a line whose
    // first non-blank character is '#'.
    bool line_start = true, in_comment = false;
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      if (c == '\n') {
        line_start = true;
        in_comment = false;
      } else if (line_start && c == '#') {
        in_comment = true;
        line_start = false;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        line_start = false;
      }
      bool counts = !in_comment && c != ' ' && c != '\t' && c != '\r' && c != '\n';
      significant_[i + 1] = significant_[i] + (counts ? 1 : 0);
    }
  }

  bool tripped() const { return tripped_; }
  // The last event before the input was cut: the unfinished value starts after it.
  const YAML::Mark& cut_after() const { return cut_after_; }

 protected:
  int_type underflow() override {
    if (pos_ >= text_.size()) return traits_type::eof();
    size_t last = std::min(builder_.last_event_pos(), text_.size());
    if (significant_[pos_] > significant_[last] + max_ahead_) {
      tripped_ = true;
      cut_after_ = builder_.last_event_mark();
      return traits_type::eof();
    }
    constexpr size_t kChunk = 4096;
    size_t n = std::min(kChunk, text_.size() - pos_);
    char* p = const_cast<char*>(text_.data()) + pos_;  // read-only: no putback area is offered
    setg(p, p, p + n);
    pos_ += n;
    return traits_type::to_int_type(*p);
  }

 private:
  const std::string& text_;
  const TreeBuilder& builder_;
  size_t max_ahead_;
  std::vector<size_t> significant_;
  size_t pos_ = 0;
  bool tripped_ = false;
  YAML::Mark cut_after_;
};

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

YamlNode parse_yaml(const std::string& text, const std::string& file, const YamlLimits& limits) {
  if (text.size() > limits.max_bytes)
    throw Error(SourceLoc{file, 0, 0}, "the model file is " + std::to_string(text.size()) +
                                           " bytes; expected at most " +
                                           std::to_string(limits.max_bytes) + " bytes");
  TreeBuilder builder(file, limits);
  LookaheadGuard guard(text, builder, limits.max_lookahead);
  auto lookahead_error = [&] {
    return Error(builder.loc(guard.cut_after()),
                 "the YAML parser would need more than " + std::to_string(limits.max_lookahead) +
                     " bytes of look-ahead after this point (deeply nested flow collections "
                     "such as [[[[...]]]], or one huge value); expected a flatter document");
  };
  try {
    std::istream in(&guard);
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(builder)) {
    }
  } catch (const YAML::Exception& e) {
    if (guard.tripped()) throw lookahead_error();
    throw Error(builder.loc(e.mark), "malformed YAML: " + e.msg);
  } catch (const Error&) {
    // Once the input is cut short, any later complaint is about the cut, not the file.
    if (guard.tripped()) throw lookahead_error();
    throw;
  }
  if (guard.tripped()) throw lookahead_error();
  return builder.take_root();
}

std::string_view kind_name(YamlNode::Kind kind) {
  switch (kind) {
    case YamlNode::Kind::Null:
      return "nothing (null)";
    case YamlNode::Kind::Scalar:
      return "a scalar";
    case YamlNode::Kind::Sequence:
      return "a sequence";
    case YamlNode::Kind::Mapping:
      return "a mapping";
  }
  return "?";
}

std::string escape_text(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    } else {
      out += c;
    }
  }
  return out;
}

std::string quote(std::string_view text) {
  constexpr size_t kMax = 40;  // keep one-line errors readable whatever the file holds
  return "'" + escape_text(text.substr(0, kMax)) + (text.size() > kMax ? "...'" : "'");
}

std::string describe(const YamlNode& node) {
  return node.is_scalar() ? quote(node.text) : std::string(kind_name(node.kind));
}

void expect_kind(const YamlNode& node, YamlNode::Kind kind, std::string_view what) {
  if (node.kind != kind)
    throw Error(node.loc, "expected " + std::string(kind_name(kind)) + " for " + std::string(what) +
                              ", found " + describe(node));
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  // Bounded cost whatever the file holds: a typo of a name is a few edits, so a candidate whose
  // length differs by more than that is skipped, and words past kMaxWord characters (no name is
  // that long) get only the prefix test. Then each distance costs at most kMaxWord^2 steps.
  constexpr size_t kMaxWord = 64;
  const size_t max_edits = std::max<size_t>(1, word.size() / 3);
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const std::string& c : candidates) {
    size_t length_gap = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    size_t d = word.size() <= kMaxWord && c.size() <= kMaxWord && length_gap <= max_edits
                   ? edit_distance(word, c)
                   : std::max(word.size(), c.size());
    // A typo is a couple of edits; a prefix ("epsilon" for "eps") is a likely abbreviation.
    bool close = d <= max_edits && d < word.size();
    bool prefix = std::min(word.size(), c.size()) >= 2 &&
                  (word.starts_with(c) || std::string_view(c).starts_with(word));
    if (!close && !prefix) continue;
    if (best == nullptr || d < best_distance) best = &c, best_distance = d;
  }
  return best ? "; did you mean '" + *best + "'?" : "";
}

std::string join(const std::vector<std::string>& words, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? std::string(sep) : "") + words[i];
  return out;
}

bool is_identifier(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (s.empty() || !alpha(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

std::optional<int64_t> as_int(const YamlNode& node) {
  if (!node.is_scalar() || !node.plain) return std::nullopt;
  std::string_view s = node.text;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  size_t digits_from = !s.empty() && s[0] == '-' ? 1 : 0;
  if (s.size() == digits_from) return std::nullopt;
  for (size_t i = digits_from; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range)
    throw Error(node.loc, "integer " + describe(node) +
                              " is out of range; expected a value "
                              "that fits in 64 bits");
  return v;
}

std::optional<double> as_float(const YamlNode& node) {
  if (!node.is_scalar() || !node.plain) return std::nullopt;
  if (std::optional<int64_t> i = as_int(node)) return static_cast<double>(*i);
  std::string_view s = node.text;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) s.remove_prefix(1);
  bool negative = !node.text.empty() && node.text[0] == '-';
  if (s == ".inf" || s == ".Inf" || s == ".INF")
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  if (node.text == ".nan" || node.text == ".NaN" || node.text == ".NAN")
    return std::numeric_limits<double>::quiet_NaN();
  // YAML 1.2 core: [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
  size_t i = 0, mantissa_digits = 0;
  auto digits = [&] {
    size_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++n;
    return n;
  };
  mantissa_digits += digits();
  if (i < s.size() && s[i] == '.') ++i, mantissa_digits += digits();
  if (mantissa_digits == 0) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  double v = 0;
  // from_chars rejects a leading '+' and a leading '.', so hand it a normalised copy.
  std::string normal = (negative ? "-" : "") + std::string(s[0] == '.' ? "0" : "") + std::string(s);
  auto [ptr, ec] = std::from_chars(normal.data(), normal.data() + normal.size(), v);
  if (ec == std::errc::result_out_of_range)
    throw Error(node.loc, "number " + describe(node) +
                              " is out of range; expected a finite "
                              "double-precision value");
  return v;
}

std::optional<bool> as_bool(const YamlNode& node) {
  if (!node.is_scalar() || !node.plain) return std::nullopt;
  const std::string& s = node.text;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

int64_t read_int(const YamlNode& node, std::string_view what) {
  if (std::optional<int64_t> v = as_int(node)) return *v;
  throw Error(node.loc,
              "expected an integer for " + std::string(what) + ", found " + describe(node));
}

double read_float(const YamlNode& node, std::string_view what) {
  if (std::optional<double> v = as_float(node)) return *v;
  throw Error(node.loc, "expected a number for " + std::string(what) + ", found " + describe(node));
}

std::string read_string(const YamlNode& node, std::string_view what) {
  if (node.is_scalar()) return node.text;
  throw Error(node.loc, "expected a string for " + std::string(what) + ", found " + describe(node));
}

std::string read_identifier(const YamlNode& node, std::string_view what) {
  std::string s = read_string(node, what);
  if (!is_identifier(s))
    throw Error(node.loc, describe(node) + " is not a valid name for " + std::string(what) +
                              "; expected an identifier ([A-Za-z_][A-Za-z0-9_]*)");
  return s;
}

void check_identifier_key(const YamlEntry& entry, std::string_view what) {
  if (!is_identifier(entry.key))
    throw Error(entry.key_loc, quote(entry.key) + " is not a valid name for " + std::string(what) +
                                   "; expected an identifier ([A-Za-z_][A-Za-z0-9_]*)");
}

MapReader::MapReader(const YamlNode& node, std::string what, std::vector<std::string> allowed)
    : node_(node), what_(std::move(what)), allowed_(std::move(allowed)) {
  expect_kind(node_, YamlNode::Kind::Mapping, what_);
  if (allowed_.empty()) return;
  for (const YamlEntry& e : node_.entries) {
    if (std::find(allowed_.begin(), allowed_.end(), e.key) != allowed_.end()) continue;
    throw Error(e.key_loc, "unknown key " + quote(e.key) + " in " + what_ +
                               did_you_mean(e.key, allowed_) + " (allowed keys: " + join(allowed_) +
                               ")");
  }
}

const YamlNode* MapReader::find(std::string_view key) const {
  for (const YamlEntry& e : node_.entries)
    if (e.key == key) return &e.value;
  return nullptr;
}

const YamlNode& MapReader::required(std::string_view key) const {
  if (const YamlNode* n = find(key)) return *n;
  throw Error(node_.loc, "missing required key '" + std::string(key) + "' in " + what_ +
                             " (expected keys: " + join(allowed_) + ")");
}

}  // namespace tilerun::graph
