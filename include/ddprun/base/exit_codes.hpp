// The exit codes ddprun documents (README "Exit codes"). A worker's own code
// passes through unchanged; these are the ones ddprun chooses itself.
#pragma once

namespace ddprun::exit_code {

constexpr int kSuccess = 0;
constexpr int kUsage = 2;        // bad flag, value, environment default or program
constexpr int kRendezvous = 75;  // rendezvous failed: join timeout, lost store, mismatch
constexpr int kInternal = 70;    // ddprun itself failed (cannot create a pipe, fork, ...)
// --max-no-progress-restarts: restarts in a row made no progress. Permanent, unlike
// kRendezvous (EX_TEMPFAIL): a scheduler's requeue must not retry it (EX_CONFIG's number).
constexpr int kNoProgress = 78;
// --health-check: a node failed its check and the job cannot go on without it; or a worker
// stayed in uninterruptible sleep for TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT (torch's
// UNHEALTHY worker group). EX_UNAVAILABLE: the node, not the job, is at fault; a scheduler
// may requeue it elsewhere.
constexpr int kUnhealthy = 69;
constexpr int kHang = 124;  // a rank stopped making progress (--hang-timeout), as timeout(1)
constexpr int kNotExecutable = 126;  // the program exists but cannot be executed
constexpr int kNotFound = 127;       // the program does not exist
constexpr int kSignalBase = 128;     // 128+N: died of / stopped by signal N

}  // namespace ddprun::exit_code
