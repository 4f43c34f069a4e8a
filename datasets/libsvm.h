// LIBSVM / svmlight text files (a9a): one example per line,
//
//   <label> <index>:<value> <index>:<value> ...  [# comment]
//
// read into a sparse (CSR) Dataset. Indices are 1-based in the file and 0-based in the
// Dataset; within a line they must be strictly increasing and at most num_features.
// Fields are separated by spaces or tabs; blank lines and lines holding only a comment
// are skipped; "\r\n" line ends are accepted. Files may be gzip-compressed or plain.
//
// Labels:
//   num_classes == 2: -1 and 0 are class 0, +1 (or 1) is class 1;
//   num_classes > 2: integers in [first_label, first_label + num_classes) map to
//                    class label - first_label (first_label 1 for files counting 1..K).
//
// A line that breaks a rule (bad label, index 0, an index not above the previous one, an
// index above num_features, a field without ':', a value that is not a finite number)
// is a DataError naming the file and the 1-based line number and saying what was
// expected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "datasets/content.h"
#include "datasets/dataset.h"

namespace asgd::datasets {

struct LibsvmOptions {
  // Feature dimension d: indices run from 1 to d. 0 infers d from the largest index in
  // the file (then a train and a test file may disagree: pass d explicitly for those).
  // Default: 0. a9a: 123 (its test file never uses index 123).
  int64_t num_features = 0;
  // Number of classes; see the header comment for how labels map. Default: 2.
  int num_classes = 2;
  // The label of class 0 when num_classes > 2. Default: 0.
  int first_label = 0;
  // Keep only the first max_examples examples; -1 keeps all. The file is still read and
  // checked in full. Default: -1.
  int64_t max_examples = -1;
  // Checksum of the file's decompressed content; empty: not checked.
  ContentCheck check;
};

// Reads a LIBSVM file into a Dataset named `name` (sparse = true, example_shape
// {num_features}). Throws DataError if the file is unreadable or a line is bad, and
// ConfigError if the options are invalid.
Dataset ReadLibsvm(std::string name, const std::string& path, const LibsvmOptions& options);

// Parses LIBSVM text already in memory; `path` is only used in error messages.
Dataset ParseLibsvm(std::string name, const std::string& path, std::string_view text,
                    const LibsvmOptions& options);

}  // namespace asgd::datasets
