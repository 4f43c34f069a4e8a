#include "experiments/cluster/control_protocol.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <type_traits>

#include <msgpack.hpp>

#include "core/check.h"
#include "experiments/cluster/control_codec.h"

namespace asgd::experiments {
namespace {

using namespace control_codec;  // NOLINT(build/namespaces): this file's own codec
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

void PutMetrics(Writer& w, const WorkerMetrics& m) {
  w.Map("metrics", 11);
  w.Put("steps", m.steps);
  w.Put("samples", m.samples);
  w.Put("pushes", m.pushes);
  w.Put("active_s", m.active_s);
  w.Put("compute_s", m.compute_s);
  w.Put("wait_s", m.wait_s);
  w.Put("comm_s", m.comm_s);
  w.Put("bytes_pushed", m.bytes_pushed);
  w.Put("bytes_pulled", m.bytes_pulled);
  w.Put("dropped_pushes", m.dropped_pushes);
  w.Put("dense_bytes_pushed", m.dense_bytes_pushed);
}

// Optional (a worker of before compression leaves it out): then bytes_pushed.
bool ReadDenseBytes(Fields& f, WorkerMetrics* m) {
  std::optional<uint64_t> dense;
  if (!f.OptionalUint("dense_bytes_pushed", &dense)) return false;
  m->dense_bytes_pushed =
      dense ? static_cast<int64_t>(std::min<uint64_t>(*dense, kI64Max)) : m->bytes_pushed;
  return true;
}

bool ReadMetrics(Fields& f, WorkerMetrics* m) {
  return f.Int("steps", 0, kI64Max, &m->steps) && f.Int("samples", 0, kI64Max, &m->samples) &&
         f.Int("pushes", 0, kI64Max, &m->pushes) && f.Double("active_s", &m->active_s) &&
         f.Double("compute_s", &m->compute_s) && f.Double("wait_s", &m->wait_s) &&
         f.Double("comm_s", &m->comm_s) && f.Int("bytes_pushed", 0, kI64Max, &m->bytes_pushed) &&
         f.Int("bytes_pulled", 0, kI64Max, &m->bytes_pulled) &&
         f.Int("dropped_pushes", 0, kI64Max, &m->dropped_pushes) && ReadDenseBytes(f, m);
}

bool ReadRecord(Fields& f, ps::StalenessRecord* r) {
  const int64_t u32 = std::numeric_limits<uint32_t>::max();
  std::optional<uint64_t> oldest;
  bool dropped = false;
  if (!(f.IntAs("worker", 0, u32, &r->worker) && f.IntAs("shard", 0, u32, &r->shard) &&
        f.Int("step", std::numeric_limits<int64_t>::min(), kI64Max, &r->step) &&
        f.Uint("pulled_version", &r->pulled_version) &&
        f.Uint("applied_version", &r->applied_version) &&
        f.Int("staleness", std::numeric_limits<int64_t>::min(), kI64Max, &r->staleness) &&
        f.Double("wall_time_s", &r->wall_time_s) && f.OptionalUint("oldest_version", &oldest) &&
        f.OptionalBool("dropped", &dropped))) {
    return false;
  }
  // Absent: the push's gradients were all computed on the pulled version.
  if (oldest) {
    if (*oldest > r->pulled_version) {
      return f.Fail(StrCat("\"oldest_version\" = ", *oldest,
                           " exceeds \"pulled_version\" = ", r->pulled_version));
    }
    r->oldest_lag = r->pulled_version - *oldest;
  }
  r->outcome = dropped ? ps::PushOutcome::kDropped : ps::PushOutcome::kApplied;
  return true;
}

bool ReadSaved(Fields& f, SavedShard* s) {
  return f.Int("step", 0, kI64Max, &s->step) && f.Str("file", &s->file) &&
         f.Sha256("sha256", &s->sha256) && f.Uint("version", &s->version) &&
         f.Int("elements", 0, kI64Max, &s->elements);
}

bool ReadResult(Fields& f, EvalResultMessage* r) {
  if (!(f.Int("id", 0, kI64Max, &r->id) && f.Double("loss_sum", &r->loss_sum) &&
        f.Int("correct", 0, kI64Max, &r->correct) && f.Int("count", 0, kI64Max, &r->count))) {
    return false;
  }
  return r->correct <= r->count || f.Fail("\"correct\" exceeds \"count\"");
}

void PutSaved(Writer& w, const SavedShard& s) {
  w.Put("step", s.step);
  w.Put("file", s.file);
  w.Put("sha256", s.sha256);
  w.Put("version", s.version);
  w.Put("elements", s.elements);
}

bool ReadCollectiveEvaluation(Fields& f, CollectiveEvaluation* e) {
  if (!(f.Int("id", 0, kI64Max, &e->id) && f.Bool("full", &e->full) &&
        f.Int("samples", 0, kI64Max, &e->samples) && f.Int("updates", 0, kI64Max, &e->updates) &&
        f.Double("loss_sum", &e->loss_sum) && f.Int("correct", 0, kI64Max, &e->correct) &&
        f.Int("count", 0, kI64Max, &e->count) &&
        f.Double("consensus_distance", &e->consensus_distance))) {
    return false;
  }
  if (!(e->consensus_distance >= 0)) return f.Fail("\"consensus_distance\" is not >= 0");
  return e->correct <= e->count || f.Fail("\"correct\" exceeds \"count\"");
}

// Parses bytes into one msgpack object and reads its version and type. The handle owns
// the object; *type receives the message type. Returns "" or the error line.
std::string Open(std::string_view bytes, msgpack::object_handle* handle, std::string* type) {
  if (bytes.empty()) return "control message is empty";
  try {
    std::size_t off = 0;
    // Depth: message map > records array > record map. Sizes: strings up to the string
    // limit, arrays up to the record limit, maps small.
    // msgpack-c reserves an array's elements when it reads the array's length, so the
    // limit is also the input's size: each element takes at least one byte.
    const msgpack::unpack_limit limit(std::min(kMaxStalenessRecords, bytes.size()), 64,
                                      kMaxControlString, 0, 0, 4);
    *handle = msgpack::unpack(bytes.data(), bytes.size(), off, nullptr, nullptr, limit);
    if (off != bytes.size()) {
      return StrCat("control message has ", bytes.size() - off, " bytes after its end");
    }
  } catch (const std::exception& e) {
    return StrCat("control message is not valid MessagePack (", e.what(), ")");
  }
  std::string error;
  Fields f(handle->get(), "control message", &error);
  uint64_t version = 0;
  if (!f.Uint("version", &version)) return error;
  if (version != kControlVersion) {
    return StrCat("control message has version ", version, ", this program speaks ",
                  kControlVersion, " (every process of a run must be the same asgd)");
  }
  if (!f.Str("type", type)) return error;
  return "";
}

// Reads a message of a known type from its map; checks every key was known.
template <typename T, typename ReadFn>
ControlError ReadBody(const msgpack::object& o, const std::string& type, T* out, ReadFn read) {
  std::string error;
  Fields f(o, StrCat("control message \"", Printable(type), "\""), &error);
  (void)f.Find("version", true);
  (void)f.Find("type", true);
  *out = T{};
  if (!read(f, out) || !f.Done()) return ControlError(error);
  return {};
}

bool ReadTask(Fields& f, int* task) { return f.IntAs("task", 0, kIntMax, task); }

bool ReadRegister(Fields& f, RegisterRequest* m) {
  if (!(f.Str("role", &m->role) && ReadTask(f, &m->task) && f.Int("pid", 0, kI64Max, &m->pid) &&
        f.Str("host", &m->host))) {
    return false;
  }
  if (m->role != "ps" && m->role != "worker" && m->role != "evaluator") {
    return f.Fail(
        StrCat("\"role\" is \"", Printable(m->role), "\", expected ps, worker or evaluator"));
  }
  return true;
}

bool ReadWorkerReport(Fields& f, WorkerReport* m) {
  std::optional<WorkerMetrics> metrics;
  if (!(ReadTask(f, &m->task) && Nested(f, "metrics", true, &metrics, ReadMetrics) &&
        f.Double("loss_sum", &m->loss_sum) && f.Int("loss_count", 0, kI64Max, &m->loss_count) &&
        f.Bool("done", &m->done) && f.Str("failure", &m->failure) &&
        Nested(f, "evaluation", false, &m->evaluation, ReadCollectiveEvaluation) &&
        Nested(f, "saved", false, &m->saved, [](Fields& g, CollectiveSaved* c) {
          return ReadSaved(g, &c->shard) && g.Int("pushes", 0, kI64Max, &c->pushes);
        }))) {
    return false;
  }
  m->metrics = *metrics;
  m->metrics.worker = m->task;
  return true;
}

bool ReadPsReport(Fields& f, PsReport* m) {
  if (!(ReadTask(f, &m->task) && f.OptionalUint("shard_version", &m->version) &&
        Nested(f, "saved", false, &m->saved, ReadSaved) && f.Bool("done", &m->done))) {
    return false;
  }
  const msgpack::object* records = f.Find("records", true);
  if (!records) return false;
  if (records->type != msgpack::type::ARRAY) {
    return f.Fail(StrCat("\"records\" is ", TypeName(*records), ", expected an array"));
  }
  m->records.reserve(records->via.array.size);
  for (uint32_t i = 0; i < records->via.array.size; ++i) {
    Fields r(records->via.array.ptr[i], StrCat(f.what(), " record ", i), f.error());
    ps::StalenessRecord rec;
    if (!ReadRecord(r, &rec) || !r.Done()) return false;
    m->records.push_back(rec);
  }
  return true;
}

bool ReadEvaluatorReport(Fields& f, EvaluatorReport* m) {
  return f.IntAs("task", 0, 0, &m->task) && Nested(f, "result", false, &m->result, ReadResult) &&
         f.Bool("done", &m->done);
}

// A reply: the expected type, or an ErrorReply turned into a refused() error.
template <typename T, typename ReadFn>
ControlError DecodeReplyAs(std::string_view bytes, const char* expected, T* out, ReadFn read) {
  msgpack::object_handle handle;
  std::string type;
  if (std::string e = Open(bytes, &handle, &type); !e.empty()) return ControlError(e);
  if (type == "error") {
    ErrorReply r;
    ControlError e = ReadBody(handle.get(), type, &r, [](Fields& f, ErrorReply* m) {
      return f.Str("message", &m->message);
    });
    if (!e.ok()) return e;
    return ControlError("the coordinator refused: " + Printable(r.message, 1024), /*refused=*/true);
  }
  if (type != expected) {
    return ControlError(
        StrCat("control message is \"", Printable(type), "\", expected \"", expected, "\""));
  }
  return ReadBody(handle.get(), type, out, read);
}

}  // namespace

// ---- requests -------------------------------------------------------------------------

std::string Encode(const RegisterRequest& m) {
  Writer w("register", 4);
  w.Put("role", m.role);
  w.Put("task", m.task);
  w.Put("pid", m.pid);
  w.Put("host", m.host);
  return w.Bytes();
}

std::string Encode(const WorkerReport& m) {
  Writer w("worker_report", 6 + (m.evaluation ? 1u : 0u) + (m.saved ? 1u : 0u));
  w.Put("task", m.task);
  PutMetrics(w, m.metrics);
  w.Put("loss_sum", m.loss_sum);
  w.Put("loss_count", m.loss_count);
  w.Put("done", m.done);
  w.Put("failure", m.failure);
  if (m.evaluation) {
    const CollectiveEvaluation& e = *m.evaluation;
    w.Map("evaluation", 8);
    w.Put("id", e.id);
    w.Put("full", e.full);
    w.Put("samples", e.samples);
    w.Put("updates", e.updates);
    w.Put("loss_sum", e.loss_sum);
    w.Put("correct", e.correct);
    w.Put("count", e.count);
    w.Put("consensus_distance", e.consensus_distance);
  }
  if (m.saved) {
    w.Map("saved", 6);
    PutSaved(w, m.saved->shard);
    w.Put("pushes", m.saved->pushes);
  }
  return w.Bytes();
}

std::string Encode(const PsReport& m) {
  Writer w("ps_report", 3 + (m.version ? 1u : 0u) + (m.saved ? 1u : 0u));
  w.Put("task", m.task);
  if (m.version) w.Put("shard_version", *m.version);
  if (m.saved) {
    w.Map("saved", 5);
    PutSaved(w, *m.saved);
  }
  w.Put("done", m.done);
  w.Array("records", static_cast<uint32_t>(m.records.size()));
  for (const auto& r : m.records) {
    // The optional keys only when they say something, so a record of an applied push
    // without a window is what a coordinator of before them reads.
    const bool windowed = r.oldest_lag > 0;
    w.RawMap(7 + (windowed ? 1u : 0u) + (r.dropped() ? 1u : 0u));
    w.Put("worker", uint64_t{r.worker});
    w.Put("shard", uint64_t{r.shard});
    w.Put("step", r.step);
    w.Put("pulled_version", r.pulled_version);
    w.Put("applied_version", r.applied_version);
    w.Put("staleness", r.staleness);
    w.Put("wall_time_s", r.wall_time_s);
    if (windowed) w.Put("oldest_version", r.oldest_version());
    if (r.dropped()) w.Put("dropped", true);
  }
  return w.Bytes();
}

std::string Encode(const EvaluatorReport& m) {
  Writer w("evaluator_report", 2 + (m.result ? 1u : 0u));
  w.Put("task", m.task);
  if (m.result) {
    w.Map("result", 4);
    w.Put("id", m.result->id);
    w.Put("loss_sum", m.result->loss_sum);
    w.Put("correct", m.result->correct);
    w.Put("count", m.result->count);
  }
  w.Put("done", m.done);
  return w.Bytes();
}

std::string EncodeRequest(const ControlRequest& m) {
  return std::visit([](const auto& r) { return Encode(r); }, m);
}

ControlError DecodeRequest(std::string_view bytes, ControlRequest* out) {
  msgpack::object_handle handle;
  std::string type;
  if (std::string e = Open(bytes, &handle, &type); !e.empty()) return ControlError(e);
  auto as = [&](auto message, auto read) {
    ControlError e = ReadBody(handle.get(), type, &message, read);
    if (e.ok()) *out = std::move(message);
    return e;
  };
  if (type == "register") return as(RegisterRequest{}, ReadRegister);
  if (type == "worker_report") return as(WorkerReport{}, ReadWorkerReport);
  if (type == "ps_report") return as(PsReport{}, ReadPsReport);
  if (type == "evaluator_report") return as(EvaluatorReport{}, ReadEvaluatorReport);
  return ControlError(StrCat("control message has an unknown type \"", Printable(type), "\""));
}

// ---- replies --------------------------------------------------------------------------

namespace {

void PutEvalOrder(Writer& w, const EvalOrder& o) {
  w.Map("evaluate", 2 + (o.best_above ? 1u : 0u));
  w.Put("id", o.id);
  w.Put("full", o.full);
  if (o.best_above) w.Put("best_above", *o.best_above);
}

void PutCheckpointOrder(Writer& w, const CheckpointOrder& o) {
  w.Map("checkpoint", 2);
  w.Put("step", o.step);
  w.Put("dir", o.dir);
}

bool ReadCheckpointOrder(Fields& c, CheckpointOrder* o) {
  return c.Int("step", 0, kI64Max, &o->step) && c.Str("dir", &o->dir);
}

bool ReadEvalOrder(Fields& e, EvalOrder* o) {
  return e.Int("id", 0, kI64Max, &o->id) && e.Bool("full", &o->full) &&
         e.OptionalDouble("best_above", &o->best_above);
}

}  // namespace

std::string Encode(const RegisterReply& m) {
  const bool collective = !m.collective_dir.empty();
  const bool save = !m.save_dir.empty();
  Writer w("register_reply",
           1 + (m.restore ? 1u : 0u) + (collective ? 1u : 0u) + (save ? 2u : 0u));
  w.Put("run_id", m.run_id);
  if (collective) w.Put("collective_dir", m.collective_dir);
  if (save) {
    w.Put("save_dir", m.save_dir);
    w.Put("best_above", m.best_above);
  }
  if (m.restore) {
    w.Map("restore", 3);
    w.Put("file", m.restore->file);
    w.Put("sha256", m.restore->sha256);
    w.Put("version", m.restore->version);
  }
  return w.Bytes();
}

std::string Encode(const WorkerReply& m) {
  Writer w("worker_reply",
           6 + (m.evaluate ? 1u : 0u) + (m.checkpoint ? 1u : 0u) + (m.best_above ? 1u : 0u));
  w.Put("start", m.start);
  w.Put("stop", m.stop);
  w.Put("paused", m.paused);
  w.Put("samples", m.samples);
  w.Put("sample_budget", m.sample_budget);
  w.Put("step_budget", m.step_budget);
  if (m.evaluate) PutEvalOrder(w, *m.evaluate);
  if (m.checkpoint) PutCheckpointOrder(w, *m.checkpoint);
  if (m.best_above) w.Put("best_above", *m.best_above);
  return w.Bytes();
}

std::string Encode(const PsReply& m) {
  Writer w("ps_reply", 3 + (m.checkpoint ? 1u : 0u));
  w.Put("close", m.close);
  w.Put("stop", m.stop);
  w.Put("live_workers", m.live_workers);
  if (m.checkpoint) PutCheckpointOrder(w, *m.checkpoint);
  return w.Bytes();
}

std::string Encode(const EvaluatorReply& m) {
  Writer w("evaluator_reply", 1 + (m.evaluate ? 1u : 0u));
  w.Put("stop", m.stop);
  if (m.evaluate) PutEvalOrder(w, *m.evaluate);
  return w.Bytes();
}

std::string Encode(const ErrorReply& m) {
  Writer w("error", 1);
  w.Put("message", m.message.substr(0, kMaxControlString));
  return w.Bytes();
}

ControlError DecodeReply(std::string_view bytes, RegisterReply* out) {
  return DecodeReplyAs(bytes, "register_reply", out, [](Fields& f, RegisterReply* m) {
    std::optional<double> best;
    const bool ok = f.Str("run_id", &m->run_id) &&
                    f.OptionalStr("collective_dir", &m->collective_dir) &&
                    f.OptionalStr("save_dir", &m->save_dir) &&
                    f.OptionalDouble("best_above", &best) &&
                    Nested(f, "restore", false, &m->restore, [](Fields& r, RestoreOrder* o) {
                      return r.Str("file", &o->file) && r.Sha256("sha256", &o->sha256) &&
                             r.Uint("version", &o->version);
                    });
    m->best_above = best.value_or(0.0);
    return ok;
  });
}

ControlError DecodeReply(std::string_view bytes, WorkerReply* out) {
  return DecodeReplyAs(bytes, "worker_reply", out, [](Fields& f, WorkerReply* m) {
    return f.Bool("start", &m->start) && f.Bool("stop", &m->stop) && f.Bool("paused", &m->paused) &&
           f.Int("samples", 0, kI64Max, &m->samples) &&
           f.Int("sample_budget", 0, kI64Max, &m->sample_budget) &&
           f.Int("step_budget", -1, kI64Max, &m->step_budget) &&
           Nested(f, "evaluate", false, &m->evaluate, ReadEvalOrder) &&
           Nested(f, "checkpoint", false, &m->checkpoint, ReadCheckpointOrder) &&
           f.OptionalDouble("best_above", &m->best_above);
  });
}

ControlError DecodeReply(std::string_view bytes, PsReply* out) {
  return DecodeReplyAs(bytes, "ps_reply", out, [](Fields& f, PsReply* m) {
    return f.Bool("close", &m->close) && f.Bool("stop", &m->stop) &&
           f.IntAs("live_workers", 0, kIntMax, &m->live_workers) &&
           Nested(f, "checkpoint", false, &m->checkpoint, ReadCheckpointOrder);
  });
}

ControlError DecodeReply(std::string_view bytes, EvaluatorReply* out) {
  return DecodeReplyAs(bytes, "evaluator_reply", out, [](Fields& f, EvaluatorReply* m) {
    return f.Bool("stop", &m->stop) && Nested(f, "evaluate", false, &m->evaluate, ReadEvalOrder);
  });
}

}  // namespace asgd::experiments
