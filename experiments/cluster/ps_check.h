// `asgd ps-check` (docs/failure-model.md#ps-check): a self-contained check of a deployed
// parameter server, no training and no coordinator. `asgd ps-check ps` serves one shard
// with an additive rule, `asgd ps-check worker` pushes small integers to the shards and
// verifies their sum exactly. The processes are placed as a training run's ps and workers
// are (roles.h: [cluster] or TF_CONFIG, --task), and the [check] keys say what to push.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <vector>

#include "experiments/cluster/roles.h"
#include "experiments/config/config.h"

namespace asgd::experiments {

// `asgd ps-check ps`: serves shard --task with an additive rule until worker 0 stops the
// servers, or SIGINT/SIGTERM; with check.seconds > 0, also prints the pushes applied so
// far every check.report_every_s. Returns 0 once the server stopped, whichever way.
// Throws InputError/ConfigError for bad configuration.
int RunPsCheckServer(const Config& config, const RoleRequest& request, std::ostream& out);

// `asgd ps-check worker`: each worker pushes check.pushes deltas of small integers
// (several in flight), all workers meet at a barrier, and each pulls the parameters and
// compares them, element for element, with the initial values plus every worker's
// pushes; float32 addition of small integers is exact, so any difference is a lost,
// repeated or misplaced push. With check.seconds > 0 (a soak), the workers instead push
// as fast as they can for that long from a common start, print their pushes so far every
// check.report_every_s, and then check the sum and every shard's count of every worker's
// pushes exactly (ps_check.cc explains the values pushed). Returns 0 when exact, 1 on a
// mismatch (one line naming the first differing element or count); a server that does
// not answer or answers with an error is an InputError (exit status 2).
int RunPsCheckWorker(const Config& config, const RoleRequest& request, std::ostream& out);

// The check's values: initial parameters and worker w's push number step, as small
// integers derived from seed. Exposed for tests.
std::vector<float> PsCheckInitial(int64_t n, uint64_t seed);
std::vector<float> PsCheckDelta(int64_t n, uint64_t seed, int worker, int64_t step);

}  // namespace asgd::experiments
