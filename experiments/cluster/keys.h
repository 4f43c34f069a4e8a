// CURVE keys of a cluster (transport/curve.h): `asgd keys generate DIR` writes them, and
// every process of a run with cluster.curve = true reads the ones it needs from
// cluster.keys_dir.
//
// The files in DIR (Z85 text from ZeroMQ's zmq_curve_keypair; lines starting with "# "
// are comments):
//   server.key          the servers' key pair, lines "public-key = K" and
//                       "secret-key = K"; mode 0600. Needed where a server runs: every
//                       ps and the coordinator (it serves the control channel).
//   server.pub          the servers' public key, "public-key = K": every process.
//   client.key          the clients' key pair (mode 0600), and its public key: every
//   client.pub          process (every role connects to the coordinator).
//   authorized_clients  the client public keys the servers accept, one per line; delete
//                       a line to lock that key out.
// With --clients N (N > 1) the client pairs are client-1.key ... client-N.key (and .pub),
// all of them authorized, and each process names its own with cluster.client_key (a
// host or a role per key pair, so one can be revoked without the others).
// Secret key files are written with mode 0600, each atomically (temporary + rename);
// existing key files are never overwritten without --force.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/config/cluster_plan.h"
#include "experiments/config/config.h"
#include "transport/curve.h"

namespace asgd::experiments {

// `asgd keys generate DIR [--clients N] [--force]`. Returns the exit status.
int KeysCommand(const std::vector<std::string>& args, std::ostream& out);

// Writes the key files of a cluster into dir (created, mode 0700, if missing) and
// returns their names. Throws InputError if one of them exists and !force, IoError if
// a file cannot be written. REQUIRES: clients >= 1.
std::vector<std::string> GenerateClusterKeys(const std::string& dir, int clients, bool force);

// The CURVE options of one process of a run: disabled unless cluster.curve. Otherwise
// the client side (server.pub and cluster.client_key's pair) and, when serves (a ps or
// the coordinator), the server side (server.key and authorized_clients), read from
// cluster.keys_dir (relative paths are relative to the working directory). Throws
// ConfigError naming the key and the file for a missing, unreadable or malformed file.
transport::CurveOptions CurveFromPlan(const ClusterPlan& cluster, bool serves);

// ConfigError if cluster.curve is true: `asgd run` runs every role as a thread of one
// process (cluster.transport inproc or memory), where there is no connection to protect.
void RefuseCurveInOneProcess(const Config& config);

}  // namespace asgd::experiments
