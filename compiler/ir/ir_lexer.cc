#include "compiler/ir/ir_lexer.h"

#include <cctype>

namespace tilerun::compiler {
namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}
bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)); }

// Longest first, so `>>>` is not read as `>>` `>`.
const char* const kPuncts[] = {">>>", ":=", "+:", "<-", "<<", ">>", "==", "!=", "<=", ">=", "<u",
                               "(",   ")",  "[",  "]",  "{",  "}",  ",",  ":",  "=",  "+",  "-",
                               "*",   "/",  "%",  "&",  "|",  "^",  "<",  ">",  "!"};

}  // namespace

std::vector<Token> lex_ir(const std::string& text, const std::string& file) {
  std::vector<Token> out;
  size_t i = 0;
  int line = 1, col = 1;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n; ++k, ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  while (i < text.size()) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advance(1);
      continue;
    }
    if (text.compare(i, 2, "//") == 0) {
      while (i < text.size() && text[i] != '\n') advance(1);
      continue;
    }
    Token t{TokKind::Punct, "", line, col};
    size_t start = i;
    if (ident_start(c)) {
      while (i < text.size() && ident_char(text[i])) advance(1);
      t.kind = TokKind::Ident;
      t.text = text.substr(start, i - start);
    } else if (digit(c) || (c == '-' && i + 1 < text.size() && digit(text[i + 1]))) {
      // A leading '-' belongs to the number: the printer spaces binary operators, so `-5` is a
      // literal and `(a - 5)` a subtraction.
      size_t j = i + 1;
      while (j < text.size() && digit(text[j])) ++j;
      bool is_float = false;
      if (j < text.size() && text[j] == '.') {
        is_float = true;
        for (++j; j < text.size() && digit(text[j]);) ++j;
      }
      if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
        size_t k = j + 1;
        if (k < text.size() && (text[k] == '+' || text[k] == '-')) ++k;
        if (k < text.size() && digit(text[k])) {
          is_float = true;
          for (j = k; j < text.size() && digit(text[j]);) ++j;
        }
      }
      t.text = text.substr(i, j - i);
      if (j < text.size() && text[j] == 'f') {
        t.kind = TokKind::Float;
        ++j;
      } else if (is_float) {
        throw Error(SourceLoc{file, line, col}, "float literal '" + t.text + "' needs an f suffix");
      } else {
        t.kind = TokKind::Int;
      }
      advance(j - i);
    } else {
      for (const char* p : kPuncts) {
        if (text.compare(i, std::char_traits<char>::length(p), p) == 0) {
          t.text = p;
          break;
        }
      }
      if (t.text.empty())
        throw Error(SourceLoc{file, line, col}, std::string("unexpected character '") + c + "'");
      advance(t.text.size());
    }
    out.push_back(std::move(t));
  }
  out.push_back(Token{TokKind::End, "", line, col});
  return out;
}

}  // namespace tilerun::compiler
