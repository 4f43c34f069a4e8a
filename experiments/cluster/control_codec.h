// Internal to experiments/cluster/control_protocol.cc (and its fuzz target): the
// MessagePack map writer and the validating field reader the control messages are made of.
// A Writer packs one map with "version" and "type" first; a Fields reads one map by key,
// checking each value's type and range, refusing repeated and unknown keys, and keeps the
// first problem as one printable line (peer text has its control characters replaced and
// is cut short).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "core/check.h"
#include "experiments/cluster/control_protocol.h"

namespace asgd::experiments::control_codec {

using ::asgd::internal::StrCat;
inline constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// A peer's text for an error line: control characters (a line break would make two
// lines) become '?', and anything past max bytes is cut.
inline std::string Printable(std::string_view text, std::size_t max = 64) {
  std::string out(text.substr(0, max));
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  if (text.size() > max) out += "...";
  return out;
}

// ---- encoding: one map, "version" and "type" first ------------------------------------

class Writer {
 public:
  // fields: the message's own fields that will be written (the map's size needs them).
  Writer(const char* type, uint32_t fields) : pk_(buf_) {
    pk_.pack_map(fields + 2);
    Put("version", uint64_t{kControlVersion});
    Put("type", std::string_view(type));
  }
  void Key(const char* k) { Text(k); }
  void Put(const char* k, uint64_t v) {
    Key(k);
    pk_.pack_uint64(v);
  }
  void Put(const char* k, int64_t v) {
    Key(k);
    pk_.pack_int64(v);
  }
  void Put(const char* k, int v) { Put(k, static_cast<int64_t>(v)); }
  void Put(const char* k, double v) {
    Key(k);
    pk_.pack_double(v);
  }
  void Put(const char* k, bool v) {
    Key(k);
    v ? pk_.pack_true() : pk_.pack_false();
  }
  void Put(const char* k, std::string_view v) {
    Key(k);
    Text(v);
  }
  void Put(const char* k, const std::string& v) { Put(k, std::string_view(v)); }
  void Map(const char* k, uint32_t n) {
    Key(k);
    pk_.pack_map(n);
  }
  void Array(const char* k, uint32_t n) {
    Key(k);
    pk_.pack_array(n);
  }
  void RawMap(uint32_t n) { pk_.pack_map(n); }
  std::string Bytes() const { return {buf_.data(), buf_.size()}; }

 private:
  void Text(std::string_view s) {
    pk_.pack_str(static_cast<uint32_t>(s.size()));
    pk_.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
  }
  msgpack::sbuffer buf_;
  msgpack::packer<msgpack::sbuffer> pk_;
};

// ---- decoding --------------------------------------------------------------------

inline const char* TypeName(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "a boolean";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
      return "an integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "a float";
    case msgpack::type::STR:
      return "a string";
    case msgpack::type::BIN:
      return "bin";
    case msgpack::type::ARRAY:
      return "an array";
    case msgpack::type::MAP:
      return "a map";
    case msgpack::type::EXT:
      return "ext";
  }
  return "unknown";
}

// The fields of one msgpack map, read by name. The first problem is kept in error (one
// line, prefixed by what the map is); later reads are then no-ops returning false.
class Fields {
 public:
  Fields(const msgpack::object& o, std::string what, std::string* error)
      : what_(std::move(what)), error_(error) {
    if (!error_->empty()) return;
    if (o.type != msgpack::type::MAP) {
      Fail(StrCat("is ", TypeName(o), ", expected a map"));
      return;
    }
    map_ = &o.via.map;
    used_.assign(map_->size, false);
    for (uint32_t i = 0; i < map_->size; ++i) {
      const msgpack::object& k = map_->ptr[i].key;
      if (k.type != msgpack::type::STR) {
        Fail(StrCat("has a key that is ", TypeName(k), ", expected a string"));
        return;
      }
      for (uint32_t j = 0; j < i; ++j) {
        if (KeyIs(map_->ptr[j].key, KeyView(k))) {
          Fail(StrCat("repeats \"", Printable(KeyView(k)), "\""));
          return;
        }
      }
    }
  }

  bool ok() const { return error_->empty(); }

  // The value of key, or nullptr (with an error if required) when absent. nil counts as
  // absent for optional keys only.
  const msgpack::object* Find(const char* key, bool required) {
    if (!ok()) return nullptr;
    for (uint32_t i = 0; i < map_->size; ++i) {
      if (KeyIs(map_->ptr[i].key, key)) {
        used_[i] = true;
        const msgpack::object& v = map_->ptr[i].val;
        if (!required && v.type == msgpack::type::NIL) return nullptr;
        return &v;
      }
    }
    if (required) Fail(StrCat("has no \"", key, "\""));
    return nullptr;
  }

  bool Int(const char* key, int64_t lo, int64_t hi, int64_t* out) {
    const msgpack::object* v = Find(key, true);
    return v && IntValue(*v, key, lo, hi, out);
  }
  template <typename T>
  bool IntAs(const char* key, int64_t lo, int64_t hi, T* out) {
    int64_t v = 0;
    if (!Int(key, lo, hi, &v)) return false;
    *out = static_cast<T>(v);
    return true;
  }
  bool Uint(const char* key, uint64_t* out) {
    const msgpack::object* v = Find(key, true);
    return v && UintValue(*v, key, out);
  }
  bool OptionalUint(const char* key, std::optional<uint64_t>* out) {
    out->reset();
    const msgpack::object* v = Find(key, false);
    if (!v) return ok();
    uint64_t u = 0;
    if (!UintValue(*v, key, &u)) return false;
    *out = u;
    return true;
  }
  bool Double(const char* key, double* out) {
    const msgpack::object* v = Find(key, true);
    if (!v) return false;
    // msgpack-c (and other encoders) write a float with an integral value as an integer.
    switch (v->type) {
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64:
        *out = v->via.f64;
        return true;
      case msgpack::type::POSITIVE_INTEGER:
        *out = static_cast<double>(v->via.u64);
        return true;
      case msgpack::type::NEGATIVE_INTEGER:
        *out = static_cast<double>(v->via.i64);
        return true;
      default:
        return Fail(StrCat("\"", key, "\" is ", TypeName(*v), ", expected a number"));
    }
  }
  bool OptionalDouble(const char* key, std::optional<double>* out) {
    out->reset();
    if (!Find(key, false)) return ok();
    double d = 0;
    if (!Double(key, &d)) return false;
    *out = d;
    return true;
  }
  bool OptionalBool(const char* key, bool* out) {
    const msgpack::object* v = Find(key, false);
    if (!v) return ok();
    if (v->type != msgpack::type::BOOLEAN) {
      return Fail(StrCat("\"", key, "\" is ", TypeName(*v), ", expected a boolean"));
    }
    *out = v->via.boolean;
    return true;
  }
  bool Bool(const char* key, bool* out) {
    const msgpack::object* v = Find(key, true);
    if (!v) return false;
    if (v->type != msgpack::type::BOOLEAN) {
      return Fail(StrCat("\"", key, "\" is ", TypeName(*v), ", expected a boolean"));
    }
    *out = v->via.boolean;
    return true;
  }
  bool Str(const char* key, std::string* out) { return Text(key, true, out); }
  // An optional string: left as it is when absent.
  bool OptionalStr(const char* key, std::string* out) { return Text(key, false, out); }
  bool Text(const char* key, bool required, std::string* out) {
    const msgpack::object* v = Find(key, required);
    if (!v) return !required && ok();
    if (v->type != msgpack::type::STR) {
      return Fail(StrCat("\"", key, "\" is ", TypeName(*v), ", expected a string"));
    }
    if (v->via.str.size > kMaxControlString) {
      return Fail(
          StrCat("\"", key, "\" is ", v->via.str.size, " bytes, limit ", kMaxControlString));
    }
    out->assign(v->via.str.ptr, v->via.str.size);
    return true;
  }
  bool Sha256(const char* key, std::string* out) {
    if (!Str(key, out)) return false;
    const bool hex =
        out->size() == 64 && out->find_first_not_of("0123456789abcdef") == std::string::npos;
    return hex || Fail(StrCat("\"", key, "\" is not 64 lowercase hex digits"));
  }
  // Every key was read: anything else is an unknown field.
  bool Done() {
    if (!ok()) return false;
    for (uint32_t i = 0; i < map_->size; ++i) {
      if (!used_[i])
        return Fail(StrCat("has an unknown field \"", Printable(KeyView(map_->ptr[i].key)), "\""));
    }
    return true;
  }
  bool Fail(const std::string& detail) {
    if (error_->empty()) *error_ = StrCat(what_, " ", detail);
    return false;
  }
  const std::string& what() const { return what_; }
  std::string* error() const { return error_; }

 private:
  static std::string_view KeyView(const msgpack::object& k) {
    return {k.via.str.ptr, k.via.str.size};
  }
  static bool KeyIs(const msgpack::object& k, std::string_view key) { return KeyView(k) == key; }

  bool IntValue(const msgpack::object& v, const char* key, int64_t lo, int64_t hi, int64_t* out) {
    int64_t x = 0;
    if (v.type == msgpack::type::POSITIVE_INTEGER) {
      if (v.via.u64 > static_cast<uint64_t>(kI64Max)) {
        return Fail(StrCat("\"", key, "\" = ", v.via.u64, " does not fit int64"));
      }
      x = static_cast<int64_t>(v.via.u64);
    } else if (v.type == msgpack::type::NEGATIVE_INTEGER) {
      x = v.via.i64;
    } else {
      return Fail(StrCat("\"", key, "\" is ", TypeName(v), ", expected an integer"));
    }
    if (x < lo || x > hi) {
      return Fail(StrCat("\"", key, "\" = ", x, " is outside [", lo, ", ", hi, "]"));
    }
    *out = x;
    return true;
  }
  bool UintValue(const msgpack::object& v, const char* key, uint64_t* out) {
    if (v.type == msgpack::type::NEGATIVE_INTEGER) {
      return Fail(StrCat("\"", key, "\" = ", v.via.i64, " is negative"));
    }
    if (v.type != msgpack::type::POSITIVE_INTEGER) {
      return Fail(StrCat("\"", key, "\" is ", TypeName(v), ", expected an integer"));
    }
    *out = v.via.u64;
    return true;
  }

  std::string what_;
  std::string* error_;
  const msgpack::object_map* map_ = nullptr;
  std::vector<bool> used_;
};

// A nested map field: absent/nil (optional) leaves out unset.
template <typename T, typename ReadFn>
bool Nested(Fields& f, const char* key, bool required, std::optional<T>* out, ReadFn read) {
  out->reset();
  const msgpack::object* v = f.Find(key, required);
  if (!v) return f.ok();
  Fields inner(*v, StrCat(f.what(), " \"", key, "\""), f.error());
  T value;
  if (!read(inner, &value) || !inner.Done()) return false;
  *out = std::move(value);
  return true;
}

}  // namespace asgd::experiments::control_codec
