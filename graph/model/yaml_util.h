// Located YAML: a small tree built from yaml-cpp's event stream, every node carrying its
// file:line:col, plus the checked accessors the model parser reads it with. The tree is built
// from events rather than YAML::Load so that size, depth, node count and aliases are bounded
// while parsing, before anything can blow up (alias bombs, deeply nested flow collections).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tilerun/error.h"

namespace tilerun::graph {

// What a model file may be; each limit is far above any real model.
struct YamlLimits {
  size_t max_bytes = size_t{16} << 20;  // 16 MiB of text
  int max_depth = 64;                   // nested mappings/sequences
  size_t max_nodes = 500000;            // scalars, mappings and sequences together
  size_t max_lookahead = 64 << 10;      // bytes yaml-cpp may scan past the last event
};

struct YamlEntry;

struct YamlNode {
  enum class Kind { Null, Scalar, Sequence, Mapping };
  Kind kind = Kind::Null;
  std::string text;                // Scalar: its value
  bool plain = false;              // Scalar: unquoted, so it may read as a number or boolean
  std::vector<YamlNode> items;     // Sequence
  std::vector<YamlEntry> entries;  // Mapping, in file order; keys are unique scalars
  SourceLoc loc;

  bool is_null() const { return kind == Kind::Null; }
  bool is_scalar() const { return kind == Kind::Scalar; }
  bool is_sequence() const { return kind == Kind::Sequence; }
  bool is_mapping() const { return kind == Kind::Mapping; }
};

struct YamlEntry {
  std::string key;
  SourceLoc key_loc;
  YamlNode value;
};

// Parses one YAML document into a tree (an empty document gives a Null node). Throws Error at
// the offending place for malformed YAML, anchors and aliases (refused outright: a model never
// needs them and they are how alias bombs work), explicit tags, duplicate or non-scalar mapping
// keys, a second document, and anything beyond `limits`.
YamlNode parse_yaml(const std::string& text, const std::string& file,
                    const YamlLimits& limits = {});

// Text as it appears in an error: in single quotes, cut to 40 characters, control characters
// and NUL escaped (escape_text).
std::string quote(std::string_view text);
// `text` with newline and tab as \n, \t and every other control character (NUL, ESC, BEL, DEL)
// as \xNN, so a name read from a file can neither cut a message nor drive the terminal.
std::string escape_text(std::string_view text);
// How a node reads in an error: "a mapping", "a sequence", "nothing (null)", "'text'".
std::string describe(const YamlNode& node);
std::string_view kind_name(YamlNode::Kind kind);  // "a mapping", ...
// Throws "expected a mapping for `what`, found a sequence" unless `node` is of `kind`.
void expect_kind(const YamlNode& node, YamlNode::Kind kind, std::string_view what);

// "; did you mean 'x'?" for the candidate closest to `word` (edit distance), or "" if none is
// close enough to be a plausible typo.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);
std::string join(const std::vector<std::string>& words, std::string_view sep = ", ");
// [A-Za-z_][A-Za-z0-9_]*
bool is_identifier(std::string_view s);

// Plain-scalar readings (YAML 1.2 core schema). nullopt when the node does not have that form;
// a quoted scalar is always a string.
std::optional<int64_t> as_int(const YamlNode& node);   // decimal; throws Error when out of range
std::optional<double> as_float(const YamlNode& node);  // also accepts integers
std::optional<bool> as_bool(const YamlNode& node);

// Readers that throw Error at the node naming `what` and the form expected there.
int64_t read_int(const YamlNode& node, std::string_view what);
double read_float(const YamlNode& node, std::string_view what);
std::string read_string(const YamlNode& node, std::string_view what);  // any scalar
std::string read_identifier(const YamlNode& node, std::string_view what);
// An identifier given as a mapping key.
void check_identifier_key(const YamlEntry& entry, std::string_view what);

// A mapping read against the keys it may have: the constructor rejects any other key (listing
// the allowed ones and suggesting the closest), so the caller only asks for known keys.
class MapReader {
 public:
  // `what` names the mapping in errors ("the model", "layer 'block'").
  MapReader(const YamlNode& node, std::string what, std::vector<std::string> allowed);

  const YamlNode* find(std::string_view key) const;  // nullptr when absent
  const YamlNode& required(std::string_view key) const;
  const YamlNode& node() const { return node_; }
  const std::string& what() const { return what_; }

 private:
  const YamlNode& node_;
  std::string what_;
  std::vector<std::string> allowed_;
};

}  // namespace tilerun::graph
