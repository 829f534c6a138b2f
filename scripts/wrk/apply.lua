-- scripts/wrk/apply.lua — POST /quota/apply of 1 on RESOURCE, every request a
-- new session (the server picks the id). Arguments: RESOURCE.
package.path = debug.getinfo(1, "S").source:sub(2):match("(.*/)") .. "?.lua;" .. package.path
local c = require("common")

function setup(thread) c.register(thread) end

function init(args)
	c.fixed("/quota/apply", string.format('{"resourceName":"%s","applyAmount":1,"clientId":"wrk"}', args[1]))
end

function done(summary, latency, requests) c.report(summary, latency, {}) end
