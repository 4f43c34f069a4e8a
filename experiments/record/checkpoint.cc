#include "experiments/record/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"
#include "core/sha256.h"
#include "experiments/config/config_keys.h"
#include "experiments/record/metrics.h"
#include "experiments/record/run_core.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;
using ::asgd::internal::StrCat;
using nlohmann::json;

constexpr int kManifestFormat = 1;
constexpr const char* kManifest = "manifest.json";

constexpr const char* kStepPrefix = "step-";    // runs on the parameter server: updates
constexpr const char* kRoundPrefix = "round-";  // runs on a collective: rounds

std::string FolderName(const CheckpointManifest& m) {
  const bool rounds = m.rounds >= 0;
  char name[40];
  std::snprintf(name, sizeof(name), "%s%012" PRId64, rounds ? kRoundPrefix : kStepPrefix,
                rounds ? m.rounds : m.step);
  return name;
}

// A checkpoint folder's place in time: round- folders after step- ones (a run on a
// collective saved by summed pushes, then resumed by a build that saves by rounds), then
// the number. Empty for a name that is not a checkpoint folder's.
std::optional<std::pair<int, int64_t>> FolderOrder(const std::string& name) {
  for (const auto& [prefix, kind] : {std::pair{kStepPrefix, 0}, std::pair{kRoundPrefix, 1}}) {
    const std::string_view p(prefix);
    if (name.size() <= p.size() || name.compare(0, p.size(), p) != 0) continue;
    int64_t n = 0;
    const char* first = name.data() + p.size();
    const char* last = name.data() + name.size();
    const auto [end, ec] = std::from_chars(first, last, n);
    if (ec != std::errc() || end != last || n < 0) return std::nullopt;
    return std::pair{kind, n};
  }
  return std::nullopt;
}

// Checkpoint folders under root, newest first.
std::vector<fs::path> Folders(const std::string& root) {
  std::vector<std::pair<std::pair<int, int64_t>, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory()) continue;
    if (const auto order = FolderOrder(e.path().filename().string())) {
      found.emplace_back(*order, e.path());
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

json ToJson(const CheckpointManifest& m) {
  json j;
  j["format"] = kManifestFormat;
  j["step"] = m.step;
  if (m.rounds >= 0) j["rounds"] = m.rounds;
  j["steps"] = m.steps;
  j["samples"] = m.samples;
  j["time_s"] = m.time_s;
  j["convergence_rows"] = m.convergence_rows;
  j["staleness_rows"] = m.staleness_rows;
  j["best_test_accuracy"] = m.best_test_accuracy;
  j["time_to_target_s"] = m.time_to_target_s;
  j["resumes"] = m.resumes;
  j["config_hash"] = m.config_hash;
  j["algorithm"] = m.algorithm;
  j["shards"] = json::array();
  for (const auto& s : m.shards) {
    j["shards"].push_back(
        {{"file", s.file}, {"sha256", s.sha256}, {"version", s.version}, {"elements", s.elements}});
  }
  j["staleness_histogram"] = json::array();
  for (const auto& [worker, counts] : m.staleness_histogram) {
    for (const auto& [staleness, count] : counts) {
      j["staleness_histogram"].push_back({worker, staleness, count});
    }
  }
  j["workers"] = json::array();
  for (const auto& w : m.workers) {
    j["workers"].push_back({{"worker", w.worker},
                            {"steps", w.steps},
                            {"samples", w.samples},
                            {"pushes", w.pushes},
                            {"active_s", w.active_s},
                            {"compute_s", w.compute_s},
                            {"wait_s", w.wait_s},
                            {"comm_s", w.comm_s},
                            {"bytes_pushed", w.bytes_pushed},
                            {"bytes_pulled", w.bytes_pulled},
                            {"dropped_pushes", w.dropped_pushes},
                            {"dense_bytes_pushed", w.dense_bytes_pushed}});
  }
  return j;
}

// Throws DataError(file, ...) for anything missing or of the wrong type.
CheckpointManifest FromJson(const std::string& text, const std::string& file) {
  try {
    const json j = json::parse(text);
    if (j.at("format").get<int>() != kManifestFormat) {
      throw DataError(
          file, StrCat("manifest format ", j.at("format").dump(), ", expected ", kManifestFormat));
    }
    CheckpointManifest m;
    m.step = j.at("step").get<int64_t>();
    // Absent: a run on the parameter server, or a collective's checkpoint of before rounds.
    m.rounds = j.contains("rounds") ? j.at("rounds").get<int64_t>() : -1;
    m.steps = j.at("steps").get<int64_t>();
    m.samples = j.at("samples").get<int64_t>();
    m.time_s = j.at("time_s").get<double>();
    m.convergence_rows = j.at("convergence_rows").get<int64_t>();
    m.staleness_rows = j.at("staleness_rows").get<int64_t>();
    m.best_test_accuracy = j.at("best_test_accuracy").get<double>();
    m.time_to_target_s = j.at("time_to_target_s").get<double>();
    m.resumes = j.at("resumes").get<int>();
    m.config_hash = j.at("config_hash").get<std::string>();
    m.algorithm = j.at("algorithm").get<std::string>();
    for (const auto& s : j.at("shards")) {
      CheckpointManifest::Shard shard;
      shard.file = s.at("file").get<std::string>();
      shard.sha256 = s.at("sha256").get<std::string>();
      shard.version = s.at("version").get<uint64_t>();
      shard.elements = s.at("elements").get<int64_t>();
      if (shard.file.empty() || shard.file.find('/') != std::string::npos || shard.file[0] == '.') {
        throw DataError(file, "a shard file name with a path in it: '" + shard.file + "'");
      }
      m.shards.push_back(shard);
    }
    for (const auto& h : j.at("staleness_histogram")) {
      m.staleness_histogram[h.at(0).get<uint32_t>()][h.at(1).get<int64_t>()] +=
          h.at(2).get<int64_t>();
    }
    for (const auto& w : j.at("workers")) {
      WorkerMetrics x;
      x.worker = w.at("worker").get<int>();
      x.steps = w.at("steps").get<int64_t>();
      x.samples = w.at("samples").get<int64_t>();
      x.pushes = w.at("pushes").get<int64_t>();
      x.active_s = w.at("active_s").get<double>();
      x.compute_s = w.at("compute_s").get<double>();
      x.wait_s = w.at("wait_s").get<double>();
      x.comm_s = w.value("comm_s", 0.0);  // absent in checkpoints of before the column
      x.bytes_pushed = w.at("bytes_pushed").get<int64_t>();
      x.bytes_pulled = w.at("bytes_pulled").get<int64_t>();
      x.dropped_pushes = w.at("dropped_pushes").get<int64_t>();
      // A checkpoint of before compression: every push was dense.
      x.dense_bytes_pushed = w.value("dense_bytes_pushed", x.bytes_pushed);
      m.workers.push_back(x);
    }
    if (m.step < 0 || (j.contains("rounds") && m.rounds < 0) || m.samples < 0 ||
        m.convergence_rows < 0 || m.staleness_rows < 0) {
      throw DataError(file, "negative counters");
    }
    return m;
  } catch (const json::exception& e) {
    throw DataError(file, StrCat("not a checkpoint manifest (", e.what(), ")"));
  }
}

// Verifies one checkpoint folder. Throws DataError naming the file at fault.
LoadedCheckpoint LoadFolder(const fs::path& dir) {
  const std::string manifest_path = (dir / kManifest).string();
  if (!FileExists(manifest_path)) {
    throw DataError(manifest_path, "missing (the save did not finish)");
  }
  LoadedCheckpoint c;
  c.dir = dir.string();
  c.manifest = FromJson(ReadFile(manifest_path), manifest_path);
  for (std::size_t i = 0; i < c.manifest.shards.size(); ++i) {
    const auto& entry = c.manifest.shards[i];
    const std::string path = (dir / entry.file).string();
    const std::string bytes = ReadFile(path);
    if (Sha256Hex(bytes) != entry.sha256) {
      throw DataError(path,
                      "SHA-256 differs from the manifest's (the file is corrupt or was changed)");
    }
    ps::ShardCheckpoint shard = ps::DecodeShardCheckpoint(bytes, path);
    if (shard.snapshot.shard != i || shard.snapshot.version != entry.version ||
        static_cast<int64_t>(shard.snapshot.values.size()) != entry.elements) {
      throw DataError(path, "shard, version or size differs from the manifest's");
    }
    if (!c.manifest.algorithm.empty() && !shard.rule_name.empty() &&
        shard.rule_name != c.manifest.algorithm) {
      // The rule's name is recorded for the reader; the manifest's algorithm decides.
      ASGD_LOG(kDebug, path, ": rule ", shard.rule_name, " for algorithm ", c.manifest.algorithm);
    }
    c.shards.push_back(std::move(shard.snapshot));
  }
  return c;
}

}  // namespace

std::string TrainingConfigHash(const Config& config) {
  std::string text;
  for (const KeySpec& key : config.schema().keys()) {
    if (!KeyIn(kTrainingSections, key.section()) && !KeyIn(kTrainingClusterKeys, key.name)) {
      continue;
    }
    if (KeyIn(kWhereNotWhatKeys, key.name)) continue;
    text += key.name;
    text += '=';
    text += config.Raw(key.name);
    text += '\n';
  }
  return Sha256Hex(text);
}

std::string CheckpointPosition(const CheckpointManifest& manifest) {
  return manifest.rounds >= 0 ? StrCat("round ", manifest.rounds)
                              : StrCat("update ", manifest.step);
}

CheckpointManifest ManifestOfRun(const std::string& algorithm, const std::string& config_hash,
                                 int resumes, const RunRecorder& recorder) {
  CheckpointManifest m;
  m.algorithm = algorithm;
  m.config_hash = config_hash;
  m.resumes = resumes;
  SetManifestAccount(m, recorder);
  return m;
}

void SetManifestAccount(CheckpointManifest& m, const RunRecorder& recorder) {
  m.convergence_rows = recorder.convergence_rows();
  m.best_test_accuracy = recorder.best_test_accuracy();
  m.time_to_target_s = recorder.time_to_target_s();
}

void SetManifestCounters(CheckpointManifest& m, const RunPosition& at,
                         const StalenessRecorder* staleness) {
  m.step = at.pushes;
  m.steps = at.steps;
  m.samples = at.samples;
  m.time_s = at.time_s;
  if (staleness != nullptr) {
    m.staleness_rows = staleness->rows_written();
    m.staleness_histogram = staleness->histogram();
  }
}

Checkpointer::Checkpointer(std::string run_path, int keep)
    : root_(std::move(run_path) + "/checkpoints"), keep_(keep) {
  ASGD_CHECK(keep_ >= 1, "keep ", keep_);
}

CheckpointManifest::Shard WriteShardFile(const std::string& folder, std::size_t index,
                                         const ps::ShardSnapshot& snapshot,
                                         const std::string& rule_name) {
  MakeDirs(folder);
  const std::string bytes = ps::EncodeShardCheckpoint(snapshot, rule_name);
  CheckpointManifest::Shard entry;
  entry.file = StrCat("shard-", index, ".ckpt");
  entry.sha256 = Sha256Hex(bytes);
  entry.version = snapshot.version;
  entry.elements = static_cast<int64_t>(snapshot.values.size());
  WriteFileAtomic((fs::path(folder) / entry.file).string(), bytes);
  return entry;
}

std::string Checkpointer::Folder(const CheckpointManifest& manifest) const {
  return (fs::path(root_) / FolderName(manifest)).string();
}

std::string Checkpointer::Save(CheckpointManifest manifest,
                               const std::vector<ps::ShardSnapshot>& shards) {
  const std::string dir = Folder(manifest);
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kManifest, ec)) return dir;  // this point is saved already
  manifest.shards.clear();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    manifest.shards.push_back(WriteShardFile(dir, i, shards[i], manifest.algorithm));
  }
  return WriteManifest(manifest);
}

std::string Checkpointer::WriteManifest(const CheckpointManifest& manifest) {
  const fs::path dir = Folder(manifest);
  MakeDirs(dir.string());
  WriteFileAtomic((dir / kManifest).string(), ToJson(manifest).dump(1) + "\n");
  // Older complete checkpoints beyond keep_, and incomplete ones (a crash mid-save).
  std::error_code ec;
  int complete = 0;
  for (const fs::path& f : Folders(root_)) {
    const bool has_manifest = fs::exists(f / kManifest, ec);
    if (has_manifest && ++complete <= keep_) continue;
    if (f == dir) continue;
    fs::remove_all(f, ec);
    if (ec) ASGD_LOG(kWarning, "checkpoint: could not remove ", f.string(), ": ", ec.message());
  }
  return dir.string();
}

LoadedCheckpoint LoadNewestCheckpoint(const std::string& run_path, const std::string& config_hash) {
  if (!IsDirectory(run_path)) {
    throw ConfigError("--resume", run_path, "a run folder (it does not exist)");
  }
  const std::vector<fs::path> folders = Folders(run_path + "/checkpoints");
  if (folders.empty()) {
    throw ConfigError("--resume", run_path,
                      "a run folder with a checkpoint (set experiment.checkpoint_every_steps or "
                      "checkpoint_every_s)");
  }
  std::vector<std::string> skipped;  // newest first
  for (const fs::path& dir : folders) {
    try {
      LoadedCheckpoint c = LoadFolder(dir);
      if (c.manifest.config_hash != config_hash) {
        throw ConfigError(
            StrCat("--resume ", run_path, ": checkpoint ", dir.filename().string(),
                   " is of another configuration (the [data], [model], [algorithm] or cluster "
                   "shards/placement/transport keys differ from the run's config.ini)"));
      }
      for (const std::string& why : skipped) {
        ASGD_LOG(kWarning, "resume: skipped a newer checkpoint: ", why);
      }
      return c;
    } catch (const DataError& e) {
      skipped.push_back(e.what());
    }
  }
  throw DataError(run_path, "no valid checkpoint; the newest: " + skipped.front());
}

namespace {

std::vector<std::string_view> SplitCells(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    cells.push_back(line.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return cells;
    start = comma + 1;
  }
}

// The schema before dropped pushes and windowed pushes had columns: the first eight.
constexpr std::size_t kOldStalenessColumns = 8;

}  // namespace

namespace {

// Rewrites the CSV at `path`, whose header is the first `old_count` of `now`, with the
// header `now` and every complete row extended by `extra(cells)` (a row cut short by a
// crash is left to the resume to drop). A file whose header is `now` is left untouched.
void UpgradeCsv(const std::string& path, const std::vector<std::string>& now, std::size_t old_count,
                const char* what,
                const std::function<std::string(const std::vector<std::string_view>&)>& extra) {
  const std::string text = ReadFile(path);
  const std::size_t at = text.find('\n');
  if (at == std::string::npos) throw DataError(path, "no header line");
  const std::vector<std::string_view> header = SplitCells(std::string_view(text).substr(0, at));
  if (std::equal(header.begin(), header.end(), now.begin(), now.end())) return;
  if (!std::equal(header.begin(), header.end(), now.begin(), now.begin() + old_count)) {
    throw DataError(path, StrCat("columns \"", std::string_view(text).substr(0, at),
                                 "\" are not those of ", what));
  }
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (std::size_t c = 0; c < now.size(); ++c) {
    if (c > 0) out.push_back(',');
    out.append(now[c]);
  }
  out.push_back('\n');
  long line_no = 1;
  for (std::size_t from = at + 1; from < text.size();) {
    std::size_t nl = text.find('\n', from);
    const bool complete = nl != std::string::npos;
    if (!complete) nl = text.size();
    const std::string_view line(text.data() + from, nl - from);
    ++line_no;
    from = nl + 1;
    out.append(line);
    if (!complete) break;
    if (!line.empty()) {
      const std::vector<std::string_view> cells = SplitCells(line);
      if (cells.size() != old_count) {
        throw DataError(path, StrCat("a row without the ", old_count, " columns of its header"),
                        line_no);
      }
      out.append(extra(cells));
    }
    out.push_back('\n');
  }
  WriteFileAtomic(path, out);
}

}  // namespace

void UpgradeStalenessCsv(const std::string& path) {
  // Every old row was an applied or accepted push computed on one version:
  // oldest_version = pulled_version, oldest_staleness = staleness, dropped = 0.
  UpgradeCsv(path, StalenessColumns(), kOldStalenessColumns, "staleness.csv",
             [](const std::vector<std::string_view>& cells) {
               return StrCat(",", cells[4], ",", cells[6], ",0");
             });
}

void UpgradeConvergenceCsv(const std::string& path) {
  // Rows of before consensus_distance were of strategies that do not measure it.
  const std::vector<std::string>& now = ConvergenceColumns();
  UpgradeCsv(path, now, now.size() - 1, "convergence.csv",
             [](const std::vector<std::string_view>&) { return std::string(",nan"); });
}

KeptStaleness FilterStalenessCsv(const std::string& path,
                                 const std::vector<uint64_t>& shard_versions) {
  UpgradeStalenessCsv(path);
  const std::string text = ReadFile(path);
  std::size_t at = text.find('\n');
  if (at == std::string::npos) throw DataError(path, "no header line");
  std::string out = text.substr(0, at + 1);
  const std::vector<std::string>& columns = StalenessColumns();
  auto column = [&](std::string_view name) {
    return static_cast<std::size_t>(std::find(columns.begin(), columns.end(), name) -
                                    columns.begin());
  };
  const std::size_t worker_at = column("worker"), shard_at = column("shard"),
                    applied_at = column("applied_version"), staleness_at = column("staleness"),
                    dropped_at = column("dropped");
  KeptStaleness kept;
  long line_no = 1;
  for (std::size_t from = at + 1; from < text.size();) {
    std::size_t nl = text.find('\n', from);
    if (nl == std::string::npos) nl = text.size();  // a last row cut short by a crash: dropped
    const std::string_view line(text.data() + from, nl - from);
    ++line_no;
    const bool complete = nl < text.size();
    from = nl + 1;
    if (!complete || line.empty()) continue;
    const std::vector<std::string_view> cells = SplitCells(line);
    if (cells.size() != columns.size()) {
      throw DataError(path, StrCat("a row without the ", columns.size(), " staleness columns"),
                      line_no);
    }
    try {
      const auto worker = static_cast<uint32_t>(std::stoul(std::string(cells[worker_at])));
      const auto shard = static_cast<std::size_t>(std::stoul(std::string(cells[shard_at])));
      const uint64_t applied = std::stoull(std::string(cells[applied_at]));
      const int64_t staleness = std::stoll(std::string(cells[staleness_at]));
      const bool dropped = cells[dropped_at] == "1";
      if (!dropped && cells[dropped_at] != "0") {
        throw DataError(path, "a staleness row whose dropped is neither 0 nor 1", line_no);
      }
      if (shard >= shard_versions.size())
        throw DataError(path, "a row of an unknown shard", line_no);
      // A dropped push is kept when it reached the shard before the save, as the others.
      if (applied >= shard_versions[shard]) continue;  // after the shard was saved
      out.append(line);
      out.push_back('\n');
      ++kept.rows;
      // The histogram holds the pushes the shards took in, as StalenessRecorder's.
      if (!dropped) ++kept.histogram[worker][staleness];
    } catch (const std::logic_error&) {
      throw DataError(path, "a staleness row with a non-number", line_no);
    }
  }
  if (out.size() != text.size()) WriteFileAtomic(path, out);
  return kept;
}

void TruncateCsv(const std::string& path, int64_t rows) {
  const std::string text = ReadFile(path);
  std::size_t at = 0;
  for (int64_t line = 0; line < rows + 1; ++line) {  // the header, then rows
    const std::size_t nl = text.find('\n', at);
    if (nl == std::string::npos) {
      throw DataError(
          path, StrCat("has ", line == 0 ? 0 : line - 1, " rows, the checkpoint counted ", rows));
    }
    at = nl + 1;
  }
  if (at != text.size()) WriteFileAtomic(path, std::string_view(text).substr(0, at));
}

}  // namespace asgd::experiments
