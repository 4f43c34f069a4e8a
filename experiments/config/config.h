// Experiment configuration: INI files with documented, typed, validated keys.
//
// Every key asgd understands is declared once in a Schema (experiments/config/config_keys.cc)
// with its type, default, unit, allowed range and a one-line description; a strategy's own
// [algorithm] keys come from its registry entry (algorithms/settings.h). The schema is
// what `asgd run --help-config` prints and what a run's resolved config.ini lists.
//
// A Config is parsed from an INI file with Boost.Program_options, then command-line
// overrides ("section.key=value", from --set) are applied, then every key is validated.
// Any problem is a ConfigError whose message is one line naming the key, the value and
// what was expected, with a suggestion for a misspelt key:
//
//   config: algorithm.learning_rte: unknown key (did you mean algorithm.learning_rate?)
//   config: algorithm.batch_size = '0': expected an integer >= 1
//
// Keys are written "section.key" everywhere (messages, --set, CSV headers).
//
// Thread safety: a Config is immutable after construction except through Set(), which
// must not race with readers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace asgd::experiments {

enum class KeyType {
  kString,      // any text (may be constrained by a validator)
  kInt,         // 64-bit integer, optional [min, max]
  kDouble,      // finite number, optional [min, max] with exclusive bounds
  kBool,        // true/false, yes/no, on/off, 1/0
  kChoice,      // one of `choices`
  kIntList,     // comma-separated integers, each within [min, max]; may be empty if allowed
  kDoubleList,  // comma-separated numbers, each within [min, max]
};

struct KeySpec {
  std::string name;  // "section.key"
  KeyType type = KeyType::kString;
  std::string default_value;         // as it would be written in the INI
  std::string doc;                   // one line: meaning
  std::string unit;                  // e.g. "seconds", "examples"; empty if none
  std::vector<std::string> choices;  // kChoice
  std::optional<double> min;         // kInt, kDouble, lists
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  bool allow_empty = false;  // lists and strings: empty value allowed
  // Extra check on the raw text; returns "" if fine, else what was expected. A kChoice
  // key's validator is also asked about a value outside its choices, and its answer, if
  // not empty, replaces "one of ..." (a value that names something else now).
  std::function<std::string(std::string_view)> validator;

  std::string section() const;  // "algorithm"
  std::string key() const;      // "learning_rate"
  // What a valid value looks like, e.g. "a number > 0", "one of sgd, adam".
  std::string Expectation() const;
};

class Schema {
 public:
  // REQUIRES: name unique and of the form section.key; the default valid.
  void Add(KeySpec spec);
  const KeySpec* Find(std::string_view name) const;
  // Throws ConfigError for an unknown key, suggesting the closest known one.
  const KeySpec& Get(std::string_view name) const;
  const std::vector<KeySpec>& keys() const { return keys_; }
  std::vector<std::string> Sections() const;  // in declaration order
  // Every key with default, type/unit and description, grouped by section.
  std::string Help() const;

  // A key an earlier asgd had and this one dropped. A config that gives it its old default
  // (as every config.ini an earlier run wrote does) loads as if it were absent, so old run
  // folders still rerun and resume; any other value is a ConfigError naming `instead`,
  // what replaced it. REQUIRES: name not a key of the schema.
  struct RetiredKey {
    std::string name;
    std::string old_default;
    std::string instead;
  };
  void Retire(RetiredKey key);
  const std::vector<RetiredKey>& retired() const { return retired_; }

 private:
  std::vector<KeySpec> keys_;
  std::vector<RetiredKey> retired_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

// Returns "" if raw is valid for spec, else the expectation text.
std::string ValidateValue(const KeySpec& spec, std::string_view raw);

class Config {
 public:
  // Parses an INI file and applies overrides ("section.key=value"). Throws ConfigError.
  static Config FromFile(const std::string& path, const std::vector<std::string>& overrides,
                         const Schema& schema);
  // As FromFile, from text; source names it in messages ("<string>" by default).
  static Config FromString(std::string_view ini, const std::vector<std::string>& overrides,
                           const Schema& schema, const std::string& source = "<string>");
  // All defaults.
  static Config Defaults(const Schema& schema);

  // Sets one key (validated). Throws ConfigError.
  void Set(std::string_view name, std::string_view value);
  // Applies one "section.key=value" override. Throws ConfigError.
  void ApplyOverride(std::string_view assignment);

  // Raw text of a key (its default when not given). Throws ConfigError if unknown.
  const std::string& Raw(std::string_view name) const;
  std::string String(std::string_view name) const { return Raw(name); }
  int64_t Int(std::string_view name) const;
  double Double(std::string_view name) const;
  bool Bool(std::string_view name) const;
  std::vector<int64_t> IntList(std::string_view name) const;
  std::vector<double> DoubleList(std::string_view name) const;

  // True if the file or an override gave the key.
  bool IsExplicit(std::string_view name) const;
  // The file the config came from ("" for strings/defaults).
  const std::string& source() const { return source_; }
  const Schema& schema() const { return *schema_; }

  // Every key with its value, grouped by section, each preceded by its description;
  // parsing it back gives an equal Config.
  std::string ResolvedIni() const;

 private:
  explicit Config(const Schema& schema);

  const Schema* schema_;
  std::string source_;
  std::map<std::string, std::string, std::less<>> values_;  // every key of the schema
  std::map<std::string, bool, std::less<>> explicit_;
};

}  // namespace asgd::experiments
