#include "datasets/locate.h"

#include "core/error.h"
#include "core/file_util.h"
#include "core/strings.h"
#include "datasets/known_files.h"

namespace asgd::datasets {
namespace {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace

std::string FindDataFile(const std::string& dataset_dir, const std::string& file_name) {
  std::string gz = JoinPath(dataset_dir, file_name + ".gz");
  if (FileExists(gz) && !IsDirectory(gz)) return gz;
  std::string plain = JoinPath(dataset_dir, file_name);
  if (FileExists(plain) && !IsDirectory(plain)) return plain;
  return "";
}

std::string FindDatasetDir(const std::string& dataset_name,
                           const std::vector<std::string>& search_dirs) {
  const KnownDataset* known = FindKnownDataset(dataset_name);
  if (known == nullptr) {
    std::vector<std::string> names;
    for (const KnownDataset& d : KnownDatasets()) names.push_back(d.name);
    std::string expected = "one of " + Join(names, ", ");
    std::string guess = ClosestMatch(dataset_name, names);
    if (!guess.empty()) expected += " (did you mean '" + guess + "'?)";
    throw ConfigError("data.dataset", dataset_name, expected);
  }
  std::vector<std::string> searched;
  for (const std::string& dir : search_dirs) {
    if (dir.empty()) continue;
    const std::string dataset_dir = JoinPath(dir, dataset_name);
    if (!IsDirectory(dataset_dir)) {
      searched.push_back(dataset_dir + " (no such directory)");
      continue;
    }
    std::vector<std::string> missing;
    for (const KnownFile& f : known->files) {
      if (FindDataFile(dataset_dir, f.name).empty()) missing.push_back(f.name + "[.gz]");
    }
    if (missing.empty()) return dir;
    searched.push_back(dataset_dir + " (missing " + Join(missing, ", ") + ")");
  }
  std::string what = searched.empty() ? "not found: no data directories to search"
                                      : "not found: searched " + Join(searched, ", ");
  what += "; get it with `asgd data fetch " + dataset_name +
          "`, or set ASGD_DATA_DIR or [data] dir to the folder that holds " + dataset_name + "/";
  throw DataError(dataset_name, what);
}

}  // namespace asgd::datasets
