// The datasets asgd knows how to fetch and verify: where each file is published and what
// it must hash to.
//
// Each file has two digests. download_sha256 is that of the bytes as published (a ".gz"
// for the IDX datasets); `asgd data fetch` checks it before keeping a download.
// content_sha256 is that of the decompressed content; the loaders check it, so a
// re-compressed or gunzipped copy of a known file is accepted too (datasets/content.h).
//
// A dataset published as one archive (CIFAR-10: cifar-10-binary.tar.gz) has an `archive`
// entry: the archive is what is downloaded and verified (its MD5 as the authors publish it,
// and a SHA-256), and its files are extracted from it. For such a dataset a file's
// remote_name is its path inside the archive, and its download_sha256 and download_size
// are those of the extracted file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace asgd::datasets {

struct KnownFile {
  // The content's name, without ".gz": "train-images-idx3-ubyte", "a9a". On disk the
  // loaders accept NAME.gz or NAME.
  std::string name;
  // The name under the download location's base URL: "train-images-idx3-ubyte.gz", "a9a".
  // Downloads are stored under this name.
  std::string remote_name;
  // SHA-256 (64 lowercase hex digits) of the file as downloaded.
  std::string download_sha256;
  // Size in bytes of the file as downloaded; a download that grows past it is cut off.
  // 0 means unknown (no limit).
  int64_t download_size = 0;
  // SHA-256 of the decompressed content (equal to download_sha256 for plain files).
  std::string content_sha256;
  // MD5 (32 lowercase hex digits) of the file as downloaded, where its publisher gives
  // one; checked as well as the SHA-256. "" means none.
  std::string download_md5 = "";
};

struct KnownDataset {
  std::string name;  // "mnist", "fashion-mnist", "a9a", "cifar10"
  // Download locations, tried in order; a file's URL is BASE + remote_name (BASE ends
  // with '/').
  std::vector<std::string> base_urls;
  std::vector<KnownFile> files;
  // The archive the files come in (downloaded from base_urls like a file, kept next to
  // them after extraction), or none: each file is downloaded on its own.
  std::optional<KnownFile> archive = std::nullopt;
};

// The compiled-in table: mnist, fashion-mnist, a9a, cifar10.
const std::vector<KnownDataset>& KnownDatasets();
// The entry for name, or nullptr if asgd does not know it.
const KnownDataset* FindKnownDataset(std::string_view name);
// The entry for one file of a known dataset, or nullptr.
const KnownFile* FindKnownFile(std::string_view dataset, std::string_view file_name);

}  // namespace asgd::datasets
