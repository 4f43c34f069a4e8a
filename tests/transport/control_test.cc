// The control channel (transport/control.h): request and reply, timeouts as values, and a
// late reply never answering the next request.
#include "transport/control.h"

#include <gtest/gtest.h>

#include <thread>

namespace asgd::transport {
namespace {

using namespace std::chrono_literals;

TEST(Control, RequestGetsItsReplyAndATimeoutIsAValue) {
  for (const char* address : {"inproc://control-test", "tcp://127.0.0.1:*"}) {
    SCOPED_TRACE(address);
    auto context = NewContext();
    ControlServer server(context, address);
    ControlClient client(context, server.endpoint());
    std::thread echo([&] {
      for (int i = 0; i < 2; ++i) {
        auto req = server.Receive(5000ms);
        ASSERT_TRUE(req.has_value());
        if (req->text == "slow") std::this_thread::sleep_for(300ms);
        server.Reply(req->peer, "re:" + req->text);
      }
    });
    EXPECT_EQ(client.Request("hello", 5000ms), "re:hello");
    // No reply in time: a value, and the late reply is dropped, not read as the next one.
    EXPECT_FALSE(client.Request("slow", 50ms).has_value());
    echo.join();
    std::thread again([&] {
      auto req = server.Receive(5000ms);
      ASSERT_TRUE(req.has_value());
      server.Reply(req->peer, "re:" + req->text);
    });
    EXPECT_EQ(client.Request("next", 5000ms), "re:next");
    again.join();
    EXPECT_FALSE(server.Receive(10ms).has_value());
  }
}

TEST(Control, NoServerIsATimeout) {
  auto context = NewContext();
  ControlClient client(context, "tcp://127.0.0.1:1");
  EXPECT_FALSE(client.Request("anyone?", 100ms).has_value());
}

}  // namespace
}  // namespace asgd::transport
