#include "datasets/fetch.h"

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "datasets/content.h"

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

  FetchReport report;
  for (const KnownFile& file : dataset.files) {
    std::string existing;
    if (AlreadyPresent(dir, file, &existing)) {
      ASGD_LOG(kInfo, existing, " is present and valid");
      report.present.push_back(existing);
      continue;
    }
    const std::string target = JoinPath(dir, file.remote_name);
    std::vector<std::string> failures;
    std::string first_url;
    bool done = false;
    for (const std::string& base : bases) {
      const std::string url =
          (base.empty() || base.back() == '/' ? base : base + "/") + file.remote_name;
      if (first_url.empty()) first_url = url;
      ASGD_LOG(kInfo, "downloading ", url);
      std::string why = TryDownload(url, file, target, options);
      if (why.empty()) {
        ASGD_LOG(kInfo, "saved ", target, " (sha256 ok)");
        report.downloaded.push_back(target);
        done = true;
        break;
      }
      ASGD_LOG(kWarning, url, ": ", why);
      failures.push_back(url + ": " + why);
    }
    if (!done) {
      throw DataError(target, "download failed (" + Join(failures, "; ") +
                                  "); nothing was written. Download it by hand from " + first_url +
                                  " into " + dir + "/ (expected sha256 " + file.download_sha256 +
                                  "), or fetch from another location with --url BASE");
    }
  }
  return report;
}

}  // namespace asgd::datasets
