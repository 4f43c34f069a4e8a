// Device specs, CUDA discovery and NewModelOn. Runs in every build and on every machine:
// where CUDA is unusable (no driver, no device, or a build without CUDA) it checks the
// refusals; where a device is present it checks that it is accepted. Which branch ran is
// recorded as the test property cuda_device_count.
#include "models/device.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/build_config.h"
#include "core/error.h"
#include "models/factory.h"

namespace asgd::models {
namespace {

InputSpec Mnist() { return {{1, 28, 28}, 784, 10, false}; }
InputSpec A9a() { return {{123}, 123, 2, true}; }

// Expects f to throw a one-line ConfigError about model.device with value; returns what().
template <typename F>
std::string ExpectDeviceError(F&& f, const std::string& value) {
  try {
    f();
    ADD_FAILURE() << "no ConfigError for model.device = '" << value << "'";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.key(), "model.device") << what;
    EXPECT_EQ(e.value(), value) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find("model.device"), std::string::npos) << what;
    return what;
  }
  return "";
}

TEST(DeviceSpec, ParsesCpuAndCuda) {
  EXPECT_EQ(ParseDevice("cpu"), (Device{Device::Kind::kCpu, 0}));
  EXPECT_EQ(ParseDevice("cuda"), (Device{Device::Kind::kCuda, 0}));
  EXPECT_EQ(ParseDevice("cuda:0"), (Device{Device::Kind::kCuda, 0}));
  EXPECT_EQ(ParseDevice("cuda:7"), (Device{Device::Kind::kCuda, 7}));
  EXPECT_EQ(ParseDevice("cuda:12"), (Device{Device::Kind::kCuda, 12}));
  EXPECT_EQ(ParseDevice("cuda:3").ToString(), "cuda:3");
  EXPECT_EQ(ParseDevice("cuda").ToString(), "cuda:0");
  EXPECT_EQ(ParseDevice("cpu").ToString(), "cpu");
  EXPECT_FALSE(ParseDevice("cpu").is_cuda());
  EXPECT_TRUE(ParseDevice("cuda:1").is_cuda());
}

TEST(DeviceSpec, RefusesJunk) {
  for (const std::string junk : {"gpu", "cuda:x", "cuda:-1", "cuda:", "cuda:+1", "cuda:1x",
                                 "cuda:0x1", "CUDA", "Cpu", "", " cpu", "cuda 0", "cuda:1.0",
                                 "cuda:99999999999", "cuda0", "cpu:0"}) {
    const std::string what = ExpectDeviceError([&] { ParseDevice(junk); }, junk);
    EXPECT_NE(what.find("cpu, cuda or cuda:N"), std::string::npos) << what;
    // Junk is refused the same way when a model is asked for.
    ExpectDeviceError([&] { NewModelOn(ModelOptions{}, Mnist(), junk); }, junk);
  }
}

TEST(DeviceDiscovery, CountAndReasonAgree) {
  const int count = CudaDeviceCount();
  RecordProperty("cuda_device_count", count);
  EXPECT_GE(count, 0);
  EXPECT_EQ(count, CudaDeviceCount());  // cached, stable
  const std::string reason = CudaUnavailableReason();
  if (count == 0) {
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
  } else {
    EXPECT_EQ(reason, "") << reason;
  }
#if !ASGD_HAVE_CUDA
  EXPECT_EQ(count, 0);
  EXPECT_NE(reason.find("no CUDA support"), std::string::npos) << reason;
#endif
}

TEST(DeviceDiscovery, CpuAlwaysWorks) {
  EXPECT_EQ(ResolveDevice("cpu"), (Device{Device::Kind::kCpu, 0}));
  for (const std::string name : {"softmax", "mlp", "cnn", "logreg"}) {
    ModelOptions o;
    o.name = name;
    const InputSpec input = name == "logreg" ? A9a() : Mnist();
    auto on_cpu = NewModelOn(o, input, "cpu");
    auto reference = NewModel(o, input);
    EXPECT_EQ(on_cpu->Name(), name);
    EXPECT_EQ(on_cpu->Describe(), reference->Describe());
    EXPECT_EQ(on_cpu->layout(), reference->layout());
  }
  // Model options are checked as by NewModel.
  ModelOptions bad;
  bad.name = "resnet";
  EXPECT_THROW(NewModelOn(bad, Mnist(), "cpu"), ConfigError);
}

TEST(DeviceDiscovery, CudaIsRefusedWithTheReasonWhenUnavailable) {
  const int count = CudaDeviceCount();
  if (count > 0) GTEST_SKIP() << count << " CUDA device(s) present; refusals are for machines without";
  for (const std::string spec : {"cuda", "cuda:0", "cuda:1"}) {
    const std::string what = ExpectDeviceError([&] { ResolveDevice(spec); }, spec);
    // The one-line reason is part of the message.
    EXPECT_NE(what.find(CudaUnavailableReason()), std::string::npos) << what;
    ExpectDeviceError([&] { NewModelOn(ModelOptions{}, Mnist(), spec); }, spec);
    // A Device is named canonically ("cuda" is cuda:0).
    ExpectDeviceError([&] { NewModelOn(ModelOptions{}, Mnist(), ParseDevice(spec)); },
                      ParseDevice(spec).ToString());
  }
  // A valid spec parses even here: a coordinator without a GPU can check workers' configs.
  EXPECT_EQ(ParseDevice("cuda:1").index, 1);
}

TEST(DeviceDiscovery, CudaIsAcceptedWhenPresent) {
  const int count = CudaDeviceCount();
  if (count == 0) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
  EXPECT_EQ(ResolveDevice("cuda"), (Device{Device::Kind::kCuda, 0}));
  EXPECT_EQ(ResolveDevice("cuda:" + std::to_string(count - 1)).index, count - 1);
  const std::string beyond = "cuda:" + std::to_string(count);
  const std::string what = ExpectDeviceError([&] { ResolveDevice(beyond); }, beyond);
  EXPECT_NE(what.find("CUDA device"), std::string::npos) << what;
  for (const std::string name : {"softmax", "mlp", "cnn"}) {
    ModelOptions o;
    o.name = name;
    auto model = NewModelOn(o, Mnist(), "cuda");
    EXPECT_EQ(model->Name(), name);
    EXPECT_EQ(model->layout(), NewModel(o, Mnist())->layout());
    EXPECT_EQ(model->Describe(), NewModel(o, Mnist())->Describe() + " on cuda:0");
  }
  // logreg has no CUDA implementation.
  ModelOptions logreg;
  logreg.name = "logreg";
  const std::string no_cuda =
      ExpectDeviceError([&] { NewModelOn(logreg, A9a(), "cuda"); }, "cuda");
  EXPECT_NE(no_cuda.find("logreg"), std::string::npos) << no_cuda;
}

}  // namespace
}  // namespace asgd::models
