// libFuzzer target over the LIBSVM parser (datasets/libsvm.h): ParseLibsvm, the code
// ReadLibsvm runs on a file's decompressed text. It must never crash, hang or read
// outside the text, and may throw only DataError (one line naming the file); a Dataset
// it returns must pass CheckDataset and agree with the options.
//
// The input is the file's text. The options vary with the input's size (size % 4), so
// that both label mappings, an inferred and a given dimension, and max_examples are
// reachable:
//   0: binary, dimension inferred           1: binary, 123 features (a9a)
//   2: 10 classes 0..9, max_examples 1      3: 3 classes 1..3, 16 features
//
// Seeds: `libsvm_fuzz --write-seeds=DIR` writes a few small files, valid and slightly
// broken, to DIR (the committed corpus in tests/fuzz/corpus/libsvm, which also holds the
// first three lines of a9a). See README.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "datasets/dataset.h"
#include "datasets/libsvm.h"
#include "tests/fuzz/fuzz_util.h"

namespace asgd::datasets {
namespace {

constexpr std::string_view kPath = "fuzz/train.libsvm";

LibsvmOptions OptionsFor(std::size_t size) {
  LibsvmOptions o;
  switch (size % 4) {
    case 0:
      break;
    case 1:
      o.num_features = 123;
      break;
    case 2:
      o.num_classes = 10;
      o.max_examples = 1;
      break;
    default:
      o.num_classes = 3;
      o.first_label = 1;
      o.num_features = 16;
      break;
  }
  return o;
}

void FuzzOne(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const LibsvmOptions options = OptionsFor(size);
  Dataset ds;
  try {
    ds = ParseLibsvm("fuzz", std::string(kPath), text, options);
  } catch (const DataError& e) {
    fuzz::CheckErrorMessage(e, "data: ", kPath);
    return;
  }
  CheckDataset(ds);  // InvariantError, reported by RunOne, if the parser broke one
  ASGD_FUZZ_CHECK(ds.sparse && ds.num_classes == options.num_classes);
  ASGD_FUZZ_CHECK(ds.num_examples >= (options.max_examples == 0 ? 0 : 1));
  ASGD_FUZZ_CHECK(options.max_examples < 0 || ds.num_examples <= options.max_examples);
  if (options.num_features > 0) ASGD_FUZZ_CHECK(ds.num_features == options.num_features);
  ASGD_FUZZ_CHECK(ds.example_shape.size() == 1 && ds.example_shape[0] == ds.num_features);
}

// ---- Seeds ----------------------------------------------------------------------------

// Each seed is padded with trailing blanks (which the parser skips) to the size whose
// residue mod 4 selects the options it was written for.
std::string Sized(std::string text, std::size_t residue) {
  while (text.size() % 4 != residue) text.push_back(text.back() == '\n' ? ' ' : '\n');
  return text;
}

fuzz::Seeds MakeSeeds() {
  fuzz::Seeds seeds;
  seeds.emplace_back("binary_inferred",
                     Sized("+1 1:0.5 3:1 10:-2.25\n-1 2:1\n0 5:1e-3 7:4\n", 0));
  seeds.emplace_back("binary_a9a_dim",
                     Sized("-1 3:1 11:1 14:1 19:1 39:1 42:1 55:1 64:1 67:1 73:1 75:1 76:1 80:1 "
                           "83:1\n+1 5:1 123:1\n",
                           1));
  seeds.emplace_back("multiclass_0_9", Sized("0 1:1\n9 2:0.5 4:2\n3 1:1 2:1\n", 2));
  seeds.emplace_back("multiclass_1_3",
                     Sized("1 1:1 16:0.5\n3\t2:0.25\t15:1  # a comment\n\n# only a comment\n"
                           "2 4:1\r\n",
                           3));
  // Slightly broken: each fails on one rule.
  seeds.emplace_back("index_not_increasing", Sized("+1 3:1 2:1\n", 0));
  seeds.emplace_back("index_zero", Sized("-1 0:1\n", 0));
  seeds.emplace_back("no_colon", Sized("+1 3:1 4\n", 0));
  seeds.emplace_back("bad_label", Sized("2 1:1\n", 0));
  seeds.emplace_back("value_not_finite", Sized("+1 1:inf\n", 0));
  seeds.emplace_back("index_above_dim", Sized("+1 124:1\n", 1));
  return seeds;
}

}  // namespace
}  // namespace asgd::datasets

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  asgd::fuzz::HandleWriteSeeds("libsvm_fuzz", *argc, *argv, asgd::datasets::MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  asgd::fuzz::RunOne("libsvm_fuzz", [&] { asgd::datasets::FuzzOne(data, size); });
  return 0;
}
