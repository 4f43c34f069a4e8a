#include "datasets/fetch.h"

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "datasets/content.h"
#include "datasets/md5.h"

namespace asgd::datasets {
namespace {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

void InitCurlOnce() {
  // curl_global_init is not thread-safe in every libcurl this may link against.
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (rc != CURLE_OK) {
    throw IoError(std::string("cannot initialise libcurl: ") + curl_easy_strerror(rc));
  }
}

// The temporary a download streams into; removed unless committed.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : path_(TempPathFor(target)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError("cannot create " + path_ + ": " + std::strerror(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  void Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw IoError("cannot close " + path_ + ": " + std::strerror(errno));
  }
  // CommitTempFile removes the temporary itself when it fails.
  void CommitTo(const std::string& target) {
    committed_ = true;
    CommitTempFile(path_, target);
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

struct Sink {
  int fd = -1;
  const std::string* tmp_path = nullptr;
  Sha256 hash;
  Md5* md5 = nullptr;  // also hashed when the file has a published MD5
  int64_t bytes = 0;
  int64_t limit = 0;        // 0: none
  std::string too_large;    // set when the server sent more than limit
  std::string local_error;  // set when the disk refused
};

std::size_t WriteToSink(char* data, std::size_t size, std::size_t nmemb, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const std::size_t len = size * nmemb;
  if (sink->limit > 0 && sink->bytes + static_cast<int64_t>(len) > sink->limit) {
    sink->too_large =
        "the server sent more than the expected " + std::to_string(sink->limit) + " bytes";
    return 0;  // makes curl_easy_perform fail with CURLE_WRITE_ERROR
  }
  std::size_t done = 0;
  while (done < len) {
    ssize_t n = ::write(sink->fd, data + done, len - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      sink->local_error = "cannot write " + *sink->tmp_path + ": " + std::strerror(errno);
      return 0;
    }
    done += static_cast<std::size_t>(n);
  }
  sink->hash.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data), len));
  if (sink->md5 != nullptr) {
    sink->md5->Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data), len));
  }
  sink->bytes += static_cast<int64_t>(len);
  return len;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};

// Downloads url into target through a verified temporary. Returns "" on success, else
// why this location failed. Throws IoError when the local disk is the problem (another
// location would not help).
std::string TryDownload(const std::string& url, const KnownFile& file, const std::string& target,
                        const FetchOptions& options) {
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) throw IoError("cannot create a libcurl handle");
  TempFile tmp(target);
  Sink sink;
  sink.fd = tmp.fd();
  sink.tmp_path = &tmp.path();
  sink.limit = file.download_size;
  std::optional<Md5> md5;
  if (!file.download_md5.empty()) sink.md5 = &md5.emplace();
  char errbuf[CURL_ERROR_SIZE] = {0};

  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &WriteToSink);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);  // HTTP >= 400 is an error, not a body
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.stall_timeout.count()));
  curl_easy_setopt(c, CURLOPT_USERAGENT, "asgd");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: other threads are running
  // file:// is allowed for a URL the user gave, never as the target of a redirect.
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(c, CURLOPT_PROTOCOLS,
                   static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS | CURLPROTO_FILE));
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif

  CURLcode rc = curl_easy_perform(c);
  if (!sink.local_error.empty()) throw IoError(sink.local_error);
  if (rc != CURLE_OK) {
    if (!sink.too_large.empty()) return sink.too_large;
    if (rc == CURLE_HTTP_RETURNED_ERROR) {
      long status = 0;
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
      return "HTTP status " + std::to_string(status);
    }
    return errbuf[0] != '\0' ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
  }
  tmp.Close();
  std::string found = sink.hash.FinishHex();
  if (md5) {
    const std::string found_md5 = md5->FinishHex();
    if (found_md5 != file.download_md5) {
      std::string why = "md5 mismatch: expected " + file.download_md5 + " (as published), found " +
                        found_md5 + " (" + std::to_string(sink.bytes) + " bytes received";
      if (file.download_size > 0) why += ", expected " + std::to_string(file.download_size);
      return why + ")";
    }
  }
  if (found != file.download_sha256) {
    return "sha256 mismatch: expected " + file.download_sha256 + ", found " + found + " (" +
           std::to_string(sink.bytes) + " bytes received)";
  }
  tmp.CommitTo(target);
  return "";
}

// True when the file is already there and valid, as downloaded or gunzipped.
bool AlreadyPresent(const std::string& dir, const KnownFile& file, std::string* path) {
  const std::string target = JoinPath(dir, file.remote_name);
  if (FileExists(target)) {
    if (Sha256File(target) == file.download_sha256) {
      *path = target;
      return true;
    }
    ASGD_LOG(kWarning, target, " does not have the expected sha256; downloading it again");
  }
  const std::string plain = JoinPath(dir, file.name);
  if (plain != target && FileExists(plain)) {
    if (ContentSha256(plain) == file.content_sha256) {
      *path = plain;
      return true;
    }
  }
  return false;
}

// Downloads `file` into target from the first location that serves it with the right
// digests. Throws DataError listing every location tried when none does.
void DownloadFromAny(const KnownFile& file, const std::string& target,
                     const std::vector<std::string>& bases, const std::string& dir,
                     const FetchOptions& options) {
  std::vector<std::string> failures;
  std::string first_url;
  for (const std::string& base : bases) {
    const std::string url =
        (base.empty() || base.back() == '/' ? base : base + "/") + file.remote_name;
    if (first_url.empty()) first_url = url;
    ASGD_LOG(kInfo, "downloading ", url);
    std::string why = TryDownload(url, file, target, options);
    if (why.empty()) {
      ASGD_LOG(kInfo, "saved ", target,
               file.download_md5.empty() ? " (sha256 ok)" : " (md5 and sha256 ok)");
      return;
    }
    ASGD_LOG(kWarning, url, ": ", why);
    failures.push_back(url + ": " + why);
  }
  std::string expected = "sha256 " + file.download_sha256;
  if (!file.download_md5.empty()) expected = "md5 " + file.download_md5 + ", " + expected;
  if (file.download_size > 0) expected += ", " + std::to_string(file.download_size) + " bytes";
  throw DataError(target, "download failed (" + Join(failures, "; ") +
                              "); nothing was written. Download it by hand from " + first_url +
                              " into " + dir + "/ (expected " + expected +
                              "), or fetch from another location with --url BASE");
}

// True when an archive member is already extracted with the right content (plain or
// gzip-compressed).
bool MemberPresent(const std::string& dir, const KnownFile& file, std::string* path) {
  for (const std::string& candidate :
       {JoinPath(dir, file.name), JoinPath(dir, file.name + ".gz")}) {
    if (FileExists(candidate) && !IsDirectory(candidate) &&
        ContentSha256(candidate) == file.content_sha256) {
      *path = candidate;
      return true;
    }
  }
  return false;
}

// True when path holds the archive with both its digests right (one pass over the file).
bool ArchiveValid(const std::string& path, const KnownFile& archive) {
  if (!FileExists(path) || IsDirectory(path)) return false;
  Sha256 sha;
  Md5 md5;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::vector<uint8_t> buf(std::size_t{1} << 20);
  int64_t bytes = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      if (n < 0) return false;
      break;
    }
    sha.Update(std::span<const uint8_t>(buf.data(), static_cast<std::size_t>(n)));
    md5.Update(std::span<const uint8_t>(buf.data(), static_cast<std::size_t>(n)));
    bytes += n;
  }
  const bool md5_ok = archive.download_md5.empty() || md5.FinishHex() == archive.download_md5;
  return md5_ok && sha.FinishHex() == archive.download_sha256 &&
         (archive.download_size == 0 || bytes == archive.download_size);
}

void WriteAll(int fd, const uint8_t* data, std::size_t len, const std::string& path) {
  std::size_t done = 0;
  while (done < len) {
    ssize_t n = ::write(fd, data + done, len - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError("cannot write " + path + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

struct ArchiveDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};

// Extracts the members `wanted` of a verified tar.gz archive into dir under their names,
// each through a temporary checked for its size and SHA-256 before it is renamed into
// place. Only the exact member paths of the table are extracted, to paths asgd chooses:
// nothing in the archive decides where a file goes. Throws DataError naming the archive.
void ExtractMembers(const std::string& archive_path, const std::vector<const KnownFile*>& wanted,
                    const std::string& dir, FetchReport* report) {
  std::unique_ptr<struct archive, ArchiveDeleter> a(archive_read_new());
  if (!a) throw IoError("cannot create a libarchive reader");
  archive_read_support_filter_gzip(a.get());
  archive_read_support_format_tar(a.get());
  auto error = [&](const std::string& what) {
    const char* why = archive_error_string(a.get());
    return DataError(archive_path, what +
                                       (why != nullptr ? std::string(": ") + why : std::string()) +
                                       "; delete it and fetch again");
  };
  if (archive_read_open_filename(a.get(), archive_path.c_str(), std::size_t{1} << 16) !=
      ARCHIVE_OK) {
    throw error("cannot be read as a tar.gz archive");
  }
  std::vector<bool> done(wanted.size(), false);
  std::vector<uint8_t> buf(std::size_t{1} << 20);
  struct archive_entry* entry = nullptr;
  int rc = ARCHIVE_OK;
  while ((rc = archive_read_next_header(a.get(), &entry)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
    std::string member =
        archive_entry_pathname(entry) != nullptr ? archive_entry_pathname(entry) : "";
    if (member.rfind("./", 0) == 0) member = member.substr(2);
    std::size_t k = 0;
    while (k < wanted.size() && (done[k] || wanted[k]->remote_name != member)) ++k;
    if (k == wanted.size()) continue;  // the next header skips this member's data
    const KnownFile& file = *wanted[k];
    if (archive_entry_filetype(entry) != AE_IFREG) {
      throw DataError(archive_path, "member " + member + " is not a regular file");
    }
    if (archive_entry_size_is_set(entry) != 0 && file.download_size > 0 &&
        archive_entry_size(entry) != file.download_size) {
      throw DataError(archive_path, "member " + member + " is " +
                                        std::to_string(archive_entry_size(entry)) +
                                        " bytes: expected " + std::to_string(file.download_size));
    }
    const std::string target = JoinPath(dir, file.name);
    TempFile tmp(target);
    Sha256 hash;
    int64_t bytes = 0;
    for (;;) {
      la_ssize_t n = archive_read_data(a.get(), buf.data(), buf.size());
      if (n < 0) throw error("is corrupt (reading member " + member + ")");
      if (n == 0) break;
      WriteAll(tmp.fd(), buf.data(), static_cast<std::size_t>(n), tmp.path());
      hash.Update(std::span<const uint8_t>(buf.data(), static_cast<std::size_t>(n)));
      bytes += n;
    }
    tmp.Close();
    const std::string found = hash.FinishHex();
    if ((file.download_size > 0 && bytes != file.download_size) || found != file.download_sha256) {
      throw DataError(archive_path, "member " + member + ": expected " +
                                        std::to_string(file.download_size) + " bytes with sha256 " +
                                        file.download_sha256 + ", found " + std::to_string(bytes) +
                                        " bytes with sha256 " + found);
    }
    tmp.CommitTo(target);
    ASGD_LOG(kInfo, "extracted ", target, " (sha256 ok)");
    report->downloaded.push_back(target);
    done[k] = true;
  }
  if (rc != ARCHIVE_EOF) throw error("is corrupt");
  std::vector<std::string> missing;
  for (std::size_t k = 0; k < wanted.size(); ++k) {
    if (!done[k]) missing.push_back(wanted[k]->remote_name);
  }
  if (!missing.empty()) {
    throw DataError(archive_path, "has no member " + Join(missing, ", ") +
                                      ": expected the files of the published archive");
  }
}

// A dataset published as one archive: download and verify the archive unless a valid copy
// is already there, then extract the files that are missing.
FetchReport FetchArchive(const KnownDataset& dataset, const FetchOptions& options,
                         const std::string& dir, const std::vector<std::string>& bases) {
  FetchReport report;
  std::vector<const KnownFile*> missing;
  for (const KnownFile& file : dataset.files) {
    std::string existing;
    if (MemberPresent(dir, file, &existing)) {
      ASGD_LOG(kInfo, existing, " is present and valid");
      report.present.push_back(existing);
    } else {
      missing.push_back(&file);
    }
  }
  if (missing.empty()) return report;
  const KnownFile& archive = *dataset.archive;
  const std::string archive_path = JoinPath(dir, archive.remote_name);
  if (ArchiveValid(archive_path, archive)) {
    ASGD_LOG(kInfo, archive_path, " is present and valid");
    report.present.push_back(archive_path);
  } else {
    if (FileExists(archive_path)) {
      ASGD_LOG(kWarning, archive_path,
               " does not have the expected checksums; downloading it again");
    }
    DownloadFromAny(archive, archive_path, bases, dir, options);
    report.downloaded.push_back(archive_path);
  }
  ExtractMembers(archive_path, missing, dir, &report);
  return report;
}

}  // namespace

FetchReport FetchDataset(const std::string& name, const FetchOptions& options) {
  const KnownDataset* known = FindKnownDataset(name);
  if (known == nullptr) {
    std::vector<std::string> names;
    for (const KnownDataset& d : KnownDatasets()) names.push_back(d.name);
    throw ConfigError("NAME", name,
                      "one of " + Join(names, ", ") +
                          " (synthetic data is "
                          "generated, not fetched)");
  }
  return FetchFiles(*known, options);
}

FetchReport FetchFiles(const KnownDataset& dataset, const FetchOptions& options) {
  if (options.data_dir.empty()) {
    throw ConfigError("data.dir", "", "a directory to download " + dataset.name + " into");
  }
  InitCurlOnce();
  const std::string dir = JoinPath(options.data_dir, dataset.name);
  MakeDirs(dir);
  std::vector<std::string> bases = dataset.base_urls;
  if (!options.base_url.empty()) bases = {options.base_url};

  if (dataset.archive) return FetchArchive(dataset, options, dir, bases);

  FetchReport report;
  for (const KnownFile& file : dataset.files) {
    std::string existing;
    if (AlreadyPresent(dir, file, &existing)) {
      ASGD_LOG(kInfo, existing, " is present and valid");
      report.present.push_back(existing);
      continue;
    }
    const std::string target = JoinPath(dir, file.remote_name);
    DownloadFromAny(file, target, bases, dir, options);
    report.downloaded.push_back(target);
  }
  return report;
}

}  // namespace asgd::datasets
