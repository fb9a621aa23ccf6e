// //third_party:protobuf and sluice_grpc_proto: generated messages serialize and parse.
#include <google/protobuf/stubs/common.h>
#include <gtest/gtest.h>

#include <string>

#include "sluice_deps/versions.h"
#include "third_party/testdata/echo.pb.h"

namespace {

using ::sluice::testing::EchoRequest;

TEST(Protobuf, LibraryMatchesHeadersAndPinnedPackage) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;               // aborts if libprotobuf and the headers disagree
  const int version = GOOGLE_PROTOBUF_VERSION;  // e.g. 3021012
  const std::string upstream = std::to_string(version / 1000000) + "." +
                               std::to_string(version / 1000 % 1000) + "." +
                               std::to_string(version % 1000);
  const std::string package_version = sluice::deps::kProtobufVersion;
  EXPECT_TRUE(package_version.starts_with(upstream + "-"))
      << "protobuf headers " << upstream << " vs. Debian package " << package_version;
}

TEST(Protobuf, GeneratedMessageRoundTrips) {
  EchoRequest request;
  request.set_text("h\xc3\xa9llo");
  request.set_sequence(-42);
  request.mutable_sent_at()->set_seconds(1700000000);
  request.mutable_sent_at()->set_nanos(5);
  request.add_chunks(std::string("\0\xff", 2));

  std::string wire;
  ASSERT_TRUE(request.SerializeToString(&wire));
  EchoRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_EQ(parsed.text(), "h\xc3\xa9llo");
  EXPECT_EQ(parsed.sequence(), -42);
  EXPECT_EQ(parsed.sent_at().seconds(), 1700000000);
  EXPECT_EQ(parsed.sent_at().nanos(), 5);
  ASSERT_EQ(parsed.chunks_size(), 1);
  EXPECT_EQ(parsed.chunks(0), std::string("\0\xff", 2));
}

TEST(Protobuf, RejectsTruncatedInput) {
  EchoRequest parsed;
  EXPECT_FALSE(parsed.ParseFromString(std::string("\x10\xff\xff", 3)));  // varint cut short
}

}  // namespace
