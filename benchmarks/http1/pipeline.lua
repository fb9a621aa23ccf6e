-- wrk pipelining script for benchmarks/http1/run.sh: TechEmpower plaintext shape.
-- Each request() hands wrk DEPTH (default 16) pipelined "GET /plaintext" requests in one buffer;
-- wrk counts every response, but records one latency sample per batch (first write -> last
-- response of the 16). Usage: wrk -s pipeline.lua URL -- [DEPTH] [PATH]
local depth = 16
local path = "/plaintext"

init = function(args)
  if args[1] ~= nil then depth = tonumber(args[1]) end
  if args[2] ~= nil then path = args[2] end
  local r = {}
  for i = 1, depth do
    r[i] = wrk.format("GET", path)
  end
  req = table.concat(r)
end

request = function()
  return req
end
