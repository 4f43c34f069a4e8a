#!/usr/bin/env bash
# asgd set-up: installs missing Debian packages, builds, and runs things.
#
#   ./setup.sh quickstart   install what is missing, build (Release), train the quickstart
#   ./setup.sh test         install what is missing, build, run the whole test suite (ctest)
#   ./setup.sh deps         only install missing packages
#   ./setup.sh build        only configure and build
#
# Idempotent: packages already present are not reinstalled, an existing build folder is
# reused. Environment: ASGD_BUILD_DIR (default: build), ASGD_DATA_DIR (reference data;
# made absolute here so tests find it from any folder; quickstart and test stop with exit
# status 2 when it names no folder), ASGD_JOBS (parallel jobs).
set -euo pipefail

CALLER_DIR=$(pwd)
cd "$(dirname "$0")"
ROOT=$(pwd)
BUILD_DIR=${ASGD_BUILD_DIR:-build}
JOBS=${ASGD_JOBS:-$(nproc)}

# Debian 12 packages the build, the tests and the tools need.
PACKAGES=(
  cmake make g++ git pkg-config
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libeigen3-dev libboost-program-options-dev libboost-context-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libcurl4-openssl-dev libarchive-dev libssl-dev
  nlohmann-json3-dev python3 python3-matplotlib openmpi-bin
  libgloo-dev libopenmpi-dev libtorch-dev python3-torch libopenblas0-pthread
  slurmctld slurmd slurm-client munge
)

log() { printf '[setup] %s\n' "$*" >&2; }

deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "all ${#PACKAGES[@]} packages present"
    return
  fi
  log "installing: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
      sudo=(sudo)
    else
      log "error: not root and no sudo; install these packages first: ${missing[*]}"
      exit 2
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build() {
  # Configuring again is cheap and recovers a folder whose earlier configure failed.
  log "configuring $BUILD_DIR (Release, warnings as errors)"
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DASGD_WERROR=ON >/dev/null
  log "building with $JOBS jobs"
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

# ASGD_DATA_DIR made absolute (a relative one is taken from the folder setup.sh was called
# from). One that names no folder stops here, before any installing or building: the tests
# that need the data would otherwise skip, and a run look complete without them.
absolute_data_dir() {
  [ -n "${ASGD_DATA_DIR:-}" ] || return 0
  local dir
  if ! dir=$(cd "$CALLER_DIR" && cd "$ASGD_DATA_DIR" 2>/dev/null && pwd); then
    log "error: ASGD_DATA_DIR=$ASGD_DATA_DIR is not a folder (expected the folder holding the reference data, or ASGD_DATA_DIR unset)"
    exit 2
  fi
  export ASGD_DATA_DIR=$dir
}

quickstart() {
  absolute_data_dir
  deps
  build
  local config=experiments/configs/quickstart.ini
  if ! "$BUILD_DIR/asgd" data find mnist >/dev/null 2>&1; then
    log "MNIST not found; fetching it into ./data"
    "$BUILD_DIR/asgd" data fetch mnist --dir data
  fi
  "$BUILD_DIR/asgd" run "$config" "$@"
}

# Reads ctest's output (--output-on-failure) and lists the tests that failed and then
# passed on their rerun, each with its first failure: the status, and GoogleTest's
# "file:line: Failure" line with the 3 lines after it (the assertion's values).
report_reruns() {
  awk '
    / Test +#[0-9]+: / {
      rest = $0
      sub(/^.* Test +#[0-9]+: /, "", rest)
      name = rest
      sub(/ .*$/, "", name)
      if (rest ~ /\*\*\*Skipped/) { current = ""; next }
      if (rest ~ /\*\*\*/ || rest !~ / Passed /) {
        if (!(name in failed)) {
          failed[name] = 1
          status = rest
          sub(/^.* \.+/, "", status)
          sub(/^ +/, "", status)
          sub(/ +[0-9.]+ sec$/, "", status)
          sub(/^\*+/, "", status)
          first[name] = status
          current = name
          more = -1
        } else {
          current = ""
        }
      } else {
        if (name in failed && !(name in reran)) { reran[name] = 1; order[++n] = name }
        current = ""
      }
      next
    }
    /^ +Start +[0-9]+: / { current = ""; next }
    current != "" && more < 0 && / Failure$/ { detail[current] = "    " $0; more = 3; next }
    current != "" && more > 0 { detail[current] = detail[current] "\n    " $0; more--; next }
    END {
      if (n == 0) { print "[setup] no test needed its rerun"; exit }
      print "[setup] " n " test(s) passed only when run again (--repeat until-pass:2); their first failure:"
      for (i = 1; i <= n; i++) {
        print "  " order[i] " (" first[order[i]] ")"
        if (order[i] in detail) print detail[order[i]]
      }
    }
  ' "$1"
}

run_tests() {
  absolute_data_dir
  deps
  build
  cd "$BUILD_DIR"
  # A test that fails is run once more (--repeat until-pass:2): some tests train with real
  # threads on a shared 2-core machine, where the scheduler decides staleness. A test that
  # fails twice fails the run. After ctest's summary, the tests that passed only on their
  # rerun are listed with their first failure (the whole output is kept in the log below).
  local out=Testing/Temporary/setup-test-output.log status=0
  mkdir -p Testing/Temporary
  ctest --output-on-failure --timeout 600 --repeat until-pass:2 "$@" 2>&1 | tee "$out" || status=$?
  report_reruns "$out"
  log "ctest's whole output: $BUILD_DIR/$out"
  return "$status"
}

case "${1:-}" in
  quickstart) shift; quickstart "$@" ;;
  test) shift; run_tests "$@" ;;
  deps) deps ;;
  build) deps; build ;;
  *)
    echo "usage: ./setup.sh quickstart|test|deps|build" >&2
    exit 2
    ;;
esac
