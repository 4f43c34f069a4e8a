#include "algorithms/settings.h"

#include <cstdio>

#include "core/check.h"
#include "core/strings.h"

namespace asgd::algorithms {

Setting IntSetting(std::string name, int64_t default_value, std::optional<double> min,
                   std::optional<double> max, std::string help, std::string unit) {
  Setting s;
  s.name = std::move(name);
  s.type = SettingType::kInt;
  s.default_value = std::to_string(default_value);
  s.min = min;
  s.max = max;
  s.help = std::move(help);
  s.unit = std::move(unit);
  return s;
}

Setting DoubleSetting(std::string name, std::string default_value, std::optional<double> min,
                      bool min_exclusive, std::optional<double> max, bool max_exclusive,
                      std::string help, std::string unit) {
  Setting s;
  s.name = std::move(name);
  s.type = SettingType::kDouble;
  s.default_value = std::move(default_value);
  s.min = min;
  s.min_exclusive = min_exclusive;
  s.max = max;
  s.max_exclusive = max_exclusive;
  s.help = std::move(help);
  s.unit = std::move(unit);
  return s;
}

Setting ChoiceSetting(std::string name, std::string default_value, std::vector<std::string> choices,
                      std::string help) {
  Setting s;
  s.name = std::move(name);
  s.type = SettingType::kChoice;
  s.default_value = std::move(default_value);
  s.choices = std::move(choices);
  s.help = std::move(help);
  return s;
}

namespace {

const Setting& Declared(std::string_view name) {
  const Setting* s = FindSetting(name);
  ASGD_CHECK(s != nullptr, "no strategy declares the setting ", name);
  return *s;
}

}  // namespace

void SettingValues::Set(std::string_view name, std::string value) {
  const Setting& s = Declared(name);
  values_[s.name] = std::move(value);
}

const std::string& SettingValues::Raw(std::string_view name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  return Declared(name).default_value;
}

int64_t SettingValues::Int(std::string_view name) const {
  ASGD_CHECK(Declared(name).type == SettingType::kInt, "setting ", name, " is not an integer");
  const std::optional<int64_t> v = ParseInt64(Raw(name));
  ASGD_CHECK(v.has_value(), "setting ", name, " is not an integer: ", Raw(name));
  return *v;
}

double SettingValues::Double(std::string_view name) const {
  ASGD_CHECK(Declared(name).type == SettingType::kDouble, "setting ", name, " is not a number");
  const std::optional<double> v = ParseDouble(Raw(name));
  ASGD_CHECK(v.has_value(), "setting ", name, " is not a number: ", Raw(name));
  return *v;
}

std::string SettingValues::FormatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace asgd::algorithms
