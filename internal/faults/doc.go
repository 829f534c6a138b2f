// Package faults runs quota-center against PRIVATE Redis and MariaDB
// servers and breaks them on purpose: it is the support code of the
// fault-injection test (faults_test.go) and of the soak program
// (cmd/qc-soak).
//
// Nothing here touches the machine's shared servers (6379, 3306), which
// other test packages use in parallel: every server is started from the
// redis-server and mariadbd binaries on a free loopback port, with its data
// in a directory the caller owns, and is stopped by Close.
//
//   - Redis (StartRedis): Start, Stop, Kill, Restart (killed and started
//     again EMPTY: --save "" --appendonly no), Pause (CLIENT PAUSE ms ALL),
//     ScriptFlush, FlushAll.
//   - MariaDB (StartMariaDB): Start, Stop (graceful), Kill (SIGKILL),
//     Restart, KillConnections (KILL of every connection to a database: the
//     service's pool). Its datadir is copied from a template made once per
//     MariaDB version with mariadb-install-db (root@127.0.0.1 without a
//     password), cached in os.TempDir().
//   - Proxy (StartProxy): a TCP forwarder that can hold replies back past
//     the client timeout (Redis ran the command; go-redis sends it again) or
//     lose them with the connection (MySQL ran the statement; the caller
//     cannot tell).
//   - Env (StartEnv): both servers, a proxy in front of each, and
//     quota-center itself, run in-process with app.Serve on 127.0.0.1:0 and
//     tuned for fast failure detection.
//   - Workload: concurrent clients running apply → heartbeat → finish
//     sessions and recording every answer; Env.Inject breaks a backend;
//     Env.Settle and Env.Verify check the invariants of issue 3 §8.
//
// No function takes a testing.T: errors are returned and progress goes to a
// Logf, so cmd/qc-soak uses the same code. Every wait is bounded by a
// deadline. Processes are started with a parent-death signal (Linux), so a
// killed test binary does not leave servers behind.
package faults
