-- scripts/wrk/ratelimit.lua — envoyproxy/ratelimit's HTTP JSON endpoint
-- (POST /json), one descriptor per request: the peer of the apply
-- scenario. Its config (written by scripts/bench.sh) gives domain "qcbench",
-- key "resource" a limit it never reaches. Arguments: VALUE.
package.path = debug.getinfo(1, "S").source:sub(2):match("(.*/)") .. "?.lua;" .. package.path
local c = require("common")

function setup(thread) c.register(thread) end

function init(args)
	c.fixed("/json", string.format(
		'{"domain":"qcbench","descriptors":[{"entries":[{"key":"resource","value":"%s"}]}]}', args[1]))
end

function done(summary, latency, requests) c.report(summary, latency, {}) end
