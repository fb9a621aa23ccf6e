// //third_party:grpc: gRPC over TLS (OpenSSL 3) with a certificate made at run time.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "third_party/testdata/echo.grpc.pb.h"
#include "third_party/testing/test_certificate.h"

namespace {

using ::sluice::testing::Echo;
using ::sluice::testing::EchoReply;
using ::sluice::testing::EchoRequest;
using ::sluice::testing::MakeSelfSignedCertificate;
using ::sluice::testing::TestCertificate;

class EchoService final : public Echo::Service {
 public:
  grpc::Status Say(grpc::ServerContext* context, const EchoRequest* request,
                   EchoReply* reply) override {
    if (context->auth_context()->FindPropertyValues("transport_security_type").empty()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "call did not arrive over TLS");
    }
    reply->set_text(request->text());
    reply->set_sequence(request->sequence() + 1);
    return grpc::Status::OK;
  }
};

std::chrono::system_clock::time_point SecondsFromNow(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

TEST(GrpcTls, CallsServerOverTlsWithGeneratedCertificate) {
  const std::optional<TestCertificate> certificate = MakeSelfSignedCertificate("localhost");
  ASSERT_TRUE(certificate.has_value());

  EchoService service;
  grpc::SslServerCredentialsOptions server_options;
  server_options.pem_key_cert_pairs.push_back({certificate->key_pem, certificate->certificate_pem});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(server_options), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  grpc::SslCredentialsOptions client_options;
  client_options.pem_root_certs = certificate->certificate_pem;
  grpc::ChannelArguments arguments;
  arguments.SetSslTargetNameOverride("localhost");
  std::unique_ptr<Echo::Stub> stub = Echo::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port), grpc::SslCredentials(client_options), arguments));
  grpc::ClientContext context;
  context.set_deadline(SecondsFromNow(10));
  EchoRequest request;
  request.set_text("ping");
  request.set_sequence(1);
  EchoReply reply;
  const grpc::Status status = stub->Say(&context, request, &reply);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_EQ(reply.text(), "ping");
  EXPECT_EQ(reply.sequence(), 2);
  const std::vector<grpc::string_ref> security =
      context.auth_context()->FindPropertyValues("transport_security_type");
  ASSERT_EQ(security.size(), 1u);
  EXPECT_EQ(std::string(security[0].data(), security[0].size()), "ssl");

  server->Shutdown(SecondsFromNow(5));
}

}  // namespace
