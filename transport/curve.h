// CURVE security (ZeroMQ's RFC 26, with ZAP, RFC 27) for the parameter server and the
// control channel: encryption of every frame on ipc:// and tcp://, and authentication
// of the clients by their long-term public keys. Off by default.
//
// A server with CurveOptions::enabled is a CURVE server holding the server's secret key;
// it accepts only CURVE clients whose public key is in authorized_clients. Everything
// else is refused during the handshake, before a single request is read: a client
// without CURVE, a client that names another server public key, a client whose key is
// not listed. A refused client never gets a connection, so its requests time out (a
// Status, as for a server that is down); the server logs the refusal (rate-limited) and
// counts it (ShardStats::auth_refused). A client without CURVE may hang up before the
// server has read its greeting, so a connection that ends during the handshake counts as
// refused too. A client with enabled sets the server's public key and its own key pair on
// every socket it connects.
//
// The checks of the listed keys run in a ZAP handler: one thread per Context, bound to
// inproc://zeromq.zap.01 of that Context, started by the first CURVE server made from it.
// inproc:// connections are never authenticated (ZeroMQ runs no handshake in-process), so
// a CURVE server on an inproc:// address is a ConfigError: CURVE is for ipc:// and tcp://.
// With enabled false nothing of this exists.
//
// Keys are Z85 text of 40 characters (ZeroMQ's zmq_curve_keypair). Reading key files is
// experiments/' business (experiments/cluster/keys.h); this layer takes the keys as strings.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace asgd::transport {

// Length of a CURVE key (public or secret) in Z85 text.
inline constexpr std::size_t kCurveKeyChars = 40;

struct CurveKeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

struct CurveOptions {
  // Use CURVE at all. Default false: plain ZeroMQ, no handler thread, every field below
  // ignored.
  bool enabled = false;
  // The server's long-term key pair. Clients need the public key; servers the secret
  // key (the public key, if given, must be the secret key's).
  std::string server_public_key;
  std::string server_secret_key;
  // Servers: the public keys of the clients that may connect. Required (non-empty) for
  // a server.
  std::vector<std::string> authorized_clients;
  // Clients: this client's key pair; its public key must be in the server's list.
  std::string client_public_key;
  std::string client_secret_key;
};

// Whether the linked libzmq supports CURVE (zmq_has("curve")).
bool CurveAvailable();
// A fresh key pair (zmq_curve_keypair). Throws IoError if libzmq has no CURVE.
CurveKeyPair NewCurveKeyPair();
// True for 40 characters of Z85 text that decode to a 32-byte key.
bool IsCurveKey(std::string_view z85);
// The public key of a secret key (zmq_curve_public); "" if secret_key is not a key.
std::string CurvePublicKey(std::string_view secret_key);

// The checks ShardServer, PsClient and the control channel make at construction when
// enabled: ConfigError naming the field ("curve.server_secret_key", ...) for a missing
// or malformed key, a public key that does not belong to its secret key, or a server
// without authorized clients; IoError if libzmq has no CURVE. No-ops when disabled.
void CheckCurveServer(const CurveOptions& options);
void CheckCurveClient(const CurveOptions& options);

}  // namespace asgd::transport
