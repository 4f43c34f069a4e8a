// A strategy's own settings: the [algorithm] keys that only it (or a few strategies that
// share a rule) reads, declared in its registry entry (Strategy::settings) with their type,
// default, range and help. experiments/config turns every declared setting into an entry of
// the config table (`asgd run --help-config`, validation, --strict) and hands the values to
// the rules in StrategyOptions::settings, where they read them by name. A new setting is
// then one line in the strategy's file (and its test), not a field, a table row and a read
// in three central files (docs/architecture.md#adding-a-strategy).
//
// Keys every strategy or many read (learning_rate, momentum, window, batch_size, ...) stay
// in the central table (experiments/config/config_keys.cc) and in StrategyOptions' fields.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace asgd::algorithms {

struct StrategyOptions;  // strategy.h

enum class SettingType {
  kInt,     // a 64-bit integer within [min, max]
  kDouble,  // a finite number within min/max (each bound inclusive or exclusive)
  kChoice,  // one of `choices`
};

// One setting: the key algorithm.<name>.
struct Setting {
  std::string name;  // the key under [algorithm], e.g. "sign_momentum"
  SettingType type = SettingType::kDouble;
  std::string default_value;  // as written in a config file
  // One line: the meaning. The config table puts the names of the strategies that declare
  // the setting in front of it ("signsgd_vote: ...").
  std::string help;
  std::string unit;                  // e.g. "clocks"; empty if none
  std::vector<std::string> choices;  // kChoice
  std::optional<double> min;         // kInt, kDouble
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  // A check against the other options (e.g. at most algorithm.workers), run on every
  // config whatever its strategy: "" if the value is fine, else what was expected (the
  // config error names the key and its value). Empty = none.
  std::function<std::string(const StrategyOptions&)> check;
};

// Builders, in the order of the config table's own (experiments/config/config_keys.cc).
Setting IntSetting(std::string name, int64_t default_value, std::optional<double> min,
                   std::optional<double> max, std::string help, std::string unit = "");
Setting DoubleSetting(std::string name, std::string default_value, std::optional<double> min,
                      bool min_exclusive, std::optional<double> max, bool max_exclusive,
                      std::string help, std::string unit = "");
Setting ChoiceSetting(std::string name, std::string default_value, std::vector<std::string> choices,
                      std::string help);

// The values of the settings, by name, as the text a config holds. A setting not given
// reads as its declared default, so a StrategyOptions built by a test holds every
// strategy's defaults. Reading or setting a name no registered strategy declares is a
// bug (InvariantError).
class SettingValues {
 public:
  // Sets the setting to `value` (a config's text; not range-checked here: the config's
  // validation does that, and a test may ask for what a config cannot).
  void Set(std::string_view name, std::string value);
  void Set(std::string_view name, const char* value) { Set(name, std::string(value)); }
  // A number, written so that it reads back exactly.
  template <typename T>
  requires std::is_arithmetic_v<T>
  void Set(std::string_view name, T value) {
    if constexpr (std::is_floating_point_v<T>) {
      Set(name, FormatDouble(static_cast<double>(value)));
    } else {
      Set(name, std::to_string(value));
    }
  }

  // The text: the value set, or the declared default.
  const std::string& Raw(std::string_view name) const;
  // The value, parsed as the config parses it. REQUIRES: the setting is of that type
  // (kInt for Int; kChoice for String).
  int64_t Int(std::string_view name) const;
  double Double(std::string_view name) const;
  const std::string& String(std::string_view name) const { return Raw(name); }

 private:
  static std::string FormatDouble(double v);
  std::map<std::string, std::string, std::less<>> values_;
};

// The declared setting of that name (shared settings are declared alike by every strategy
// that reads them; strategy.cc checks it), or nullptr.
const Setting* FindSetting(std::string_view name);
// Every setting some registered strategy declares, once each: by strategy name, then in
// each strategy's order.
std::vector<const Setting*> AllSettings();
// The strategies that declare the setting, by name (aliases left out).
std::vector<std::string> StrategiesWithSetting(std::string_view name);

}  // namespace asgd::algorithms
