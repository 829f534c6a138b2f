-- scripts/wrk/pools.lua — POST /quota/apply of 1, every request a new
-- session (the server picks the id), on a resource with LINES business lines
-- (line-1 … line-LINES, round robin per thread), or with LINES 0 on a plain
-- resource: the same script, bodies prepared ahead, so both sides of issue
-- 13 §8's comparison cost wrk the same. Arguments: RESOURCE LINES.
package.path = debug.getinfo(1, "S").source:sub(2):match("(.*/)") .. "?.lua;" .. package.path
local c = require("common")

function setup(thread) c.register(thread) end

function init(args)
	local resource, lines = args[1], tonumber(args[2] or "0")
	reqs = {}
	for i = 1, math.max(lines, 1) do
		local line = ""
		if lines > 0 then line = string.format(',"businessLine":"line-%d"', i) end
		reqs[i] = wrk.format("POST", "/quota/apply", c.headers,
			string.format('{"resourceName":"%s","applyAmount":1,"clientId":"wrk"%s}', resource, line))
	end
	n = 0
end

function request()
	n = n + 1
	return reqs[(n % #reqs) + 1]
end

function done(summary, latency, requests) c.report(summary, latency, {}) end
