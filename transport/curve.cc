#include "transport/curve.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>

#include <zmq.h>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "transport/zap_handler.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

using ::asgd::internal::StrCat;

bool CurveAvailable() { return zmq_has("curve") == 1; }

namespace {

void RequireCurve() {
  if (!CurveAvailable()) {
    throw IoError(
        "transport: this libzmq was built without CURVE (zmq_has(\"curve\") is false); "
        "install a libzmq with libsodium");
  }
}

// A public key of the form the handshake reports it in ZAP requests: 32 bytes.
bool DecodeKey(std::string_view z85, std::string* binary) {
  if (z85.size() != kCurveKeyChars) return false;
  const std::string text(z85);
  uint8_t out[32];
  if (zmq_z85_decode(out, text.c_str()) == nullptr) return false;
  if (binary != nullptr) binary->assign(reinterpret_cast<const char*>(out), sizeof(out));
  return true;
}

std::string EncodeKey(std::string_view binary) {
  if (binary.size() != 32) return "(not a 32-byte key)";
  char out[kCurveKeyChars + 1];
  if (zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(binary.data()), binary.size()) ==
      nullptr) {
    return "(not a key)";
  }
  return std::string(out, kCurveKeyChars);
}

void CheckKey(const std::string& value, const char* field, bool secret) {
  if (IsCurveKey(value)) return;
  // A secret key never goes into a message, not even a malformed one.
  throw ConfigError(field, secret ? (value.empty() ? "" : "(hidden)") : value,
                    "a CURVE key: 40 characters of Z85 text (asgd keys generate)");
}

}  // namespace

CurveKeyPair NewCurveKeyPair() {
  RequireCurve();
  char pub[kCurveKeyChars + 1], sec[kCurveKeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0) {
    throw IoError(StrCat("transport: zmq_curve_keypair: ", zmq_strerror(zmq_errno())));
  }
  return {std::string(pub, kCurveKeyChars), std::string(sec, kCurveKeyChars)};
}

bool IsCurveKey(std::string_view z85) { return DecodeKey(z85, nullptr); }

std::string CurvePublicKey(std::string_view secret_key) {
  if (!IsCurveKey(secret_key) || !CurveAvailable()) return "";
  const std::string secret(secret_key);
  char pub[kCurveKeyChars + 1];
  if (zmq_curve_public(pub, secret.c_str()) != 0) return "";
  return std::string(pub, kCurveKeyChars);
}

void CheckCurveServer(const CurveOptions& o) {
  if (!o.enabled) return;
  RequireCurve();
  CheckKey(o.server_secret_key, "curve.server_secret_key", true);
  if (!o.server_public_key.empty()) {
    CheckKey(o.server_public_key, "curve.server_public_key", false);
    if (CurvePublicKey(o.server_secret_key) != o.server_public_key) {
      throw ConfigError("curve.server_public_key", o.server_public_key,
                        "the public key of curve.server_secret_key (the two are of different "
                        "key pairs)");
    }
  }
  if (o.authorized_clients.empty()) {
    throw ConfigError("curve.authorized_clients", "",
                      "at least one client public key (a CURVE server accepts only listed keys)");
  }
  for (const std::string& k : o.authorized_clients) {
    CheckKey(k, "curve.authorized_clients", false);
  }
}

void CheckCurveClient(const CurveOptions& o) {
  if (!o.enabled) return;
  RequireCurve();
  CheckKey(o.server_public_key, "curve.server_public_key", false);
  CheckKey(o.client_secret_key, "curve.client_secret_key", true);
  CheckKey(o.client_public_key, "curve.client_public_key", false);
  if (CurvePublicKey(o.client_secret_key) != o.client_public_key) {
    throw ConfigError("curve.client_public_key", o.client_public_key,
                      "the public key of curve.client_secret_key (the two are of different "
                      "key pairs)");
  }
}

namespace internal {

using Steady = std::chrono::steady_clock;

namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
// At most one refusal line per server socket this often; the lines in between are counted.
constexpr auto kRefusalLogEvery = std::chrono::seconds(10);
// How often the handler thread looks for new servers and for the stop flag.
constexpr auto kPollInterval = std::chrono::milliseconds(100);

std::string Text(const zmq::message_t& m) {
  return std::string(static_cast<const char*>(m.data()), m.size());
}

}  // namespace

// One CURVE server socket, as its ZAP handler knows it.
struct ZapDomain {
  std::string name;            // its ZMQ_ZAP_DOMAIN
  std::string what;            // "shard 3", for log lines; immutable
  std::set<std::string> keys;  // authorized public keys, 32 bytes each; immutable
  std::atomic<uint64_t> refused{0};
  std::atomic<bool> active{true};
  std::mutex mu;
  std::string address ASGD_GUARDED_BY(mu);  // bound address, for log lines
  // Handler thread only: log rate limiting.
  Steady::time_point last_log{};
  uint64_t unlogged = 0;

  std::string Address() {
    std::lock_guard<std::mutex> lock(mu);
    return address;
  }
  // On the handler thread: counts a refusal and logs it, at most every kRefusalLogEvery.
  void Refuse(const std::string& why) {
    refused.fetch_add(1, std::memory_order_relaxed);
    const auto now = Steady::now();
    if (last_log != Steady::time_point() && now - last_log < kRefusalLogEvery) {
      ++unlogged;
      return;
    }
    const std::string more =
        unlogged == 0 ? "" : StrCat(" (and ", unlogged, " more refusals since the last line)");
    ASGD_LOG(kWarning, "transport: ", what, " at ", Address(), " refused ", why, more);
    last_log = now;
    unlogged = 0;
  }
};

struct ZapHandler::Monitor {
  std::shared_ptr<ZapDomain> domain;
  zmq::socket_t socket;  // PAIR connected to the server socket's monitor
};

ZapHandler::ZapHandler(zmq::context_t& context) : context_(context) {
  RequireCurve();
  try {
    zap_ = zmq::socket_t(context_, zmq::socket_type::rep);
    zap_.set(zmq::sockopt::linger, 0);
    zap_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    ThrowZmqError(e, "bind the ZAP handler on", kZapEndpoint);
  }
  thread_ = std::thread([this] { Loop(); });
}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  new_monitors_.clear();  // closes their sockets
}

std::shared_ptr<ZapDomain> ZapHandler::Register(zmq::socket_t& server,
                                                const std::vector<std::string>& keys,
                                                std::string what) {
  auto domain = std::make_shared<ZapDomain>();
  domain->what = std::move(what);
  for (const std::string& k : keys) {
    std::string binary;
    if (!DecodeKey(k, &binary)) {
      throw ConfigError("curve.authorized_clients", k, "CURVE public keys (40 characters of Z85)");
    }
    domain->keys.insert(std::move(binary));
  }
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = next_domain_++;
  }
  domain->name = StrCat("asgd-curve-", n);
  const std::string monitor_address = StrCat("inproc://asgd-curve-monitor-", n);
  auto monitor = std::make_unique<Monitor>();
  monitor->domain = domain;
  try {
    server.set(zmq::sockopt::zap_domain, domain->name);
    // Handshakes that fail before ZAP is asked (no CURVE, a wrong server key) are only
    // seen by the socket's monitor. A client without CURVE sees the mismatch too and may
    // hang up first: the server then sees a handshake that ended without detail.
    if (zmq_socket_monitor(
            server.handle(), monitor_address.c_str(),
            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
      throw zmq::error_t();
    }
    monitor->socket = zmq::socket_t(context_, zmq::socket_type::pair);
    monitor->socket.set(zmq::sockopt::linger, 0);
    monitor->socket.connect(monitor_address);
  } catch (const zmq::error_t& e) {
    ThrowZmqError(e, "monitor the CURVE server on", monitor_address);
  }
  std::lock_guard<std::mutex> lock(mu_);
  domains_.push_back(domain);
  new_monitors_.push_back(std::move(monitor));  // the handler thread takes it over
  return domain;
}

void ZapHandler::Unregister(const std::shared_ptr<ZapDomain>& domain) {
  domain->active.store(false);
  std::lock_guard<std::mutex> lock(mu_);
  domains_.erase(std::remove(domains_.begin(), domains_.end(), domain), domains_.end());
}

void ZapHandler::Loop() {
  std::vector<std::unique_ptr<Monitor>> monitors;
  std::vector<zmq::pollitem_t> items;
  while (!stop_.load()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& m : new_monitors_) monitors.push_back(std::move(m));
      new_monitors_.clear();
    }
    // A server gone: its monitor socket closes here, on the thread that owns it.
    monitors.erase(std::remove_if(monitors.begin(), monitors.end(),
                                  [](const auto& m) { return !m->domain->active.load(); }),
                   monitors.end());
    items.clear();
    items.push_back({zap_.handle(), 0, ZMQ_POLLIN, 0});
    for (const auto& m : monitors) items.push_back({m->socket.handle(), 0, ZMQ_POLLIN, 0});
    try {
      if (zmq::poll(items, kPollInterval) == 0) continue;
      if (items[0].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> request;
        do {
          request.emplace_back();
          (void)zap_.recv(request.back());
        } while (request.back().more());
        AnnotateReceive();
        Answer(request);
      }
      for (std::size_t i = 1; i < items.size(); ++i) {
        if (items[i].revents & ZMQ_POLLIN) ReadEvent(*monitors[i - 1]);
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      if (e.num() == ETERM) break;
      // Without its handler no CURVE client can connect: say so once, and stop.
      ASGD_LOG(kError, "transport: the CURVE (ZAP) handler failed: ", e.what());
      break;
    }
  }
  monitors.clear();
  zap_.close();
}

void ZapHandler::Answer(std::vector<zmq::message_t>& request) {
  // RFC 27: version, request id, domain, address, routing id, mechanism, credentials.
  std::string status = "400", text = "refused";
  std::shared_ptr<ZapDomain> domain;
  if (request.size() >= 6 && Text(request[0]) == "1.0") {
    const std::string name = Text(request[2]);
    const std::string mechanism = Text(request[5]);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& d : domains_) {
        if (d->name == name) domain = d;
      }
    }
    if (mechanism == "NULL" && domain == nullptr) {
      // A plain socket of this context (none of ours sets a domain): not ours to police.
      status = "200";
      text = "OK";
    } else if (domain != nullptr && mechanism == "CURVE" && request.size() >= 7) {
      const std::string key = Text(request[6]);
      if (domain->keys.count(key) != 0) {
        status = "200";
        text = "OK";
      } else {
        text = "client key not authorized";
        domain->Refuse(StrCat("a CURVE client from ", Text(request[3]), ": its public key ",
                              EncodeKey(key), " is not an authorized client"));
      }
    } else if (domain != nullptr) {
      domain->Refuse(StrCat("a ", mechanism, " client from ", Text(request[3])));
    }
  }
  const std::string version = "1.0";
  const std::string id = request.size() >= 2 ? Text(request[1]) : "";
  AnnotateSend();
  zap_.send(zmq::buffer(version), zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(id), zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(status), zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(text), zmq::send_flags::sndmore);
  zap_.send(zmq::str_buffer(""), zmq::send_flags::sndmore);  // user id
  zap_.send(zmq::str_buffer(""), zmq::send_flags::none);     // metadata
}

void ZapHandler::ReadEvent(Monitor& m) {
  // A monitor event: 6 bytes (uint16 event, uint32 value), then the endpoint.
  zmq::message_t event, endpoint;
  if (!m.socket.recv(event, zmq::recv_flags::dontwait)) return;
  if (event.more()) (void)m.socket.recv(endpoint);
  while (endpoint.more()) (void)m.socket.recv(endpoint);  // not the format we know
  AnnotateReceive();
  if (event.size() < 6) return;
  uint16_t id = 0;
  uint32_t value = 0;
  std::memcpy(&id, event.data(), sizeof(id));
  std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof(value));
  // libzmq does not say who the peer was; the ZAP path above does.
  if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
    m.domain->Refuse(StrCat("a connection that ended during the handshake (",
                            zmq_strerror(static_cast<int>(value)),
                            "): a client without CURVE, for one"));
    return;
  }
  if (id != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) return;
  std::string why;
  switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      why = "a client without CURVE (ZeroMQ security mechanism mismatch)";
      break;
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      why = "a CURVE client that failed the key exchange (it uses another server public key)";
      break;
    default: {
      char code[16];
      std::snprintf(code, sizeof(code), "0x%08x", value);
      why = StrCat("a client whose CURVE handshake failed (ZeroMQ protocol error ", code, ")");
    }
  }
  m.domain->Refuse(why);
}

CurveServerSecurity::CurveServerSecurity(Context& context, zmq::socket_t& socket,
                                         const CurveOptions& options, std::string what)
    : context_(context) {
  // The handler must be bound before the socket takes connections: a CURVE server whose
  // context has no ZAP handler accepts every client that knows its public key.
  ZapHandler& handler = context_.zap_handler();
  domain_ = handler.Register(socket, options.authorized_clients, std::move(what));
  try {
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, options.server_secret_key);
  } catch (const zmq::error_t& e) {
    handler.Unregister(domain_);
    ThrowZmqError(e, "make a CURVE server of", domain_->what);
  }
}

CurveServerSecurity::~CurveServerSecurity() { context_.zap_handler().Unregister(domain_); }

void CurveServerSecurity::SetAddress(const std::string& address) {
  std::lock_guard<std::mutex> lock(domain_->mu);
  domain_->address = address;
}

uint64_t CurveServerSecurity::refused() const {
  return domain_->refused.load(std::memory_order_relaxed);
}

void ConfigureCurveClient(zmq::socket_t& socket, const CurveOptions& options) {
  socket.set(zmq::sockopt::curve_serverkey, options.server_public_key);
  socket.set(zmq::sockopt::curve_publickey, options.client_public_key);
  socket.set(zmq::sockopt::curve_secretkey, options.client_secret_key);
}

}  // namespace internal
}  // namespace asgd::transport
