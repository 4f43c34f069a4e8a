// `asgd tune --backend slurm` and `asgd tune collect` (batch.h). The adaptive stages of a
// local tune do not fit one job array, so every value runs with every seed at once
// (slurm/), values are scored by their seeds' mean, and each round of the edge rule is
// an array of its own (slurm-edge<k>/, its values in slurm-edge<k>/values), written and
// submitted by the collect that finds the best value on an edge.
#include <filesystem>
#include <ostream>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "core/strings.h"
#include "experiments/batch/batch_internal.h"
#include "experiments/config/exit_status.h"

namespace asgd::experiments::batch {
namespace {

std::string EdgeFolder(int round) { return "slurm-edge" + std::to_string(round); }

// Writes the array of the runs at indices into dir/sub; returns the script's path.
std::string WriteArray(TuneState& st, const std::vector<std::size_t>& indices,
                       const TuneExecution& ex, const std::string& sub) {
  std::vector<BatchRun> runs;
  for (std::size_t i : indices) runs.push_back(st.runs[i].run);
  if (ex.backend.srun) PlanSrunRuns(runs);
  const std::string script =
      WriteSlurmFiles(runs, st.dir, ex.replan, ex.given_parallel, ex.backend, ex.job_name, sub);
  for (std::size_t k = 0; k < indices.size(); ++k) st.runs[indices[k]].run = runs[k];
  return script;
}

// How the runs at indices ended, from the array in dir/sub.
BatchOutcome CollectArray(TuneState& st, const std::vector<std::size_t>& indices,
                          const std::string& sub, std::ostream& out) {
  std::vector<BatchRun> runs;
  for (std::size_t i : indices) runs.push_back(st.runs[i].run);
  const BatchOutcome outcome = CollectSlurm(runs, st.dir, st.settings.command, out, sub);
  for (std::size_t k = 0; k < indices.size(); ++k) st.runs[indices[k]].run = runs[k];
  return outcome;
}

// The runs of an edge round's array, from its values file (point index, then the value
// of every axis, tab-separated).
std::vector<std::size_t> ReadEdgeRound(TuneState& st, int round, const SlurmOptions& backend) {
  const std::string path = JoinPath(JoinPath(st.dir, EdgeFolder(round)), "values");
  std::istringstream in(ReadFile(path));
  std::vector<std::size_t> added;
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = Split(line, '\t');
    const auto point = ParseInt64(f.empty() ? "" : f[0]);
    if (f.size() != st.settings.axes.size() + 1 || !point || *point < 0 ||
        static_cast<std::size_t>(*point) >= st.settings.points.size()) {
      throw InputError(path +
                       ": a line that is not a point and its values: " + QuoteForMessage(line));
    }
    const std::vector<std::string> values(f.begin() + 1, f.end());
    for (int k = 0; k < st.settings.seeds; ++k) {
      added.push_back(st.runs.size());
      st.runs.push_back(MakeTuneRun(st, static_cast<std::size_t>(*point), values, k,
                                    "edge " + std::to_string(round), backend));
    }
  }
  return added;
}

// Writes (and unless --emit-only submits) the array of an edge round.
void SubmitEdgeRound(TuneState& st, int round, const std::vector<std::size_t>& added,
                     const TuneExecution& ex, std::ostream& out) {
  const std::string sub = EdgeFolder(round);
  MakeDirs(JoinPath(st.dir, sub));
  std::string values;
  for (std::size_t k = 0; k < added.size(); k += static_cast<std::size_t>(st.settings.seeds)) {
    const TuneRun& r = st.runs[added[k]];
    values += std::to_string(r.point) + "\t" + Join(r.values, "\t") + "\n";
  }
  WriteFileAtomic(JoinPath(JoinPath(st.dir, sub), "values"), values);
  const std::string script = WriteArray(st, added, ex, sub);
  out << st.settings.command << ": edge round " << round << ": " << added.size()
      << " runs as a SLURM job array\nwrote " << script << "\n";
  if (!ex.backend.emit_only) SubmitSlurm(st.dir, script, st.settings.command, out, sub);
}

}  // namespace

int SubmitTune(TuneState& st, const TuneExecution& ex, std::ostream& out) {
  const TuneSettings& s = st.settings;
  PlanGrid(st, s.seeds, ex.backend);
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < st.runs.size(); ++i) all.push_back(i);
  const std::string script = WriteArray(st, all, ex, kSlurmFolder);
  out << s.command << ": " << st.runs.size() << " runs (" << s.points.size()
      << (s.points.size() == 1 ? " point" : " points") << " x "
      << st.runs.size() / s.points.size() / static_cast<std::size_t>(s.seeds) << " values x "
      << s.seeds << (s.seeds == 1 ? " seed" : " seeds") << ") as a SLURM job array into " << st.dir
      << "\nwrote " << script << "\n"
      << "values are scored by their seeds' mean at `asgd " << s.command << " collect " << st.dir
      << "`, which submits the edge rule's values as another array when the best lies on an "
         "edge\n";
  if (!ex.backend.emit_only) SubmitSlurm(st.dir, script, s.command, out);
  return kExitOk;
}

int CollectTune(TuneState& st, const TuneExecution& ex, std::ostream& out) {
  const TuneSettings& s = st.settings;
  std::vector<std::size_t> grid;
  for (std::size_t i = 0; i < st.runs.size(); ++i) grid.push_back(i);
  int waiting = CollectArray(st, grid, kSlurmFolder, out).waiting;
  int rounds = 0;
  while (FileExists(JoinPath(JoinPath(st.dir, EdgeFolder(rounds + 1)), "values"))) {
    ++rounds;
    const std::vector<std::size_t> added = ReadEdgeRound(st, rounds, ex.backend);
    waiting += CollectArray(st, added, EdgeFolder(rounds), out).waiting;
  }
  ScoreRuns(st);
  const std::string collect = "asgd " + s.command + " collect: ";
  if (waiting > 0) {
    WriteTuneCsv(st, out);
    throw InputError(collect + std::to_string(waiting) +
                     " runs have not finished in SLURM; collect again once they end");
  }
  if (rounds < s.extend) {
    const std::vector<std::size_t> added = PlanEdges(st, rounds + 1, s.seeds, ex.backend, out);
    if (!added.empty()) {
      SubmitEdgeRound(st, rounds + 1, added, ex, out);
      WriteTuneCsv(st, out);
      throw InputError(collect + "the edge rule added " + std::to_string(added.size()) + " runs (" +
                       JoinPath(st.dir, EdgeFolder(rounds + 1)) + "); collect again once they end");
    }
  }
  WriteTuneCsv(st, out);
  return FinishTune(st, ex.plots, out);
}

}  // namespace asgd::experiments::batch
