// //third_party:grpc_unsecure: plaintext gRPC over loopback, in one process with BoringSSL (the
// combination sluice's benchmark binaries use; boringssl_ldd_test checks this binary too).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <chrono>
#include <memory>
#include <string>

#include "sluice_deps/versions.h"
#include "third_party/testdata/echo.grpc.pb.h"

#if !defined(OPENSSL_IS_BORINGSSL)
#error "//third_party:boringssl must provide BoringSSL's <openssl/ssl.h>"
#endif

namespace {

using ::sluice::testing::Echo;
using ::sluice::testing::EchoReply;
using ::sluice::testing::EchoRequest;

class EchoService final : public Echo::Service {
 public:
  grpc::Status Say(grpc::ServerContext*, const EchoRequest* request, EchoReply* reply) override {
    reply->set_text(request->text());
    reply->set_sequence(request->sequence() + 1);
    return grpc::Status::OK;
  }
};

std::chrono::system_clock::time_point SecondsFromNow(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

TEST(GrpcUnsecure, LibraryMatchesPinnedPackage) {
  const std::string package_version = sluice::deps::kGrpcVersion;
  EXPECT_TRUE(package_version.starts_with(grpc::Version() + "-"))
      << "gRPC " << grpc::Version() << " vs. Debian package " << package_version;
}

TEST(GrpcUnsecure, CallsInProcessServerOverLoopback) {
  EchoService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  std::unique_ptr<Echo::Stub> stub = Echo::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(SecondsFromNow(10));
  EchoRequest request;
  request.set_text("ping");
  request.set_sequence(41);
  EchoReply reply;
  const grpc::Status status = stub->Say(&context, request, &reply);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_EQ(reply.text(), "ping");
  EXPECT_EQ(reply.sequence(), 42);

  server->Shutdown(SecondsFromNow(5));
}

TEST(GrpcUnsecure, BoringSslWorksInTheSameProcess) {
  bssl::UniquePtr<SSL_CTX> context(SSL_CTX_new(TLS_method()));
  ASSERT_NE(context, nullptr);
  EXPECT_EQ(SSL_CTX_set_min_proto_version(context.get(), TLS1_3_VERSION), 1);
  bssl::UniquePtr<SSL> ssl(SSL_new(context.get()));
  EXPECT_NE(ssl, nullptr);
}

}  // namespace
