-- scripts/wrk/heartbeat.lua — POST /quota/heartbeat on open sessions
-- PREFIX-1 … PREFIX-N, in turn (each thread starts at its own offset).
-- With MODE "open" it instead applies 1 to each of those session ids (a
-- repeat is a replay), which is how bench.sh opens them before the run.
-- Arguments: RESOURCE PREFIX N [open].
package.path = debug.getinfo(1, "S").source:sub(2):match("(.*/)") .. "?.lua;" .. package.path
local c = require("common")

local nthreads = 0
function setup(thread)
	c.register(thread)
	nthreads = nthreads + 1
	thread:set("offset", nthreads * 7919)
end

function init(args)
	resource, prefix, n, mode = args[1], args[2], tonumber(args[3]), args[4]
	i = offset or 0
end

function request()
	i = i + 1
	local id = string.format("%s-%d", prefix, i % n + 1)
	if mode == "open" then
		return wrk.format("POST", "/quota/apply", c.headers,
			string.format('{"resourceName":"%s","applyAmount":1,"clientId":"wrk","sessionId":"%s"}', resource, id))
	end
	return wrk.format("POST", "/quota/heartbeat", c.headers,
		string.format('{"resourceName":"%s","sessionId":"%s"}', resource, id))
end

function done(summary, latency, requests) c.report(summary, latency, {}) end
