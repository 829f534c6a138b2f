-- scripts/wrk/session.lua — apply → finish: each connection sends an apply of
-- 1, or, when an apply's answer is waiting for its finish, that finish
-- (actualUsedAmount 1). A finish is sent only after its apply answered 200,
-- so every session is two dependent requests, many sessions interleaved.
-- "finished" counts 200 answers to finishes (sessions completed).
-- Arguments: RESOURCE.
package.path = debug.getinfo(1, "S").source:sub(2):match("(.*/)") .. "?.lua;" .. package.path
local c = require("common")

function setup(thread) c.register(thread) end

function init(args)
	resource = args[1]
	apply_req = wrk.format("POST", "/quota/apply", c.headers,
		string.format('{"resourceName":"%s","applyAmount":1,"clientId":"wrk"}', resource))
	queue, head, tail = {}, 1, 0
	finished, applied = 0, 0
end

function request()
	if head <= tail then
		local id = queue[head]
		queue[head] = nil
		head = head + 1
		return wrk.format("POST", "/quota/finish", c.headers,
			string.format('{"resourceName":"%s","sessionId":"%s","actualUsedAmount":1}', resource, id))
	end
	return apply_req
end

function response(status, headers, body)
	if status ~= 200 then return end
	if body:find('"leaseExpiresAt"', 1, true) and body:find('"grantedAmount"', 1, true)
		and not body:find('"chargedAmount"', 1, true) then
		applied = applied + 1
		tail = tail + 1
		queue[tail] = body:match('"sessionId":"([^"]+)"')
	else
		finished = finished + 1
	end
end

function done(summary, latency, requests) c.report(summary, latency, { "applied", "finished" }) end
