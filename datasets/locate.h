// Finding a dataset's files on disk.
//
// A file dataset NAME ("mnist", "fashion-mnist", "a9a", "cifar10") lives in a folder NAME/ under
// one of several data directories, which the caller supplies in order of preference (the CLI passes
// the config's data.dir, $ASGD_DATA_DIR, ./data and /usr/share/datasets, where Debian's dataset
// packages install). Each file may be stored gzip-compressed (FILE.gz, as distributed) or plain
// (FILE).
#pragma once

#include <string>
#include <vector>

namespace asgd::datasets {

// The first entry dir of search_dirs (returned as given; empty entries are skipped)
// such that dir/dataset_name/ holds every file of the dataset, each as FILE.gz or FILE.
// Only presence is checked here; the loaders verify content.
// Throws ConfigError if dataset_name is not a file dataset asgd knows, and DataError,
// listing every place searched and what was missing there, if no directory qualifies:
//   "data: mnist: not found: searched A/mnist (no such directory), B/mnist (missing
//    t10k-labels-idx1-ubyte[.gz]); get it with `asgd data fetch mnist`, or set
//    ASGD_DATA_DIR or [data] dir to the folder that holds mnist/"
std::string FindDatasetDir(const std::string& dataset_name,
                           const std::vector<std::string>& search_dirs);

// dataset_dir/file_name.gz if it is a file, else dataset_dir/file_name if it is a file,
// else "".
std::string FindDataFile(const std::string& dataset_dir, const std::string& file_name);

}  // namespace asgd::datasets
