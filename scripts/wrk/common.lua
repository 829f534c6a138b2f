-- scripts/wrk/common.lua — shared by the wrk scripts of scripts/bench.sh.
-- Each script is run as
--   wrk -t T -c C -d D --latency -s scripts/wrk/X.lua URL -- RESOURCE [ARG]
-- and prints, from done(), one JSON line starting with "QCWRK " that bench.sh
-- collects: requests and 2xx answers over the run, the latency percentiles of
-- every request (microseconds, from wrk's own histogram), socket errors, and
-- the counters each script keeps per thread (e.g. finished sessions).

local M = {}

M.threads = {}
M.headers = { ["Content-Type"] = "application/json" }

-- fixed makes every request of the run the same POST of body to path.
function M.fixed(path, body)
	wrk.method = "POST"
	wrk.path = path
	wrk.headers["Content-Type"] = "application/json"
	wrk.body = body
end

-- register is setup(): it keeps each thread so done() can read its counters.
function M.register(thread)
	table.insert(M.threads, thread)
end

-- report prints the QCWRK line. counters names the per-thread globals to sum.
function M.report(summary, latency, counters)
	local sums = {}
	for _, name in ipairs(counters) do
		sums[name] = 0
		for _, t in ipairs(M.threads) do
			sums[name] = sums[name] + (tonumber(t:get(name)) or 0)
		end
	end
	local e = summary.errors
	local parts = {
		string.format('"duration_us":%d', summary.duration),
		string.format('"requests":%d', summary.requests),
		string.format('"non2xx":%d', e.status),
		string.format('"socket_errors":%d', e.connect + e.read + e.write + e.timeout),
		string.format('"p50_us":%d', latency:percentile(50)),
		string.format('"p90_us":%d', latency:percentile(90)),
		string.format('"p99_us":%d', latency:percentile(99)),
		string.format('"max_us":%d', latency.max),
	}
	for _, name in ipairs(counters) do
		table.insert(parts, string.format('"%s":%d', name, sums[name]))
	end
	io.write("QCWRK {" .. table.concat(parts, ",") .. "}\n")
end

return M
