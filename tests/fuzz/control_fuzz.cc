// libFuzzer target over the control protocol's decoders (experiments/cluster/control_protocol.h):
// what the coordinator reads from any peer (DecodeRequest) and what each role reads from
// the coordinator (DecodeReply of every reply type). They must never crash, throw or read
// outside the input; an error must be one line; and whatever they accept must satisfy
// what control_protocol.h promises (ranges below) and survive Encode + Decode unchanged
// (the second encoding equals the first, byte for byte).
//
// Input framing: byte 0 modulo 5 picks the decoder (0 request, 1 register reply, 2 worker
// reply, 3 ps reply, 4 evaluator reply); the rest is the message. An empty input is the
// empty message to the request decoder.
//
// Seeds: `control_fuzz --write-seeds=DIR` writes a valid message of every type (and an
// error reply to each reply decoder) in this framing to DIR (the committed corpus in
// tests/fuzz/corpus/control) and exits. See README.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "experiments/cluster/control_protocol.h"
#include "fuzz_util.h"

namespace asgd::experiments {
namespace {

void CheckError(const ControlError& e) {
  ASGD_FUZZ_CHECK(!e.message().empty());
  ASGD_FUZZ_CHECK(e.message().find_first_of("\n\r") == std::string::npos);
}

bool Sha256Ok(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The promises on an accepted request.
void CheckRequest(const ControlRequest& m) {
  if (const auto* r = std::get_if<RegisterRequest>(&m)) {
    ASGD_FUZZ_CHECK(r->role == "ps" || r->role == "worker" || r->role == "evaluator");
    ASGD_FUZZ_CHECK(r->task >= 0 && r->pid >= 0);
  } else if (const auto* w = std::get_if<WorkerReport>(&m)) {
    ASGD_FUZZ_CHECK(w->task >= 0 && w->metrics.worker == w->task);
    ASGD_FUZZ_CHECK(w->metrics.steps >= 0 && w->metrics.samples >= 0 && w->metrics.pushes >= 0);
    ASGD_FUZZ_CHECK(w->metrics.bytes_pushed >= 0 && w->metrics.bytes_pulled >= 0);
    ASGD_FUZZ_CHECK(w->metrics.dropped_pushes >= 0 && w->loss_count >= 0);
  } else if (const auto* p = std::get_if<PsReport>(&m)) {
    ASGD_FUZZ_CHECK(p->task >= 0 && p->records.size() <= kMaxStalenessRecords);
    for (const auto& rec : p->records) {
      ASGD_FUZZ_CHECK(rec.oldest_lag <= rec.pulled_version);
      ASGD_FUZZ_CHECK(rec.outcome != ps::PushOutcome::kAccepted);
    }
    if (p->saved) ASGD_FUZZ_CHECK(p->saved->step >= 0 && Sha256Ok(p->saved->sha256));
  } else if (const auto* e = std::get_if<EvaluatorReport>(&m)) {
    ASGD_FUZZ_CHECK(e->task == 0);
    if (e->result) {
      ASGD_FUZZ_CHECK(e->result->id >= 0 && e->result->correct >= 0);
      ASGD_FUZZ_CHECK(e->result->correct <= e->result->count);
    }
  }
}

void FuzzRequest(std::string_view bytes) {
  ControlRequest m;
  const ControlError e = DecodeRequest(bytes, &m);
  if (!e.ok()) return CheckError(e);
  ASGD_FUZZ_CHECK(!e.refused());
  CheckRequest(m);
  const std::string once = EncodeRequest(m);
  ControlRequest again;
  ASGD_FUZZ_CHECK(DecodeRequest(once, &again).ok());
  ASGD_FUZZ_CHECK(again.index() == m.index());
  ASGD_FUZZ_CHECK(EncodeRequest(again) == once);
}

void CheckReply(const RegisterReply& r) {
  if (r.restore) ASGD_FUZZ_CHECK(Sha256Ok(r.restore->sha256));
}
void CheckReply(const WorkerReply& r) {
  ASGD_FUZZ_CHECK(r.samples >= 0 && r.sample_budget >= 0 && r.step_budget >= -1);
}
void CheckReply(const PsReply& r) {
  ASGD_FUZZ_CHECK(r.live_workers >= 0);
  if (r.checkpoint) ASGD_FUZZ_CHECK(r.checkpoint->step >= 0);
}
void CheckReply(const EvaluatorReply& r) {
  if (r.evaluate) ASGD_FUZZ_CHECK(r.evaluate->id >= 0);
}

template <typename Reply>
void FuzzReply(std::string_view bytes) {
  Reply m;
  const ControlError e = DecodeReply(bytes, &m);
  if (!e.ok()) return CheckError(e);
  CheckReply(m);
  const std::string once = Encode(m);
  Reply again;
  ASGD_FUZZ_CHECK(DecodeReply(once, &again).ok());
  ASGD_FUZZ_CHECK(Encode(again) == once);
}

void FuzzOne(const uint8_t* data, std::size_t size) {
  if (size == 0) return FuzzRequest({});
  // A heap copy of exactly the message, so that AddressSanitizer sees a read past its end.
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      return FuzzRequest(bytes);
    case 1:
      return FuzzReply<RegisterReply>(bytes);
    case 2:
      return FuzzReply<WorkerReply>(bytes);
    case 3:
      return FuzzReply<PsReply>(bytes);
    default:
      return FuzzReply<EvaluatorReply>(bytes);
  }
}

fuzz::Seeds MakeSeeds() {
  fuzz::Seeds seeds;
  auto add = [&](const std::string& name, char decoder, const std::string& message) {
    seeds.emplace_back(name, std::string(1, decoder) + message);
  };
  add("register", 0, Encode(RegisterRequest{"worker", 1, 4242, "node-1"}));
  WorkerReport w;
  w.task = 1;
  w.metrics.steps = 10;
  w.metrics.samples = 640;
  w.metrics.pushes = 10;
  w.metrics.active_s = 1.5;
  w.metrics.compute_s = 1.25;
  w.metrics.wait_s = 0.25;
  w.metrics.bytes_pushed = 4096;
  w.metrics.bytes_pulled = 8192;
  w.loss_sum = 147.25;
  w.loss_count = 640;
  add("worker_report", 0, Encode(w));
  w.done = true;
  w.failure = "worker 1: training loss is NaN";
  add("worker_report_failed", 0, Encode(w));
  PsReport p;
  p.task = 0;
  ps::StalenessRecord r;
  r.worker = 1;
  r.step = 9;
  r.pulled_version = 17;
  r.applied_version = 19;
  r.staleness = 2;
  r.wall_time_s = 1.8e9 + 0.125;
  p.records = {r, r};
  p.version = 20;
  add("ps_report", 0, Encode(p));
  ps::StalenessRecord late = r;  // a windowed push a round dropped
  late.oldest_lag = 5;
  late.outcome = ps::PushOutcome::kDropped;
  p.records = {r, late};
  add("ps_report_windowed_dropped", 0, Encode(p));
  p.records = {r, r};
  p.saved = SavedShard{100, "shard-0.ckpt", std::string(64, 'c'), 20, 4096};
  add("ps_report_saved", 0, Encode(p));
  PsReport last;
  last.done = true;
  add("ps_report_last", 0, Encode(last));
  EvaluatorReport e;
  add("evaluator_report", 0, Encode(e));
  e.result = EvalResultMessage{3, 57.5, 93, 100};
  add("evaluator_report_result", 0, Encode(e));
  add("register_reply", 1, Encode(RegisterReply{"20261124-run", std::nullopt}));
  add("register_reply_restore", 1,
      Encode(RegisterReply{"20261124-run", RestoreOrder{"run/checkpoints/step-100/shard-0.ckpt",
                                                        std::string(64, 'e'), 20}}));
  RegisterReply saving{"20261124-run", std::nullopt};
  saving.save_dir = "run";
  saving.best_above = 0.75;
  add("register_reply_save", 1, Encode(saving));
  add("worker_reply", 2, Encode(WorkerReply{true, false, false, 6400, 128, -1}));
  WorkerReply rank0{true, false, false, 6400, 128, -1};
  rank0.best_above = 0.5;
  add("worker_reply_best", 2, Encode(rank0));
  add("ps_reply", 3,
      Encode(PsReply{false, false, 2, CheckpointOrder{100, "run/checkpoints/step-100"}}));
  add("evaluator_reply", 4, Encode(EvaluatorReply{false, EvalOrder{3, true}}));
  add("evaluator_reply_best", 4, Encode(EvaluatorReply{false, EvalOrder{3, false, 0.9}}));
  add("error_reply", 2, Encode(ErrorReply{"no worker 7 in this cluster"}));
  return seeds;
}

}  // namespace
}  // namespace asgd::experiments

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  asgd::fuzz::HandleWriteSeeds("control_fuzz", *argc, *argv, asgd::experiments::MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  asgd::fuzz::RunOne("control_fuzz", [&] { asgd::experiments::FuzzOne(data, size); });
  return 0;
}
