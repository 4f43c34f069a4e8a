#include "datasets/libsvm.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace asgd::datasets {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

const char* SkipBlanks(const char* p, const char* end) {
  while (p < end && IsBlank(*p)) ++p;
  return p;
}

const char* TokenEnd(const char* p, const char* end) {
  while (p < end && !IsBlank(*p)) ++p;
  return p;
}

std::string Quote(const char* begin, const char* end) {
  return QuoteForMessage(std::string_view(begin, static_cast<std::size_t>(end - begin)));
}

// Parses all of [begin, end) as a number of type T; from_chars does not take a leading
// '+', which LIBSVM files use for labels.
template <typename T>
bool ParseWhole(const char* begin, const char* end, T* out) {
  if (begin < end && *begin == '+') ++begin;
  if (begin == end) return false;
  auto [p, ec] = std::from_chars(begin, end, *out);
  return ec == std::errc() && p == end;
}

struct Parser {
  const std::string& path;
  const LibsvmOptions& options;
  long line = 0;

  [[noreturn]] void Fail(const std::string& what) const { throw DataError(path, what, line); }

  int32_t Label(const char* begin, const char* end) const {
    double v = 0;
    if (!ParseWhole(begin, end, &v) || !std::isfinite(v) || v != std::floor(v) ||
        std::fabs(v) > 1e9) {
      Fail("label " + Quote(begin, end) + ": expected " + ExpectedLabels());
    }
    auto label = static_cast<int64_t>(v);
    if (options.num_classes == 2) {
      if (label == -1 || label == 0) return 0;
      if (label == 1) return 1;
    } else {
      int64_t k = label - options.first_label;
      if (k >= 0 && k < options.num_classes) return static_cast<int32_t>(k);
    }
    Fail("label " + Quote(begin, end) + ": expected " + ExpectedLabels());
  }

  std::string ExpectedLabels() const {
    if (options.num_classes == 2) return "-1, +1, 0 or 1 (a binary dataset)";
    return "an integer from " + std::to_string(options.first_label) + " to " +
           std::to_string(int64_t{options.first_label} + options.num_classes - 1) + " (" +
           std::to_string(options.num_classes) + " classes)";
  }
};

void ValidateOptions(const LibsvmOptions& o) {
  if (o.num_features < 0 || o.num_features > std::numeric_limits<int32_t>::max()) {
    throw ConfigError("data.num_features", std::to_string(o.num_features),
                      "0 (infer from the file) or a feature count from 1 to 2147483647");
  }
  if (o.num_classes < 2) {
    throw ConfigError("data.num_classes", std::to_string(o.num_classes), "at least 2 classes");
  }
}

}  // namespace

Dataset ParseLibsvm(std::string name, const std::string& path, std::string_view text,
                    const LibsvmOptions& options) {
  ValidateOptions(options);
  Parser parser{path, options};
  const int64_t limit =
      options.num_features > 0 ? options.num_features : std::numeric_limits<int32_t>::max();
  Dataset ds;
  ds.name = std::move(name);
  ds.sparse = true;
  ds.num_classes = options.num_classes;
  ds.indptr.push_back(0);
  // a9a averages about 5 bytes per non-zero ("123:1 ").
  ds.indices.reserve(text.size() / 5);
  ds.values.reserve(text.size() / 5);

  int64_t rows_seen = 0;
  int64_t max_index = 0;
  const char* p = text.data();
  const char* const text_end = p + text.size();
  while (p < text_end) {
    ++parser.line;
    const char* eol = static_cast<const char*>(std::memchr(p, '\n', text_end - p));
    if (eol == nullptr) eol = text_end;
    const char* end = eol;
    if (const void* hash = std::memchr(p, '#', end - p)) end = static_cast<const char*>(hash);

    const char* tok = SkipBlanks(p, end);
    // On a last line without '\n', eol is text_end and eol + 1 would point past the end
    // of the text: undefined behaviour even though it is never read.
    p = eol == text_end ? text_end : eol + 1;
    if (tok == end) continue;  // blank or comment-only line
    const char* tok_end = TokenEnd(tok, end);
    int32_t label = parser.Label(tok, tok_end);
    const bool keep = options.max_examples < 0 || rows_seen < options.max_examples;

    int64_t prev = 0;
    for (tok = SkipBlanks(tok_end, end); tok < end; tok = SkipBlanks(tok_end, end)) {
      tok_end = TokenEnd(tok, end);
      const char* colon = static_cast<const char*>(std::memchr(tok, ':', tok_end - tok));
      if (colon == nullptr) {
        parser.Fail("expected <index>:<value>, found " + Quote(tok, tok_end));
      }
      int64_t index = 0;
      if (!ParseWhole(tok, colon, &index)) {
        parser.Fail("feature index in " + Quote(tok, tok_end) + ": expected an integer");
      }
      if (index < 1) {
        parser.Fail("feature index " + std::to_string(index) + " in " + Quote(tok, tok_end) +
                    ": expected an index from 1 (LIBSVM indices are 1-based)");
      }
      if (index > limit) {
        parser.Fail(
            "feature index " + std::to_string(index) + " in " + Quote(tok, tok_end) +
            ": expected at most " + std::to_string(limit) +
            (options.num_features > 0 ? " (the feature dimension, data.num_features)" : ""));
      }
      if (index <= prev) {
        parser.Fail("feature index " + std::to_string(index) + " in " + Quote(tok, tok_end) +
                    " after index " + std::to_string(prev) +
                    ": expected strictly increasing indices");
      }
      float value = 0;
      if (!ParseWhole(colon + 1, tok_end, &value)) {
        parser.Fail("value in " + Quote(tok, tok_end) + ": expected a number");
      }
      if (!std::isfinite(value)) {
        parser.Fail("value in " + Quote(tok, tok_end) + ": expected a finite number");
      }
      prev = index;
      if (keep) {
        ds.indices.push_back(static_cast<int32_t>(index - 1));
        ds.values.push_back(value);
      }
    }
    if (prev > max_index) max_index = prev;
    if (keep) {
      ds.labels.push_back(label);
      ds.indptr.push_back(static_cast<int64_t>(ds.indices.size()));
    }
    ++rows_seen;
  }
  if (rows_seen == 0) throw DataError(path, "holds no examples: expected LIBSVM lines");

  ds.num_examples = static_cast<int64_t>(ds.labels.size());
  ds.num_features = options.num_features > 0 ? options.num_features : max_index;
  ds.example_shape = {ds.num_features};
  ds.indices.shrink_to_fit();
  ds.values.shrink_to_fit();
  return ds;
}

Dataset ReadLibsvm(std::string name, const std::string& path, const LibsvmOptions& options) {
  ValidateOptions(options);
  std::string text;
  {
    ContentReader in(path);
    in.ReadAll(&text);
    // The whole file is in memory anyway; checking it before parsing makes a damaged
    // known file report "re-fetch" rather than whichever line broke first.
    in.Verify(options.check);
  }
  return ParseLibsvm(std::move(name), path, text, options);
}

}  // namespace asgd::datasets
