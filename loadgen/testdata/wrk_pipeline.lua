-- wrk pipelining script for loadgen/run_efficiency.sh: each request() hands wrk DEPTH (default
-- 16) pipelined "GET PATH" requests in one buffer. Usage: wrk -s wrk_pipeline.lua URL -- [DEPTH]
local depth = 16

init = function(args)
  if args[1] ~= nil then depth = tonumber(args[1]) end
  local r = {}
  for i = 1, depth do
    r[i] = wrk.format("GET", wrk.path)
  end
  req = table.concat(r)
end

request = function()
  return req
end
