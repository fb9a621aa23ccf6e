// Conversions between the load agent's protobuf messages (loadgen/agent.proto) and the engine's
// structs (loadgen/engine.h): what the controller sends is exactly the LoadSpec a local run would
// use, and what comes back is a RunResult that merges exactly (histograms in their serialized
// form).
//
//   sluice::loadgen::v1::LoadSpec wire;
//   sluice::loadgen::LoadSpecToProto(spec, &wire);
//   sluice::StatusOr<sluice::loadgen::LoadSpec> back = sluice::loadgen::LoadSpecFromProto(wire);
//
// The *FromProto functions read what a peer sent: they never crash and reject, with
// INVALID_ARGUMENT naming the field, any value the struct cannot hold. They do not judge the spec
// (ValidateSpec and Engine::Create do).
//
// Thread-safety: stateless functions; thread-safe.
#ifndef SLUICE_LOADGEN_AGENT_CONVERT_H_
#define SLUICE_LOADGEN_AGENT_CONVERT_H_

#include "core/status.h"
#include "loadgen/agent.pb.h"
#include "loadgen/engine.h"

namespace sluice::loadgen {

// Fills every field of `out` (which is cleared first).
void LoadSpecToProto(const LoadSpec& spec, v1::LoadSpec* out);

// INVALID_ARGUMENT for counts out of the int range or negative, negative durations, an unknown
// protocol.
[[nodiscard]] StatusOr<LoadSpec> LoadSpecFromProto(const v1::LoadSpec& proto);

// Fills every RunResult field of `out` (which is cleared first); `partial` and `stop_reason` are
// the caller's to set.
void RunResultToProto(const RunResult& result, v1::RunResultProto* out);

// INVALID_ARGUMENT for a status code outside 100..599, a negative duration, or a histogram that
// Histogram::Deserialize rejects (a missing histogram, "", is rejected too: an agent always sends
// all three).
[[nodiscard]] StatusOr<RunResult> RunResultFromProto(const v1::RunResultProto& proto);

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_AGENT_CONVERT_H_
