#include "experiments/config/config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include <boost/program_options.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace asgd::experiments {
namespace po = boost::program_options;

namespace {

// A bound as a user would write it: whole numbers in full (1048576, not 1.04858e+06, whose
// rounding hid the limit), others with the stream's 6 significant digits.
std::string FormatNumber(double v) {
  std::ostringstream os;
  if (v == std::floor(v) && std::fabs(v) < 0x1p53) {
    os << static_cast<int64_t>(v);
  } else {
    os << v;
  }
  return os.str();
}

std::string RangeText(const KeySpec& s) {
  if (s.min && s.max) {
    return std::string(s.min_exclusive ? "in (" : "in [") + FormatNumber(*s.min) + ", " +
           FormatNumber(*s.max) + (s.max_exclusive ? ")" : "]");
  }
  if (s.min) return std::string(s.min_exclusive ? "> " : ">= ") + FormatNumber(*s.min);
  if (s.max) return std::string(s.max_exclusive ? "< " : "<= ") + FormatNumber(*s.max);
  return "";
}

bool InRange(const KeySpec& s, double v) {
  if (s.min && (s.min_exclusive ? !(v > *s.min) : !(v >= *s.min))) return false;
  if (s.max && (s.max_exclusive ? !(v < *s.max) : !(v <= *s.max))) return false;
  return true;
}

// Text from the input (a key, a line Boost quotes) for a one-line message: as it is when
// printable, else quoted with its control characters escaped. config_fuzz found a key
// holding '\r' copied raw into the message, where it returns the cursor and hides the
// start of the line.
std::string ForMessage(std::string_view text) {
  const bool printable = std::none_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  return printable ? std::string(text) : QuoteForMessage(text, text.size());
}

std::string UnknownKeyMessage(std::string_view name, const Schema& schema) {
  std::vector<std::string> names;
  for (const auto& k : schema.keys()) names.push_back(k.name);
  std::string msg = ForMessage(name) + ": unknown key";
  std::string guess = ClosestMatch(name, names);
  if (guess.empty()) {
    // A key in the wrong section is a common mistake: match on the key part alone.
    std::string_view key =
        name.substr(name.find('.') == std::string_view::npos ? 0 : name.find('.') + 1);
    for (const auto& k : schema.keys()) {
      if (k.key() == key) {
        guess = k.name;
        break;
      }
    }
  }
  if (!guess.empty()) {
    msg += " (did you mean " + guess + "?)";
  } else {
    msg += " (see `asgd run --help-config` for every key)";
  }
  return msg;
}

}  // namespace

void Schema::Retire(RetiredKey key) {
  ASGD_CHECK(Find(key.name) == nullptr, "a retired key that is a key");
  retired_.push_back(std::move(key));
}

std::string KeySpec::section() const { return name.substr(0, name.find('.')); }
std::string KeySpec::key() const { return name.substr(name.find('.') + 1); }

std::string KeySpec::Expectation() const {
  std::string range = RangeText(*this);
  switch (type) {
    case KeyType::kString:
      return allow_empty ? "text" : "non-empty text";
    case KeyType::kInt:
      return range.empty() ? "an integer" : "an integer " + range;
    case KeyType::kDouble:
      return range.empty() ? "a number" : "a number " + range;
    case KeyType::kBool:
      return "true or false";
    case KeyType::kChoice:
      return "one of " + Join(choices, ", ");
    case KeyType::kIntList:
      return std::string(allow_empty ? "a (possibly empty) " : "a ") +
             "comma-separated list of integers" + (range.empty() ? "" : " " + range);
    case KeyType::kDoubleList:
      return std::string(allow_empty ? "a (possibly empty) " : "a ") +
             "comma-separated list of numbers" + (range.empty() ? "" : " " + range);
  }
  return "a valid value";
}

std::string ValidateValue(const KeySpec& spec, std::string_view raw) {
  const std::string_view v = Trim(raw);
  // ResolvedIni writes every value into an INI file, which cannot hold a '#' (Boost reads
  // the rest of the line as a comment) or a line break. Only --set can give one, and
  // config_fuzz found that such a value did not read back as itself: config.ini came
  // back cut short or did not parse. Refused like any other bad value.
  if (v.find_first_of("#\n") != std::string_view::npos) {
    return "a value without '#' or a line break (a config file cannot hold them)";
  }
  bool ok = true;
  switch (spec.type) {
    case KeyType::kString:
      ok = spec.allow_empty || !v.empty();
      break;
    case KeyType::kInt: {
      auto x = ParseInt64(v);
      ok = x.has_value() && InRange(spec, static_cast<double>(*x));
      break;
    }
    case KeyType::kDouble: {
      auto x = ParseDouble(v);
      ok = x.has_value() && InRange(spec, *x);
      break;
    }
    case KeyType::kBool:
      ok = ParseBool(v).has_value();
      break;
    case KeyType::kChoice:
      ok =
          std::find(spec.choices.begin(), spec.choices.end(), std::string(v)) != spec.choices.end();
      break;
    case KeyType::kIntList:
    case KeyType::kDoubleList: {
      if (v.empty()) {
        ok = spec.allow_empty;
        break;
      }
      for (const auto& part : Split(v, ',')) {
        std::optional<double> x;
        if (spec.type == KeyType::kIntList) {
          auto i = ParseInt64(part);
          if (i) x = static_cast<double>(*i);
        } else {
          x = ParseDouble(part);
        }
        if (!x || !InRange(spec, *x)) {
          ok = false;
          break;
        }
      }
      break;
    }
  }
  if (!ok) {
    // A choice's validator may say more than "one of ..." about a value that is not one
    // (algorithm.name = ps_check, a command now).
    if (spec.type == KeyType::kChoice && spec.validator) {
      std::string why = spec.validator(v);
      if (!why.empty()) return why;
    }
    return spec.Expectation();
  }
  if (spec.validator) return spec.validator(v);
  return "";
}

void Schema::Add(KeySpec spec) {
  ASGD_CHECK(spec.name.find('.') != std::string::npos, "key ", spec.name, " lacks a section");
  ASGD_CHECK(index_.find(spec.name) == index_.end(), "duplicate key ", spec.name);
  std::string why = ValidateValue(spec, spec.default_value);
  ASGD_CHECK(why.empty(), "default of ", spec.name, " is invalid: expected ", why);
  index_[spec.name] = keys_.size();
  keys_.push_back(std::move(spec));
}

const KeySpec* Schema::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &keys_[it->second];
}

const KeySpec& Schema::Get(std::string_view name) const {
  const KeySpec* s = Find(name);
  if (s == nullptr) throw ConfigError(UnknownKeyMessage(name, *this));
  return *s;
}

std::vector<std::string> Schema::Sections() const {
  std::vector<std::string> out;
  for (const auto& k : keys_) {
    std::string s = k.section();
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

std::string Schema::Help() const {
  std::ostringstream os;
  for (const auto& section : Sections()) {
    os << "[" << section << "]\n";
    for (const auto& k : keys_) {
      if (k.section() != section) continue;
      os << "  " << k.key() << " = " << k.default_value << "\n      " << k.doc;
      os << " (" << k.Expectation();
      if (!k.unit.empty()) os << "; unit: " << k.unit;
      os << ")\n";
    }
    os << "\n";
  }
  return os.str();
}

Config::Config(const Schema& schema) : schema_(&schema) {
  for (const auto& k : schema.keys()) values_[k.name] = k.default_value;
}

Config Config::Defaults(const Schema& schema) { return Config(schema); }

Config Config::FromFile(const std::string& path, const std::vector<std::string>& overrides,
                        const Schema& schema) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot open config file '" + path + "': " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return FromString(ss.str(), overrides, schema, path);
}

Config Config::FromString(std::string_view ini, const std::vector<std::string>& overrides,
                          const Schema& schema, const std::string& source) {
  Config cfg(schema);
  cfg.source_ = source == "<string>" ? "" : source;
  po::options_description desc;
  for (const auto& k : schema.keys()) {
    desc.add_options()(k.name.c_str(), po::value<std::string>());
  }
  for (const auto& r : schema.retired()) {
    desc.add_options()(r.name.c_str(), po::value<std::string>());
  }
  po::variables_map vm;
  std::istringstream in{std::string(ini)};
  try {
    po::store(po::parse_config_file(in, desc, /*allow_unregistered=*/false), vm);
  } catch (const po::unknown_option& e) {
    throw ConfigError(source + ": " + UnknownKeyMessage(e.get_option_name(), schema));
  } catch (const po::multiple_occurrences& e) {
    throw ConfigError(source + ": " + e.get_option_name() + " is given more than once");
  } catch (const po::invalid_config_file_syntax& e) {
    throw ConfigError(source + ": " + ForMessage(e.what()) +
                      " (expected 'key = value' or '[section]')");
  } catch (const po::error& e) {
    throw ConfigError(source + ": " + ForMessage(e.what()));
  }
  for (const auto& entry : vm) {
    // Named, not a structured binding: clang before 16 cannot capture one in a lambda.
    const std::string& name = entry.first;
    const po::variable_value& value = entry.second;
    const auto retired =
        std::find_if(schema.retired().begin(), schema.retired().end(),
                     [&](const Schema::RetiredKey& r) { return r.name == name; });
    if (retired == schema.retired().end()) {
      cfg.Set(name, value.as<std::string>());
    } else if (Trim(value.as<std::string>()) != retired->old_default) {
      throw ConfigError(name, value.as<std::string>(),
                        "no such key any more (" + retired->instead + ")");
    }
  }
  for (const auto& o : overrides) cfg.ApplyOverride(o);
  return cfg;
}

void Config::Set(std::string_view name, std::string_view value) {
  const KeySpec& spec = schema_->Get(name);
  std::string why = ValidateValue(spec, value);
  if (!why.empty()) throw ConfigError(spec.name, std::string(value), why);
  values_[spec.name] = std::string(Trim(value));
  explicit_[spec.name] = true;
}

void Config::ApplyOverride(std::string_view assignment) {
  std::size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw ConfigError("--set " + QuoteForMessage(assignment) +
                      ": expected section.key=value, e.g. --set algorithm.learning_rate=0.1");
  }
  Set(Trim(assignment.substr(0, eq)), assignment.substr(eq + 1));
}

const std::string& Config::Raw(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw ConfigError(UnknownKeyMessage(name, *schema_));
  return it->second;
}

int64_t Config::Int(std::string_view name) const {
  auto v = ParseInt64(Raw(name));
  ASGD_CHECK(v.has_value(), "key ", name, " is not an integer: ", Raw(name));
  return *v;
}

double Config::Double(std::string_view name) const {
  auto v = ParseDouble(Raw(name));
  ASGD_CHECK(v.has_value(), "key ", name, " is not a number: ", Raw(name));
  return *v;
}

bool Config::Bool(std::string_view name) const {
  auto v = ParseBool(Raw(name));
  ASGD_CHECK(v.has_value(), "key ", name, " is not a bool: ", Raw(name));
  return *v;
}

std::vector<int64_t> Config::IntList(std::string_view name) const {
  std::vector<int64_t> out;
  const std::string& raw = Raw(name);
  if (Trim(raw).empty()) return out;
  for (const auto& part : Split(raw, ',')) {
    auto v = ParseInt64(part);
    ASGD_CHECK(v.has_value(), "key ", name, " is not an integer list: ", raw);
    out.push_back(*v);
  }
  return out;
}

std::vector<double> Config::DoubleList(std::string_view name) const {
  std::vector<double> out;
  const std::string& raw = Raw(name);
  if (Trim(raw).empty()) return out;
  for (const auto& part : Split(raw, ',')) {
    auto v = ParseDouble(part);
    ASGD_CHECK(v.has_value(), "key ", name, " is not a number list: ", raw);
    out.push_back(*v);
  }
  return out;
}

bool Config::IsExplicit(std::string_view name) const {
  schema_->Get(name);
  auto it = explicit_.find(name);
  return it != explicit_.end() && it->second;
}

std::string Config::ResolvedIni() const {
  std::ostringstream os;
  os << "# Resolved configuration: every key asgd read, with the value used.\n"
     << "# Keys marked (default) were not set by the config file or --set.\n";
  for (const auto& section : schema_->Sections()) {
    os << "\n[" << section << "]\n";
    for (const auto& k : schema_->keys()) {
      if (k.section() != section) continue;
      os << "# " << k.doc << (IsExplicit(k.name) ? "" : " (default)") << "\n";
      os << k.key() << " = " << Raw(k.name) << "\n";
    }
  }
  return os.str();
}

}  // namespace asgd::experiments
