// What `ddprun --version` prints: the version, the commit it was built from,
// and whether the pieces jobs load later are where they will be looked for:
// the store plugin and the libtorch it links (multi-node c10d jobs), the
// OpenSSL plugin and its libssl and libcrypto (etcd jobs, job secrets).
// Checked without loading anything: loading libtorch alone takes 0.4 s.
#pragma once

#include <string>

namespace ddprun {

// "0.1.0"
const char* version();

// The git commit of the tree ddprun was built from, "unknown" outside a git
// checkout, with "-dirty" when it had uncommitted changes.
const char* build_commit();

// Every line of --version, each ending in '\n'. For a process that exits next:
// the files it reads stay mapped until then.
std::string version_report();

}  // namespace ddprun
