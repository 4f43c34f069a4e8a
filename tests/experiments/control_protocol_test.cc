#include "experiments/cluster/control_protocol.h"

#include <cmath>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <msgpack.hpp>

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;

RegisterRequest SomeRegister() { return {"worker", 3, 4242, "node-7"}; }

WorkerReport SomeWorkerReport() {
  WorkerReport r;
  r.task = 1;
  r.metrics.worker = 1;
  r.metrics.steps = 10;
  r.metrics.samples = 640;
  r.metrics.pushes = 9;
  r.metrics.active_s = 1.5;
  r.metrics.compute_s = 1.25;
  r.metrics.wait_s = 0.25;
  r.metrics.bytes_pushed = 1 << 20;
  r.metrics.bytes_pulled = 3 << 20;
  r.metrics.dropped_pushes = 2;
  r.loss_sum = 123.5;
  r.loss_count = 640;
  r.done = true;
  r.failure = "worker 1: loss is NaN";
  return r;
}

PsReport SomePsReport() {
  PsReport r;
  r.task = 2;
  ps::StalenessRecord a;
  a.worker = 1;
  a.shard = 2;
  a.step = 17;
  a.pulled_version = 40;
  a.applied_version = 43;
  a.staleness = 3;
  a.wall_time_s = 1.75e9;
  ps::StalenessRecord b = a;
  b.worker = 0;
  b.step = -1;
  b.staleness = -2;                  // ssp states clocks
  ps::StalenessRecord c = a;         // a windowed push a synchronous rule dropped
  c.oldest_lag = 6;
  c.outcome = ps::PushOutcome::kDropped;
  r.records = {a, b, c};
  r.version = 44;
  r.saved = SavedShard{500, "shard-2.ckpt", std::string(64, 'a'), 44, 1000};
  return r;
}

template <typename T>
T RoundTripRequest(const T& m) {
  ControlRequest out;
  const ControlError e = DecodeRequest(Encode(m), &out);
  EXPECT_TRUE(e.ok()) << e.message();
  EXPECT_TRUE(std::holds_alternative<T>(out));
  return std::get<T>(out);
}

template <typename T>
T RoundTripReply(const T& m) {
  T out;
  const ControlError e = DecodeReply(Encode(m), &out);
  EXPECT_TRUE(e.ok()) << e.message();
  return out;
}

TEST(ControlProtocol, RequestsRoundTrip) {
  EXPECT_EQ(RoundTripRequest(SomeRegister()), SomeRegister());
  const WorkerReport w = RoundTripRequest(SomeWorkerReport());
  const WorkerReport x = SomeWorkerReport();
  EXPECT_EQ(w.task, x.task);
  EXPECT_EQ(w.metrics.worker, 1);
  EXPECT_EQ(w.metrics.steps, x.metrics.steps);
  EXPECT_EQ(w.metrics.samples, x.metrics.samples);
  EXPECT_EQ(w.metrics.pushes, x.metrics.pushes);
  EXPECT_EQ(w.metrics.active_s, x.metrics.active_s);
  EXPECT_EQ(w.metrics.compute_s, x.metrics.compute_s);
  EXPECT_EQ(w.metrics.wait_s, x.metrics.wait_s);
  EXPECT_EQ(w.metrics.bytes_pushed, x.metrics.bytes_pushed);
  EXPECT_EQ(w.metrics.bytes_pulled, x.metrics.bytes_pulled);
  EXPECT_EQ(w.metrics.dropped_pushes, x.metrics.dropped_pushes);
  EXPECT_EQ(w.loss_sum, x.loss_sum);
  EXPECT_EQ(w.loss_count, x.loss_count);
  EXPECT_EQ(w.done, x.done);
  EXPECT_EQ(w.failure, x.failure);
  EXPECT_FALSE(w.evaluation.has_value());
  // Rank 0 of a strategy on a collective: its evaluation of the average.
  WorkerReport rank0 = SomeWorkerReport();
  rank0.evaluation = CollectiveEvaluation{3, false, 4800, 75, 31.25, 550, 600, 2.5e-7};
  EXPECT_EQ(RoundTripRequest(rank0).evaluation, rank0.evaluation);
  rank0.saved =
      CollectiveSaved{SavedShard{300, "shard-0.ckpt", std::string(64, 'b'), 112, 323}, 112};
  EXPECT_EQ(RoundTripRequest(rank0).saved, rank0.saved);
  EXPECT_EQ(RoundTripRequest(SomePsReport()), SomePsReport());
  PsReport last;  // the final report: no version, no saved file, no records
  last.done = true;
  EXPECT_EQ(RoundTripRequest(last), last);
  EvaluatorReport e;
  EXPECT_EQ(RoundTripRequest(e), e);
  e.result = EvalResultMessage{7, 12.5, 90, 100};
  e.done = true;
  EXPECT_EQ(RoundTripRequest(e), e);
}

TEST(ControlProtocol, NanLossSurvives) {
  WorkerReport r = SomeWorkerReport();
  r.loss_sum = std::nan("");
  EXPECT_TRUE(std::isnan(RoundTripRequest(r).loss_sum));
}

TEST(ControlProtocol, RepliesRoundTrip) {
  RegisterReply r{"20260101-000000-run", std::nullopt, "", "", 0.0};
  EXPECT_EQ(RoundTripReply(r), r);
  r.restore = RestoreOrder{"ckpt/step-10/shard-0.ckpt", std::string(64, 'f'), 9};
  EXPECT_EQ(RoundTripReply(r), r);
  r.collective_dir = "runs/20260101-000000-run/rendezvous";
  EXPECT_EQ(RoundTripReply(r), r);
  // The role that evaluates a model that can save itself: where, and the best so far.
  r.save_dir = "runs/20260101-000000-run";
  r.best_above = 0.8125;
  EXPECT_EQ(RoundTripReply(r), r);
  WorkerReply w{true, false, true, 1000, 64, -1, std::nullopt, std::nullopt, std::nullopt};
  EXPECT_EQ(RoundTripReply(w), w);
  w.evaluate = EvalOrder{5, false, std::nullopt};
  w.checkpoint = CheckpointOrder{300, "runs/r/checkpoints/step-000000000300"};
  EXPECT_EQ(RoundTripReply(w), w);
  w.best_above = 0.5;
  EXPECT_EQ(RoundTripReply(w), w);
  PsReply p{true, false, 3, std::nullopt};
  EXPECT_EQ(RoundTripReply(p), p);
  p.checkpoint = CheckpointOrder{100, "checkpoints/step-100"};
  EXPECT_EQ(RoundTripReply(p), p);
  EvaluatorReply e{false, EvalOrder{4, true, std::nullopt}};
  EXPECT_EQ(RoundTripReply(e), e);
  e.evaluate->best_above = 0.0;  // a fresh run: any accuracy is the best so far
  EXPECT_EQ(RoundTripReply(e), e);
  e.evaluate->best_above = 0.97;
  EXPECT_EQ(RoundTripReply(e), e);
}

TEST(ControlProtocol, ErrorReplyIsARefusal) {
  WorkerReply w;
  const ControlError e = DecodeReply(Encode(ErrorReply{"no worker 7 in this cluster"}), &w);
  EXPECT_FALSE(e.ok());
  EXPECT_TRUE(e.refused());
  EXPECT_EQ(e.message(), "the coordinator refused: no worker 7 in this cluster");
}

// Builds a message map by hand: version, type, then the given key/value pairs.
class Builder {
 public:
  explicit Builder(uint32_t entries) : pk_(buf_) { pk_.pack_map(entries); }
  // A message of the given type: version 1 and the type come first.
  Builder(uint32_t entries, const char* type) : Builder(entries) {
    Put("version", 1).Put("type", type);
  }
  Builder(const Builder&) = delete;
  template <typename V>
  Builder& Put(const std::string& k, const V& v) {
    pk_.pack(k);
    pk_.pack(v);
    return *this;
  }
  Builder& Nil(const std::string& k) {
    pk_.pack(k);
    pk_.pack_nil();
    return *this;
  }
  std::string Bytes() const { return {buf_.data(), buf_.size()}; }

 private:
  msgpack::sbuffer buf_;
  msgpack::packer<msgpack::sbuffer> pk_;
};

std::string RequestError(const std::string& bytes) {
  ControlRequest out;
  const ControlError e = DecodeRequest(bytes, &out);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  return e.message();
}

TEST(ControlProtocol, RefusesTruncatedInput) {
  const std::string full = Encode(SomePsReport());
  for (std::size_t n = 0; n < full.size(); ++n) {
    ControlRequest out;
    EXPECT_FALSE(DecodeRequest(full.substr(0, n), &out).ok()) << n << " bytes";
  }
  EXPECT_THAT(RequestError(""), HasSubstr("empty"));
  EXPECT_THAT(RequestError(full.substr(0, full.size() / 2)), HasSubstr("not valid MessagePack"));
  EXPECT_THAT(RequestError(full + "x"), HasSubstr("1 bytes after its end"));
}

TEST(ControlProtocol, RefusesOtherVersionsAndTypes) {
  EXPECT_THAT(RequestError(Builder(2).Put("version", 2).Put("type", "register").Bytes()),
              HasSubstr("version 2, this program speaks 1"));
  EXPECT_THAT(RequestError(Builder(1).Put("type", "register").Bytes()),
              HasSubstr("has no \"version\""));
  EXPECT_THAT(RequestError(Builder(2).Put("version", 1).Put("type", "dance").Bytes()),
              HasSubstr("unknown type \"dance\""));
  EXPECT_THAT(RequestError("\x93\x01\x02\x03"),
              HasSubstr("is an array, expected a map"));  // [1, 2, 3]
  // A reply where a request belongs, and the reverse.
  EXPECT_THAT(RequestError(Encode(WorkerReply{})), HasSubstr("unknown type \"worker_reply\""));
  WorkerReply w;
  const ControlError e = DecodeReply(Encode(PsReply{}), &w);
  EXPECT_FALSE(e.refused());
  EXPECT_THAT(e.message(), HasSubstr("is \"ps_reply\", expected \"worker_reply\""));
}

TEST(ControlProtocol, RefusesMissingMistypedAndOutOfRangeFields) {
  auto reg = [](uint32_t n) { return Builder(n + 2, "register"); };
  EXPECT_THAT(RequestError(reg(3).Put("role", "worker").Put("task", 0).Put("pid", 1).Bytes()),
              HasSubstr("has no \"host\""));
  EXPECT_THAT(
      RequestError(
          reg(4).Put("role", "worker").Put("task", "0").Put("pid", 1).Put("host", "x").Bytes()),
      HasSubstr("\"task\" is a string, expected an integer"));
  EXPECT_THAT(
      RequestError(
          reg(4).Put("role", "worker").Put("task", -1).Put("pid", 1).Put("host", "x").Bytes()),
      HasSubstr("\"task\" = -1 is outside"));
  EXPECT_THAT(
      RequestError(
          reg(4).Put("role", "chief").Put("task", 0).Put("pid", 1).Put("host", "x").Bytes()),
      HasSubstr("expected ps, worker or evaluator"));
  EXPECT_THAT(
      RequestError(
          reg(4).Put("role", "worker").Put("task", 0).Put("pid", 1.5).Put("host", "x").Bytes()),
      HasSubstr("\"pid\" is a float, expected an integer"));
  EXPECT_THAT(
      RequestError(reg(4).Put("role", "worker").Put("task", 0).Put("pid", 1).Nil("host").Bytes()),
      HasSubstr("\"host\" is nil"));
  // Inside nested maps: the message and the field are named.
  Builder ps(5, "ps_report");
  ps.Put("task", 0).Put("done", false).Put("records", std::vector<int>{1, 2, 3});
  EXPECT_THAT(RequestError(ps.Bytes()), HasSubstr("record 0 is an integer, expected a map"));
  EXPECT_THAT(RequestError(Builder(4, "evaluator_report").Put("task", 0).Put("done", "no").Bytes()),
              HasSubstr("\"done\" is a string, expected a boolean"));
  EvaluatorReport e;
  e.result = EvalResultMessage{1, 1.0, 11, 10};
  EXPECT_THAT(RequestError(Encode(e)), HasSubstr("\"correct\" exceeds \"count\""));
  WorkerReport w = SomeWorkerReport();
  w.metrics.samples = -5;
  EXPECT_THAT(RequestError(Encode(w)), HasSubstr("\"metrics\" \"samples\" = -5 is outside"));
  WorkerReport rank0 = SomeWorkerReport();
  rank0.evaluation = CollectiveEvaluation{1, false, 10, 1, 1.0, 11, 10, 0.0};
  EXPECT_THAT(RequestError(Encode(rank0)), HasSubstr("\"correct\" exceeds \"count\""));
  rank0.evaluation = CollectiveEvaluation{1, false, 10, 1, 1.0, 5, 10, -1.0};
  EXPECT_THAT(RequestError(Encode(rank0)), HasSubstr("\"consensus_distance\" is not >= 0"));
  rank0.evaluation = CollectiveEvaluation{1, false, -10, 1, 1.0, 5, 10, 0.0};
  EXPECT_THAT(RequestError(Encode(rank0)), HasSubstr("\"samples\" = -10 is outside"));
  PsReport p = SomePsReport();
  p.saved->sha256 = "not-a-digest";
  EXPECT_THAT(RequestError(Encode(p)), HasSubstr("\"sha256\" is not 64 lowercase hex digits"));
}

// A record's optional keys travel only when they say something (an older coordinator
// reads the others), come back as sent, and an oldest version above the pulled one is
// refused by name.
TEST(ControlProtocol, StalenessRecordsCarryTheOldestVersionAndDropped) {
  PsReport p = SomePsReport();
  p.records.resize(1);  // a: applied, no window
  std::string bytes = Encode(p);
  EXPECT_EQ(bytes.find("oldest_version"), std::string::npos);
  EXPECT_EQ(bytes.find("\xa7"
                       "dropped"),
            std::string::npos);  // the key, a 7-byte fixstr
  p = SomePsReport();
  const PsReport back = RoundTripRequest(p);
  ASSERT_EQ(back.records.size(), 3u);
  EXPECT_EQ(back.records[2].oldest_version(), 34u);
  EXPECT_EQ(back.records[2].oldest_staleness(), 9);
  EXPECT_TRUE(back.records[2].dropped());
  EXPECT_FALSE(back.records[0].dropped());
  EXPECT_EQ(back.records[0].oldest_lag, 0u);
  p.records[2].oldest_lag = p.records[2].pulled_version + 1;  // oldest would wrap above
  EXPECT_THAT(RequestError(Encode(p)),
              HasSubstr("record 2 \"oldest_version\" = 18446744073709551615 exceeds "
                        "\"pulled_version\" = 40"));
}

TEST(ControlProtocol, RefusesExtraAndRepeatedFields) {
  EXPECT_THAT(RequestError(Builder(7)
                               .Put("version", 1)
                               .Put("type", "register")
                               .Put("role", "ps")
                               .Put("task", 0)
                               .Put("pid", 1)
                               .Put("host", "x")
                               .Put("colour", "blue")
                               .Bytes()),
              HasSubstr("unknown field \"colour\""));
  EXPECT_THAT(RequestError(Builder(7)
                               .Put("version", 1)
                               .Put("type", "register")
                               .Put("role", "ps")
                               .Put("task", 0)
                               .Put("task", 1)
                               .Put("pid", 1)
                               .Put("host", "x")
                               .Bytes()),
              HasSubstr("repeats \"task\""));
}

// A peer's text lands in error lines with its control characters replaced, cut short:
// still one line.
TEST(ControlProtocol, PeerTextInErrorsStaysOneLine) {
  EXPECT_EQ(RequestError(Builder(7, "register")
                             .Put("role", "ps")
                             .Put("task", 0)
                             .Put("pid", 1)
                             .Put("host", "x")
                             .Put("a\nb", 1)
                             .Bytes()),
            "control message \"register\" has an unknown field \"a?b\"");
  EXPECT_THAT(RequestError(Builder(2, std::string(100, 'y').c_str()).Bytes()),
              HasSubstr("unknown type \"" + std::string(64, 'y') + "...\""));
  WorkerReply w;
  const ControlError e = DecodeReply(Encode(ErrorReply{"two\nlines"}), &w);
  EXPECT_EQ(e.message(), "the coordinator refused: two?lines");
}

}  // namespace
}  // namespace asgd::experiments
