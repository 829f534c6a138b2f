// Package testenv gives tests the machine's real backends and a running
// quota-center. Real-backend helpers skip when a server is unreachable,
// unless QC_TEST_REQUIRE_BACKENDS=1 (CI), where they fail instead.
//
// Only tests import it.
package testenv
