// agn (alias adag) — Accumulated Gradient Normalization.
//
// Source: J. Hermans, G. Spanakis, R. Möckel, "Accumulated Gradient Normalization",
// arXiv:1710.02368 (2017); Hermans' MSc thesis, Alg. "AGNWorker"; dist-keras ADAGWorker.
// Worker: pull θ̃ → θ; W local optimizer steps accumulating a = Σ u; push a / W; θ ← the
// centre (one atomic push-pull). Server: θ̃ ← θ̃ + a/W (the add rule, no learning rate).
// Conventions (docs/algorithms.md#agn): exactly W terms (the algorithms, not the thesis
// equation's W + 1); the window check after the step, so every push covers W steps; a
// partial window at the end is dropped. "adag" is dist-keras's name for this algorithm,
// not Hermans' distance-based ADAG (adag_distance).
//
// Compression (compression.name, issue 17): meaningful: the push is the accumulated (normalised)
// update of a window.
#include "algorithms/builtin_strategies.h"
#include "algorithms/windowed_worker.h"

namespace asgd::algorithms {

Strategy AgnStrategy() {
  Strategy s;
  s.name = "agn";
  s.supports_compression = true;
  s.description = "accumulated gradient normalization: push the window's update / W";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window", "algorithm.fetch_window"});
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    WindowedWorker::Mode mode;
    mode.normalise = true;
    return std::make_unique<WindowedWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions&, uint32_t) { return ps::NewAddRule(); };
  return s;
}

}  // namespace asgd::algorithms
