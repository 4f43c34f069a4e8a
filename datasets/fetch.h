// Downloading the known datasets: `asgd data fetch mnist|fashion-mnist|a9a|cifar10`.
//
// Each file of the dataset is downloaded into DATA_DIR/NAME/ under its published name,
// streamed into a temporary file next to the target while it is hashed; only a download
// whose SHA-256 matches the table (datasets/known_files.h) is fsynced and renamed into
// place. Any failure (connection, HTTP status, size, checksum) removes the temporary, so
// nothing half-written is ever left under the target's name. Files already present and
// valid (as downloaded, or gunzipped with valid content) are skipped.
//
// A dataset published as one archive (CIFAR-10) is fetched as that archive: it is
// downloaded the same way, checked against its published MD5 and its SHA-256 (both must
// match), kept as DATA_DIR/NAME/ARCHIVE, and the dataset's files are extracted from it into
// DATA_DIR/NAME/ (each through a temporary checked for its size and SHA-256). A valid
// archive already there is extracted without downloading; files already extracted and
// valid are kept.
//
// The built-in locations are tried in order (MNIST has a mirror first and the original
// site second); FetchOptions::base_url replaces them with one location of the user's
// choosing, which may be a file:// URL.
//
// Thread safety: the functions may be called from several threads, but not for the
// same target directory at once.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "datasets/known_files.h"

namespace asgd::datasets {

struct FetchOptions {
  // Files go to data_dir/NAME/, created if needed. Required.
  std::string data_dir;
  // When not empty, replaces the built-in download locations: a file is fetched from
  // base_url + remote_name ('/' inserted when missing). http://, https:// or file://.
  // Default: "" (the built-in locations, in order).
  std::string base_url;
  // Give up on a location that does not connect within this time. Default: 30 s.
  std::chrono::seconds connect_timeout{30};
  // Give up on a transfer that stays below 1 KiB/s for this long. Default: 60 s.
  std::chrono::seconds stall_timeout{60};
};

struct FetchReport {
  std::vector<std::string> downloaded;  // paths written by this call
  std::vector<std::string> present;     // paths that were already there and valid
};

// Fetches a dataset of the built-in table. Throws ConfigError if name is not in it, and
// see FetchFiles.
FetchReport FetchDataset(const std::string& name, const FetchOptions& options);

// Fetches the files of `dataset` (the built-in table's entry, or a table of a test's
// own). Throws DataError if a file cannot be downloaded from any location, or downloads
// with the wrong digest; the message lists each location tried and why it failed, and
// says how to get the file by hand. Throws IoError if the local disk refuses (the
// directory cannot be created, a write or rename fails). Files fetched before a failure
// stay (they are complete and verified).
FetchReport FetchFiles(const KnownDataset& dataset, const FetchOptions& options);

}  // namespace asgd::datasets
