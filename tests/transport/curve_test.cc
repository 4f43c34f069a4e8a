// CURVE on the parameter server and the control channel, over tcp on loopback: an
// authorized client pushes and pulls exactly; a client with an unlisted key, a plain
// client and a client that names another server key are refused during the handshake,
// so their requests time out and the shard is untouched; refusals are counted and
// logged (rate-limited) with the peer address where ZeroMQ gives it.
#include "transport/curve.h"

#include <chrono>
#include <mutex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/log.h"
#include "core/param_layout.h"
#include "transport/control.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::transport {

using ps::NewAddRule;
using ps::Placement;
using ps::ShardSnapshot;
using ps::Status;
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// More than 4 KiB of floats: a whole-shard push is above the server's maxmsgsize floor,
// so CURVE's per-frame overhead must be allowed for.
constexpr int64_t kSize = 3000;

Placement OneShard() {
  ParamLayout layout;
  layout.Add("w", {kSize});
  return Placement::Build(layout, 1, {});
}

std::vector<float> Initial() {
  std::vector<float> v(kSize);
  for (int64_t i = 0; i < kSize; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i % 13);
  return v;
}

// A cluster's keys: the server pair and one authorized client pair.
struct Keys {
  CurveKeyPair server = NewCurveKeyPair();
  CurveKeyPair client = NewCurveKeyPair();

  CurveOptions Server() const {
    CurveOptions o;
    o.enabled = true;
    o.server_public_key = server.public_key;
    o.server_secret_key = server.secret_key;
    o.authorized_clients = {client.public_key};
    return o;
  }
  CurveOptions Client(const CurveKeyPair& pair) const {
    CurveOptions o;
    o.enabled = true;
    o.server_public_key = server.public_key;
    o.client_public_key = pair.public_key;
    o.client_secret_key = pair.secret_key;
    return o;
  }
  CurveOptions Client() const { return Client(client); }
};

// Log lines, captured from any thread.
class LogCapture {
 public:
  LogCapture() {
    SetLogSink([this](std::string_view line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { SetLogSink(nullptr); }
  std::vector<std::string> Matching(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& l : lines_) {
      if (l.find(text) != std::string::npos) out.push_back(l);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

struct CurveShard {
  std::shared_ptr<Context> context = NewContext();
  std::unique_ptr<ShardServer> server;

  explicit CurveShard(const CurveOptions& curve) {
    ServerOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.curve = curve;
    server = std::make_unique<ShardServer>(context, o, Initial(), NewAddRule());
    server->Start();
  }
  // A client in its own context, as in another process.
  std::unique_ptr<PsClient> Client(const CurveOptions& curve, std::chrono::milliseconds timeout) {
    ClientOptions o;
    o.curve = curve;
    o.timeout = timeout;
    return std::make_unique<PsClient>(NewContext(), std::vector<std::string>{server->endpoint()},
                                      OneShard(), o);
  }
  // Waits (at most 10 s) until the server counted at least n refusals.
  uint64_t WaitForRefusals(uint64_t n) const {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (server->stats().auth_refused < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    return server->stats().auth_refused;
  }
  // The shard is as it started: no version, the initial values, no request read.
  void ExpectUntouched() const {
    const ShardSnapshot snap = server->Snapshot();
    EXPECT_EQ(snap.version, 0u);
    EXPECT_EQ(snap.values, Initial());
    const ShardStats st = server->stats();
    EXPECT_EQ(st.requests, 0u);
    EXPECT_EQ(st.bytes_received, 0u);
  }
};

// A push of ones that must not land; returns its status.
Status RefusedPush(PsClient& client) {
  const std::vector<float> ones(kSize, 1.0f);
  return client.PushAndWait(ones);
}

TEST(Curve, KeysAreZ85AndChecked) {
  ASSERT_TRUE(CurveAvailable());
  const CurveKeyPair pair = NewCurveKeyPair();
  EXPECT_EQ(pair.public_key.size(), kCurveKeyChars);
  EXPECT_TRUE(IsCurveKey(pair.public_key));
  EXPECT_TRUE(IsCurveKey(pair.secret_key));
  EXPECT_EQ(CurvePublicKey(pair.secret_key), pair.public_key);
  EXPECT_NE(NewCurveKeyPair().public_key, pair.public_key);
  EXPECT_FALSE(IsCurveKey(""));
  EXPECT_FALSE(IsCurveKey(pair.public_key.substr(1)));
  EXPECT_FALSE(IsCurveKey(std::string(40, ' ')));  // not Z85
  EXPECT_EQ(CurvePublicKey("nonsense"), "");

  Keys keys;
  EXPECT_NO_THROW(CheckCurveServer(keys.Server()));
  EXPECT_NO_THROW(CheckCurveClient(keys.Client()));
  EXPECT_NO_THROW(CheckCurveServer(CurveOptions{}));  // disabled: nothing to check

  CurveOptions o = keys.Server();
  o.authorized_clients.clear();
  EXPECT_THROW(CheckCurveServer(o), ConfigError);
  o = keys.Server();
  o.server_public_key = keys.client.public_key;  // of another pair
  EXPECT_THROW(CheckCurveServer(o), ConfigError);
  o = keys.Client();
  o.client_public_key = keys.server.public_key;
  EXPECT_THROW(CheckCurveClient(o), ConfigError);
  o = keys.Client();
  o.server_public_key = "short";
  try {
    CheckCurveClient(o);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("curve.server_public_key"));
  }
  o = keys.Client();
  o.client_secret_key[0] = ' ';
  try {
    CheckCurveClient(o);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("curve.client_secret_key"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr(o.client_secret_key)));  // never shown
  }
  // A CURVE server on inproc:// would authenticate nobody: refused.
  ServerOptions so;
  so.endpoint = "inproc://curve-test-inproc";
  so.curve = keys.Server();
  EXPECT_THROW(ShardServer(NewContext(), so, Initial(), NewAddRule()), ConfigError);
}

TEST(Curve, AuthorizedClientPushesAndPullsExactly) {
  Keys keys;
  CurveShard ps(keys.Server());
  auto client = ps.Client(keys.Client(), 10s);
  ASSERT_TRUE(client->WaitForServers(10s).ok());
  std::vector<float> delta(kSize);
  for (int64_t i = 0; i < kSize; ++i) {
    delta[static_cast<std::size_t>(i)] = static_cast<float>(i % 5) - 2;
  }
  ASSERT_TRUE(client->PushAndWait(delta).ok());
  ASSERT_TRUE(client->PushAndWait(delta).ok());
  std::vector<float> got(kSize, -1.0f);
  ASSERT_TRUE(client->PullAndWait(got).ok());
  std::vector<float> expected = Initial();
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += 2 * delta[i];
  EXPECT_EQ(got, expected);
  EXPECT_EQ(ps.server->Snapshot().version, 2u);
  EXPECT_EQ(ps.server->stats().auth_refused, 0u);
}

// A CURVE client whose public key is not listed: ZAP refuses it. One log line names the
// peer's address and the key, however often ZeroMQ retries the handshake.
TEST(Curve, UnlistedClientKeyIsRefusedAndLogged) {
  Keys keys;
  LogCapture log;
  {
    CurveShard ps(keys.Server());
    const CurveKeyPair stranger = NewCurveKeyPair();
    auto client = ps.Client(keys.Client(stranger), 1500ms);
    const Status st = RefusedPush(*client);
    EXPECT_TRUE(st.timed_out()) << st.ToString();
    EXPECT_GE(ps.WaitForRefusals(1), 1u);
    ps.ExpectUntouched();
    client.reset();
    const auto lines = log.Matching("refused");
    ASSERT_EQ(lines.size(), 1u);  // rate-limited
    EXPECT_THAT(lines[0], HasSubstr("127.0.0.1"));
    EXPECT_THAT(lines[0], HasSubstr(stranger.public_key));
    EXPECT_THAT(lines[0], HasSubstr("shard 0"));
  }
}

// A client without CURVE and a client that names another server public key fail the
// handshake before ZAP is asked; the server's socket monitor counts them. The server
// still serves its authorized client afterwards.
TEST(Curve, PlainClientAndWrongServerKeyAreRefused) {
  Keys keys;
  LogCapture log;
  CurveShard ps(keys.Server());
  {
    auto plain = ps.Client(CurveOptions{}, 1500ms);
    const Status st = RefusedPush(*plain);
    EXPECT_TRUE(st.timed_out()) << st.ToString();
  }
  const uint64_t after_plain = ps.WaitForRefusals(1);
  EXPECT_GE(after_plain, 1u);
  ps.ExpectUntouched();
  {
    CurveOptions wrong = keys.Client();
    wrong.server_public_key = NewCurveKeyPair().public_key;
    auto client = ps.Client(wrong, 1500ms);
    const Status st = RefusedPush(*client);
    EXPECT_TRUE(st.timed_out()) << st.ToString();
  }
  EXPECT_GT(ps.WaitForRefusals(after_plain + 1), after_plain);
  ps.ExpectUntouched();
  EXPECT_THAT(log.Matching("refused"), ::testing::Not(::testing::IsEmpty()));

  auto good = ps.Client(keys.Client(), 10s);
  const std::vector<float> ones(kSize, 1.0f);
  ASSERT_TRUE(good->PushAndWait(ones).ok());
  EXPECT_EQ(ps.server->Snapshot().version, 1u);
}

// The coordinator's control channel: the same rules.
TEST(Curve, ControlChannelAnswersOnlyAuthorizedClients) {
  Keys keys;
  auto context = NewContext();
  ControlOptions so;
  so.curve = keys.Server();
  ControlServer server(context, "tcp://127.0.0.1:*", so);
  std::atomic<bool> stop{false};
  std::thread serving([&] {
    while (!stop.load()) {
      if (auto req = server.Receive(50ms)) server.Reply(req->peer, "re: " + req->text);
    }
  });
  ControlOptions co;
  co.curve = keys.Client();
  ControlClient good(NewContext(), server.endpoint(), co);
  EXPECT_EQ(good.Request("hello", 10s), std::optional<std::string>("re: hello"));
  co.curve = keys.Client(NewCurveKeyPair());
  ControlClient stranger(NewContext(), server.endpoint(), co);
  EXPECT_EQ(stranger.Request("hello", 1s), std::nullopt);
  ControlClient plain(NewContext(), server.endpoint());
  EXPECT_EQ(plain.Request("hello", 1s), std::nullopt);
  EXPECT_EQ(good.Request("again", 10s), std::optional<std::string>("re: again"));
  stop.store(true);
  serving.join();
}

// A plain server in a context that also holds a CURVE server (a coordinator's, say) is
// unchanged: its plain clients connect as before.
TEST(Curve, PlainServerBesideACurveServerIsUnchanged) {
  Keys keys;
  CurveShard secure(keys.Server());
  ServerOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  ShardServer plain(secure.context, o, Initial(), NewAddRule());
  plain.Start();
  PsClient client(NewContext(), {plain.endpoint()}, OneShard(), {});
  const std::vector<float> ones(kSize, 1.0f);
  ASSERT_TRUE(client.PushAndWait(ones).ok());
  EXPECT_EQ(plain.Snapshot().version, 1u);
  EXPECT_EQ(plain.stats().auth_refused, 0u);
}

}  // namespace
}  // namespace asgd::transport
