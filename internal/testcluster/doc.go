// Package testcluster gives tests a real Redis Cluster: 3 masters and 3
// replicas on loopback ports, started from the machine's redis-server by
// scripts/redis-cluster.sh when it is not up. It skips a test when the
// cluster cannot be had, unless QC_TEST_REQUIRE_BACKENDS=1 (CI), where it
// fails it instead.
//
// Only tests import it; it imports go-redis and nothing of quota-center, so
// that every package's tests (redisstore's own too) can use it.
package testcluster
