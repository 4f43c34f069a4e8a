// The messages of a multi-process run's control channel
// (docs/architecture.md#roles-and-processes): what the roles
// (ps, worker, evaluator) send the coordinator and what it answers. transport/control.h
// carries them as opaque bytes; this file gives them their meaning.
//
// Encoding: each message is one MessagePack map with string keys: "version" (always
// kControlVersion), "type" (the message's name below) and the message's own fields.
// Optional fields are left out when unset; nested values (worker metrics, staleness
// records, a restore or checkpoint order, an evaluation request or result) are maps with
// named keys too, never positional arrays.
//
// Decoding: a peer's bytes are input, not trusted. Every Decode* checks, before anything
// is used, that the bytes are exactly one MessagePack map (no trailing bytes, containers
// and strings within bounds), that the version is kControlVersion, the type is the one
// expected, every required key is present with the right type and in range, and that no
// key is unknown or repeated. It never throws and never aborts on malformed input: the
// result is a ControlError holding one line naming the first problem (a peer's text in it
// has its control characters replaced and is cut short).
//
// A reply is either the expected reply message or an ErrorReply (the coordinator refused
// the request); Decode*Reply reports the latter as a ControlError "the coordinator
// refused: <message>" with refused() true.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "experiments/record/metrics.h"
#include "ps/staleness.h"

namespace asgd::experiments {

inline constexpr uint32_t kControlVersion = 1;

// Bounds a decoder enforces (a peer cannot make the coordinator allocate at will beyond
// the channel's own message limit).
inline constexpr std::size_t kMaxControlString = 64 * 1024;    // any string field
inline constexpr std::size_t kMaxStalenessRecords = 1u << 22;  // records in one report

// The outcome of a decode: ok, or one line saying what was wrong.
class ControlError {
 public:
  ControlError() = default;
  explicit ControlError(std::string message, bool refused = false)
      : message_(std::move(message)), refused_(refused) {}
  bool ok() const { return message_.empty(); }
  const std::string& message() const { return message_; }
  // True when the peer sent an ErrorReply (a well-formed refusal).
  bool refused() const { return refused_; }

 private:
  std::string message_;
  bool refused_ = false;
};

// ---- role -> coordinator ------------------------------------------------------------

// Sent once by every role before anything else (and again by a restarted process).
struct RegisterRequest {
  std::string role;  // "ps", "worker" or "evaluator"
  int task = 0;      // >= 0
  int64_t pid = 0;   // >= 0
  std::string host;
  bool operator==(const RegisterRequest&) const = default;
};

// A checkpoint file a shard wrote (CheckpointManifest::Shard plus the update it is for).
struct SavedShard {
  int64_t step = 0;  // the checkpoint's update count, >= 0
  std::string file;
  std::string sha256;  // 64 lowercase hex digits
  uint64_t version = 0;
  int64_t elements = 0;  // >= 0
  bool operator==(const SavedShard&) const = default;
};

// Rank 0's checkpoint of a run on a collective: the average's file (shard.version: the
// steps every worker had taken at the boundary) and its own pushes then (every worker
// pushed as many).
struct CollectiveSaved {
  SavedShard shard;
  int64_t pushes = 0;  // >= 0
  bool operator==(const CollectiveSaved&) const = default;
};

// What rank 0 of a run on a collective evaluated at a round boundary (the workers'
// average θ̄, collective_rank.h): the coordinator writes its convergence row.
struct CollectiveEvaluation {
  int64_t id = 0;       // the EvalOrder it answers; 0 = one by epochs or the final one, >= 0
  bool full = false;    // the whole test set (the final evaluation)
  int64_t samples = 0;  // the run's samples at the boundary, >= 0
  int64_t updates = 0;  // the run's updates at the boundary, >= 0
  double loss_sum = 0;
  int64_t correct = 0;  // 0 <= correct <= count
  int64_t count = 0;
  double consensus_distance = 0;  // (1/N)·Σ‖θ_i − θ̄‖², >= 0
  bool operator==(const CollectiveEvaluation&) const = default;
};

// A worker's periodic report (also its heartbeat). metrics.worker is the task.
struct WorkerReport {
  int task = 0;
  WorkerMetrics metrics;   // counters >= 0; its worker field is not sent (it is task)
  double loss_sum = 0;     // training loss x examples since the last report
  int64_t loss_count = 0;  // examples since the last report, >= 0
  bool done = false;       // the worker's loop ended
  std::string failure;     // why it ended badly ("" = it did not)
  // Rank 0 of a strategy on a collective: an evaluation of the average ("evaluation").
  std::optional<CollectiveEvaluation> evaluation;
  // Rank 0 of a strategy on a collective: the checkpoint it wrote ("saved").
  std::optional<CollectiveSaved> saved;
};

// A shard's periodic report: the staleness records since the last one. A record's keys:
// worker, shard, step, pulled_version, applied_version, staleness, wall_time_s, and two
// optional ones, sent only when they say something: "oldest_version" (the version the
// push's oldest gradients were computed on; at most pulled_version, absent = equal) and
// "dropped" (true: the rule dropped the push). Of the outcome only that is sent: the
// coordinator records an applied or accepted push as applied, as it always did.
struct PsReport {
  int task = 0;
  std::vector<ps::StalenessRecord> records;
  std::optional<uint64_t>
      version;  // the shard's version ("shard_version"); unset in the final report
  std::optional<SavedShard> saved;  // the last checkpoint file, until acknowledged
  bool done = false;
  bool operator==(const PsReport&) const = default;
};

// An evaluation the evaluator finished.
struct EvalResultMessage {
  int64_t id = 0;  // the EvalOrder it answers, >= 0
  double loss_sum = 0;
  int64_t correct = 0;  // 0 <= correct <= count
  int64_t count = 0;
  bool operator==(const EvalResultMessage&) const = default;
};

// The evaluator's periodic report.
struct EvaluatorReport {
  int task = 0;  // always 0 (one evaluator)
  std::optional<EvalResultMessage> result;
  bool done = false;
  bool operator==(const EvaluatorReport&) const = default;
};

using ControlRequest = std::variant<RegisterRequest, WorkerReport, PsReport, EvaluatorReport>;

// ---- coordinator -> role ------------------------------------------------------------

// For a shard that starts from a checkpoint (a resumed run, or a restarted shard).
struct RestoreOrder {
  std::string file;
  std::string sha256;  // 64 lowercase hex digits
  uint64_t version = 0;
  bool operator==(const RestoreOrder&) const = default;
};

struct RegisterReply {
  std::string run_id;
  std::optional<RestoreOrder> restore;
  // A worker of a strategy on a collective: the folder of the file store the ranks meet
  // in ("collective_dir"; "" = not one).
  std::string collective_dir;
  // The role that evaluates (the evaluator; rank 0 of a collective), when the model can
  // save itself (models::Model::CanSave): the run folder, where it writes final_model.pt
  // after the final evaluation and best_model.pt after one above the run's best
  // ("save_dir"; "" = nothing to write).
  std::string save_dir;
  // With save_dir: the run's best test accuracy so far (a resumed run's restored best),
  // which an evaluation must pass to be written as best_model.pt ("best_above").
  double best_above = 0;
  bool operator==(const RegisterReply&) const = default;
};

struct CheckpointOrder {
  int64_t step = 0;  // >= 0
  std::string dir;
  bool operator==(const CheckpointOrder&) const = default;
};

struct EvalOrder {
  int64_t id = 0;     // >= 0
  bool full = false;  // the whole test set, else metrics.eval_examples of it
  // The run's best test accuracy before this evaluation, when the role saves models
  // (RegisterReply::save_dir): above it, the role writes best_model.pt ("best_above").
  std::optional<double> best_above;
  bool operator==(const EvalOrder&) const = default;
};

struct WorkerReply {
  bool start = false;         // training may begin
  bool stop = false;          // stop after the current step
  bool paused = false;        // a shard is being restarted: wait
  int64_t samples = 0;        // the run's samples so far, >= 0
  int64_t sample_budget = 0;  // in this process's count, >= 0
  int64_t step_budget = -1;   // likewise; -1 = no step limit
  // A strategy on a collective: the evaluation the coordinator waits for (the ranks hold
  // themselves for it at their next vote; rank 0 answers with WorkerReport::evaluation).
  std::optional<EvalOrder> evaluate;
  // A strategy on a collective: the checkpoint to take at the next vote (rank 0 writes
  // the average into dir and answers with WorkerReport::saved).
  std::optional<CheckpointOrder> checkpoint;
  // Rank 0 of a collective that saves models (RegisterReply::save_dir): the run's best
  // test accuracy so far, which its next evaluation must pass to be written as
  // best_model.pt ("best_above").
  std::optional<double> best_above;
  bool operator==(const WorkerReply&) const = default;
};

struct PsReply {
  bool close = false;    // refuse further pushes (let a synchronous round go)
  bool stop = false;     // shut down
  int live_workers = 0;  // >= 0
  std::optional<CheckpointOrder> checkpoint;
  bool operator==(const PsReply&) const = default;
};

struct EvaluatorReply {
  bool stop = false;
  std::optional<EvalOrder> evaluate;
  bool operator==(const EvaluatorReply&) const = default;
};

// The coordinator refused a request (the message says why, one line).
struct ErrorReply {
  std::string message;
  bool operator==(const ErrorReply&) const = default;
};

// ---- encoding ----------------------------------------------------------------------

std::string Encode(const RegisterRequest& m);
std::string Encode(const WorkerReport& m);
std::string Encode(const PsReport& m);
std::string Encode(const EvaluatorReport& m);
std::string EncodeRequest(const ControlRequest& m);
std::string Encode(const RegisterReply& m);
std::string Encode(const WorkerReply& m);
std::string Encode(const PsReply& m);
std::string Encode(const EvaluatorReply& m);
std::string Encode(const ErrorReply& m);

// A request of any type (the coordinator's side).
ControlError DecodeRequest(std::string_view bytes, ControlRequest* out);
// The reply each role expects; an ErrorReply is returned as a refused() error.
ControlError DecodeReply(std::string_view bytes, RegisterReply* out);
ControlError DecodeReply(std::string_view bytes, WorkerReply* out);
ControlError DecodeReply(std::string_view bytes, PsReply* out);
ControlError DecodeReply(std::string_view bytes, EvaluatorReply* out);

}  // namespace asgd::experiments
