#include "ps/param_client_wrapper.h"

#include "core/check.h"

namespace asgd::ps {

ParamClientWrapper::ParamClientWrapper(ParamClient* target) : target_(target) {
  ASGD_CHECK(target_ != nullptr, "ParamClientWrapper needs a target client");
}

ParamClientWrapper::ParamClientWrapper(std::unique_ptr<ParamClient> target)
    : owned_(std::move(target)), target_(owned_.get()) {
  ASGD_CHECK(target_ != nullptr, "ParamClientWrapper needs a target client");
}

ParamClientWrapper::~ParamClientWrapper() = default;

}  // namespace asgd::ps
