// Exceptions used across asgd.
//
// The hierarchy separates what a user can fix from what is a bug:
//   Error                 base of everything asgd throws
//   ├─ InputError         bad input from outside: config, CLI, data files, a peer's
//   │  │                  message, a NaN loss, a dead peer. The CLI prints what() as
//   │  │                  one line and exits with status 2.
//   │  ├─ ConfigError     a configuration key with a bad value
//   │  └─ DataError       a data file that is missing, truncated or corrupt
//   ├─ IoError            the operating system refused (disk full, bind failed, ...)
//   ├─ DeviceError        an accelerator (CUDA device, driver, cuBLAS) failed a call
//   └─ InvariantError     a broken internal invariant (a bug); see core/check.h
//
// Expected outcomes of asynchronous training (timeouts, stale pushes, a peer that is
// not up yet) are values, never exceptions.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace asgd {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

// "config: [model] hidden = 'abc': expected a comma-separated list of positive integers"
class ConfigError : public InputError {
 public:
  // key is "section.key" (or a CLI flag); expected says what would have been accepted.
  ConfigError(std::string key, std::string value, std::string expected);
  // For errors that are not about one key's value (e.g. a missing config file).
  explicit ConfigError(const std::string& what);

  const std::string& key() const { return key_; }
  const std::string& value() const { return value_; }

 private:
  std::string key_;
  std::string value_;
};

// "data: train-images-idx3-ubyte.gz: expected IDX magic 2051, found 2049"
class DataError : public InputError {
 public:
  // line is 1-based; 0 means the error is not about one line.
  DataError(std::string file, std::string what, long line = 0);

  const std::string& file() const { return file_; }
  long line() const { return line_; }

 private:
  std::string file_;
  long line_;
};

class IoError : public Error {
 public:
  explicit IoError(const std::string& what) : Error(what) {}
};

// "cuda: cudaMalloc(&ptr, bytes) failed: cudaErrorMemoryAllocation (out of memory) at
// models/cuda/device_memory.cc:41 on device 0". Neither an InputError (nothing in the
// config can fix an out-of-memory device or a lost driver) nor an IoError (the operating
// system did not refuse anything): a caller may want to retire a worker on a failed GPU
// without treating the failure as a bug. device() is the CUDA ordinal, -1 if unknown.
class DeviceError : public Error {
 public:
  DeviceError(const std::string& what, int device) : Error(what), device_(device) {}

  int device() const { return device_; }

 private:
  int device_;
};

class InvariantError : public Error {
 public:
  explicit InvariantError(const std::string& what) : Error(what) {}
};

// Formats a value for an error message: quoted, with control characters escaped and
// long values shortened, so one bad input always yields one readable line.
std::string QuoteForMessage(std::string_view value, std::size_t max_len = 80);

}  // namespace asgd
